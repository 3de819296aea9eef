"""A small, real group-RL trainer: a tabular softmax policy over (anchor, action) logits trained
by a GRPO-style policy gradient, with the per-step advantage from any registered estimator
handed over through the integration API a real trainer calls
(`crbc_viz.integrations.verl_agent.compute_advantage`).

One train step:

1. sample ``groups`` tasks from the run's pool (without replacement) and play ``rollouts``
   episodes of each with the current policy (temperature 1);
2. hand every environment step to ``compute_advantage`` as a verl-agent batch row: one token
   per step (``token_level_rewards`` ``[B, 1]`` = the env reward, ``response_mask`` ones),
   ``anchor_obs`` = the board text, ``index`` = the task (group), ``traj_index`` = the
   rollout, ``step_index`` = the turn, ``actions``, ``success``;
3. policy gradient on the token-mean loss ``-(1/B) sum_i A_i log pi(a_i | s_i)`` (on-policy, one
   update per batch, so PPO's ratio is 1 and its clip never binds). The step is the gradient
   rescaled to norm ``lr`` (gradient-norm clipping that always binds), so the estimators'
   different advantage scales do not act as different learning rates: only the direction --
   which steps get more credit than others -- differs between runs;
4. write the step's canonical rows (``advantage`` = what the trainer used) and a checkpoint.

Randomness is ``numpy.random.default_rng([seed, train_step])`` per step, so a resumed run is
identical to an uninterrupted one.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from .envs import POOLS

__all__ = ["Config", "TabularPolicy", "RunMismatch", "train", "run_id_of", "main"]

CHECKPOINT = "checkpoint.json"
LOG_DIR = "logs"


@dataclass(frozen=True)
class Config:
    """Everything that defines a run (a resumed run must match it)."""

    estimator: str = "crbc"
    seed: int = 0
    steps: int = 40
    env: str = "sokoban"  # a key of `envs.POOLS`
    pool: int = 16  # tasks in the run's pool
    groups: int = 8  # tasks per train step
    rollouts: int = 8  # rollouts per task
    lr: float = 4.0  # norm of each policy update
    params: dict = field(default_factory=dict)  # estimator hyper-parameters
    env_kwargs: dict = field(default_factory=dict)  # pool options (max_steps, ...)


class RunMismatch(ValueError):
    """The run folder's checkpoint was made with another configuration."""


def run_id_of(cfg: Config) -> str:
    return f"{cfg.estimator}-s{cfg.seed}"


class TabularPolicy:
    """Softmax over per-anchor action logits; a row is added (logits 0, uniform) the first time
    an anchor is seen."""

    def __init__(self, num_actions: int):
        self.num_actions = num_actions
        self.index: dict[str, int] = {}
        self.logits = np.zeros((0, num_actions))

    def rows(self, keys) -> np.ndarray:
        new = [k for k in dict.fromkeys(keys) if k not in self.index]
        for k in new:
            self.index[k] = len(self.index)
        if new:
            self.logits = np.vstack([self.logits, np.zeros((len(new), self.num_actions))])
        return np.fromiter((self.index[k] for k in keys), np.int64, len(keys))

    def probs(self, rows) -> np.ndarray:
        z = self.logits[rows]
        z = np.exp(z - z.max(axis=-1, keepdims=True))
        return z / z.sum(axis=-1, keepdims=True)

    def update(self, rows: np.ndarray, actions: np.ndarray, adv: np.ndarray, lr: float) -> float:
        """One step on ``-(1/B) sum A log pi(a|s)``, rescaled to norm ``lr``; returns the
        gradient norm (0: no step, every advantage was 0)."""
        B = len(rows)
        p = self.probs(rows)
        onehot = np.zeros_like(p)
        onehot[np.arange(B), actions] = 1.0
        g = np.zeros_like(self.logits)
        np.add.at(g, rows, -(adv[:, None] * (onehot - p)) / max(B, 1))
        norm = float(np.sqrt((g * g).sum()))
        if norm > 1e-12:
            self.logits -= lr * g / norm
        return norm

    def save(self, path: Path) -> None:
        tmp = path.with_name(path.name + ".tmp.npz")
        np.savez(tmp, keys=np.array(list(self.index), dtype=object), logits=self.logits)
        os.replace(tmp, path)

    @classmethod
    def load(cls, path: Path, num_actions: int) -> TabularPolicy:
        with np.load(path, allow_pickle=True) as z:
            pol = cls(num_actions)
            pol.index = {str(k): i for i, k in enumerate(z["keys"].tolist())}
            pol.logits = z["logits"].astype(np.float64)
        return pol


# ---------------------------------------------------------------------------------------------
def rollout_batch(policy: TabularPolicy, tasks, rollouts: int, rng: np.random.Generator) -> dict:
    """Play ``rollouts`` episodes of every task; per-step arrays (one entry per env step)."""
    cols = {k: [] for k in ("group", "traj", "step", "anchor", "action", "reward", "done", "prob", "row")}
    success, returns = [], []
    for task in tasks:
        for r in range(rollouts):
            s = task.reset()
            ret, start = 0.0, len(cols["step"])
            solved = False
            for t in range(task.max_steps):
                row = policy.rows([s])[0]
                p = policy.probs([row])[0]
                a = int(rng.choice(len(p), p=p))
                nxt, reward, solved = task.step(a)
                for k, v in (
                    ("group", task.task_id),
                    ("traj", f"r{r}"),
                    ("step", t),
                    ("anchor", s),
                    ("action", a),
                    ("reward", reward),
                    ("done", solved),
                    ("prob", float(p[a])),
                    ("row", row),
                ):
                    cols[k].append(v)
                ret += reward
                s = nxt
                if solved:
                    break
            n = len(cols["step"]) - start
            success.extend([solved] * n)
            returns.extend([ret] * n)
    out = {k: np.asarray(v) for k, v in cols.items()}
    out["anchor"] = np.asarray(cols["anchor"], dtype=object)
    out["success"] = np.asarray(success, bool)
    out["episode_return"] = np.asarray(returns, np.float64)
    return out


def advantages(batch: dict, action_names, estimator: str, params: dict) -> np.ndarray:
    """The hand-off: the batch as verl-agent rows (L = 1 token per step) through
    ``compute_advantage``; returns the per-step advantage ``[B]``."""
    import torch

    from crbc_viz.integrations.verl_agent import compute_advantage

    B = len(batch["step"])
    adv, _ = compute_advantage(
        torch.as_tensor(batch["reward"], dtype=torch.float64).reshape(B, 1),
        torch.ones(B, 1, dtype=torch.float64),
        batch["anchor"],
        batch["group"].astype(object),
        np.array([f"{g}/{t}" for g, t in zip(batch["group"], batch["traj"])], dtype=object),
        batch["step"],
        actions=np.asarray(action_names, dtype=object)[batch["action"]],
        success=batch["success"],
        estimator=estimator,
        **params,
    )
    return adv[:, 0].double().numpy()


def step_rows(batch: dict, adv: np.ndarray, action_names, cfg: Config, train_step: int, env_name: str):
    """The step's canonical rows (SCHEMA.md), in rollout order."""
    run_id = run_id_of(cfg)
    names = list(action_names)
    for i in range(len(batch["step"])):
        yield {
            "run_id": run_id,
            "train_step": train_step,
            "group_id": str(batch["group"][i]),
            "traj_id": str(batch["traj"][i]),
            "step_idx": int(batch["step"][i]),
            "action": names[int(batch["action"][i])],
            "reward": round(float(batch["reward"][i]), 6),
            "done": bool(batch["done"][i]),
            "success": bool(batch["success"][i]),
            "episode_return": round(float(batch["episode_return"][i]), 6),
            "anchor_obs": str(batch["anchor"][i]),
            "advantage": float(adv[i]),
            "action_prob": round(float(batch["prob"][i]), 6),
            "env_name": env_name,
            "split": "train",
            "is_action_valid": True,
            "estimator": cfg.estimator,
        }


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def _load_checkpoint(out: Path, cfg: Config):
    ck = out / CHECKPOINT
    if not ck.exists():
        return None
    state = json.loads(ck.read_text(encoding="utf-8"))
    if state["config"] != json.loads(json.dumps(asdict(cfg))):
        raise RunMismatch(
            f"{ck}: this folder holds a run with another configuration ({state['config']}); use another --out"
        )
    return state


def train(
    cfg: Config, out: str | os.PathLike, *, progress: bool = True, stop_after: int | None = None
) -> list[dict]:
    """Run (or resume) ``cfg`` in folder ``out``: ``out/logs/train_step_NNNN.jsonl`` per step,
    ``out/checkpoint.json`` + ``out/policy-NNNN.npz`` after each. Returns the per-step metrics.
    ``stop_after``: return after this many new steps (tests use it to simulate a crash)."""
    from tqdm import tqdm

    out = Path(out)
    (out / LOG_DIR).mkdir(parents=True, exist_ok=True)
    pool = POOLS[cfg.env](cfg.seed, cfg.pool, **cfg.env_kwargs)
    names = pool[0].actions
    state = _load_checkpoint(out, cfg)
    if state is None:
        policy, metrics, start = TabularPolicy(len(names)), [], 0
    else:
        policy = TabularPolicy.load(out / state["policy"], len(names))
        metrics, start = state["metrics"], state["train_step"] + 1
    bar = tqdm(
        range(start, cfg.steps),
        initial=start,
        total=cfg.steps,
        disable=not progress,
        desc=run_id_of(cfg),
        unit="step",
        leave=False,
    )
    done_now = 0
    for ts in bar:
        t0 = time.perf_counter()
        rng = np.random.default_rng([cfg.seed, ts])
        tasks = [pool[i] for i in sorted(rng.choice(len(pool), cfg.groups, replace=False))]
        batch = rollout_batch(policy, tasks, cfg.rollouts, rng)
        adv = advantages(batch, names, cfg.estimator, cfg.params)
        rows = batch["row"]
        gnorm = policy.update(rows, batch["action"], adv, cfg.lr)
        text = "".join(
            json.dumps(r, sort_keys=True) + "\n" for r in step_rows(batch, adv, names, cfg, ts, cfg.env)
        )
        _write_atomic(out / LOG_DIR / f"train_step_{ts:04d}.jsonl", text)
        first = np.r_[True, (batch["step"][1:] == 0)]
        m = {
            "train_step": ts,
            "success_rate": float(batch["success"][first].mean()),
            "steps": int(len(rows)),
            "mean_len": float(len(rows) / first.sum()),
            "states": len(policy.index),
            "grad_norm": gnorm,
            "adv_abs_mean": float(np.abs(adv).mean()),
            "seconds": round(time.perf_counter() - t0, 3),
        }
        metrics.append(m)
        pol = f"policy-{ts:04d}.npz"
        policy.save(out / pol)
        _write_atomic(
            out / CHECKPOINT,
            json.dumps(
                {"config": asdict(cfg), "train_step": ts, "policy": pol, "metrics": metrics}, indent=1
            ),
        )
        for old in out.glob("policy-*.npz"):
            if old.name != pol:
                old.unlink()
        bar.set_postfix(success=f"{m['success_rate']:.2f}")
        done_now += 1
        if stop_after is not None and done_now >= stop_after:
            break
    bar.close()
    return metrics


def parse_params(items) -> dict:
    out = {}
    for it in items or ():
        if "=" not in it:
            raise ValueError(f"--param {it!r}: expected key=value")
        k, v = it.split("=", 1)
        out[k.strip()] = v.strip()
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--estimator", "-e", default="crbc")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--steps", type=int, default=Config.steps)
    ap.add_argument("--env", choices=sorted(POOLS), default="sokoban")
    ap.add_argument("--pool", type=int, default=Config.pool)
    ap.add_argument("--groups", type=int, default=Config.groups)
    ap.add_argument("--rollouts", type=int, default=Config.rollouts)
    ap.add_argument("--lr", type=float, default=Config.lr)
    ap.add_argument("--param", "-p", action="append", help="estimator key=value")
    ap.add_argument("--out", required=True, help="run folder (resumed when it holds a checkpoint)")
    ap.add_argument("--quiet", "-q", action="store_true")
    a = ap.parse_args(argv)
    from crbc_viz.errors import CrbcVizError
    from crbc_viz.estimators import registry

    try:
        params = parse_params(a.param)
        registry.make_params(registry.get(a.estimator), **params)  # unknown names fail here
    except (CrbcVizError, ValueError, KeyError) as e:
        ap.error(str(e).strip("'\""))  # exit 2
    cfg = Config(
        estimator=a.estimator,
        seed=a.seed,
        steps=a.steps,
        env=a.env,
        pool=a.pool,
        groups=a.groups,
        rollouts=a.rollouts,
        lr=a.lr,
        params=params,
    )
    try:
        metrics = train(cfg, a.out, progress=not a.quiet)
    except RunMismatch as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    last = metrics[-1] if metrics else {}
    print(
        f"{run_id_of(cfg)}: {len(metrics)} train steps, last success rate "
        f"{last.get('success_rate', float('nan')):.3f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
