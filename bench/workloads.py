"""Benchmark workloads: random-MDP batches (see `crbc_viz.synthetic`) and the bundled samples.

| name | groups × rollouts × max steps | generator settings |
| --- | --- | --- |
| a | 1 × 8 × 50 | num_states 40, p_fail 0.01 |
| b | 256 × 8 × 50 (~77k steps) | num_states 40, p_fail 0.01 |
| c | 4096 × 16 × 100 (~4.9M steps) | num_states 100, p_fail 0.01 |

Every task plants self-loops (p 0.15), back edges (p 0.15), stochastic transitions (p 0.15),
a dead-end trap state, failure exits and truncation at the step limit; seed 1.
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SYNTHETIC = {
    "a": dict(num_groups=1, rollouts=8, max_steps=50, num_states=40, p_fail=0.01),
    "b": dict(num_groups=256, rollouts=8, max_steps=50, num_states=40, p_fail=0.01),
    "c": dict(num_groups=4096, rollouts=16, max_steps=100, num_states=100, p_fail=0.01),
}
SAMPLES = {
    "sokoban": ROOT / "sample_rollouts" / "sokoban" / "sokoban.jsonl",
    "textworld": ROOT / "sample_rollouts" / "textworld" / "textworld_cooking.jsonl.gz",
}


def load(name: str):
    """The workload's `RolloutBatch`."""
    from crbc_viz import load_rollouts
    from crbc_viz.synthetic import random_mdp_batch

    if name in SYNTHETIC:
        return random_mdp_batch(seed=1, text=(name != "c"), **SYNTHETIC[name])
    return load_rollouts(SAMPLES[name])
