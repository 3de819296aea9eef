"""Primitives with no estimator knowledge (docs/architecture.md, layer ``ops``), written once
for numpy arrays and torch tensors where the vectorised estimators use them (`xp`).

Every estimator module builds on these instead of importing a peer estimator:

- `segments`: per-segment count / mean / std, the no-spread test (values that agree within
  round-off: `roundoff_tol`, the one rule and its constants) and the segment z-score;
- `returns`: R_i per rollout, per-step rewards, discounted suffix sums within trajectories;
- `advantage`: `group_advantage`, the one GRPO advantage A^G;
- `closure`: the closure solve (I − βM)V = b for every group at once (dense per size class,
  sparse LU, bounded iteration), the empirical mean backup and successor values;
- `signals`: readers of the optional logged per-step signals, with their error messages.
"""

from __future__ import annotations

from .advantage import group_advantage
from .closure import graph_entries, mean_backup_values, solve_closure, successor_values
from .returns import discounted_returns, discounted_suffix_sums, group_steps, step_rewards, trajectory_outcome
from .segments import no_spread, roundoff_tol, segment_stats, segment_zscore
from .signals import float_signal, is_missing, require_columns, step_location

__all__ = [
    "group_advantage",
    "graph_entries",
    "mean_backup_values",
    "solve_closure",
    "successor_values",
    "discounted_returns",
    "discounted_suffix_sums",
    "step_rewards",
    "trajectory_outcome",
    "group_steps",
    "no_spread",
    "roundoff_tol",
    "segment_stats",
    "segment_zscore",
    "float_signal",
    "is_missing",
    "require_columns",
    "step_location",
]
