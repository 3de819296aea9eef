"""The shared view of one group (`crbc_viz.show`, `crbc-viz html`), checked without rendering:
the fragment's structure (one self-contained iframe per estimator, no script or request of its
own), the per-step credit against hand computations (docs/spec_vectors.md, the toy group), the
provenance, every logged text escaped, and bad input as one `CrbcVizError`."""

from __future__ import annotations

import re
from html.parser import HTMLParser

import pytest

import crbc_viz
from crbc_viz.errors import CrbcVizError, MissingSignalError, UnknownEstimatorError
from crbc_viz.views.share import UnknownGroupError, resolve_group
from helpers import ROOT, TOY, write_jsonl

MARKUP = ROOT / "tests/bad_inputs/markup_everywhere.jsonl"
SOKOBAN = ROOT / "sample_rollouts/sokoban/sokoban.jsonl"


class _Tags(HTMLParser):
    """Start tags with their attributes, and the credit cells' values by (rollout, step_idx)."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict]] = []
        self.row: tuple[str, int] | None = None
        self.credit: dict[tuple[str, str, int], float] = {}
        self.text: dict[tuple[str, str, int], str] = {}
        self._cell: tuple | None = None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self.tags.append((tag, a))
        if tag == "tr" and "data-crbc-traj" in a:
            self.row = (a["data-crbc-traj"], int(a["data-crbc-step-idx"]))
        if tag == "td" and "data-crbc-credit" in a and self.row is not None:
            key = (a["data-crbc-credit"], *self.row)
            self.credit[key] = float(a["data-value"])
            self._cell = key

    def handle_data(self, data):
        if self._cell is not None:
            self.text[self._cell] = self.text.get(self._cell, "") + data

    def handle_endtag(self, tag):
        if tag == "td":
            self._cell = None


def _parse(html: str) -> _Tags:
    p = _Tags()
    p.feed(html)
    p.close()
    return p


def _prov(html: str) -> dict[str, str]:
    rows = re.findall(r"<tr data-crbc-prov='[^']*'><td>(.*?)</td><td>(.*?)</td></tr>", html)
    return dict(rows)


@pytest.fixture(scope="module")
def toy_view():
    return crbc_viz.show(TOY, estimators=("crbc", "grpo"))


def test_fragment_is_self_contained_one_graph_per_estimator(toy_view):
    html = toy_view._repr_html_()
    tags = _parse(html).tags
    frames = [a for t, a in tags if t == "iframe"]
    assert [f.get("title") for f in frames] == ["anchor graph, crbc", "anchor graph, grpo"]
    assert [a["data-crbc-estimator"] for t, a in tags if "data-crbc-estimator" in a] == ["crbc", "grpo"]
    # Scripts only inside the graphs' own pages; nothing anywhere names a host to fetch from.
    assert not [t for t, _ in tags if t in ("script", "link", "img")]
    for f in frames:
        page = f["srcdoc"]
        assert "new vis.Network" in page and "SUCCESS" in page and "FAILURE" in page
        inner = _parse(page).tags
        assert not [a for t, a in inner if t == "script" and a.get("src")], "a script fetched from a URL"
        assert not [a for t, a in inner if t == "link" and a.get("href")], "a stylesheet fetched from a URL"
    assert not re.search(r"(src|href)\s*=\s*[\"']?(https?:)?//", html)


def test_per_step_credit_equals_the_hand_computation(toy_view):
    """docs/spec_vectors.md: GRPO on the toy group is ±0.5 / (0.57735 + 1e-6) = ±0.8660 (t1 and
    t4 succeed); CRBC's step credit A^S(s0,a) = 0.006989 / σ_min 0.1 = +0.0699 and
    A^S(s1,b) = 0.160067 / 0.277244 = +0.5774."""
    p = _parse(toy_view._repr_html_())
    assert len(p.credit) == 2 * 15  # 15 steps, two estimators
    for t, n in (("t1", 3), ("t2", 3), ("t3", 4), ("t4", 5)):
        sign = 1 if t in ("t1", "t4") else -1
        for k in range(n):
            assert p.credit[("grpo", t, k)] == pytest.approx(sign * 0.5 / (0.5773503 + 1e-6), abs=1e-6)
            assert p.text[("grpo", t, k)] == ("+0.8660" if sign > 0 else "-0.8660")
    assert p.credit[("crbc", "t1", 0)] == pytest.approx(0.006989 / 0.1, abs=1e-5)
    assert p.credit[("crbc", "t1", 1)] == pytest.approx(0.160067 / 0.277244, abs=1e-5)
    assert p.text[("crbc", "t1", 0)] == "+0.0699" and p.text[("crbc", "t1", 1)] == "+0.5774"
    # The rollouts' chip table is there too, one chip row per estimator.
    assert "chips, top to bottom" in toy_view.fragment and "data-crbc-step='0:0'" in toy_view.fragment


def test_provenance_names_file_format_group_version_and_params(toy_view):
    prov = _prov(toy_view.fragment)
    assert prov["file"] == "toy_group.jsonl"
    assert prov["read as"] == "canonical log (detected)"
    assert (prov["run"], prov["train step"]) == ("toy", "0")
    assert prov["group"] == "toy (1 of 1 in the file)"
    assert prov["crbc-viz version"] == crbc_viz.__version__
    assert "beta=0.98" in prov["params [crbc]"] and "min_actions=2" in prov["params [crbc]"]
    assert "norm=&#x27;std&#x27;" in prov["params [grpo]"]
    assert re.fullmatch(r"[0-9a-f]{64}", prov["file SHA-256"])
    assert re.fullmatch(r"auto \(ran: crbc on \w+, grpo on \w+\)", prov["backend"])


def test_parameters_reach_the_estimators_and_the_provenance():
    shared = crbc_viz.show(TOY, estimators=("crbc", "grpo"), beta=0.9, grpo={"norm": "mean"})
    assert shared.results["crbc"].params.beta == 0.9
    prov = _prov(shared.fragment)
    assert "beta=0.9," in prov["params [crbc]"] and "norm=&#x27;mean&#x27;" in prov["params [grpo]"]
    # GRPO without normalisation: ±0.5 (mean-only, spec_vectors).
    p = _parse(shared.fragment)
    assert p.credit[("grpo", "t1", 0)] == pytest.approx(0.5) and p.credit[("grpo", "t2", 0)] == pytest.approx(
        -0.5
    )


def test_a_trainer_dump_says_how_it_was_read():
    path = ROOT / "tests/fixtures/trl_real/trl_run/completions/completions_00001.parquet"
    shared = crbc_viz.show(path, estimators="grpo")
    assert _prov(shared.fragment)["read as"].startswith("TRL")


def test_logged_markup_is_text_everywhere():
    shared = crbc_viz.show(MARKUP, estimators=("crbc", "grpo"))
    html = shared._repr_html_()
    tags = _parse(html).tags
    assert not [t for t, _ in tags if t in ("script", "img")], "logged markup became an element"
    assert "<img src=x" not in html.split("srcdoc=")[0]
    for _, a in tags:
        if "srcdoc" in a:  # the graph's own page: logged text is text there too
            assert not [t for t, _ in _parse(a["srcdoc"]).tags if t == "img"]
            assert "<script>alert(2)" not in a["srcdoc"]
    assert "&lt;img src=x onerror=alert(1)&gt;" in html  # shown, as text
    page = shared.page()
    assert page.startswith("<!doctype html>") and "<title>crbc-viz · bad/0/&lt;img" in page


def test_groups_are_named_by_label_or_unique_id():
    b = crbc_viz.load_rollouts(SOKOBAN)
    labels = b.group_labels()
    assert resolve_group(b, None) == 0
    assert resolve_group(b, labels[4]) == 4
    assert resolve_group(b, labels[4].rsplit("/", 1)[1]) == 4
    shared = crbc_viz.show(b, group=labels[2])
    assert shared.group_label == labels[2]
    assert _prov(shared.fragment)["read as"] == "a RolloutBatch given in Python"


def test_bad_input_is_one_line(tmp_path):
    with pytest.raises(UnknownGroupError, match=r"^no group 'nope' in the data \(1 groups: toy/0/toy\)$"):
        crbc_viz.show(TOY, group="nope")
    with pytest.raises(UnknownEstimatorError):
        crbc_viz.show(TOY, estimators=("crbc", "nope"))
    with pytest.raises(CrbcVizError, match="unknown parameter"):
        crbc_viz.show(TOY, estimators=("grpo",), not_a_param=1)
    with pytest.raises(MissingSignalError, match="gold_logprob"):  # the only estimator refuses
        crbc_viz.show(TOY, estimators=("trace",))
    rows = [
        dict(run_id="r", train_step=s, group_id="g", traj_id="a", step_idx=0, anchor_obs="s0",
             action="x", reward=1.0, done=True, success=True)
        for s in (0, 1)
    ]  # fmt: skip
    with pytest.raises(UnknownGroupError, match="ambiguous .* r/0/g, r/1/g"):
        crbc_viz.show(write_jsonl(tmp_path / "two.jsonl", rows), group="g")


def test_one_refusal_does_not_stop_the_others():
    shared = crbc_viz.show(TOY, estimators=("trace", "crbc"))
    assert list(shared.results) == ["crbc"] and list(shared.refused) == ["trace"]
    tags = _parse(shared.fragment).tags
    assert [a["data-crbc-refused"] for t, a in tags if "data-crbc-refused" in a] == ["trace"]
    assert [a.get("title") for t, a in tags if t == "iframe"] == ["anchor graph, crbc"]
    assert "gold_logprob" in shared.fragment


def test_save_writes_the_page(tmp_path, toy_view):
    out = toy_view.save(tmp_path / "v.html")
    assert out.read_text(encoding="utf-8") == toy_view.page()
