"""Advantage functions for trainers: verl, verl-agent, TRL, ROLL and rLLM.

One module per trainer (`verl_agent`, `verl`, `trl`, `roll`, `rllm`) gives the trainer's own
signature over `crbc_viz.api.score`, on the trainer's device. Importing this package or any
of its modules imports no trainer: `trl.CreditGRPOTrainer` imports TRL when it is first looked
up, `rllm.register` imports rLLM when called, and `verl_plugin` (the ``verl.plugins`` entry
point) imports verl — it is verl that loads it, from ``import verl``.
The shared step handling (de-duplication, ordering by an explicit step index, broadcast back
to every row and over the response mask) is in `crbc_viz.integrations._core`.

Credit on a dashboard while training: `wandb.log_groups` and `tensorboard.log_groups` log a
source's graph, per-step credit and statistics to a W&B run or a TensorBoard writer;
`log_every(N, logger)` has every adapter hand the batch it scored to such a logger on every
N-th call (`cadence`). Those two modules sit above `crbc_viz.views` (the graph's HTML); no
adapter imports them.
"""

from __future__ import annotations

from .cadence import log_every

__all__ = ["verl_agent", "verl", "verl_plugin", "trl", "roll", "rllm", "wandb", "tensorboard", "log_every"]
