"""What every trainer adapter shares: trainer rows -> canonical steps -> credit -> rows.

A trainer hands over one row per environment step (verl-agent, ROLL, rLLM's step-wise path) or
one row per trajectory that the adapter first cuts into steps (verl, TRL). Rows may be
duplicated (verl-agent's ``adjust_batch``, ROLL's ``batch_adjust_mode="copy"``) and shuffled
(``_balance_batch``). Here:

1. rows become canonical steps (SCHEMA.md fields ``group_id``, ``traj_id``, ``step_idx``,
   ``reward``, ``anchor_key``, ``action``, ``success``): statistics are computed on the unique
   (trajectory, step) rows — exact copies are dropped, copies that differ raise, naming both
   rows; steps are ordered by the explicit step index (none, or gaps: refused);
2. the unique steps are assembled from the arrays the trainer already holds: ids, anchors and
   actions are factorised once (a hash table per column, ``pandas.factorize``: the only pandas
   on this path), each distinct anchor is hashed once (`crbc_viz.io.anchors.anchor_hash64`, as
   the loader hashes it), the rows are placed in batch order by counting
   (`crbc_viz.io.assemble.place_steps`) and the batch keeps its step columns as Arrow
   (`crbc_viz.io.assemble.assemble_arrow`: no frame unless someone reads ``batch.steps``).
   The checks are the loader's (`crbc_viz.io.assemble.build_batch`) on the same rows (step
   indices contiguous from 0, rewards finite and at most `MAX_ABS_REWARD`), so the credit is
   what ``crbc-viz score`` gives those rows written to a file;
3. the estimator runs through `crbc_viz.api.score`: on the CPU the compiled numba engine where
   the estimator has one; on a device (`_on_device`: a CUDA device) its torch backend there
   (the numpy reference where it has none), where the kernel table picks the row (``crbc`` at
   exact depth: the fused device path);
4. each unique step's advantage goes back to every row that carried it.

The host-side passes of steps 2 and 4 (factorising string columns of few distinct values, the
passes over ``[B, L]`` token masks) run in chunks of rows on the kernel's threads
(`crbc_viz.integrations._threads`), with the one-thread result bit for bit.

The work is split by responsibility: `crbc_viz.integrations._rows` (steps 1-2),
`crbc_viz.integrations._scoring` (step 3) and `crbc_viz.integrations._tokens` (token rows, step
4); every name stays importable from here.
"""

from __future__ import annotations

from ..io.actions import transition_actions
from ._rows import (
    ROW_REWARD,
    CodedRows,
    IntegrationInputError,
    Steps,
    _action_codes,
    _anchor_codes,
    _assemble,
    _id_codes,
    _pair_codes,
    anchor_hashes,
    anchor_rule_scope,
    as_anchor_rule,
    canonical_steps,
    row_flags,
    row_numbers,
    with_anchor_rule,
)
from ._scoring import (
    _on_device,
    any_per_trajectory,
    as_device,
    check_steps,
    resolve_params,
    score_steps,
)
from ._tokens import (
    Turns,
    _begin,
    broadcast,
    masked,
    masked_row_sum,
    rows_as_steps,
    token_steps,
    token_tensors,
    trajectory_credit,
)

__all__ = [
    "Steps",
    "IntegrationInputError",
    "canonical_steps",
    "score_steps",
    "check_steps",
    "as_device",
    "ROW_REWARD",
    "transition_actions",
    "token_steps",
    "trajectory_credit",
    "rows_as_steps",
    "Turns",
    "masked",
    "masked_row_sum",
    "broadcast",
    "token_tensors",
    "any_per_trajectory",
    "row_flags",
    "row_numbers",
    "with_anchor_rule",
    "anchor_rule_scope",
    "as_anchor_rule",
    # Private helpers the adapters and tests import from here.
    "CodedRows",
    "_action_codes",
    "_anchor_codes",
    "_assemble",
    "_begin",
    "_id_codes",
    "_on_device",
    "_pair_codes",
    "anchor_hashes",
    "resolve_params",
]
