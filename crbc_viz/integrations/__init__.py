"""Advantage functions for trainers: verl, verl-agent, TRL, ROLL and rLLM.

One module per trainer (`verl_agent`, `verl`, `trl`, `roll`, `rllm`) gives the trainer's own
signature over `crbc_viz.api.score`, on the trainer's device. Importing this package (or any
of its modules, except where a module says so) imports no trainer: `trl.CreditGRPOTrainer`
imports TRL when it is first used, and the verl plugin imports verl only when verl loads it.
The shared step handling (de-duplication, ordering by an explicit step index, broadcast back
to every row and over the response mask) is in `crbc_viz.integrations._core`.
"""
from __future__ import annotations

__all__ = ["verl_agent", "verl", "trl", "roll", "rllm"]
