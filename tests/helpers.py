"""Shared test helpers (no fixtures with hidden state)."""

from __future__ import annotations

import json
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TOY = ROOT / "sample_rollouts" / "toy" / "toy_group.jsonl"


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def toy_pairs(graph) -> dict[tuple[str, str], int]:
    """(anchor name, action) -> pair index, for the toy group."""
    return {
        (str(graph.node_anchor_obs[graph.pair_node[p]]), str(graph.action_names[graph.pair_action[p]])): p
        for p in range(len(graph.pair_node))
    }


def toy_nodes(graph) -> dict[str, int]:
    return {str(graph.node_anchor_obs[n]): n for n in range(graph.num_nodes)}
