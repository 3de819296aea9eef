"""Write ``search_signals.jsonl``: a small, SYNTHETIC search-agent-style sample with every
optional signal of SCHEMA.md filled in, so that every estimator (TRACE, AgentOPSD, ABC,
TRCA, IAPO included) can run on it.

It is a hand-built illustration, not a real environment: each question has three clues;
an agent searches for clues (sometimes a malformed tool call), and answers; it succeeds
when it answers after finding at least two clues. The signals are simple deterministic
functions of that story plus seeded noise. Standard library only; bit-for-bit
reproducible:

    python sample_rollouts/search/make_search_sample.py [--seed 0] [--out PATH]
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

QUESTIONS = [
    (
        "q-river",
        "Which river flows through the city where the 1936 Olympics were held?",
        ["host city of 1936 Olympics", "Berlin", "Spree"],
        4,
    ),
    (
        "q-author",
        "Who wrote the novel adapted into the 1962 film with the mockingbird title?",
        ["1962 film title", "novel source", "Harper Lee"],
        6,
    ),
    (
        "q-element",
        "Which element has the atomic number equal to the number of US states?",
        ["number of US states", "atomic number 50", "tin"],
        8,
    ),
]
MAX_STEPS = 6
RUBRIC = [
    {"id": "E1", "category": "evidence"},
    {"id": "E2", "category": "evidence"},
    {"id": "E3", "category": "evidence"},
    {"id": "X1", "category": "execution"},
    {"id": "I1", "category": "invalidity"},
]


def rollout(rng: random.Random, clues: list[str]):
    """One rollout as a list of step dicts (before signals are attached)."""
    found: list[int] = []
    steps = []
    for t in range(MAX_STEPS):
        state = (
            "found: "
            + (", ".join(clues[k] for k in sorted(found)) or "nothing")
            + " | stage: "
            + ("answering" if len(found) >= 2 else "searching")
        )
        u = rng.random()
        if len(found) >= 2 and u < 0.6 or (t >= 3 and u < 0.35):
            steps.append({"state": state, "kind": "answer", "found": list(found)})
            return steps, True
        if u < 0.12:
            steps.append({"state": state, "kind": "error", "found": list(found)})
            continue
        k = min(range(3), key=lambda j: (j in found, j)) if rng.random() < 0.7 else rng.randrange(3)
        new = k not in found and rng.random() < 0.8
        steps.append({"state": state, "kind": "search", "clue": k, "new": new, "found": list(found)})
        if new:
            found.append(k)
    return steps, False  # truncated at MAX_STEPS: a failure


def rows_for(seed: int):
    rng = random.Random(seed)
    out = []
    for gid, question, clues, n in QUESTIONS:
        for r in range(n):
            steps, answered = rollout(rng, clues)
            success = answered and len(steps[-1]["found"]) >= 2
            edge_lists: list[list[dict]] = [[] for _ in steps]
            clue_step: dict[int, int] = {}
            for t, s in enumerate(steps):
                if s["kind"] == "search" and s["new"]:
                    clue_step[s["clue"]] = t
                if s["kind"] == "error" and t + 1 < len(steps):
                    edge_lists[t].append({"to": t + 1, "type": "failed"})
                if s["kind"] == "answer":
                    for src in sorted(clue_step.values()):
                        edge_lists[src].append({"to": t, "type": "support"})
                if s["kind"] == "search" and t + 1 < len(steps) and steps[t + 1]["kind"] == "search":
                    edge_lists[t].append({"to": t + 1, "type": "support"})
            for t, s in enumerate(steps):
                last = t == len(steps) - 1
                noise = rng.uniform(-0.05, 0.05)
                ell_t = min(-0.05, -3.0 + 0.9 * len(s["found"]) + noise)
                if s["kind"] == "answer":
                    action = "answer[" + (clues[2] if success else "unknown") + "]"
                    evidence = 1.2 if success else -1.0
                    judge = 1.0 + (1.0 if success else -1.0)
                    active = ["X1"] if success else []
                    resp = "I have enough evidence; answering."
                elif s["kind"] == "error":
                    action = "search[]"
                    evidence = -0.3
                    judge = 0.6
                    active = ["I1"]
                    resp = "<tool_call>search(</tool_call>"
                else:
                    action = f"search[{clues[s['clue']]}]"
                    evidence = 0.6 if s["new"] else -0.1
                    judge = 1.8 if s["new"] else 1.0
                    active = [f"E{s['clue'] + 1}"] if s["new"] or rng.random() < 0.5 else []
                    resp = f"Let me look up '{clues[s['clue']]}'."
                out.append(
                    {
                        "run_id": "search-synthetic",
                        "train_step": 0,
                        "group_id": gid,
                        "traj_id": f"r{r}",
                        "step_idx": t,
                        "anchor_obs": s["state"],
                        "observation": f"Question: {question}\n{s['state']}",
                        "action": action,
                        "response": resp,
                        "reward": 1.0 if (last and success) else 0.0,
                        "done": bool(last and answered),
                        "success": success,
                        "is_action_valid": s["kind"] != "error",
                        "env_name": "search (synthetic)",
                        "split": "train",
                        "gold_logprob": round(ell_t, 4),
                        "turn_evidence": round(evidence + rng.uniform(-0.05, 0.05), 4),
                        "judge_score": round(min(2.0, max(0.0, judge)), 2),
                        "rubric_active": active,
                        "rubric": RUBRIC if t == 0 else None,
                        "influence_edges": edge_lists[t],
                        "is_error": s["kind"] == "error",
                        "direct_inputs": 1 if t == 0 else 0,
                        "num_tokens": 40 + 10 * len(s["found"]) + rng.randrange(0, 30),
                    }
                )
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=str(Path(__file__).with_name("search_signals.jsonl")))
    args = ap.parse_args(argv)
    with open(args.out, "w", encoding="utf-8") as f:
        for row in rows_for(args.seed):
            if row["rubric"] is None:
                del row["rubric"]
            f.write(json.dumps(row, ensure_ascii=False, sort_keys=False) + "\n")


if __name__ == "__main__":
    main()
