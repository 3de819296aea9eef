"""Field maps: a log of any layout (nested JSON fields, a Parquet struct column, per-trajectory
records holding a list of steps) read through ``--map target=path`` / ``--map-file``, checked
against a hand-written truth, against scoring the same data written canonically by hand, and
with hostile maps and values (exit 2, one line naming the record and the map entry)."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from crbc_viz.cli import main
from crbc_viz.store import LogStore

# The truth, by hand: (group, traj) -> per-step rewards, success, truncated.
TRUTH = {
    ("A", "e1"): ([0.0, 1.0], True, False),
    ("A", "e2"): ([0.0, 0.0, 0.0], False, True),  # last step done=false: truncated
    ("B", "e3"): ([0.5], False, False),
}
ANCHORS = {("A", "e1"): ["s0", "s1"], ("A", "e2"): ["s0", "s2", "s3"], ("B", "e3"): ["b0"]}
ACTIONS = {("A", "e1"): ["go", "win"], ("A", "e2"): ["stay", "go", "go"], ("B", "e3"): ["x"]}


def _steps():
    """(group, traj, t, anchor, action, reward, done, won-or-None) in a shuffled file order."""
    out = []
    for (g, tr), (rs, won, trunc) in TRUTH.items():
        for t, r in enumerate(rs):
            last = t == len(rs) - 1
            out.append(
                (g, tr, t, ANCHORS[g, tr][t], ACTIONS[g, tr][t], r, last and not trunc, won if last else None)
            )
    return [out[i] for i in (3, 0, 5, 1, 4, 2)]


FLAT_MAP = [
    "group_id=meta.task",
    "traj_id=episode",
    "step_idx=t",
    "anchor_obs=obs.text",
    "action=act",
    "reward=r",
    "done=info.end",
    "success=info.won",
]


def _flat_jsonl(path):
    with open(path, "w") as fh:
        for g, tr, t, o, a, r, done, won in _steps():
            info = {"end": done, **({} if won is None else {"won": won})}
            rec = {"meta": {"task": g, "seed": 7}, "episode": tr, "t": t, "obs": {"text": o, "img": None}}
            fh.write(json.dumps({**rec, "act": a, "r": r, "info": info, "note": "kept"}) + "\n")
    return path


def _parquet(path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = _steps()
    table = pa.table(
        {
            "task": [s[0] for s in rows],
            "ep": [s[1] for s in rows],
            "t": [s[2] for s in rows],
            "obs": pa.array([{"text": s[3]} for s in rows]),
            "act": [s[4] for s in rows],
            "r": [s[5] for s in rows],
            "info": pa.array([{"end": s[6], "won": s[7]} for s in rows]),
        }
    )
    pq.write_table(table, path)
    return path


def _nested_jsonl(path):
    with open(path, "w") as fh:
        for (g, tr), (rs, won, trunc) in TRUTH.items():
            turns = [
                {
                    "o": ANCHORS[g, tr][t],
                    "a": ACTIONS[g, tr][t],
                    "r": r,
                    "end": t == len(rs) - 1 and not trunc,
                }
                for t, r in enumerate(rs)
            ]
            fh.write(json.dumps({"episode": tr, "meta": {"task": g}, "won": won, "turns": turns}) + "\n")
    return path


NESTED_MAP = [
    "steps=turns",
    "group_id=^.meta.task",
    "traj_id=^.episode",
    "step_idx=@order",
    "anchor_obs=o",
    "action=a",
    "reward=r",
    "done=end",
    "success=^.won",
]


def _canonical(path):
    """The same data in the canonical schema, written by hand (not by the mapper)."""
    with open(path, "w") as fh:
        for g, tr, t, o, a, r, done, won in _steps():
            row = {"group_id": g, "traj_id": tr, "step_idx": t, "anchor_obs": o, "action": a, "reward": r}
            row["done"] = done
            if won is not None:
                row["success"] = won
            fh.write(json.dumps(row) + "\n")
    return path


def _maps(items):
    return [a for m in items for a in ("--map", m)]


def _check_store(store, capsys):
    capsys.readouterr()
    assert main(["info", "--store", str(store), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["groups"] == 2
    assert info["trajectories"] == 3
    assert info["steps"] == 6
    assert info["truncated"] == 1
    assert info["formats"] == ["fieldmap"]
    batch = LogStore(store).load_batch()
    tr = batch.trajectories
    got = {
        (str(r.group_id), str(r.traj_id)): (int(r.num_steps), bool(r.success), bool(r.truncated))
        for r in tr.itertuples()
    }
    assert got == {k: (len(rs), won, trunc) for k, (rs, won, trunc) in TRUTH.items()}
    steps = batch.steps if hasattr(batch, "steps") else None
    rewards = {}
    for g, t, i, r in zip(
        batch.column("group_id") if steps is None else steps["group_id"],
        batch.column("traj_id") if steps is None else steps["traj_id"],
        batch.column("step_idx") if steps is None else steps["step_idx"],
        batch.column("reward") if steps is None else steps["reward"],
    ):
        rewards.setdefault((str(g), str(t)), {})[int(i)] = float(r)
    assert {k: [v[i] for i in sorted(v)] for k, v in rewards.items()} == {k: v[0] for k, v in TRUTH.items()}


@pytest.mark.parametrize(
    "make, items",
    [
        (_flat_jsonl, FLAT_MAP),
        (
            _parquet,
            [
                "group_id=task",
                "traj_id=ep",
                "step_idx=t",
                "anchor_obs=obs.text",
                "action=act",
                "reward=r",
                "done=info.end",
                "success=info.won",
            ],
        ),
        (_nested_jsonl, NESTED_MAP),
    ],
    ids=["jsonl-nested-fields", "parquet-struct", "per-trajectory-jsonl"],
)
def test_ingest_through_a_map_equals_the_truth(tmp_path, capsys, make, items):
    log = make(tmp_path / ("log.parquet" if make is _parquet else "log.jsonl"))
    store = tmp_path / "S"
    assert main(["ingest", str(log), "--store", str(store), "-q", *_maps(items)]) == 0
    _check_store(store, capsys)


def test_unmapped_fields_are_kept_as_extras(tmp_path):
    from crbc_viz.io.importers import Source, import_source

    log = _flat_jsonl(tmp_path / "log.jsonl")
    imp = import_source(
        Source(str(log), "fieldmap", (str(log),)),
        field_map={m.split("=")[0]: m.split("=")[1] for m in FLAT_MAP},
    )
    cols = set(imp.raw.records.columns)
    assert {"note", "meta", "obs", "info"} <= cols  # read partly or not at all: kept
    assert not {"t", "act", "r", "episode"} & cols  # read whole by a path: not kept twice


def _frame(path):
    df = pd.read_parquet(path)
    return df.sort_values(list(df.columns[:4])).reset_index(drop=True)


def test_score_with_a_map_file_equals_the_canonical_file(tmp_path, capsys):
    log = _nested_jsonl(tmp_path / "log.jsonl")
    mf = tmp_path / "map.toml"
    mf.write_text("[map]\n" + "".join(f'{t} = "{p}"\n' for t, p in (m.split("=", 1) for m in NESTED_MAP)))
    (tmp_path / "c").mkdir()
    canon = _canonical(tmp_path / "c" / "log.jsonl")  # the same name: the same run_id
    a, b = tmp_path / "a.parquet", tmp_path / "b.parquet"
    assert main(["score", str(log), "--map-file", str(mf), "-e", "crbc", "-e", "grpo", "--out", str(a)]) == 0
    assert main(["score", str(canon), "-e", "crbc", "-e", "grpo", "--out", str(b)]) == 0
    fa, fb = _frame(a), _frame(b)
    assert len(fa) == 12
    pd.testing.assert_frame_equal(fa, fb)


def test_step_idx_in_record_order(tmp_path, capsys):
    log = tmp_path / "log.jsonl"
    rows = [("A", "e1", 0.0), ("A", "e2", 0.0), ("A", "e1", 1.0)]
    log.write_text("".join(json.dumps({"g": g, "e": e, "r": r, "o": f"{e}{r}"}) + "\n" for g, e, r in rows))
    args = ["info", str(log), "--json", *_maps(["group_id=g", "traj_id=e", "step_idx=@order", "reward=r"])]
    assert main(args) == 0
    info = json.loads(capsys.readouterr().out)
    assert (info["trajectories"], info["steps"], info["success_rate"]) == (2, 3, 0.5)


BASE = ["group_id=g", "traj_id=e", "step_idx=t", "reward=r"]


@pytest.mark.parametrize(
    "line, items, want",
    [
        ({"g": "A", "e": "x", "t": 0}, BASE, "line 2: --map reward=r: path 'r' missing"),
        ({"g": "A", "e": "x", "t": 0, "r": "abc"}, BASE, "line 2: --map reward=r: expected a number"),
        ({"g": "A", "e": "x", "t": 10**30, "r": 1}, BASE, "line 2: --map step_idx=t: integer out of range"),
        ({"g": "A", "e": "x", "t": 0, "r": [1]}, BASE, "line 2: --map reward=r: expected a number"),
        (
            {"g": "A", "e": "x", "t": 0, "r": 1, "info": "s"},
            [*BASE, "success=info.won"],
            "--map success=info.won: path 'info.won' missing in every record",
        ),
        (
            {"g": {"k": 1}, "e": "x", "t": 0, "r": 1},
            ["group_id=g.k.z", "traj_id=e", "step_idx=t", "reward=r"],
            "line 2: --map group_id=g.k.z: path 'g.k.z' missing ('g.k' is a number, not an object)",
        ),
        ({"g": "A", "e": "x", "t": 0, "r": 1}, [*BASE, "rewrd=r"], "unknown target 'rewrd'; valid: group_id"),
        ({"g": "A", "e": "x", "t": 0, "r": 1}, BASE[:3], "the map names no reward"),
        (
            {"g": "A", "e": "x", "turns": 5},
            ["steps=turns", "group_id=^.g", "traj_id=^.e", "step_idx=@order", "reward=r"],
            "line 2: --map steps=turns: path 'turns' missing (a number, not a list of steps)",
        ),
    ],
    ids=[
        "missing",
        "wrong-type",
        "huge-int",
        "list",
        "every-record",
        "not-an-object",
        "unknown-target",
        "required-unmapped",
        "steps-not-list",
    ],
)
def test_hostile_inputs_are_one_line_naming_record_and_map_entry(tmp_path, capsys, line, items, want):
    log = tmp_path / "log.jsonl"
    first = (
        {"g": "A", "e": "y", "t": 0, "r": 0.0}
        if "steps=turns" not in items
        else {"g": "A", "e": "y", "turns": [{"r": 0}]}
    )
    log.write_text(json.dumps(first) + "\n" + json.dumps(line) + "\n")
    assert main(["info", str(log), *_maps(items)]) == 2
    err = capsys.readouterr().err
    assert want in err, err
    assert "Traceback" not in err


def test_deep_value_is_refused_naming_its_line(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("CRBC_VIZ_MAX_DEPTH", "20")
    log = tmp_path / "log.jsonl"
    deep = {"g": "A", "e": "x", "t": 0, "r": 1, "o": json.loads("[" * 50 + "]" * 50)}
    log.write_text(json.dumps({"g": "A", "e": "y", "t": 0, "r": 0}) + "\n" + json.dumps(deep) + "\n")
    assert main(["info", str(log), *_maps([*BASE, "anchor_obs=o"])]) == 2
    err = capsys.readouterr().err
    assert "log.jsonl:line 2" in err and "CRBC_VIZ_MAX_DEPTH" in err


def test_bad_toml_is_named(tmp_path, capsys):
    log = _flat_jsonl(tmp_path / "log.jsonl")
    mf = tmp_path / "map.toml"
    mf.write_text('reward = "r\n')
    assert main(["info", str(log), "--map-file", str(mf)]) == 2
    err = capsys.readouterr().err
    assert "map.toml: invalid TOML" in err and "line 1" in err
    mf.write_text("reward = 3\n")
    assert main(["info", str(log), "--map-file", str(mf)]) == 2
    assert "map.toml: reward: expected a string path, got int" in capsys.readouterr().err


def test_a_map_with_a_store_source_is_a_usage_error(tmp_path, capsys):
    assert main(["info", "--store", str(tmp_path), *_maps(BASE)]) == 2
    assert "--map" in capsys.readouterr().err


def test_store_identity_depends_on_the_map(tmp_path, capsys):
    """The same file with the same map is already in the store; with another map it is read
    again as another source (here refused: its trajectories are in the store already)."""
    log = _flat_jsonl(tmp_path / "log.jsonl")
    store = tmp_path / "S"
    assert main(["ingest", str(log), "--store", str(store), "-q", *_maps(FLAT_MAP)]) == 0
    capsys.readouterr()
    assert main(["ingest", str(log), "--store", str(store), "-q", *_maps(FLAT_MAP)]) == 0
    assert "0 source(s) ingested, 1 already in the store" in capsys.readouterr().out
    other = [m if not m.startswith("success=") else "success=info.end" for m in FLAT_MAP]
    assert main(["ingest", str(log), "--store", str(store), "-q", *_maps(other)]) == 2
    assert "trajectory 'e1' of group 'log/0/A' is already in the store" in capsys.readouterr().err


def test_the_watcher_reads_through_the_map(tmp_path, capsys):
    """``ingest --watch`` takes the same options: the follower ingests each log through the map."""
    from crbc_viz.io.importers.fieldmap import parse_map
    from crbc_viz.store.watch import Watcher

    run, store = tmp_path / "run", tmp_path / "S"
    run.mkdir()
    _nested_jsonl(run / "log.jsonl")
    clock, events = [1000.0], []
    opts = {"field_map": parse_map(NESTED_MAP)}
    with Watcher(
        run,
        store,
        fmt="fieldmap",
        import_options=opts,
        settle=1.0,
        clock=lambda: clock[0],
        on_event=events.append,
    ) as w:
        for _ in range(3):
            w.step()
            clock[0] += 5
    assert [e.kind for e in events if e.kind in ("ingested", "failed")] == ["ingested"], events
    _check_store(store, capsys)


def test_a_map_with_another_format_is_a_usage_error(tmp_path, capsys):
    log = _flat_jsonl(tmp_path / "log.jsonl")
    args = ["ingest", str(log), "--store", str(tmp_path / "S"), "--format", "trl", *_maps(FLAT_MAP)]
    assert main(args) == 2
    assert "--map / --map-file read the log as fieldmap; not with --format trl" in capsys.readouterr().err
    assert not (tmp_path / "S").exists()
