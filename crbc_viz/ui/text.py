"""Logged text and URL values placed in Streamlit markdown (``st.markdown``, ``st.caption``,
``st.warning``, ``st.error`` ...) are escaped, so ids like ``**x**``, ``[a](http://…)`` or
``![](http://…)`` show as typed instead of being formatted, linked or fetching anything.

Every character that opens an inline construct is backslash-escaped (CommonMark allows it
for any ASCII punctuation): emphasis, code, links and images, HTML and entities (``<``, ``&``),
math (``$``), tables (``|``), and also GitHub-style autolinks (``http://…``, ``a@b.c``,
``www.…``: Streamlit links those in the parsed text, so an invisible word joiner U+2060 is
put after the scheme's ``:``, after ``www`` and before ``@``; ``:`` before a letter is escaped),
emoji shortcodes and Streamlit's ``:red[…]`` / ``:material/…:`` directives. A value that starts like a block (``- ``, ``+ ``,
``1. ``, ``=``) has that escaped too; newlines become spaces (`md`) or hard line breaks
(`md_lines`), so no value can start a heading, list, table or code block. ``-``, ``/`` and
``.`` elsewhere stay as typed, so ids read naturally in the page source. Long values are cut
(`MAX_CHARS`).
"""

from __future__ import annotations

import re

__all__ = ["md", "md_lines", "cells", "MAX_CHARS", "NAME_CHARS", "middle_ellipsis", "short_names"]

#: Longest text shown; longer values keep their head and tail around an ellipsis.
MAX_CHARS = 2000
_SPECIAL = re.compile(r"([\\`*\[\]#!|<>~$&]|:(?=[A-Za-z/])|(?<![0-9A-Za-z])_|_(?![0-9A-Za-z]))")
# Streamlit's GFM linkifies "http://", "www." and "a@b.c" in the *parsed* text (after escapes
# are resolved), so a backslash cannot stop it: an invisible WORD JOINER (U+2060) goes inside
# each such pattern instead (checked in Chromium by tests/io/test_hostile.py).
_WJ = "\u2060"
_AUTOLINK = re.compile(r"(?i)(\b(?:https?|ftp|mailto|xmpp)\\?:)(?=//|[^\s]*@)|(\bwww)(?=\.)|(?=@)")
_BLOCK_START = re.compile(r"^(\s*)([-+=]|\d+[.)])")


def _escape(line: str) -> str:
    out = _AUTOLINK.sub(lambda m: (m.group(1) or m.group(2) or "") + _WJ, _SPECIAL.sub(r"\\\1", line))
    return _BLOCK_START.sub(lambda m: m.group(1) + m.group(2)[:-1] + "\\" + m.group(2)[-1], out)


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit * 2 // 3] + " … " + text[-limit // 4 :]


def md(text: object, limit: int = MAX_CHARS) -> str:
    """``text`` on one line, cut to ``limit`` characters, with every markdown-significant
    character backslash-escaped."""
    flat = " ".join(str(text).splitlines()) if "\n" in str(text) or "\r" in str(text) else str(text)
    return _escape(_cut(flat, limit))


def md_lines(text: object, limit: int = MAX_CHARS * 4) -> str:
    """``text`` escaped like `md`, keeping its lines (as hard line breaks; indentation dropped
    so that no line becomes a code block), for multi-line messages such as load errors."""
    lines = [ln.strip() for ln in _cut(str(text), limit).splitlines()]
    return "  \n".join(_escape(ln) for ln in lines if ln)


def cells(df):
    """A table for ``st.dataframe`` whose text cells a spreadsheet would run as formulas
    (leading ``=``, ``+``, ``-``, ``@``, tab, CR) carry a leading ``'``: the table's own
    "Download as CSV" writes displayed values verbatim (OWASP CSV injection).
    Numbers stay numbers; the row order and index are unchanged (row selection still maps)."""
    from ..io.write import csv_safe

    return csv_safe(df)


#: Characters of a name a sidebar select box shows without cutting it (about 250 px).
NAME_CHARS = 26
_MID = "…"


def middle_ellipsis(name: str, limit: int = NAME_CHARS) -> str:
    """``name`` in at most ``limit`` characters: a longer name keeps its first third and its
    end around one ``…`` — the end is what tells groups such as ``run/step/task-00`` and
    ``run/step/task-01`` apart, so it is the part kept longest."""
    if len(name) <= limit:
        return name
    keep = max(limit - len(_MID), 2)
    head = keep // 3
    return name[:head] + _MID + name[len(name) - (keep - head) :]


def short_names(names: list[str], limit: int = NAME_CHARS) -> dict[str, str]:
    """Each name's `middle_ellipsis`, except where two different names would read the same
    (they differ only in the middle that was left out): those keep their full name. So the
    shortened names are unique whenever the names are."""
    short = {n: middle_ellipsis(n, limit) for n in names}
    count: dict[str, int] = {}
    for s in short.values():
        count[s] = count.get(s, 0) + 1
    return {n: s if count[s] == 1 else n for n, s in short.items()}
