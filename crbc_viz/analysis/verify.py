"""Did the trainer compute the advantage it says it did? Recompute it and compare (docs/verify.md).

A dump that carries the trainer's own ``advantage`` (TRL ``advantage``, ms-swift ``advantages``,
the verl-agent dump hook's token-mean ``advantage``) is scored again with the estimator and
parameters that reproduce that trainer's computation (`CONVENTIONS`, by importer name), and the
two are compared step by step: per group the largest and mean absolute difference and its worst
steps. A step agrees when ``|logged − recomputed| ≤ atol + rtol·|recomputed|`` (`ATOL`, `RTOL`:
the float32 rule of the torch backend; the trainers write float32).

Pure: a `RolloutBatch` in, a `Verification` out; the CLI (``crbc-viz verify``) reads the file.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ..backends.torch import FLOAT32_ATOL
from ..data import RolloutBatch
from ..errors import CrbcVizError

__all__ = [
    "ATOL",
    "RTOL",
    "CONVENTIONS",
    "Convention",
    "NoAdvantageError",
    "NoConventionError",
    "Verification",
    "compare",
    "convention",
    "default_plan",
    "logged_advantage",
    "recorded_estimator",
    "ESTIMATOR_COLUMN",
]

#: Absolute part of the agreement rule: the float32 tolerance of the torch backend.
ATOL = FLOAT32_ATOL
#: Relative part: a float32 value rounded once is within 6e-8 of itself; 1e-5 leaves room for a
#: trainer's float32 sums (|advantage| up to ~10 in verl-agent's GiGPO).
RTOL = 1e-5


class NoAdvantageError(CrbcVizError, ValueError):
    """The data carries no trainer-written advantage to compare with."""


class NoConventionError(CrbcVizError, ValueError):
    """The data's format names no trainer whose estimator is known here; give one (``-e``)."""


@dataclass(frozen=True)
class Convention:
    """The estimator and parameters that reproduce one trainer's advantage, and where that is
    read from (the trainer's code)."""

    estimator: str
    params: dict
    trainer: str
    source: str
    caveat: str = ""


_GRPO_TRL = {"norm": "std", "ddof": 1, "eps": 1e-4, "stats": "trajectory", "outcome": "return"}

#: importer name -> `Convention`. Read from each trainer's code (docs/verify.md).
CONVENTIONS: dict[str, Convention] = {
    "trl": Convention(
        "grpo",
        dict(_GRPO_TRL),
        "TRL GRPOTrainer (scale_rewards='group', the default)",
        "trl/trainer/grpo_trainer.py _generate_and_score_completions: rewards = Σ reward_weights·"
        "reward_funcs; advantages = rewards − group mean, divided by (group std + 1e-4), std = "
        "torch.std (Bessel, ddof 1); scale_rewards='none' skips the division "
        "(--param grpo.norm=mean), 'batch' divides by the std of the whole batch (not reproduced)",
    ),
    "ms-swift": Convention(
        "grpo",
        dict(_GRPO_TRL),
        "ms-swift GRPOTrainer (scale_rewards='group')",
        "swift/trainers/rlhf_trainer/grpo_trainer.py _compute_advantages: (rewards − group mean) / "
        "(group std + 1e-4), std = torch.std (ddof 1), rewards = Σ reward_weights·reward_funcs",
    ),
    "verl-agent": Convention(
        "gigpo",
        {
            "gamma": 0.95,
            "omega": 1.0,
            "mode": "mean_norm",
            "episode_stats": "cross_steps",
            "step_reward": "env",
            "outcome": "return",
            "eps": 1e-6,
        },
        "verl-agent GiGPO (gigpo_mode='mean_norm', gamma 0.95, step_advantage_w 1.0)",
        "gigpo/core_gigpo.py compute_gigpo_outcome_advantage: episode level over every row of the "
        "uid (compute_mean_std_cross_steps), step level over rows of equal anchor_obs within the "
        "uid on the discounted step returns (compute_step_discounted_returns, γ 0.95), a singleton "
        "step group gets 0; A = A^E + step_advantage_w·A^S. Other configs: --param gigpo.…",
        caveat="adjust_batch(mode='copy') pads the batch with copies of random rows before "
        "compute_advantage: the copies enter the trainer's episode and step statistics, and the "
        "dump hook drops them, so a group that held a copy cannot be reproduced from the dump "
        "and shows as disagreeing",
    ),
}


#: The column in which a canonical log names the estimator that wrote its ``advantage`` (the
#: bundled training run, experiments/sokoban_grpo, writes it on every row).
ESTIMATOR_COLUMN = "estimator"


def recorded_estimator(batch: RolloutBatch) -> str | None:
    """The estimator the rows name in `ESTIMATOR_COLUMN` (one name for every row with an
    advantage), None when the column is absent.

    Raises:
        NoConventionError: the rows name several estimators.
    """
    steps = batch.steps
    if ESTIMATOR_COLUMN not in steps.columns:
        return None
    names = sorted({str(x) for x in steps[ESTIMATOR_COLUMN].dropna().unique()})
    if len(names) > 1:
        raise NoConventionError(
            f"{batch.source or 'the data'}: the rows name {len(names)} estimators "
            f"({', '.join(names[:5])}); verify one run at a time (--run) or name one with -e"
        )
    return names[0] if names else None


def convention(fmt: str) -> Convention:
    """The `Convention` of importer ``fmt``.

    Raises:
        NoConventionError: no trainer convention is known for ``fmt``.
    """
    if fmt not in CONVENTIONS:
        raise NoConventionError(
            f"the {fmt} format names no trainer estimator known here (known: "
            f"{', '.join(CONVENTIONS)}); name the estimator with -e"
        )
    return CONVENTIONS[fmt]


def default_plan(fmt: str, batch: RolloutBatch) -> tuple[str, dict, str]:
    """(estimator, params, what it reproduces) for data read as ``fmt`` with no estimator named:
    the trainer's `Convention`, else (a canonical log or store) the estimator its rows name.

    Raises:
        NoConventionError: neither is known.
    """
    if fmt not in CONVENTIONS:
        recorded = recorded_estimator(batch)
        if recorded is not None:
            what = f"the estimator the rows name (column {ESTIMATOR_COLUMN!r}), default parameters"
            return recorded, {}, what
    c = convention(fmt)
    return c.estimator, dict(c.params), c.trainer


@dataclass
class Verification:
    """The comparison of one batch.

    Attributes:
        groups: one row per group that has a logged advantage: ``run_id``, ``train_step``,
            ``group_id``, ``label``, ``steps`` (compared), ``max_abs``, ``mean_abs``,
            ``disagree`` (steps outside the rule), ``ok``, ``worst`` (up to `WORST` dicts of
            ``traj_id``, ``step_idx``, ``logged``, ``recomputed``, ``abs_diff``).
        estimator, params: what was recomputed.
        skipped_steps: steps with no logged advantage (not compared).
    """

    groups: pd.DataFrame
    estimator: str
    params: dict
    atol: float = ATOL
    rtol: float = RTOL
    skipped_steps: int = 0
    notes: list[str] = field(default_factory=list)

    @property
    def bad(self) -> pd.DataFrame:
        """The groups that disagree, worst first."""
        return self.groups[~self.groups["ok"]].sort_values("max_abs", ascending=False, kind="stable")

    @property
    def ok(self) -> bool:
        return bool(self.groups["ok"].all())

    def by_train_step(self) -> pd.DataFrame:
        """Per (``run_id``, ``train_step``): groups, disagreeing groups, max and mean |diff|."""
        g = self.groups
        rows = []
        for (run, ts), sub in g.groupby(["run_id", "train_step"], sort=True):
            n = int(sub["steps"].sum())
            mean = float((sub["mean_abs"] * sub["steps"]).sum() / n) if n else 0.0
            rows.append(
                {
                    "run_id": run,
                    "train_step": ts,
                    "groups": len(sub),
                    "disagreeing_groups": int((~sub["ok"]).sum()),
                    "max_abs": float(sub["max_abs"].max()),
                    "mean_abs": mean,
                }
            )
        return pd.DataFrame(rows)

    def to_dict(self) -> dict:
        """A JSON-ready summary (``crbc-viz verify --json``)."""
        return {
            "estimator": self.estimator,
            "params": self.params,
            "tolerance": {"atol": self.atol, "rtol": self.rtol},
            "agree": self.ok,
            "groups_compared": len(self.groups),
            "groups_disagreeing": int((~self.groups["ok"]).sum()),
            "skipped_steps": self.skipped_steps,
            "notes": list(self.notes),
            "train_steps": [
                {k: _plain(v) for k, v in row.items()}
                for row in self.by_train_step().to_dict(orient="records")
            ],
            "groups": [
                {k: _plain(v) for k, v in row.items()} for row in self.groups.to_dict(orient="records")
            ],
        }


#: Worst steps listed per group.
WORST = 3


def _plain(v):
    """A JSON value: numpy scalars as Python ones, a non-finite float as None."""
    if isinstance(v, np.generic):
        v = v.item()
    if isinstance(v, float) and not np.isfinite(v):
        return None
    if isinstance(v, list):
        return [{k: _plain(x) for k, x in d.items()} if isinstance(d, dict) else _plain(d) for d in v]
    return v


def logged_advantage(batch: RolloutBatch) -> np.ndarray:
    """The trainer's advantage per step ``[S]`` (NaN where a row has none).

    Raises:
        NoAdvantageError: no step carries one.
    """
    steps = batch.steps
    if "advantage" not in steps.columns:
        raise NoAdvantageError(f"{batch.source or 'the data'}: carries no trainer-written advantage")
    adv = pd.to_numeric(steps["advantage"], errors="coerce").to_numpy(dtype=np.float64)
    if not np.isfinite(adv).any():
        raise NoAdvantageError(f"{batch.source or 'the data'}: carries no trainer-written advantage")
    return adv


def compare(
    batch: RolloutBatch,
    estimator: str,
    params: dict | None = None,
    *,
    atol: float = ATOL,
    rtol: float = RTOL,
) -> Verification:
    """Recompute ``estimator`` (numpy reference, float64) on ``batch`` and compare its advantage
    with the logged one, group by group.

    Raises:
        NoAdvantageError: the batch carries no logged advantage.
        EstimatorInputError / MissingSignalError: the estimator refuses the input.
    """
    from ..api import score

    logged = logged_advantage(batch)
    params = dict(params or {})
    res = score(batch, estimator, backend="numpy", **params)
    ours = np.asarray(res.advantage, dtype=np.float64)
    has = np.isfinite(logged)
    diff = np.abs(logged - ours)
    diff[has & ~np.isfinite(ours)] = np.inf  # ours undefined where the trainer wrote a number
    bad = has & ~(diff <= atol + rtol * np.abs(np.nan_to_num(ours)))
    return Verification(
        _group_rows(batch, logged, ours, diff, has, bad),
        estimator,
        _used(res.params),  # every parameter as the estimator checked it (defaults included)
        atol,
        rtol,
        skipped_steps=int((~has).sum()),
    )


def _used(p) -> dict:
    import dataclasses

    return dataclasses.asdict(p) if dataclasses.is_dataclass(p) else dict(p or {})


def _group_rows(batch, logged, ours, diff, has, bad) -> pd.DataFrame:
    step_group = batch.traj_group[batch.step_traj]
    steps = batch.steps
    labels = batch.group_labels()
    groups = batch.groups
    traj_ids = steps["traj_id"].astype(str).to_numpy()
    step_idx = steps["step_idx"].to_numpy()
    rows = []
    order = np.argsort(step_group, kind="stable")
    bounds = np.searchsorted(step_group[order], np.arange(batch.num_groups + 1))
    for g in range(batch.num_groups):
        idx = order[bounds[g] : bounds[g + 1]]
        idx = idx[has[idx]]
        if not len(idx):
            continue
        d = diff[idx]
        worst = idx[np.argsort(-d, kind="stable")[:WORST]]
        rows.append(
            {
                "run_id": str(groups["run_id"].iloc[g]),
                "train_step": int(groups["train_step"].iloc[g]),
                "group_id": str(groups["group_id"].iloc[g]),
                "label": labels[g],
                "steps": len(idx),
                "max_abs": float(d.max()),
                "mean_abs": float(d.mean()),
                "disagree": int(bad[idx].sum()),
                "ok": not bool(bad[idx].any()),
                "worst": [
                    {
                        "traj_id": traj_ids[i],
                        "step_idx": int(step_idx[i]),
                        "logged": float(logged[i]),
                        "recomputed": float(ours[i]),
                        "abs_diff": float(diff[i]),
                    }
                    for i in worst
                ],
            }
        )
    cols = [
        "run_id",
        "train_step",
        "group_id",
        "label",
        "steps",
        "max_abs",
        "mean_abs",
        "disagree",
        "ok",
        "worst",
    ]
    return pd.DataFrame(rows, columns=cols)
