"""The raw-array entry points (`crbc_step_credit`, `to_device`, `crbc_step_credit_torch`) refuse
arrays and parameters outside their contract with one `EstimatorInputError` naming the argument,
before any kernel indexes by them.

Unchecked, the compiled kernel wrote outside its arrays (offsets past the last step, fewer
outcomes than trajectories: glibc aborts with heap corruption), so every bad case runs in a
child process: a regression fails these tests instead of killing the test run.

Valid inputs: the toy group of ESTIMATORS.md §14.1, whose per-step advantages are the
hand-computed vector of §14.4.
"""

from __future__ import annotations

import importlib.util
import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from helpers import ROOT

HAVE_NUMBA = importlib.util.find_spec("numba") is not None
HAVE_TORCH = importlib.util.find_spec("torch") is not None
HERE = Path(__file__).resolve().parent
MARK = "RESULTS:"

# The toy group (§14.1): anchors s0..s4, actions a..i, outcomes T F F T.
ANCHORS = "s0 s1 s2 | s0 s1 s3 | s0 s4 s1 s2 | s0 s4 s4 s1 s2"
ACTIONS = "a b c | a d e | f g b h | f i g b c"
# §14.4: A = w_G·A^G + w_S·A^S per step, by trajectory.
ADVANTAGE_14_4 = [
    1.2155, 3.7528, 4.4016,
    -0.5166, -9.5263, -0.8660,
    -1.2155, -0.6331, 2.0207, -7.9371,
    0.5166, 0.4001, 1.0990, 3.7528, 4.4016,
]  # fmt: skip


def toy_args() -> dict:
    """The five step arrays of the toy group, as the README's call passes them."""
    anchors = ANCHORS.replace("|", "").split()
    actions = ACTIONS.replace("|", "").split()
    return {
        "step_anchor_hash": np.array([1000 + int(a[1]) for a in anchors], np.uint64),
        "step_action": np.array(["abcdefghi".index(a) for a in actions], np.int64),
        "traj_offsets": np.array([0, 3, 6, 10, 15], np.int64),
        "group_traj_offsets": np.array([0, 4], np.int64),
        "traj_success": np.array([True, False, False, True]),
    }


def _set(name, value):
    return lambda args, kw: args.__setitem__(name, np.asarray(value))


def _edit(name, fn):
    return lambda args, kw: args.__setitem__(name, fn(args[name].copy()))


def _at(index, value):
    def put(a):
        a[index] = value
        return a

    return put


def _param(name, value):
    return lambda args, kw: kw.__setitem__(name, value)


#: (case id, the argument its message must name, mutation of (arrays, keywords), engines it applies to)
ARRAYS, ALL, TORCH = ("numba", "to_device", "torch"), ("numba", "torch"), ("torch",)
CASES = [
    ("hash_float", "step_anchor_hash", _edit("step_anchor_hash", lambda a: a.astype(float)), ARRAYS),
    ("hash_2d", "step_anchor_hash", _edit("step_anchor_hash", lambda a: a.reshape(-1, 1)), ARRAYS),
    ("action_short", "step_action", _edit("step_action", lambda a: a[:-1]), ARRAYS),
    ("action_negative", "step_action", _edit("step_action", _at(4, -1)), ARRAYS),
    ("action_wide", "step_action", _edit("step_action", _at(4, 1 << 32)), ARRAYS),
    ("action_float", "step_action", _edit("step_action", lambda a: a + 0.5), ARRAYS),
    ("offsets_past_end", "traj_offsets", _set("traj_offsets", [0, 3, 6, 10, 16]), ARRAYS),
    ("offsets_short_of_end", "traj_offsets", _set("traj_offsets", [0, 3, 6, 10, 14]), ARRAYS),
    ("offsets_not_from_zero", "traj_offsets", _set("traj_offsets", [1, 3, 6, 10, 15]), ARRAYS),
    ("offsets_decrease", "traj_offsets", _set("traj_offsets", [0, 6, 3, 10, 15]), ARRAYS),
    ("offsets_empty_trajectory", "traj_offsets", _set("traj_offsets", [0, 3, 3, 10, 15]), ARRAYS),
    ("offsets_float", "traj_offsets", _edit("traj_offsets", lambda a: a.astype(float)), ARRAYS),
    ("offsets_none", "traj_offsets", _set("traj_offsets", np.zeros(0, np.int64)), ARRAYS),
    ("groups_past_end", "group_traj_offsets", _set("group_traj_offsets", [0, 5]), ARRAYS),
    ("groups_short_of_end", "group_traj_offsets", _set("group_traj_offsets", [0, 3]), ARRAYS),
    ("groups_not_from_zero", "group_traj_offsets", _set("group_traj_offsets", [1, 4]), ARRAYS),
    ("groups_decrease", "group_traj_offsets", _set("group_traj_offsets", [0, 3, 2, 4]), ARRAYS),
    ("success_short", "traj_success", _edit("traj_success", lambda a: a[:1]), ARRAYS),
    ("success_nan", "traj_success", _set("traj_success", [1.0, math.nan, 0.0, 1.0]), ARRAYS),
    ("success_two", "traj_success", _set("traj_success", [1, 2, 0, 1]), ARRAYS),
    ("beta_zero", "beta", _param("beta", 0.0), ALL),
    ("beta_above_one", "beta", _param("beta", 1.5), ALL),
    ("beta_nan", "beta", _param("beta", math.nan), ALL),
    ("sigma_min_zero", "sigma_min", _param("sigma_min", 0.0), ALL),
    ("w_step_inf", "w_step", _param("w_step", math.inf), ALL),
    ("min_actions_zero", "min_actions", _param("min_actions", 0), ALL),
    ("min_actions_fraction", "min_actions", _param("min_actions", 1.5), ALL),
    ("dense_max_negative", "dense_max", _param("dense_max", -1), ALL),
    ("depth_negative", "depth", _param("depth", -1), ("numba",)),
    ("dtype_integer", "dtype", _param("dtype", "int64"), TORCH),
    ("offsets_not_a_tensor", "traj_offsets", _edit("traj_offsets", lambda a: ("numpy", a)), TORCH),
    ("success_other_device", "traj_success", _edit("traj_success", lambda a: ("meta", a)), TORCH),
]
CALLERS = {"numba": "crbc_step_credit", "to_device": "to_device", "torch": "crbc_step_credit_torch"}


def _call(engine: str, args: dict, kw: dict):
    """Run ``engine`` on the (mutated) arrays; returns the per-step advantage as floats."""
    if engine == "numba":
        from crbc_viz.backends.numba.crbc import crbc_step_credit

        return [float(x) for x in crbc_step_credit(*args.values(), **kw)["advantage"]]
    import torch

    from crbc_viz.backends.torch.fused import crbc_step_credit_torch, to_device

    if engine == "to_device":
        tensors = to_device(*args.values(), device="cpu")
    else:

        def tensor(a):
            if isinstance(a, tuple):  # ("numpy", a): not a tensor; ("meta", a): another device
                return a[1] if a[0] == "numpy" else torch.as_tensor(a[1], device="meta")
            return torch.as_tensor(a)

        tensors = [tensor(a) for a in args.values()]
        if isinstance(kw.get("dtype"), str):
            kw["dtype"] = getattr(torch, kw["dtype"])
    return [float(x) for x in crbc_step_credit_torch(*tensors, **kw)["advantage"]]


def _child(engine: str) -> None:
    """In the child process: every case of ``engine``, one JSON line of outcomes."""
    out = {}
    for case, _, mutate, engines in CASES:
        if engine not in engines:
            continue
        args, kw = toy_args(), {}
        mutate(args, kw)
        try:
            got = _call(engine, args, kw)
            out[case] = ["returned", repr(got[:3])]
        except Exception as e:  # noqa: BLE001 (the outcome is the data)
            out[case] = [type(e).__name__, str(e)]
        print(f"{case} done", file=sys.stderr, flush=True)
    print(MARK + json.dumps(out), flush=True)


def _run_child(code: str, timeout: float = 120) -> subprocess.CompletedProcess:
    prelude = f"import sys; sys.path[:0] = [{str(HERE.parent)!r}, {str(HERE)!r}]\n"
    return subprocess.run(
        [sys.executable, "-c", prelude + code], cwd=ROOT, capture_output=True, text=True, timeout=timeout
    )


_OUTCOMES: dict[str, tuple[dict, subprocess.CompletedProcess]] = {}


def outcomes(engine: str) -> tuple[dict, subprocess.CompletedProcess]:
    """The child's outcomes for ``engine`` (one child per engine per test run)."""
    if engine not in _OUTCOMES:
        proc = _run_child(f"import test_entry_validation as t; t._child({engine!r})")
        lines = [ln for ln in proc.stdout.splitlines() if ln.startswith(MARK)]
        _OUTCOMES[engine] = (json.loads(lines[-1][len(MARK) :]) if lines else {}, proc)
    return _OUTCOMES[engine]


def _needs(engine: str):
    if engine == "numba" and not HAVE_NUMBA:
        return pytest.mark.skip(reason="numba is not installed")
    if engine != "numba" and not HAVE_TORCH:
        return pytest.mark.skip(reason="torch is not installed")
    return ()


PARAMS = [
    pytest.param(engine, case, argument, id=f"{engine}-{case}", marks=_needs(engine))
    for case, argument, _, engines in CASES
    for engine in engines
]


@pytest.mark.parametrize("engine, case, argument", PARAMS)
def test_bad_argument_raises_naming_it(engine, case, argument):
    results, proc = outcomes(engine)
    assert case in results, (
        f"the child died before case {case!r} finished (exit {proc.returncode}):\n{proc.stderr[-2000:]}"
    )
    kind, message = results[case]
    assert kind == "EstimatorInputError", (kind, message)
    if engine == "torch" and argument == "step_anchor_hash":
        argument = "step_hash"  # the fused function's own name for it
    assert f"'{argument}'" in message, message
    assert message.startswith(CALLERS[engine] + ":"), message
    assert "\n" not in message, message


@pytest.mark.skipif(not HAVE_NUMBA, reason="numba is not installed")
def test_the_reported_heap_corruption_is_now_one_clean_line():
    """The issue's call: offsets [0, 3, 9] on 6 steps with one outcome aborted the process
    (glibc ``free(): invalid next size``, exit -6); now it is one error line and exit 0."""
    code = """
import numpy as np
from crbc_viz.backends.numba.crbc import crbc_step_credit
from crbc_viz.errors import EstimatorInputError
try:
    crbc_step_credit(np.arange(6, dtype=np.uint64), np.zeros(6, np.int64), np.array([0, 3, 9]),
                     np.array([0, 2]), np.array([True]))
except EstimatorInputError as e:
    print(e)
"""
    proc = _run_child(code)
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-2000:])
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == 1, proc.stdout
    assert lines[0].startswith("crbc_step_credit: argument 'traj_offsets'"), lines[0]
    assert "9" in lines[0] and "6" in lines[0], lines[0]


def _toy_as_lists() -> dict:
    """The toy arrays as plain Python lists, hashes as signed ints, outcomes as 0/1 ints, and
    an empty group in front (no trajectories: no steps, nothing to score)."""
    a = toy_args()
    return {
        "step_anchor_hash": [-int(h) for h in a["step_anchor_hash"]],
        "step_action": a["step_action"].tolist(),
        "traj_offsets": a["traj_offsets"].tolist(),
        "group_traj_offsets": [0, 0, 4],
        "traj_success": [int(s) for s in a["traj_success"]],
    }


@pytest.mark.skipif(not HAVE_NUMBA, reason="numba is not installed")
def test_numba_engine_takes_lists_and_01_outcomes_to_the_spec_values():
    from crbc_viz.backends.numba.crbc import crbc_step_credit

    out = crbc_step_credit(*_toy_as_lists().values())
    np.testing.assert_allclose(out["advantage"], ADVANTAGE_14_4, atol=1e-4)


@pytest.mark.skipif(not HAVE_TORCH, reason="torch is not installed")
def test_fused_torch_takes_narrow_integer_and_01_tensors_to_the_spec_values():
    import torch

    from crbc_viz.backends.torch.fused import crbc_step_credit_torch

    lists = _toy_as_lists()
    out = crbc_step_credit_torch(
        torch.tensor(lists["step_anchor_hash"], dtype=torch.int64),
        torch.tensor(lists["step_action"], dtype=torch.int32),
        torch.tensor(lists["traj_offsets"], dtype=torch.int32),
        torch.tensor(lists["group_traj_offsets"], dtype=torch.int64),
        torch.tensor(lists["traj_success"], dtype=torch.float32),
    )
    np.testing.assert_allclose(out["advantage"].numpy(), ADVANTAGE_14_4, atol=1e-4)


def test_factorised_action_codes_skip_the_range_scan_only_below_the_limit():
    from crbc_viz.errors import EstimatorInputError
    from crbc_viz.ops.checks import ACTION_ID_LIMIT, check_ids

    codes = np.array([0, 5, 2], dtype=np.int32)
    out = check_ids(codes, "step_action", caller="c", count=6)  # the batch's own codes: no scan
    assert out.dtype == np.int64 and out.tolist() == [0, 5, 2]
    with pytest.raises(EstimatorInputError, match="step_action"):  # a count past the limit: scanned
        check_ids(np.array([-1, 0]), "step_action", caller="c", count=ACTION_ID_LIMIT + 1)
    with pytest.raises(EstimatorInputError, match="step_action"):  # no count: scanned
        check_ids(np.array([-1, 0]), "step_action", caller="c")
