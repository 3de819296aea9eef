"""Text from logs made safe for a terminal: control characters (ESC sequences that move the
cursor, retitle the window or hide text, C1 controls, DEL, BiDi overrides) are shown as
``\\xNN`` / ``\\uNNNN`` escapes instead of being sent raw."""

from __future__ import annotations

import re

__all__ = ["term"]

_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")
_CONTROL_NL = re.compile("[\x00-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def _esc(m: re.Match) -> str:
    c = ord(m.group())
    return f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}"


def term(text: object, *, newlines: bool = False) -> str:
    """``text`` with every control character escaped; newlines kept when ``newlines``."""
    return (_CONTROL if newlines else _CONTROL_NL).sub(_esc, str(text))
