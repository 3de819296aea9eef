"""Logged text placed in Streamlit markdown is escaped, so ids like ``**x**`` or
``![](http://…)`` show as typed instead of being formatted or fetching anything."""
from __future__ import annotations

import re

__all__ = ["md"]

# Characters that start markdown constructs mid-line; "_" only where it could open or close
# emphasis (CommonMark ignores intraword underscores, e.g. in ``gold_logprob``).
_SPECIAL = re.compile(r"([\\`*\[\]#!|<>~$]|(?<![0-9A-Za-z])_|_(?![0-9A-Za-z]))")


def md(text: object) -> str:
    """``text`` with every markdown-significant character backslash-escaped."""
    return _SPECIAL.sub(r"\\\1", str(text)).replace("\n", " ")
