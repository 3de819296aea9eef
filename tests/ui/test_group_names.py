"""Group names in the sidebar's select box: a long name is shortened in the middle, so the end
that tells groups apart stays readable, the full name is recoverable, and names that differ
stay different (the 16 Sokoban groups of the bundled sample all start alike)."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given
from hypothesis import strategies as hs

from crbc_viz.ui.text import NAME_CHARS, middle_ellipsis, short_names

SOKOBAN = Path(__file__).resolve().parents[2] / "sample_rollouts" / "sokoban" / "sokoban.jsonl"


def _sokoban_labels() -> list[str]:
    from crbc_viz.io import load_rollouts

    return load_rollouts(str(SOKOBAN)).group_labels()


def test_sokoban_groups_keep_their_distinguishing_end():
    labels = _sokoban_labels()
    assert len(labels) == 16 and len(set(labels)) == 16
    # Hand-checked: every label is 'sokoban-sample/0/sokoban-task-NN' (32 characters), so a
    # cut at the box's width keeps only the common start 'sokoban-sample/0/sokoban-task'.
    assert all(lab.startswith("sokoban-sample/0/sokoban-task-") for lab in labels)
    short = short_names(labels)
    assert set(short) == set(labels)  # every full name maps to its shown name
    assert len(set(short.values())) == 16  # unique names stay unique
    for lab, s in short.items():
        assert len(s) <= NAME_CHARS, s
        assert s.endswith(lab[-2:]) and s.endswith("sokoban-task-" + lab[-2:]), s
        assert "…" in s
    assert short["sokoban-sample/0/sokoban-task-07"] == "sokoban-…0/sokoban-task-07"
    # The full name is recoverable from the shown one (the select box returns the name itself).
    back = {s: lab for lab, s in short.items()}
    assert all(back[short[lab]] == lab for lab in labels)


def test_short_names_stay_as_typed():
    assert middle_ellipsis("toy/0/g") == "toy/0/g"
    assert short_names(["a", "b/c"]) == {"a": "a", "b/c": "b/c"}
    assert middle_ellipsis("abcdefghij", 7) == "ab…ghij"


def test_names_differing_only_in_the_middle_keep_their_full_name():
    a, b = "run-" + "x" * 30 + "-A-" + "y" * 30, "run-" + "x" * 30 + "-B-" + "y" * 30
    assert middle_ellipsis(a) == middle_ellipsis(b)
    assert short_names([a, b, "short"]) == {a: a, b: b, "short": "short"}


@given(hs.lists(hs.text(alphabet="ab/-…", max_size=40), unique=True, max_size=30), hs.integers(4, 30))
def test_unique_names_stay_unique(names, limit):
    short = short_names(names, limit)
    assert set(short) == set(names)
    assert len(set(short.values())) == len(names)
    for n, s in short.items():
        assert s == n or (len(s) <= limit and s.endswith(n[-((limit - 1) - (limit - 1) // 3) :]))
