"""The Data page's Import options take a field map (`streamlit.testing`): the map reaches the
sandboxed reader, the counts equal ``crbc-viz ingest --map ... `` then ``info``, and the map is
saved in the view's link, which opens the file read the same way."""

from __future__ import annotations

import json

import pytest
from streamlit.testing.v1 import AppTest
from test_open_trainer_files import REPO, TIMEOUT, app, cli_counts, errors, metrics, ok, roots, server_path

from crbc_viz.ui.sandbox import ReadOptions, read_key, split_read_key

__all__ = ["roots"]  # the fixture, used by name

MAP = [
    "steps=turns",
    "group_id=^.task",
    "traj_id=^.ep",
    "step_idx=@order",
    "anchor_obs=o",
    "reward=r",
    "success=^.won",
]


def _log(path):
    recs = [
        {"task": "A", "ep": "e1", "won": True, "turns": [{"o": "s0", "r": 0}, {"o": "s1", "r": 1}]},
        {"task": "A", "ep": "e2", "won": False, "turns": [{"o": "s0", "r": 0}]},
        {"task": "B", "ep": "e3", "won": False, "turns": [{"o": "b0", "r": 0}]},
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    return path


def test_a_field_map_reads_the_file_and_is_kept_in_the_link(roots):
    log = _log(roots / "custom.jsonl")
    want = cli_counts(log, roots / "store", *[a for m in MAP for a in ("--map", m)])
    assert (want["Groups"], want["Rollouts"], want["Steps"]) == ("2", "3", "4")
    at = app()
    at.radio(key="data_source").set_value("Server path").run()
    at.text_area(key="import_map").input("\n".join(MAP)).run()
    at = server_path(at, log)
    assert not errors(at), errors(at)
    assert metrics(at) == want
    link = at.query_params["file"]
    opts = split_read_key(link)[1]
    assert opts.fmt == "fieldmap" and opts.field_map == "; ".join(MAP)
    again = AppTest.from_file(str(REPO / "app.py"), default_timeout=TIMEOUT)
    again.query_params["file"] = link
    again.run()
    again.radio(key="data_source").set_value("Server path").run()
    ok(again)
    assert metrics(again) == want
    assert again.text_area(key="import_map").value == "\n".join(MAP)


def test_a_bad_value_is_named_by_its_map_entry(roots):
    log = roots / "bad.jsonl"
    log.write_text(
        json.dumps({"task": "A", "ep": "e1", "won": True, "turns": [{"o": "s0", "r": "x"}]}) + "\n"
    )
    at = app()
    at.radio(key="data_source").set_value("Server path").run()
    at.text_area(key="import_map").input("\n".join(MAP)).run()
    at = server_path(at, log)
    (said,) = errors(at)
    assert "line 1: --map reward=r: expected a number" in said, said


def test_read_options_carry_the_map():
    o = ReadOptions.from_text("auto", "", "", "\n".join(MAP))
    assert o.fmt == "fieldmap" and split_read_key(read_key("/x/log.jsonl", o))[1] == o
    assert o.cli_flags() == [a for m in MAP for a in ("--map", m)]
    toml = "[map]\n" + "".join(f'{t} = "{p}"\n' for t, p in (m.split("=", 1) for m in MAP))
    assert ReadOptions.from_text("auto", "", "", toml) == o


@pytest.mark.parametrize(
    "text, why",
    [
        ("reward=r", "the map names no group_id"),
        ("group_id=g\ntraj_id=t\nstep_idx=s\nreward=r\nrewrd=q", "unknown target 'rewrd'"),
        ('reward = "r', "invalid TOML"),
    ],
)
def test_a_bad_map_is_refused_naming_it(text, why):
    with pytest.raises(ValueError, match=why):
        ReadOptions.from_text("auto", "", "", text)
    with pytest.raises(ValueError, match="not as verl"):
        ReadOptions("verl", (), None, "group_id=g; traj_id=t; step_idx=s; reward=r")
