"""Logged ids shown in markdown are escaped (no formatting, no remote images)."""

import re

from crbc_viz.ui.text import md


def test_markdown_specials_are_escaped():
    raw = "**bold** ![x](http://example.invalid/a.png) `code` $x$ <b>"
    out = md(raw)
    # Every special character is preceded by a backslash; unescaping gives the input back.
    assert re.sub(r"\\(.)", r"\1", out).replace("\u2060", "") == raw
    assert re.search(r"(?<!\\)[*`!\[\]<>$]", out) is None  # no special left unescaped


def test_newlines_cannot_start_markdown_blocks():
    assert "\n" not in md("a\n# heading\n- item")


def test_autolinks_and_block_starts_are_broken():
    """Streamlit linkifies http://, www. and e-mail addresses in the parsed text (escapes
    already resolved): an invisible word joiner breaks each pattern; nothing else changes."""
    from crbc_viz.ui.text import md_lines

    for raw in (
        "http://evil.invalid/x",
        "[a](https://evil.invalid)",
        "www.evil.invalid",
        "bob@evil.invalid",
        "mailto:bob@evil.invalid",
    ):
        out = md(raw)
        assert not re.search(r"https?://|www\.|\w@", out), out
        assert re.sub(r"\\(.)", r"\1", out).replace("\u2060", "") == raw
    assert md("- item").startswith("\\-") and md("12. x").startswith("12\\.")
    assert md("sokoban-sample/0/task_01") == "sokoban-sample/0/task_01"  # ids read as typed
    assert md_lines("2 problems:\n  a.jsonl:line 3: x") == "2 problems:  \na.jsonl\\:line 3: x"
    assert len(md("x" * 10_000)) < 2100
