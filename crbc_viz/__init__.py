"""crbc-viz: step-level credit assignment over merged rollout groups.

>>> from crbc_viz import load_rollouts, score
>>> r = score(load_rollouts("sample_rollouts/toy/toy_group.jsonl"), "crbc", backend="numpy")
>>> round(float(r.advantage[0]), 4)
1.2155
"""
from .api import score
from .data import RolloutBatch
from .graph import AnchorGraph, build_graph
from .io import LoadError, load_rollouts
from .result import CreditResult

__all__ = ["load_rollouts", "score", "build_graph", "RolloutBatch", "AnchorGraph", "CreditResult",
           "LoadError"]
__version__ = "0.1.0"
