"""Fuzzing every importer and reader through the CLI's own code: each trainer's real fixture
records (written by the trainer's code, tests/fixtures/*) are mutated -- a value replaced by one
of another type (``"False"``, ``[]``, ``{}``, a bool, the text of a number), a lone surrogate
(``"\\ud800"``), an integer beyond int64 or the float range, a deep or long value, a key or a
record deleted or doubled, JSON inside a JSON string (ROLL's cells) mutated in place, the
written file cut short -- and the result goes through ``crbc-viz ingest``, then ``info --store``
and ``score --store``. Each must end with exit 0, or exit 2 and a bounded ``error:`` message:
never a traceback, a crash or more than 1 GB.

In process (`crbc_viz.cli.main`, the code the command runs: only a `CrbcVizError` becomes exit
2, any other exception escapes and fails the test), seeded (``derandomize``), bounded to
``$CRBC_VIZ_FUZZ_EXAMPLES`` examples per seed file (default `DEFAULT_EXAMPLES`; the whole
module takes about a minute on two cores); raise it for a longer run, e.g.
``CRBC_VIZ_FUZZ_EXAMPLES=2000 pytest tests/io/test_fuzz_importers.py``. A small sample of
mutated files also runs through the real command in subprocesses (exit code, message, peak
memory of the child).
"""

from __future__ import annotations

import contextlib
import copy
import gzip
import io
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from crbc_viz.errors import MAX_LISTED
from helpers import ROOT

FIX = ROOT / "tests" / "fixtures"
DEFAULT_EXAMPLES = 15
EXAMPLES = int(os.environ.get("CRBC_VIZ_FUZZ_EXAMPLES", DEFAULT_EXAMPLES))
#: At most this many records (lines, episode files) of a fixture are fuzzed: small inputs, fast runs.
MAX_RECORDS = 12
GB_KB = 1024 * 1024  # ru_maxrss is in KiB on Linux

#: (name, importer, fixture file or rLLM folder, the path under the scratch folder it is
#: written to: names the importers read a step or a layout from are kept).
SEEDS = [
    ("canonical", "canonical", ROOT / "tests/bad_inputs/ok.jsonl", "ok.jsonl"),
    # the same rows through every other reader: a JSON document, CSV, Parquet, gzip
    ("canonical-json", "canonical", ROOT / "tests/bad_inputs/ok.jsonl", "ok.json"),
    ("canonical-csv", "canonical", ROOT / "tests/bad_inputs/ok.jsonl", "ok.csv"),
    ("canonical-parquet", "canonical", ROOT / "tests/bad_inputs/ok.jsonl", "ok.parquet"),
    ("canonical-gz", "canonical", ROOT / "tests/bad_inputs/ok.jsonl", "ok.jsonl.gz"),
    ("verl", "verl", FIX / "verl_run/rollout/7.jsonl", "run/rollout/7.jsonl"),
    ("verl041", "verl", FIX / "verl_041/rollout/1.jsonl", "run/rollout/1.jsonl"),
    ("verl-v1", "verl", FIX / "verl_run/rollout/7.jsonl", "run/rollout/7.jsonl"),  # + uid, see records
    (
        "verl-agent",
        "verl-agent",
        FIX / "verl_agent_real/crbc_dump/crbc_step_000001.jsonl",
        "run/crbc_dump/crbc_step_000001.jsonl",
    ),
    (
        "verl-agent-parquet",
        "verl-agent",
        FIX / "verl_agent_real/crbc_dump/crbc_step_000001.jsonl",
        "run/crbc_dump/crbc_step_000001.parquet",
    ),
    ("verl-agent-rollout", "verl-agent", FIX / "verl_agent_e03/rollout/1.jsonl", "run/rollout/1.jsonl"),
    (
        "roll",
        "roll",
        FIX / "roll_real/rollout_dump/rollout_dump_data.step_1.jsonl",
        "run/rollout_dump_data.step_1.jsonl",
    ),
    ("roll-rows", "roll", FIX / "roll_run/roll_steps.jsonl", "run/roll_steps.jsonl"),
    (
        "roll-native",
        "roll",
        FIX / "roll_native/rollout_dump/rollout_dump_data.step_1.jsonl",
        "run/rollout_dump_data.step_1.jsonl",
    ),
    ("rllm", "rllm", FIX / "rllm_run/step_2", "run/step_2"),
    (
        "rllm38",
        "rllm",
        FIX / "rllm_38dd/train_logs/episodes/train_step_1_epoch_0",
        "run/train_step_1_epoch_0",
    ),
    (
        "trl",
        "trl",
        FIX / "trl_real/trl_run/completions/completions_00002.parquet",
        "run/completions/completions_00002.parquet",
    ),
    ("ms-swift3", "ms-swift", FIX / "swift3_real/output/completions.jsonl", "output/completions.jsonl"),
    ("ms-swift", "ms-swift", FIX / "swift_real/output/completions.jsonl", "output/completions.jsonl"),
    (
        "skyrl",
        "skyrl",
        FIX / "skyrl_a956/export/dumped_evals/global_step_20_evals/gsm8k.jsonl",
        "export/dumped_evals/global_step_20_evals/gsm8k.jsonl",
    ),
    (
        "nemo-rl",
        "nemo-rl",
        FIX / "nemo_rl/logs/exp_001/train_data_step2.jsonl",
        "logs/exp/train_data_step2.jsonl",
    ),
    (
        "ragen",
        "ragen",
        FIX / "ragen/results/eval/val_rollouts_20261205_031500.jsonl",
        "results/eval/val_rollouts_20261205_031500.jsonl",
    ),
    (
        "verifiers",
        "verifiers",
        FIX / "verifiers_031/outputs/evals/guess--scripted/0a1b2c3d/results.jsonl",
        "evals/x/0a1b2c3d/results.jsonl",
    ),
    # the multi-turn layouts: read as turns (SCHEMA.md's history-free anchors)
    (
        "skyrl-stepwise",
        "skyrl",
        FIX / "skyrl_stepwise/export/dumped_evals/global_step_30_evals/gsm8k.jsonl",
        "export/dumped_evals/global_step_30_evals/gsm8k.jsonl",
    ),
    (
        "verifiers-traces",
        "verifiers",
        FIX / "verifiers_040/outputs/guess-game--fake/traces.jsonl",
        "x/traces.jsonl",
    ),
    (
        "roll-native-last",
        "roll",
        FIX / "roll_native_last/rollout_dump/rollout_dump_data.step_1.jsonl",
        "run/rollout_dump_data.step_1.jsonl",
    ),
    (
        "trl-tools",
        "trl",
        FIX / "trl_tools/trl_run/completions/completions_00001.parquet",
        "run/completions/completions_00001.parquet",
    ),
    (
        "ms-swift46",
        "ms-swift",
        FIX / "swift46_multiturn/output/completions.jsonl",
        "output/completions.jsonl",
    ),
    (
        "art-v1",
        "art",
        FIX / "art/art_v1/corridor/models/agent-001/trajectories/train/0003.parquet",
        "art/p/models/m/trajectories/train/0003.parquet",
    ),
    (
        "art-v2",
        "art",
        FIX / "art/art_v2/corridor/models/agent-002/trajectories/train/0012.parquet",
        "art/p/models/m/trajectories/train/0012.parquet",
    ),
    (
        "art-jsonl",
        "art",
        FIX / "art/art_jsonl/corridor/models/agent-000/trajectories/val/0001.jsonl",
        "art/p/models/m/trajectories/val/0001.jsonl",
    ),
    (
        "tinker-cookbook",
        "tinker-cookbook",
        FIX / "tinker_cookbook/log/iteration_000003/train_rollout_summaries.jsonl",
        "log/iteration_000003/train_rollout_summaries.jsonl",
    ),
    ("areal", "areal", FIX / "areal/run/rollout/2/3.jsonl", "run/rollout/2/3.jsonl"),
    # torch.save files: the records are the samples / rows, saved again as the trainer saves them
    ("slime", "slime", FIX / "slime/compact/rollout_5.pt", "run/compact/rollout_5.pt"),
    ("graphgpo", "graphgpo", FIX / "graphgpo/batch_padded_step4.pth", "run/batch_step4.pth"),
]
#: Formats read only through a user's field map (nothing to read without one): their hostile
#: maps and values are tests/io/test_fieldmap.py's.
MAPPED_ONLY = {"fieldmap"}
BY_NAME = {s[0]: s for s in SEEDS}

# ---- the records and their mutations -----------------------------------------------------------


def seed_records(name: str):
    """The records of seed ``name``; ``verl-v1``: verl's rows with the ``uid`` verl 0.9's
    TransferQueue trainer writes (``{uid}_{session}_{index}``: one session per row here)."""
    recs = records(BY_NAME[name][2])
    if name == "verl-v1":
        prompts = list(dict.fromkeys(r["input"] for r in recs))
        recs = [dict(r, uid=f"p{prompts.index(r['input'])}_{k}_0") for k, r in enumerate(recs)]
    return recs


def _plain(v):
    """A loaded torch file's value as JSON-like Python (numpy scalars and tuples unwrapped)."""
    if hasattr(v, "item") and not isinstance(v, (list, dict, str)):
        return v.item()
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    if isinstance(v, dict):
        return {k: _plain(x) for k, x in v.items()}
    return v


def _torch_records(src: Path) -> list:
    """A slime dump's samples, or a GraphGPO batch's rows (whole trajectories of the first
    group), as JSON-like dicts."""
    from crbc_viz.io.importers import _torch_file

    data = _torch_file.load(str(src), "seed", numpy=True, tensordict=True)
    if "samples" in data:
        return _plain(data["samples"][:MAX_RECORDS])
    ntb = data["non_tensor_batch"]
    rows = [{k: _plain(v[i]) for k, v in ntb.items()} for i in range(len(ntb["uid"]))]
    keep = list(dict.fromkeys(r["traj_uid"] for r in rows if r["uid"] == rows[0]["uid"]))[:3]
    return [r for r in rows if r["traj_uid"] in keep]


def _torch_write(recs, dest: Path) -> None:
    """``torch.save`` as slime (``.pt``: ``{"rollout_id", "samples"}``) or a GraphGPO batch
    (``.pth``: a DataProto's ``__dict__``, its rows as object columns) saves it."""
    import numpy as np
    import torch

    if dest.suffix == ".pt":
        torch.save({"rollout_id": 5, "samples": recs}, dest)
        return
    rows = [r for r in recs if isinstance(r, dict)]
    cols = {}
    for k in dict.fromkeys(k for r in rows for k in r):
        col = np.empty(len(rows), dtype=object)
        col[:] = [r.get(k) for r in rows]
        cols[k] = col
    torch.save({"batch": None, "non_tensor_batch": cols, "meta_info": {}}, dest)


def records(src: Path):
    """The fixture's records: a list of JSON lines, a list of Parquet rows, (an rLLM folder)
    ``{file name: episode document}``, or a torch file's samples / rows (`_torch_records`)."""
    if src.suffix in (".pt", ".pth"):
        return _torch_records(src)
    if src.is_dir():
        files = sorted(p for p in src.glob("*.json") if p.name not in ("batch_summary.json", "meta.json"))
        return {p.name: json.loads(p.read_text()) for p in files[:MAX_RECORDS]}
    if src.suffix == ".parquet":
        df = pd.read_parquet(src).head(MAX_RECORDS)
        return json.loads(df.to_json(orient="records"))
    recs = [json.loads(x) for x in src.read_text().splitlines() if x.strip()]
    if "traj_uid" in recs[0]:  # step rows: whole trajectories of the first group
        keep = list(dict.fromkeys(r["traj_uid"] for r in recs if r.get("uid") == recs[0]["uid"]))[:3]
        return [r for r in recs if r.get("traj_uid") in keep]
    return recs[:MAX_RECORDS]


def _deep(v, depth: int):
    for _ in range(depth):
        v = [v]
    return v


#: Replacements: another type, the text of a number or a flag, numbers past int64 and float.
HOSTILE = [
    None,
    True,
    False,
    0,
    1,
    -1,
    0.5,
    2**63,
    -(2**64) - 1,
    10**30,
    10**400,
    1e308,
    "",
    "False",
    "true",
    "0.5",
    " 1.0 ",
    "1e400",
    "nan",
    "\ud800",
    "x\udcffy",
    [],
    {},
    [1, "a", None],
    {"a": [1, {"b": "\ud800"}]},
    [[]],
    ["\ud800"],
    {"role": "assistant", "content": "\ud800"},
]


def _swap(v, rnd: random.Random):
    """``v`` as a value of another type (the same datum)."""
    if isinstance(v, bool):
        return rnd.choice([str(v), int(v), [v]])
    if isinstance(v, (int, float)):
        return rnd.choice([str(v), [v], bool(v), {"value": v}])
    if isinstance(v, str):
        try:
            return float(v)
        except ValueError:
            return rnd.choice([len(v), [v], {"text": v}, v.encode("utf-8", "replace").hex()])
    if isinstance(v, list):
        return rnd.choice([json.dumps(v), v[0] if v else None, {str(i): x for i, x in enumerate(v)}])
    if isinstance(v, dict):
        return rnd.choice([json.dumps(v), list(v.values()), list(v)])
    return "None"


DELETE = object()


def _leaf(v, rnd: random.Random):
    """One mutation of the value ``v``."""
    op = rnd.randrange(9)
    if op in (0, 7, 8):
        return copy.deepcopy(rnd.choice(HOSTILE))  # never the shared constant: later mutations change it
    if op == 1:
        return _swap(v, rnd)
    if op == 2 and isinstance(v, str):
        k = rnd.randrange(len(v) + 1)
        return v[:k] + rnd.choice(["\ud800", "\udfff", "\x00", "\u202e", "\ufffd"]) + v[k:]
    if op == 3:
        return _deep(v, rnd.choice([5, 40, 120, 400]))
    if op == 4:
        return rnd.choice(["x" * rnd.choice([1_000, 200_000]), [0] * rnd.choice([100, 20_000]), 9.9e15])
    if op == 5:
        return DELETE
    return _swap(v, rnd)


JSON = "<json>"  # a path step into the JSON text a string holds (ROLL's cells)
MAX_NODES = 4000


def paths(obj) -> list[tuple]:
    """The paths of (up to `MAX_NODES`) nodes of ``obj``, JSON held in strings included; a list
    contributes its first 20 items."""
    out: list[tuple] = []
    stack = [((), obj)]
    while stack and len(out) < MAX_NODES:
        path, v = stack.pop()
        out.append(path)
        if len(path) > 40:
            continue
        if isinstance(v, dict):
            stack.extend((path + (k,), x) for k, x in v.items())
        elif isinstance(v, list):
            stack.extend((path + (i,), x) for i, x in enumerate(v[:20]))
        elif isinstance(v, str) and v[:1] in "[{":
            try:
                inner = json.loads(v)
            except ValueError:
                continue
            if isinstance(inner, (list, dict)):
                stack.append((path + (JSON,), inner))
    return out


def apply_at(obj, path: tuple, fn):
    """``obj`` with ``fn(value)`` at ``path`` (`DELETE` removes it); JSON text on the path is
    decoded, changed and encoded again."""
    if not path:
        return fn(obj)
    k, rest = path[0], path[1:]
    if k == JSON and isinstance(obj, str):
        new = apply_at(json.loads(obj), rest, fn)
        return DELETE if new is DELETE else json.dumps(new)
    here = obj.get(k) if isinstance(obj, dict) and not rest else obj[k]  # a new key: its value is None
    new = apply_at(here, rest, fn)
    if new is DELETE:
        obj.pop(k, None) if isinstance(obj, dict) else obj.pop(k)
    else:
        obj[k] = new
    return obj


def mutate(recs, rnd: random.Random):
    """``recs`` with one node, chosen uniformly, changed by `_leaf` (or a whole record deleted
    or doubled)."""
    if isinstance(recs, list) and rnd.random() < 0.05:
        k = rnd.randrange(len(recs))
        if rnd.random() < 0.5:
            del recs[k]
        else:
            recs.insert(rnd.randrange(len(recs) + 1), json.loads(json.dumps(recs[k])))
        return recs
    path = rnd.choice(paths(recs)[1:] or [()])
    new = apply_at(recs, path, lambda v: _leaf(v, rnd))
    return recs if new is DELETE or not isinstance(new, (list, dict)) else new


def _dump_lines(recs) -> bytes:
    return "".join(json.dumps(r, allow_nan=True) + "\n" for r in recs).encode()


def write(recs, dest: Path, rnd: random.Random, allow_cut: bool = True) -> Path:
    """Write the (mutated) records at ``dest`` as the seed's format: Parquet where pyarrow takes
    the values (else the same rows as JSON lines beside it), JSON lines, or an rLLM folder; the
    bytes are sometimes cut short. Returns the path to ingest."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    cut = allow_cut and rnd.random() < 0.1
    if isinstance(recs, dict):
        dest.mkdir(parents=True, exist_ok=True)
        for name, doc in recs.items():
            data = json.dumps(doc, allow_nan=True).encode()
            if cut and rnd.random() < 0.5:
                data = data[: rnd.randrange(len(data) + 1)]
            (dest / name).write_bytes(data)
        return dest
    if dest.suffix in (".pt", ".pth"):
        _torch_write(recs, dest)
        if cut:
            data = dest.read_bytes()
            dest.write_bytes(data[: rnd.randrange(len(data) + 1)])
        return dest
    if dest.suffix == ".parquet":
        try:
            pd.DataFrame([r for r in recs if isinstance(r, dict)]).to_parquet(dest)
        except Exception:  # values pyarrow cannot put in one column: the same rows as JSONL
            dest = dest.with_suffix(".jsonl")
        else:
            if cut:
                data = dest.read_bytes()
                dest.write_bytes(data[: rnd.randrange(len(data) + 1)])
            return dest
    if dest.suffix == ".csv":
        try:
            pd.DataFrame([r for r in recs if isinstance(r, dict)]).to_csv(dest, index=False)
        except Exception:  # text pandas cannot write (a lone surrogate): the rows as JSONL
            dest = dest.with_suffix(".jsonl")
        else:
            return dest
    data = json.dumps(recs, allow_nan=True).encode() if dest.suffix == ".json" else _dump_lines(recs)
    if dest.suffix == ".gz":
        data = gzip.compress(data)
    if cut:
        data = data[: rnd.randrange(len(data) + 1)]
    dest.write_bytes(data)
    return dest


def mutated(name: str, rnd: random.Random, tmp: Path) -> tuple[Path, str]:
    """A mutated copy of seed ``name`` written under ``tmp``: (path, importer)."""
    _, fmt, _, rel = BY_NAME[name]
    recs = seed_records(name)
    for _ in range(rnd.randint(1, 3)):
        if recs:  # every record may have been deleted
            recs = mutate(recs, rnd)
    return write(recs, tmp / rel, rnd), fmt


# ---- the CLI's code in process -------------------------------------------------------------------


def cli(*argv: str) -> tuple[int, str]:
    """``crbc-viz ARGV`` in this process: (exit status, stderr). Only what the command maps to
    exit 2 (a `CrbcVizError`, an OS error) is caught; any other exception propagates."""
    from crbc_viz.cli import main

    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        rc = main(list(argv))
    return rc, err.getvalue()


def _clean(rc: int, err: str, what: str) -> None:
    assert rc in (0, 2), (what, rc, err[-2000:])
    assert "Traceback" not in err, (what, err[-4000:])
    if rc == 2:
        msg = err[err.index("error:") :]
        assert len(msg) < 20_000, (what, msg[:2000])
        assert len(msg.splitlines()) <= MAX_LISTED + 2, (what, msg[:2000])  # a header, the problems


def ingest_info_score(path: Path, fmt: str, tmp: Path, lenient: bool) -> None:
    """``ingest`` then, when it stored something, ``info --store`` and ``score --store``."""
    store = tmp / "store"
    rc, err = cli("ingest", str(path), "--store", str(store), "--format", fmt, *(["--lenient"] * lenient))
    _clean(rc, err, "ingest")
    if rc:
        return
    _clean(*cli("info", "--store", str(store)), "info")
    _clean(*cli("score", "--store", str(store), "-o", str(tmp / "out.parquet")), "score")


def light_check(path: Path, fmt: str) -> None:
    """What ``ingest``, ``info --store`` and ``score --store`` run on a file, without the store's
    files: import, validation, the store's Arrow tables, the graph, its summary and a score. Only
    a `CrbcVizError` may escape (the CLI's exit 2)."""
    import numpy as np

    import crbc_viz
    from crbc_viz.analysis.summary import batch_summary
    from crbc_viz.errors import CrbcVizError
    from crbc_viz.io.assemble import build_batch
    from crbc_viz.io.importers import expand_sources, import_source
    from crbc_viz.store.rows import tables_of  # what ingest writes a batch as

    try:
        for src in expand_sources([str(path)], fmt):
            batch = build_batch(import_source(src).raw)
            n = batch.num_steps
            tables_of(batch, np.full(n, "p0", dtype=object), np.arange(n, dtype=np.int32), "fuzz")
            graph = crbc_viz.build_graph(batch)
            batch_summary(graph)
            crbc_viz.score(graph, "crbc", backend="numpy")
    except CrbcVizError as exc:
        assert str(exc)


def test_every_importer_has_a_seed():
    from crbc_viz.io.importers import FORMATS

    assert {s[1] for s in SEEDS} == set(FORMATS) - MAPPED_ONLY
    for name, *_ in SEEDS:
        assert seed_records(name), name


@pytest.mark.parametrize("name", [s[0] for s in SEEDS])
def test_seed_records_ingest_as_they_are(name, tmp_path):
    """The unmutated records read (the mutations start from valid records)."""
    _, fmt, _, rel = BY_NAME[name]
    path = write(seed_records(name), tmp_path / rel, random.Random(0), allow_cut=False)
    rc, err = cli("ingest", str(path), "--store", str(tmp_path / "store"), "--format", fmt)
    assert rc == 0, err[-2000:]


@pytest.mark.parametrize("name", [s[0] for s in SEEDS])
@settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.function_scoped_fixture,
        HealthCheck.data_too_large,
    ],
)
@given(rnd=st.randoms(use_true_random=False), lenient=st.booleans())
def test_mutated_records_exit_0_or_one_clean_error(name, rnd, lenient):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with tempfile.TemporaryDirectory() as d:
        path, fmt = mutated(name, rnd, Path(d))
        ingest_info_score(path, fmt, Path(d), lenient)
    grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    assert grown < GB_KB, f"peak memory grew by {grown / 1024:.0f} MiB"


# ---- every field an importer reads x every class of value that is not what the field says -----

_STEP = ("trajectories", 0, "steps", 0)
_NATIVE = (0, "trajectory_data", 0, JSON)
#: seed -> the paths (in `seed_records`) of the fields its importer reads.
READ_FIELDS = {
    "canonical-csv": [(1, k) for k in ("reward", "step_idx", "done", "success")],
    "canonical-parquet": [(1, k) for k in ("reward", "step_idx", "done", "success")],
    "canonical": [
        (1, k)
        for k in (
            "group_id",
            "traj_id",
            "step_idx",
            "reward",
            "anchor_obs",
            "action",
            "done",
            "success",
            "train_step",
        )
    ],
    "verl": [(1, k) for k in ("input", "output", "score", "step")],
    "verl-v1": [(1, k) for k in ("input", "output", "score", "step", "uid")],
    "verl-agent": [
        (1, k)
        for k in (
            "uid",
            "traj_uid",
            "step",
            "done",
            "anchor_obs",
            "rewards",
            "active_masks",
            "is_action_valid",
            "won",
            "episode_rewards",
            "data_source",
            "global_step",
            "response",
        )
    ],
    "roll": [
        (0, k, 1)
        for k in (
            "crbc_traj_group_id",
            "crbc_traj_id",
            "crbc_step",
            "crbc_state_hash",
            "crbc_step_scores",
            "crbc_episode_scores",
            "crbc_done",
            "global_step",
        )
    ]
    + [(0, "crbc_step_scores")],
    "roll-rows": [
        (0, k)
        for k in (
            "traj_group_id",
            "traj_id",
            "step",
            "state_hash",
            "step_scores",
            "episode_scores",
            "terminated",
            "tags",
            "global_step",
            "response_text",
        )
    ],
    "roll-native": [
        _NATIVE + ("reward_info", "step_rewards", 1),
        _NATIVE + ("reward_info", "step_rewards"),
        _NATIVE + ("env_info", "tag"),
        _NATIVE + ("env_info", "seed"),
        _NATIVE + ("length_info", "terminated"),
        _NATIVE + ("trajectory_id",),
        (0, "messages", 0, JSON, 0, 1, "content"),
        (0, "messages", 0, JSON, 0, 2),
        (0, "messages", 0),
        (0, "global_step", 0),
    ],
    "rllm": [("task-9_0.json", k) for k in ("id", "is_correct", "termination_reason", "info")]
    + [("task-9_0.json", "trajectories", 0, k) for k in ("name", "uid", "reward", "steps")]
    + [
        ("task-9_0.json",) + _STEP + (k,)
        for k in (
            "observation",
            "action",
            "reward",
            "done",
            "model_response",
            "info",
            "chat_completions",
            "advantage",
        )
    ],
    "trl": [
        (1, k)
        for k in ("step", "prompt", "completion", "reward_won", "format_reward", "num_turns", "advantage")
    ],
    "ms-swift3": [(0, k, 1) for k in ("step", "prompt", "completion", "Format", "reward_won")]
    + [(0, "reward_won")],
    "skyrl": [(1, k) for k in ("input_prompt", "output_response", "score", "stop_reason", "env_class")],
    "nemo-rl": [(1, k) for k in ("content", "rewards", "token_loss_mask", "input_lengths")],
    "ragen": [(1, k) for k in ("custom_id", "messages", "metadata")],
    "areal": [(1, k) for k in ("task_id", "sample_idx", "tail_version", "prompt", "completion", "reward")],
    "slime": [
        (1, k) for k in ("group_index", "index", "rollout_id", "prompt", "response", "reward", "status")
    ],
    "graphgpo": [
        (1, k)
        for k in (
            "uid",
            "traj_uid",
            "anchor_obs",
            "next_obs",
            "text_actions",
            "episode_rewards",
            "rewards",
            "episode_lengths",
            "is_action_valid",
        )
    ],
    "verifiers": [
        (1, k)
        for k in (
            "example_id",
            "prompt",
            "completion",
            "reward",
            "is_truncated",
            "stop_condition",
            "error",
        )
    ]
    + [(1, "completion", 0, "content"), (1, "completion", 0, "role")],
    "art-v2": [(1, k) for k in ("group_index", "reward", "metrics", "messages")]
    + [(1, "messages", 2, k) for k in ("role", "content", "tool_calls", "trainable")],
    "art-jsonl": [(1, "trajectories"), (1, "trajectories", 0, "reward"), (1, "trajectories", 0, "metrics")]
    + [(1, "trajectories", 0, "messages_and_choices", 2, k) for k in ("finish_reason", "message")],
    "tinker-cookbook": [
        (1, k)
        for k in (
            "schema_version",
            "split",
            "iteration",
            "group_idx",
            "traj_idx",
            "total_reward",
            "final_reward",
            "steps",
        )
    ]
    + [(1, "steps", 1, k) for k in ("step_idx", "reward", "episode_done", "metrics", "ob_len")],
}
#: seed -> paths of a field the importer does not know (kept, stored and shown as it is).
EXTRA_FIELDS = {
    **{
        name: [(1, "x_extra")]
        for name in (
            "canonical",
            "verl",
            "verl041",
            "verl-v1",
            "verl-agent",
            "verl-agent-rollout",
            "roll-rows",
            "trl",
            "skyrl",
            "verifiers",
            "art-v2",
            "tinker-cookbook",
        )
    },
    "rllm": [
        ("task-9_0.json", "x_extra"),
        ("task-9_0.json", "trajectories", 0, "x_extra"),
        ("task-9_0.json",) + _STEP + ("x_extra",),
    ],
    "roll": [(0, "x_extra")],
    "roll-native": [(0, "x_extra"), _NATIVE + ("x_extra",)],
    "ms-swift3": [(0, "x_extra")],
}
#: A type swap each way, a number past int64, a lone surrogate, a deep value.
SWAPS = ["False", [], {"a": [1]}, True, 2**64, "x\ud800", _deep("x", 300)]


def test_read_fields_exist_in_the_seeds():
    for name, fields in READ_FIELDS.items():
        recs = seed_records(name)
        for path in fields:
            found = []
            apply_at(
                recs,
                path[:-1],
                lambda parent, k=path[-1]: (
                    found.append(k in parent if isinstance(parent, dict) else k < len(parent)) or parent
                ),
            )
            assert found == [True], (name, path)  # not a stale path


@pytest.mark.parametrize("name", sorted(READ_FIELDS))
def test_every_read_field_with_every_swap(name, tmp_path):
    """Each field the importer reads, set to each of `SWAPS` in turn: exit 0, or exit 2 with a
    clean message (the known crashes: verl ``score`` ``'False'`` / ``[]`` in a keyed file, a
    list rLLM ``name``, a surrogate in an rLLM action or a ROLL message)."""
    _, fmt, _, rel = BY_NAME[name]
    for i, path in enumerate(READ_FIELDS[name] + EXTRA_FIELDS.get(name, [])):
        for j, value in enumerate(SWAPS):
            recs = apply_at(seed_records(name), path, lambda v, value=value: copy.deepcopy(value))
            light_check(write(recs, tmp_path / f"{i}-{j}" / rel, random.Random(0), allow_cut=False), fmt)


# ---- the real command, a small sample ------------------------------------------------------------

SAMPLE = [("verl", 3), ("rllm", 5), ("roll-native", 11), ("trl", 2), ("ms-swift3", 4)]


#: ``python -m crbc_viz`` that writes its own peak RSS (VmHWM, KiB) to the file named first.
#: Neither ``RUSAGE_CHILDREN`` nor ``wait4`` tell a child's own peak: at ``exec`` Linux folds
#: the forked copy of pytest (~1 GB late in a full run) into the child's ``ru_maxrss``.
PEAK_WRAPPER = """
import atexit, re, runpy, sys
out = sys.argv.pop(1)
def peak():
    status = open("/proc/self/status").read()
    open(out, "w").write(re.search(r"VmHWM:\\s*(\\d+)", status).group(1))
atexit.register(peak)
sys.argv[0] = "crbc-viz"
runpy.run_module("crbc_viz", run_name="__main__", alter_sys=True)
"""


def _run(*argv: str) -> tuple[subprocess.CompletedProcess, int]:
    """``crbc-viz *argv`` in a child; (its outcome, its own peak RSS in KiB)."""
    with tempfile.TemporaryDirectory() as tmp:
        peak = Path(tmp) / "peak"
        proc = subprocess.run(
            [sys.executable, "-c", PEAK_WRAPPER, str(peak), *argv],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
        return proc, int(peak.read_text()) if peak.exists() else 0


def test_cli_sample_in_subprocesses(tmp_path):
    """A few mutated files through the installed command: exit 0, or exit 2 with one bounded
    ``error:`` message; no traceback; no child above 1 GB."""
    statuses = []
    for name, seed in SAMPLE:
        tmp = tmp_path / f"{name}-{seed}"
        path, fmt = mutated(name, random.Random(seed), tmp)
        proc, peak = _run("ingest", str(path), "--store", str(tmp / "store"), "--format", fmt)
        _clean(proc.returncode, proc.stderr, f"ingest {name}")
        peaks = [peak]
        statuses.append(proc.returncode)
        if proc.returncode == 0:
            for argv in (
                ("info", "--store", str(tmp / "store")),
                ("score", "--store", str(tmp / "store"), "-o", str(tmp / "o.parquet")),
            ):
                p, peak = _run(*argv)
                _clean(p.returncode, p.stderr, f"{argv[0]} {name}")
                peaks.append(peak)
        assert 0 < min(peaks) and max(peaks) < GB_KB, (name, peaks)  # 0: no peak was written
    assert 2 in statuses  # the sample holds refused inputs, not only harmless ones
