"""Logged ids shown in markdown are escaped (no formatting, no remote images)."""
import re

from crbc_viz.ui.text import md


def test_markdown_specials_are_escaped():
    raw = "**bold** ![x](http://example.invalid/a.png) `code` $x$ <b>"
    out = md(raw)
    # Every special character is preceded by a backslash; unescaping gives the input back.
    assert re.sub(r"\\(.)", r"\1", out) == raw
    assert re.search(r"(?<!\\)[*`!\[\]<>$]", out) is None   # no special left unescaped


def test_newlines_cannot_start_markdown_blocks():
    assert "\n" not in md("a\n# heading\n- item")
