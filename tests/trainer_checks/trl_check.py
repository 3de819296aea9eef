"""Run inside .venv-trainers: one real TRL ``GRPOTrainer`` optimisation step (CPU, a tiny
randomly initialised Llama and a tokenizer built here; no download) with CRBC advantages from
``crbc_viz.integrations.trl.CreditGRPOTrainer``.

The environment is a corridor walk: every generated token is one step — an even token id moves
right, an odd one left — from position 0; a completion succeeds when it ends at position >= 2.
Anchors are the positions, so the completions of a prompt share states. This script writes the
rollouts it saw as canonical rows (from the walk, not from the adapter) to ``--out``/rows_<rank>
and, in result_<rank>.json, the advantages the trainer used (per completion and step) and how far
the parameters moved. Under ``accelerate launch --num_processes 2`` with ``--per-device 6`` a
group of 4 completions straddles the two processes, so local-only statistics would be wrong.
"""

from __future__ import annotations

import argparse
import json
import os


def walk(ids):
    pos, anchors, actions = 0, [], []
    for t in ids:
        anchors.append(f"pos={pos}")
        actions.append("R" if t % 2 == 0 else "L")
        pos += 1 if t % 2 == 0 else -1
    return anchors, actions, pos >= 2


def reward_reach(prompts, completions, completion_ids, **kw):
    return [1.0 if walk(ids)[2] else 0.0 for ids in completion_ids]


def credit_steps(inputs, prompts, completions, completion_ids):
    out = []
    for ids in completion_ids:
        anchors, actions, _ = walk(ids)
        out.append({"anchors": anchors, "actions": actions, "starts": list(range(len(ids)))})
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True, help="folder: rows_<rank>.jsonl and result_<rank>.json")
    ap.add_argument("--per-device", type=int, default=16)
    a = ap.parse_args()
    import torch
    from datasets import Dataset
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast
    from trl import GRPOConfig

    from crbc_viz.integrations.trl import CreditGRPOTrainer

    torch.manual_seed(0)
    prompts = ["walk a", "walk b", "walk c", "walk d"]
    tk = Tokenizer(models.BPE())
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tk.decoder = decoders.ByteLevel()
    tk.train_from_iterator(
        prompts + ["left right up down"],
        trainers.BpeTrainer(
            vocab_size=280,
            special_tokens=["<pad>", "<eos>"],
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        ),
    )
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, pad_token="<pad>", eos_token="<eos>")
    cfg = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=64,
        pad_token_id=tok.pad_token_id,
        eos_token_id=tok.eos_token_id,
        bos_token_id=None,
    )
    model = LlamaForCausalLM(cfg)
    before = {k: v.detach().clone() for k, v in model.named_parameters()}
    seen = {}

    class Recording(CreditGRPOTrainer):
        def _calculate_rewards(self, inputs, prompts_, completions, completion_ids_list):
            seen["ids"] = [list(map(int, ids)) for ids in completion_ids_list]
            return super()._calculate_rewards(inputs, prompts_, completions, completion_ids_list)

        def _generate_and_score_completions(self, inputs):
            out = super()._generate_and_score_completions(inputs)
            seen["advantages"] = out["advantages"].detach().clone()
            seen["mask"] = out["completion_mask"].detach().clone()
            return out

    conf = GRPOConfig(
        output_dir=os.path.join(a.out, "trl_out"),
        per_device_train_batch_size=a.per_device,
        num_generations=4,
        max_completion_length=8,
        max_steps=1,
        logging_steps=1,
        report_to=[],
        save_strategy="no",
        use_cpu=True,
        bf16=False,
        learning_rate=1e-2,
        seed=0,
        temperature=1.0,
        beta=0.0,
    )
    trainer = Recording(
        model=model,
        reward_funcs=[reward_reach],
        args=conf,
        train_dataset=Dataset.from_dict({"prompt": prompts * 4}),
        processing_class=tok,
        credit_estimator="crbc",
        credit_params={"beta": 0.95},
        credit_steps=credit_steps,
    )
    trainer.train()
    moved = max(float((p.detach() - before[k]).abs().max()) for k, p in model.named_parameters())

    adv, mask, ids = seen["advantages"], seen["mask"], seen["ids"]
    G = 4
    rank = trainer.accelerator.process_index
    rows, used = [], []
    for li, c in enumerate(ids):  # local completion li is global completion rank * n + li
        i = rank * len(ids) + li
        anchors, actions, ok = walk(c)
        for k, (s, act) in enumerate(zip(anchors, actions)):
            rows.append(
                {
                    "group_id": f"g{i // G}",
                    "traj_id": f"c{i}",
                    "step_idx": k,
                    "anchor_obs": s,
                    "action": act,
                    "reward": (1.0 if ok else 0.0) if k == len(c) - 1 else 0.0,
                    "success": ok,
                }
            )
            assert mask[li, k] == 1
            used.append([f"g{i // G}", f"c{i}", k, float(adv[li, k])])
        assert torch.all(adv[li][mask[li] == 0] == 0)
    with open(os.path.join(a.out, f"rows_{rank}.jsonl"), "w", encoding="utf-8") as f:
        f.write("".join(json.dumps(r) + "\n" for r in rows))
    with open(os.path.join(a.out, f"result_{rank}.json"), "w", encoding="utf-8") as f:
        json.dump(
            {
                "moved": moved,
                "shape": list(adv.shape),
                "steps": used,
                "processes": trainer.accelerator.num_processes,
                "successes": sum(walk(c)[2] for c in ids),
                "completions": len(ids),
            },
            f,
        )
    print(json.dumps({"rank": rank, "moved": moved}))
    # Close gloo before the interpreter exits: a process group left to interpreter teardown can
    # destroy a joinable worker thread ("terminate called without an active exception", SIGABRT).
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    main()
