"""Credit on W&B and TensorBoard (`crbc_viz.integrations.wandb` / `.tensorboard`), read back
from what the real packages wrote: the W&B run's ``.wandb`` file (its protobuf records, read
with ``wandb.proto``) and media files (the Html page, the table JSON) in offline mode, and the
TensorBoard event file through tensorboard's own ``EventAccumulator``. Expected values: the
``crbc-viz score`` command's output on the same file (per step, and the statistics recomputed
from it with numpy), an independent path through the CLI's reader and writer.
"""

from __future__ import annotations

import functools
import glob
import html
import re
import struct
import subprocess
import sys
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from crbc_viz.errors import CrbcVizError, LoadError
from helpers import ROOT, TOY

SOKOBAN = ROOT / "sample_rollouts" / "sokoban" / "sokoban.jsonl"
ESTIMATORS = ("crbc", "grpo")
STATS = {
    "mean": np.mean,
    "std": np.std,
    "min": np.min,
    "max": np.max,
    "abs_mean": lambda v: np.mean(np.abs(v)),
}


def cli_scores(path, tmp_path) -> pd.DataFrame:
    out = tmp_path / f"cli_{path.stem}.csv"
    cmd = [sys.executable, "-m", "crbc_viz", "score", str(path), "--out", str(out)]
    for e in ESTIMATORS:
        cmd += ["-e", e]
    subprocess.run(cmd, check=True, capture_output=True, cwd=ROOT, timeout=300)
    df = pd.read_csv(out, dtype={"traj_id": str, "group_id": str, "run_id": str, "train_step": str})
    df["group"] = df["run_id"] + "/" + df["train_step"] + "/" + df["group_id"]
    return df


def expected_stats(df: pd.DataFrame, prefix: str = "crbc") -> dict[str, float]:
    out = {
        f"{prefix}/count/steps": len(df) / len(ESTIMATORS),
        f"{prefix}/count/groups": df["group"].nunique(),
    }
    for est in ESTIMATORS:
        sub = df[df["estimator"] == est]
        for what in ("credit", "advantage"):
            v = sub[what].to_numpy(float)
            v = v[np.isfinite(v)]
            for k, f in STATS.items():
                out[f"{prefix}/{est}/{what}_{k}"] = float(f(v))
    return out


def check_rows(columns, rows, df):
    """Every logged row equals the CLI's row of the same (group, trajectory, step), 1e-9."""
    got = pd.DataFrame(rows, columns=columns)
    assert len(got) == len(df) / len(ESTIMATORS)
    for est in ESTIMATORS:
        want = df[df["estimator"] == est].set_index(["group", "traj_id", "step_idx"])
        mine = got.set_index(["group", "traj_id", "step_idx"]).loc[want.index]
        for what in ("credit", "advantage"):
            np.testing.assert_allclose(
                mine[f"{what}[{est}]"].to_numpy(float), want[what].to_numpy(float), atol=1e-9, rtol=0
            )
    assert (got["group"] + got["traj_id"]).nunique() == df[["group", "traj_id"]].drop_duplicates().shape[0]


def check_stats(got: dict, want: dict):
    assert set(got) == set(want)
    for k, v in want.items():
        assert got[k] == pytest.approx(v, abs=1e-9), k


# -- W&B, offline ------------------------------------------------------------------------------
def wandb_records(path):
    """The protobuf records of a ``.wandb`` file (a LevelDB-style log: a 7-byte ``:W&B``
    header, then 32 KiB blocks of chunks with a 7-byte header: CRC, length, type FULL=1,
    FIRST=2, MIDDLE=3, LAST=4), parsed with ``wandb.proto``."""
    from wandb.proto import wandb_internal_pb2 as pb

    data = open(path, "rb").read()
    assert data[:4] == b":W&B"
    pos, buf, out, block = 7, b"", [], 32768
    while pos + 7 <= len(data):
        left = block - pos % block
        if left < 7:
            pos += left
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        if kind == 0 and length == 0:
            break
        buf += data[pos + 7 : pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):
            r = pb.Record()
            r.ParseFromString(buf)
            out.append(r)
            buf = b""
    return out


@pytest.fixture
def offline_wandb(tmp_path, monkeypatch):
    wandb = pytest.importorskip("wandb")
    for k, v in {
        "WANDB_MODE": "offline",
        "WANDB_DIR": str(tmp_path / "wb"),
        "WANDB_SILENT": "true",
        "WANDB_CONSOLE": "off",
        "WANDB_DISABLE_CODE": "true",
        "WANDB_DISABLE_GIT": "true",
        "WANDB_X_DISABLE_STATS": "true",
    }.items():
        monkeypatch.setenv(k, v)
    (tmp_path / "wb").mkdir()
    run = wandb.init(project="crbc-viz-test", settings=wandb.Settings(x_disable_stats=True, console="off"))
    yield run, tmp_path / "wb"
    run.finish()


def test_wandb_offline_logs_cli_values_and_a_self_contained_page(offline_wandb, tmp_path):
    from crbc_viz.integrations.wandb import log_groups

    run, root = offline_wandb
    returned = log_groups(run, SOKOBAN, step=7, estimators=ESTIMATORS, groups=None)
    run.finish()
    df = cli_scores(SOKOBAN, tmp_path)
    want = expected_stats(df)
    check_stats(returned, want)

    (wfile,) = glob.glob(str(root / "wandb" / "offline-run-*" / "run-*.wandb"))
    history = [r.history for r in wandb_records(wfile) if r.WhichOneof("record_type") == "history"]
    (h,) = history
    items = {it.key or "/".join(it.nested_key): it.value_json for it in h.item}
    assert items["_step"] == "7"
    check_stats({k: float(items[k]) for k in want}, want)

    import json

    run_dir = glob.glob(str(root / "wandb" / "offline-run-*" / "files"))[0]
    table = json.load(open(f"{run_dir}/{json.loads(items['crbc/steps/path'])}"))
    check_rows(table["columns"], table["data"], df)

    page = open(f"{run_dir}/{json.loads(items['crbc/graph/path'])}", encoding="utf-8").read()
    assert "crbc-share" in page and "Group " in page
    for text in (page, html.unescape(page)):  # the graphs' pages sit escaped in srcdoc
        assert not re.search(
            r"<(script|link|img|iframe)\b[^>]*\b(src|href)\s*=\s*['\"]?\s*(https?:)?//", text, re.I
        )
    assert "<script" in html.unescape(page)  # the drawing is there, inlined


def test_wandb_table_names_a_refusing_estimator_out(offline_wandb, tmp_path, caplog):
    """An estimator that refuses the input is left out with a warning; the others are logged."""
    from crbc_viz.integrations.wandb import log_groups

    run, root = offline_wandb
    got = log_groups(run, TOY, step=0, estimators=("crbc", "trace"), html=False)
    assert "crbc/crbc/advantage_mean" in got and not any("trace" in k for k in got)
    assert any("trace refused" in r.getMessage() for r in caplog.records)


# -- TensorBoard -------------------------------------------------------------------------------
def markdown_rows(text: str):
    lines = [ln for ln in text.splitlines() if ln.startswith("| ")]
    split = lambda ln: [c.strip() for c in re.split(r"(?<!\\)\|", ln)[1:-1]]
    columns = split(lines[0])
    rows = []
    for ln in lines[1:]:
        cells = split(ln)
        row = dict(zip(columns, cells))
        row["step_idx"] = int(row["step_idx"])
        for c in columns[4:]:
            row[c] = float(row[c])
        rows.append([row[c] for c in columns])
    return columns, rows


def test_tensorboard_event_file_holds_cli_values(tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.util import tensor_util
    from torch.utils.tensorboard import SummaryWriter

    from crbc_viz.integrations.tensorboard import log_groups

    writer = SummaryWriter(str(tmp_path / "tb"))
    log_groups(writer, SOKOBAN, step=11, estimators=ESTIMATORS)
    writer.close()
    acc = EventAccumulator(str(tmp_path / "tb"), size_guidance={"tensors": 0, "scalars": 0})
    acc.Reload()
    df = cli_scores(SOKOBAN, tmp_path)
    want = expected_stats(df)
    assert set(acc.Tags()["scalars"]) == set(want)
    got = {}
    for tag in want:
        (ev,) = acc.Scalars(tag)
        assert ev.step == 11
        got[tag] = ev.value
    for k, v in want.items():  # the event file holds float32
        assert got[k] == pytest.approx(v, rel=1e-6, abs=1e-6), k
    (text,) = acc.Tensors("crbc/steps/text_summary")
    assert text.step == 11
    md = tensor_util.make_ndarray(text.tensor_proto).item().decode("utf-8")
    check_rows(*markdown_rows(md), df)


# -- bad input: one line -----------------------------------------------------------------------
class FakeWriter:
    def __init__(self):
        self.calls = []

    def add_text(self, tag, text, global_step=None):
        self.calls.append(("text", tag, global_step, text))

    def add_scalar(self, tag, value, global_step=None):
        self.calls.append(("scalar", tag, global_step, value))


class FakeRun:
    def __init__(self):
        self.logged = []

    def log(self, data, step=None):
        self.logged.append((step, data))


@pytest.mark.parametrize("which", ["wandb", "tensorboard"])
@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"source": "no/such/file.jsonl"}, r"no/such/file\.jsonl"),
        ({"step": -1}, r"step must be a non-negative integer, got -1"),
        ({"step": "3"}, r"step must be a non-negative integer, got '3'"),
        ({"groups": ["nope"]}, r"no group 'nope'"),
        ({"estimators": ("no_such_estimator",)}, r"no_such_estimator"),
        ({"source": 42}, r"source must be a log path or a RolloutBatch, got int"),
        ({"target": object()}, r"must be a .* got object"),
    ],
)
def test_bad_input_is_one_line(which, kwargs, message):
    import importlib

    mod = importlib.import_module(f"crbc_viz.integrations.{which}")
    kwargs = dict(kwargs)
    target = kwargs.pop("target", FakeWriter() if which == "tensorboard" else FakeRun())
    args = {"source": TOY, "step": 0, "estimators": ("crbc",), **kwargs}
    if which == "wandb":
        pytest.importorskip("wandb")
        args["html"] = False
    with pytest.raises(CrbcVizError, match=message) as info:
        mod.log_groups(target, args.pop("source"), **args)
    lines = str(info.value).splitlines()
    if isinstance(info.value, LoadError):  # as the CLI shows it: a count, then one line per problem
        assert lines[0] == "1 problem in input:" and len(lines) == 2
    else:
        assert len(lines) == 1
    assert not getattr(target, "calls", None) and not getattr(target, "logged", None)  # nothing half-logged


# -- the adapters' cadence ---------------------------------------------------------------------
def roll_batch(rows):
    col = lambda k, dt=object: np.array([r[k] for r in rows], dtype=dt)
    return SimpleNamespace(
        batch={},
        non_tensor_batch={
            "traj_group_id": col("group_id"),
            "traj_id": col("traj_id"),
            "step": col("step_idx", np.int64),
            "state_hash": col("anchor_obs"),
            "step_scores": col("reward", np.float64),
            "success": col("success", bool),
            "action": col("action"),
        },
    )


def test_adapter_batch_reads_as_rows_when_traj_ids_repeat_across_groups():
    """Sokoban's groups each name their rollouts r0..r7: the adapter's batch still reads as
    rows (its traj_id column once held one dictionary entry per trajectory, so a name shared by
    two groups made ``batch.steps`` raise), with each row's own id."""
    import json

    from crbc_viz.integrations._core import canonical_steps

    rows = [json.loads(line) for line in open(SOKOBAN, encoding="utf-8")]
    nt = roll_batch(rows).non_tensor_batch
    steps = canonical_steps(
        nt["traj_group_id"], nt["traj_id"], nt["step"], nt["state_hash"], nt["step_scores"], source="t"
    )
    got = steps.canonical_rows()
    want = pd.DataFrame(rows)[["group_id", "traj_id", "step_idx"]].astype(str)
    merged = got[["group_id", "traj_id", "step_idx"]].astype(str)
    assert sorted(map(tuple, merged.to_numpy())) == sorted(map(tuple, want.to_numpy()))
    assert want["traj_id"].nunique() < len(want[["group_id", "traj_id"]].drop_duplicates())


@pytest.fixture
def cadence_off():
    from crbc_viz.integrations import log_every

    log_every(0)
    yield log_every
    log_every(0)


def test_adapter_logs_every_n_calls(cadence_off, tmp_path):
    """``log_every(3, logger)``: seven ROLL advantage calls log at calls 3 and 6, each time the
    batch the adapter scored, whose logged credit is the adapter's own advantage."""
    import json

    import torch

    from crbc_viz.integrations import tensorboard
    from crbc_viz.integrations.roll import response_level_advantages

    rows = [json.loads(line) for line in open(SOKOBAN, encoding="utf-8")]
    writer = FakeWriter()
    cadence_off(3, functools.partial(tensorboard.log_groups, writer))
    outs = [response_level_advantages(roll_batch(rows)) for _ in range(7)]
    steps = sorted({c[2] for c in writer.calls})
    assert steps == [3, 6]
    assert sum(c[0] == "text" for c in writer.calls) == 2
    mean = {c[2]: c[3] for c in writer.calls if c[1] == "crbc/crbc/advantage_mean"}
    df = cli_scores(SOKOBAN, tmp_path)
    want = float(df[df["estimator"] == "crbc"]["advantage"].mean())
    assert mean[3] == pytest.approx(want, abs=1e-9) and mean[6] == pytest.approx(want, abs=1e-9)
    assert outs[0].dtype == torch.float32  # the adapter's own result is untouched


def test_a_failing_logger_never_stops_training(cadence_off, caplog):
    import json

    from crbc_viz.integrations.roll import response_level_advantages

    def boom(batch, *, step):
        raise OSError("disk full")

    cadence_off(1, boom)
    rows = [json.loads(line) for line in open(SOKOBAN, encoding="utf-8")]
    assert response_level_advantages(roll_batch(rows)).shape == (len(rows),)
    assert any("disk full" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("n, logger", [(-1, print), (1.5, print), (2, "not callable")])
def test_log_every_refuses_a_bad_cadence(cadence_off, n, logger):
    with pytest.raises(CrbcVizError, match="log_every"):
        cadence_off(n, logger)


def test_no_logger_package_is_imported_before_it_is_used(monkeypatch):
    """Importing the loggers and the adapters imports neither wandb nor tensorboard; without
    wandb, logging to W&B is one line naming the extra."""
    code = (
        "import sys, crbc_viz.integrations.wandb, crbc_viz.integrations.tensorboard, "
        "crbc_viz.integrations.roll, crbc_viz.integrations.verl\n"
        "print(sorted(m for m in ('wandb', 'tensorboard') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert out.stdout.strip() == "[]", out.stderr
    from crbc_viz._extras import MissingExtra
    from crbc_viz.integrations.wandb import log_groups

    monkeypatch.setitem(sys.modules, "wandb", None)
    with pytest.raises(
        MissingExtra, match=r"^crbc_viz.integrations.wandb needs wandb, .*crbc-viz\[wandb\]'$"
    ):
        log_groups(FakeRun(), TOY, step=0)
