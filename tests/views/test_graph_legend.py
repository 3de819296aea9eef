"""The graph legend's bar ends are plain decimals a person reads, never e-notation, also for a
result whose credits and values span a tiny (or a large) range."""

from __future__ import annotations

import re

from crbc_viz.views.graph_page import fmt_scale, legend_html


def _ends(legend: str) -> list[str]:
    value = re.findall(r"<span class='(?:lo|hi)'>([^<]*)</span>", legend)
    credit = re.search(r"credit: ([^<]*)<span class='bar credit'.*?</span>([^<]*)</span>", legend).groups()
    return [*value, *credit]


def test_a_tiny_range_is_written_in_decimals():
    legend = legend_html("crbc", "", "V(s)", True, 0.0, 0.000012, 0.00001)
    assert _ends(legend) == ["0", "0.000012", "-0.00001", "+0.00001"]
    assert not re.search(r"\de[-+]\d", legend)


def test_a_large_range_is_written_whole():
    legend = legend_html("shortest_path", "", "d(s)", False, 3.0, 1234.5, 250.0)
    assert _ends(legend) == ["3", "1234", "-250", "+250"]


def test_two_significant_digits_by_hand():
    cases = {
        0.5: "0.5",
        0.123: "0.12",
        9.96: "10",
        0.0000996: "0.0001",
        -0.0042: "-0.0042",
        1e-13: "<0.000000000001",
    }
    assert {x: fmt_scale(x) for x in cases} == cases
    assert fmt_scale(float("nan")) == "—"
