"""Cost per training step of each trainer adapter (crbc_viz.integrations), beside its floor on
the same batch, and its peak extra memory; against the trainer's own GiGPO where it can be
imported.

    python -m bench.integrations_bench [--sizes 8k,256k] [--device cpu|cuda] [--repeats N]
        [--gigpo-src DIR --gigpo-python PY] [--no-memory] [--write]

Workloads: random-MDP batches (`crbc_viz.synthetic`, 8 rollouts per group, up to 50 steps,
40 states, seed 1): ``8k`` = 28 groups (8,170 steps), ``256k`` = 848 groups (~256k steps).
Each adapter gets the batch the way its trainer holds it, built outside the timed region:

- verl-agent / ROLL: one row per step, 3 % of rows appended as copies (adjust_batch / ROLL's
  "copy" mode), rows shuffled; verl-agent rows carry 16 response tokens ([B, 16] tensors).
  As verl-agent builds them, the ids are one string object per group / trajectory repeated on
  its rows (``uid``, ``traj_uid``), while every step's anchor and action is a string object of
  its own (the env's observation, the model's text), so reading them touches memory all over;
- verl and TRL: one row per trajectory, each step 8 model tokens then 8 env tokens (16 a
  step, as a verl-agent row: [T, 16 × longest] tensors);
- rLLM: TrajectoryGroup / Trajectory / Step objects (attribute names of rllm/types.py).

A figure is the median wall time of ``--repeats`` runs after one warm-up (the numba kernels are
compiled and cached by then), for the whole adapter call: de-duplication, ordering, anchor
hashing, batch assembly, the estimator, and the broadcast back to rows/tokens.

**Floor**: the least work that gives the same credit from the same input, run beside each
adapter (adapter and floor alternate, so both see the same machine load; the ratio is of the
medians): ``pandas.factorize`` of the anchors as the trainer hands them over, then the
compiled kernel (`crbc_viz.backends.numba.crbc.crbc_step_credit`; on CUDA the fused kernel,
codes uploaded) on the resulting codes, with every other kernel input (actions, offsets,
outcomes, the step each code goes to) prepared outside the timed region. For verl and TRL the
per-row anchor lists are first chained into one array, for rLLM the anchors are read off the
step objects and each step's advantage is written back onto it: that much work any adapter of
those shapes does. No validation, no de-duplication, no assembly, no broadcast.

**Memory** (CPU, ``--no-memory`` skips it): in a child process per size, with glibc's mmap
threshold fixed at 64 KiB (so a freed large block leaves the resident set), the high-water mark
of the resident set is reset (``/proc/self/clear_refs``) before a warmed-up adapter call and read
after it; "peak extra" is that mark minus the resident set before the call. "input" is what the
adapter is handed: tensors and numeric arrays by their bytes, object arrays by their 8-byte
slots (not the strings they point at); rLLM's step objects are not counted (no ratio).

The baseline is verl-agent's ``gigpo.core_gigpo.compute_gigpo_outcome_advantage`` (mode
mean_norm, exact anchors) on the same verl-agent batch, run in a separate interpreter that can
import verl (``--gigpo-python``, e.g. .venv-trainers/bin/python) from a fetched checkout
(``--gigpo-src``: the folder holding ``gigpo/core_gigpo.py``; never part of this project). Its
``step_rewards`` input (discounted step returns) is prepared outside its timed region too.
"""

from __future__ import annotations

import argparse
import gc
import itertools
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np

HERE = Path(__file__).resolve().parent
SIZES = {"8k": 28, "256k": 848}
L_TOKENS = 16
BEGIN, END = "<!-- integrations-bench:begin -->", "<!-- integrations-bench:end -->"
SECTION = "## Trainer integrations"
#: The targets: each adapter within this many times its floor, its peak extra memory within this
#: many times its input (at the largest size measured).
FLOOR_TARGET, MEMORY_TARGET = 4.0, 3.0
_META = ("steps", "rows", "trajectories")


def workload(size: str, seed: int = 1):
    from crbc_viz.synthetic import random_mdp_batch

    b = random_mdp_batch(
        num_groups=SIZES[size], rollouts=8, max_steps=50, num_states=40, p_fail=0.01, seed=seed
    )
    s = b.steps
    rows = {
        k: s[k].to_numpy()
        for k in ("group_id", "traj_id", "step_idx", "reward", "action", "anchor_obs", "success")
    }
    rows["traj_key"] = (s["group_id"].astype(str) + "/" + s["traj_id"].astype(str)).to_numpy()
    return b, rows


def step_rows(rows, rng):
    """verl-agent / ROLL rows: copies appended, shuffled."""
    n = len(rows["step_idx"])
    idx = np.r_[np.arange(n), rng.integers(0, n, max(1, int(0.03 * n)))]
    rng.shuffle(idx)
    return idx


def _obj(a):
    out = np.empty(len(a), dtype=object)
    out[:] = list(a)
    return out


def _shared(a):
    """One object per distinct value, repeated on its rows (verl-agent's uid / traj_uid)."""
    import pandas as pd

    codes, uniques = pd.factorize(a)
    return _obj(np.asarray(uniques, dtype=object)[codes])


def verl_agent_inputs(rows, idx, device):
    import torch

    B = len(idx)
    n_tok = np.random.default_rng(0).integers(1, L_TOKENS + 1, B)
    mask = (torch.arange(L_TOKENS)[None, :] < torch.as_tensor(n_tok)[:, None]).float()
    tlr = torch.zeros(B, L_TOKENS)
    # verl-agent's EpisodeRewardManager: the episode reward on every step's last token.
    tlr[torch.arange(B), torch.as_tensor(n_tok - 1)] = torch.as_tensor(
        rows["success"][idx].astype(np.float32)
    )
    return dict(
        token_level_rewards=tlr.to(device),
        response_mask=mask.to(device),
        anchor_obs=_obj(rows["anchor_obs"][idx]),
        index=_shared(rows["group_id"][idx]),
        traj_index=_shared(rows["traj_key"][idx]),
        step_index=rows["step_idx"][idx].astype(np.int64),
        actions=_obj(rows["action"][idx]),
    )


def trajectory_inputs(batch, device):
    """verl / TRL: one row per trajectory; each step ``L_TOKENS`` tokens, the first half the
    model's (mask 1), the second the environment's (mask 0): as many tokens per step as a
    verl-agent row has, so the tensors are of the size a trainer hands over for these steps."""
    import torch

    T = batch.num_trajectories
    lens = batch.traj_len
    half = L_TOKENS // 2
    Lmax = int(L_TOKENS * lens.max())
    pos = torch.arange(Lmax)[None, :]
    mask = ((pos % L_TOKENS < half) & (pos < L_TOKENS * torch.as_tensor(lens)[:, None])).float()
    tlr = torch.zeros(T, Lmax)
    last_model_token = L_TOKENS * (torch.as_tensor(lens) - 1) + half - 1
    tlr[torch.arange(T), last_model_token] = torch.as_tensor(batch.traj_success.astype(np.float32))
    s = batch.steps
    anchors, actions = np.empty(T, dtype=object), np.empty(T, dtype=object)
    obs, act = s["anchor_obs"].to_numpy(), s["action"].to_numpy()
    off = batch.traj_offsets
    anchors[:] = [list(obs[off[t] : off[t + 1]]) for t in range(T)]
    actions[:] = [list(act[off[t] : off[t + 1]]) for t in range(T)]
    uid = _shared(batch.groups["group_id"].to_numpy()[batch.traj_group])
    return tlr.to(device), mask.to(device), uid, anchors, actions


def rllm_groups(batch):
    s = batch.steps
    obs, act, rew = s["anchor_obs"].to_numpy(), s["action"].to_numpy(), s["reward"].to_numpy()
    off, gto = batch.traj_offsets, batch.group_traj_offsets
    groups = []
    for g in range(batch.num_groups):
        trajs = []
        for t in range(gto[g], gto[g + 1]):
            steps = [
                SimpleNamespace(
                    observation=obs[i], input=None, action=act[i], reward=float(rew[i]), advantage=None
                )
                for i in range(off[t], off[t + 1])
            ]
            trajs.append(SimpleNamespace(uid=str(t), reward=float(batch.traj_success[t]), steps=steps))
        groups.append(SimpleNamespace(group_id=f"g{g}:agent", trajectories=trajs))
    return groups


def sync(device):
    if str(device).startswith("cuda"):
        import torch

        torch.cuda.synchronize()


def _first_rows(row_step: np.ndarray) -> np.ndarray:
    """The first input row of each batch step (where the floor finds the step's anchor code)."""
    first = np.full(int(row_step.max()) + 1, len(row_step), np.int64)
    np.minimum.at(first, row_step, np.arange(len(row_step), dtype=np.int64))
    return first


def floor_fn(anchors_of, steps, device, write_back=None):
    """The floor of one adapter (module doc): ``anchors_of()`` gives the anchors as the trainer
    holds them, in input order; ``steps`` (`canonical_steps` of the same input, built here
    outside the timed region) gives the kernel's other inputs and which code each step takes."""
    import pandas as pd

    from crbc_viz.graph import action_ids

    b = steps.batch
    pick = _first_rows(steps.row_step)
    rest = (action_ids(b)[0], b.traj_offsets, b.group_traj_offsets, b.traj_success)
    if str(device).startswith("cuda"):
        import torch

        from crbc_viz.backends.torch.fused import crbc_step_credit_torch, to_device

        on_dev = to_device(b.step_anchor_hash, *rest, device=str(device))[1:]

        def kernel(codes):
            return crbc_step_credit_torch(torch.as_tensor(codes, device=device), *on_dev)["advantage"]

    else:
        from crbc_viz.backends.numba.crbc import crbc_step_credit

        def kernel(codes):
            return crbc_step_credit(codes, *rest)["advantage"]

    def run():
        codes, _ = pd.factorize(anchors_of())
        adv = kernel(codes[pick])
        if write_back is not None:
            write_back(adv)

    return run


def chained(per_row):
    """verl / TRL anchors: the per-row lists chained into one object array."""
    n = sum(len(a) for a in per_row)
    return lambda: np.fromiter(itertools.chain.from_iterable(per_row), dtype=object, count=n)


def nbytes(*xs) -> int:
    """What an adapter is handed, in bytes: tensors and numeric arrays by their data, object
    arrays by their 8-byte slots plus, one level down, the slots of the lists they hold."""
    total = 0
    for x in xs:
        if hasattr(x, "element_size"):
            total += x.numel() * x.element_size()
        elif x.dtype == object:
            total += 8 * len(x) + sum(8 * len(v) for v in x if isinstance(v, (list, tuple, np.ndarray)))
        else:
            total += x.nbytes
    return total


def cases(size, device):
    """``(batch, meta, cases, extra)``: per adapter name, ``(adapter call, floor call or None,
    input bytes or None)`` on the size's workload; ``extra`` holds the verl-agent inputs for
    the GiGPO baseline."""
    import torch

    from crbc_viz.integrations import rllm, roll, verl, verl_agent
    from crbc_viz.integrations._core import canonical_steps
    from crbc_viz.integrations.trl import completion_advantages

    batch, rows = workload(size)
    rng = np.random.default_rng(0)
    idx = step_rows(rows, rng)
    va = verl_agent_inputs(rows, idx, device)
    nt_roll = SimpleNamespace(
        batch={"response_mask": va["response_mask"]},
        non_tensor_batch={
            "traj_group_id": va["index"],
            "traj_id": va["traj_index"],
            "step": va["step_index"],
            "state_hash": va["anchor_obs"],
            "step_scores": rows["reward"][idx].astype(np.float64),
            "success": rows["success"][idx].astype(bool),
        },
    )
    tlr, mask, uid, anchors, actions = trajectory_inputs(batch, device)
    nt_verl = {"uid": uid, "crbc_anchors": anchors, "crbc_actions": actions}
    groups = rllm_groups(batch)
    meta = {"steps": batch.num_steps, "rows": len(idx), "trajectories": batch.num_trajectories}

    # TRL: the completion mask covers every token of a completion, tool results included; its
    # tool_mask is 0 on them, so the model's turns (the steps) are the runs of mask * tool_mask.
    ends = L_TOKENS * torch.as_tensor(batch.traj_len, device=mask.device)
    completion_mask = (torch.arange(mask.shape[1], device=mask.device)[None, :] < ends[:, None]).float()
    local = [{"anchors": a, "actions": x, "starts": None} for a, x in zip(anchors, actions)]
    rewards_per_func = torch.as_tensor(batch.traj_success, dtype=torch.float32, device=mask.device)[:, None]
    weights = torch.ones(1, device=mask.device)

    def trl_core():  # what CreditGRPOTrainer adds after TRL's scoring (one process)
        completion_advantages(completion_mask, mask, local, rewards_per_func, weights, num_generations=8)

    # The floors' kernel inputs, from the adapters' own canonical steps (outside the timing).
    row_steps = canonical_steps(
        va["index"],
        va["traj_index"],
        va["step_index"],
        va["anchor_obs"],
        rows["reward"][idx],
        actions=va["actions"],
    )
    lens = [len(a) for a in anchors]
    flat_steps = canonical_steps(
        np.repeat(uid, lens),
        np.repeat(np.arange(len(anchors)), lens),
        np.concatenate([np.arange(n) for n in lens]),
        chained(anchors)(),
        np.zeros(sum(lens)),
        actions=chained(actions)(),
    )
    flat = [s for g in groups for t in g.trajectories for s in t.steps]

    def rllm_anchors():
        return np.fromiter(
            (s.observation for g in groups for t in g.trajectories for s in t.steps),
            dtype=object,
            count=len(flat),
        )

    def rllm_write(adv):
        for s, v in zip(flat, np.asarray(adv)[flat_steps.row_step].tolist()):
            s.advantage = v

    va_bytes = nbytes(*va.values())
    run = {
        "verl-agent crbc": (
            lambda: verl_agent.compute_advantage(**va),
            floor_fn(lambda: va["anchor_obs"], row_steps, device),
            va_bytes,
        ),
        "verl-agent gigpo (ours)": (
            lambda: verl_agent.compute_advantage(**va, estimator="gigpo"),
            None,
            va_bytes,
        ),
        "ROLL crbc": (
            lambda: roll.response_level_advantages(nt_roll, device=device),
            floor_fn(lambda: nt_roll.non_tensor_batch["state_hash"], row_steps, device),
            nbytes(va["response_mask"], *nt_roll.non_tensor_batch.values()),
        ),
        "verl crbc": (
            lambda: verl.compute_advantage(tlr, mask, uid, None, non_tensor_batch=nt_verl),
            floor_fn(chained(anchors), flat_steps, device),
            nbytes(tlr, mask, uid, anchors, actions),
        ),
        "TRL crbc": (
            trl_core,
            floor_fn(chained(anchors), flat_steps, device),
            nbytes(completion_mask, mask, rewards_per_func, anchors, actions),
        ),
    }
    if str(device) == "cpu":
        run["rLLM crbc"] = (
            lambda: rllm.assign_step_advantages(groups),
            floor_fn(rllm_anchors, flat_steps, device, rllm_write),
            None,
        )
    return meta, run, (va, rows, idx)


def timed_pair(adapter, floor, device, repeats):
    """Medians of ``repeats`` alternating runs of the adapter and its floor, after a warm-up."""

    def once(fn):
        t = time.perf_counter()
        fn()
        sync(device)
        return time.perf_counter() - t

    adapter()  # warm-up
    if floor is not None:
        floor()
    a, f = [], []
    for _ in range(repeats):
        a.append(once(adapter))
        if floor is not None:
            f.append(once(floor))
    return statistics.median(a), (statistics.median(f) if f else None)


def run_sizes(sizes, device, repeats):
    results = []
    for size in sizes:
        meta, run, extra = cases(size, device)
        res = dict(meta)
        for name, (adapter, floor, _) in run.items():
            res[name] = timed_pair(adapter, floor, device, repeats)
        results.append((size, res, extra))
        print(size, json.dumps({k: v for k, v in res.items()}), flush=True)
    return results


def _status_kb(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"/proc/self/status has no {field}")


def memory_child(size: str) -> None:
    """Peak extra resident memory of each adapter call (module doc), printed as JSON."""
    meta, run, _ = cases(size, "cpu")
    out = {}
    for name, (adapter, _, inp) in run.items():
        adapter()  # warm-up: compiled kernels and caches loaded
        gc.collect()
        Path("/proc/self/clear_refs").write_text("5")  # high-water mark := resident set now
        base = _status_kb("VmRSS")
        adapter()
        out[name] = {
            "extra_mb": (_status_kb("VmHWM") - base) / 1024,
            "input_mb": None if inp is None else inp / 2**20,
        }
    print(json.dumps(out))


def run_memory(size: str) -> dict:
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="65536", PYTHONPATH=str(HERE.parent))
    p = subprocess.run(
        [sys.executable, "-m", "bench.integrations_bench", "--memory-child", size],
        cwd=HERE.parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    if p.returncode != 0:
        raise RuntimeError(f"memory child failed:\n{p.stderr[-2000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def run_gigpo(va, rows, idx, src, python, repeats):
    """verl-agent's own GiGPO on the same batch, in an interpreter that imports verl."""
    with tempfile.TemporaryDirectory() as d:
        np.savez(
            Path(d) / "in.npz",
            tlr=va["token_level_rewards"].cpu().numpy(),
            mask=va["response_mask"].cpu().numpy(),
            anchor=va["anchor_obs"].astype(str),
            index=va["index"].astype(str),
            traj=va["traj_index"].astype(str),
            step_rewards=rows["reward"][idx].astype(np.float32),
        )
        code = f"""
import sys, time, statistics, json, numpy as np, torch
sys.path.insert(0, {str(src)!r})
import contextlib, io
from gigpo.core_gigpo import compute_gigpo_outcome_advantage as f
z = np.load({str(Path(d) / 'in.npz')!r})
obj = lambda a: np.array(list(a), dtype=object)
args = dict(token_level_rewards=torch.as_tensor(z['tlr']), step_rewards=torch.as_tensor(z['step_rewards']),
            response_mask=torch.as_tensor(z['mask']), anchor_obs=obj(z['anchor']), index=obj(z['index']),
            traj_index=obj(z['traj']), mode='mean_norm')
def run():
    a = dict(args); a['token_level_rewards'] = args['token_level_rewards'].clone()
    with contextlib.redirect_stdout(io.StringIO()):
        f(**a)
run(); ts = []
for _ in range({repeats}):
    t = time.perf_counter(); run(); ts.append(time.perf_counter() - t)
print(json.dumps(statistics.median(ts)))
"""
        p = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=3600, cwd=d)
        if p.returncode != 0:
            print(p.stderr[-2000:], file=sys.stderr)
            return None
        return json.loads(p.stdout.strip().splitlines()[-1])


def _ms(v) -> str:
    return "—" if v is None else f"{v * 1e3:,.1f} ms"


def table(results) -> str:
    """Per adapter and size: its median, its floor's and the ratio."""
    names = []
    for _, r, _ in results:
        names += [k for k in r if k not in _META and k not in names]
    head = "| adapter | " + " | ".join(
        f"{s} ({r['steps']:,} steps, {r['rows']:,} rows): adapter | floor | × floor" for s, r, _ in results
    )
    lines = [head + " |", "| --- |" + " ---: | ---: | ---: |" * len(results)]
    for n in names:
        cells = []
        for _, r, _ in results:
            a, f = r.get(n, (None, None))
            cells += [_ms(a), _ms(f), "—" if a is None or f is None else f"**{a / f:.1f}×**"]
        lines.append(f"| {n} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def memory_table(size: str, mem: dict) -> str:
    lines = [
        f"| adapter ({size}) | input | peak extra | × input |",
        "| --- | ---: | ---: | ---: |",
    ]
    for n, m in mem.items():
        inp = m["input_mb"]
        ratio = "—" if inp is None else f"{m['extra_mb'] / inp:.2f}×"
        shown = "— (Python objects)" if inp is None else f"{inp:,.1f} MB"
        lines.append(f"| {n} | {shown} | {m['extra_mb']:,.1f} MB | {ratio} |")
    return "\n".join(lines)


def verdict(results, mem) -> str:
    size, r, _ = results[-1]
    ratios = {n: v[0] / v[1] for n, v in r.items() if n not in _META and v[1] is not None}
    worst = max(ratios, key=ratios.get)
    met = all(v <= FLOOR_TARGET for v in ratios.values())
    out = (
        f"Target: every adapter within {FLOOR_TARGET:g}× its floor at {size}: "
        f"{'met' if met else '**not met**'} (worst: {worst}, {ratios[worst]:.1f}×)."
    )
    if mem:
        mr = {n: m["extra_mb"] / m["input_mb"] for n, m in mem.items() if m["input_mb"]}
        worst = max(mr, key=mr.get)
        met = all(v <= MEMORY_TARGET for v in mr.values())
        out += (
            f" Peak extra memory within {MEMORY_TARGET:g}× the input: "
            f"{'met' if met else '**not met**'} (worst: {worst}, {mr[worst]:.2f}×)."
        )
    return out


def recorded_command(a: argparse.Namespace) -> str:
    """The command line the results block records: the options of this run (``--write`` only
    when it was given), the verl-agent checkout's path left out."""
    return (
        f"python -m bench.integrations_bench --sizes {a.sizes} --device {a.device} --repeats {a.repeats}"
        + (
            " --gigpo-src <verl-agent checkout> --gigpo-python .venv-trainers/bin/python"
            if a.gigpo_src
            else ""
        )
        + (" --no-memory" if a.no_memory else "")
        + (" --write" if a.write else "")
    )


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.integrations_bench")
    ap.add_argument("--sizes", default="8k,256k")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--gigpo-src", default=os.environ.get("CRBC_VIZ_GIGPO_SRC"))
    ap.add_argument("--gigpo-python", default=os.environ.get("CRBC_VIZ_TRAINERS_PYTHON"))
    ap.add_argument("--no-memory", action="store_true", help="skip the peak-memory child process")
    ap.add_argument("--memory-child", help=argparse.SUPPRESS)
    ap.add_argument("--write", action="store_true", help="replace the block in bench/RESULTS.md")
    a = ap.parse_args(argv)
    if a.memory_child:
        memory_child(a.memory_child)
        return
    sizes = a.sizes.split(",")
    load_start, started = os.getloadavg(), time.strftime("%Y-%m-%d %H:%M")
    results = run_sizes(sizes, a.device, a.repeats)
    if a.gigpo_src and a.gigpo_python:
        for _, res, (va, rows, idx) in results:
            res["verl-agent GiGPO (theirs)"] = (
                run_gigpo(va, rows, idx, a.gigpo_src, a.gigpo_python, a.repeats),
                None,
            )
    mem = {} if a.no_memory or a.device != "cpu" else run_memory(sizes[-1])
    loads = [" / ".join(f"{x:.2f}" for x in la) for la in (load_start, os.getloadavg())]
    command = recorded_command(a)
    from bench.__main__ import commit

    machine = f"{platform.machine()}, {os.cpu_count()} CPU cores, Python {platform.python_version()}"
    text = (
        f"Machine: {machine}; device {a.device}. Command: `{command}` on {commit()}, run {started}; load average "
        f"(1, 5, 15 min) {loads[0]} at the start, {loads[1]} at the end. Median of {a.repeats} runs "
        f"after one warm-up, adapter and floor alternating.\n\n{table(results)}\n\n"
        + (f"{memory_table(sizes[-1], mem)}\n\n" if mem else "")
        + verdict(results, mem)
        + " The adapters' path (`crbc_viz/integrations/_core.py`): ids, anchors and actions factorised"
        " once, rows placed in batch order by counting (`crbc_viz.io.assemble.place_steps`), the steps"
        " kept as Arrow (no pandas frame); what an adapter costs over its floor is factorising its"
        " ids and actions, the loader's checks, the batch assembly and, for token rows, a few passes"
        " over the tokens."
    )
    print(text)
    out = os.environ.get("OUT")
    if out:
        Path(out, f"integrations_{a.device}.md").write_text(f"{BEGIN}\n{text}\n{END}\n")
    if a.write:
        from bench.__main__ import write_block

        write_block(text, BEGIN, END, section=SECTION)


if __name__ == "__main__":
    main()
