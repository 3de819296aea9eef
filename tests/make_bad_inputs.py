"""Write the hostile-input corpus ``tests/bad_inputs/`` and its ``MANIFEST.json``.

Run ``python tests/make_bad_inputs.py`` after changing a case; the files are small and committed.
Each manifest entry maps a file name to the substring its error must contain, or ``"accept"``
when the file is valid data (possibly with warnings). Big cases (a 50 MB line, very many tiny
groups) are generated at test time by ``tests/test_hostile.py`` instead.
"""
from __future__ import annotations

import gzip
import io
import json
from pathlib import Path

import pandas as pd

OUT = Path(__file__).resolve().parent / "bad_inputs"
PAYLOAD = "<img src=x onerror=alert(1)></script><script>alert(2)</script>"


def base_rows() -> list[dict]:
    """Two rollouts of one group sharing anchor s0: r0 succeeds, r1 fails."""
    rows = []
    for traj, ok in (("r0", True), ("r1", False)):
        for i in range(2):
            rows.append({"run_id": "bad", "train_step": 0, "group_id": "g", "traj_id": traj,
                         "step_idx": i, "anchor_obs": f"s{i}" if i == 0 else f"s{i}-{traj}",
                         "action": "left" if traj == "r0" else "right", "reward": float(ok and i == 1),
                         "done": i == 1, "success": ok})
    return rows


def jsonl(rows: list[dict]) -> bytes:
    return "".join(json.dumps(r) + "\n" for r in rows).encode()


def edit(i: int, **kv) -> bytes:
    rows = base_rows()
    rows[i].update(kv)
    return jsonl(rows)


def drop(i: int, key: str) -> bytes:
    rows = base_rows()
    del rows[i][key]
    return jsonl(rows)


def raw_edit(i: int, old: str, new: str) -> bytes:
    lines = jsonl(base_rows()).decode().splitlines(keepends=True)
    assert old in lines[i], (old, lines[i])
    lines[i] = lines[i].replace(old, new, 1)
    return "".join(lines).encode()


def cases() -> dict[str, tuple[bytes, str]]:
    ok = jsonl(base_rows())
    gz = gzip.compress(ok, mtime=0)
    parquet = io.BytesIO()
    pd.DataFrame(base_rows()).to_parquet(parquet)
    pq = parquet.getvalue()
    csv = pd.DataFrame(base_rows()).to_csv(index=False).encode()
    trajs = []
    for t in ("r0", "r1"):
        steps = [{k: v for k, v in r.items() if k not in ("group_id", "traj_id")}
                 for r in base_rows() if r["traj_id"] == t]
        trajs.append({"group_id": "g", "traj_id": t, "steps": steps})
    c: dict[str, tuple[bytes, str]] = {
        # -- whole-file problems
        "empty.jsonl": (b"", "no step rows"),
        "blank_lines.jsonl": (b"\n   \n\t\n", "no step rows"),
        "binary_garbage.jsonl": (bytes(range(256)) * 4, "binary file"),
        "latin1.jsonl": (ok.replace(b'"left"', b'"l\xe9ft"'), "not UTF-8"),
        "not_gzip.jsonl.gz": (ok, "not gzip"),
        "truncated.jsonl.gz": (gz[: len(gz) // 2], "gzip stream is truncated"),
        "corrupt.jsonl.gz": (gz[:12] + b"\xff" * 40 + gz[52:], "gzip data is corrupt"),
        "gzip_of_binary.jsonl.gz": (gzip.compress(b"\xff\xfe\xfa" * 50, mtime=0), "not UTF-8"),
        "unknown_suffix.txt": (ok, "unknown file type"),
        "garbage.parquet": (b"PAR1" + b"\x00garbage" * 10, "cannot read Parquet"),
        "not_parquet.parquet": (ok, "not a Parquet file"),
        "truncated.parquet": (pq[: len(pq) // 2], "cannot read Parquet"),
        "not_array.json": (b'{"a": 1}', "'steps' array"),
        "truncated.json": (json.dumps(base_rows()).encode()[:-30], "invalid JSON"),
        "scalar_items.json": (b"[1, 2, 3]", "expected a JSON object"),
        "deep_nesting.json": (b"[" * 5000 + b"]" * 5000, "nesting too deep"),
        "ragged.csv": (csv + b'a,"unterminated\n', "cannot parse CSV"),
        "missing_column.csv": (pd.DataFrame(base_rows()).drop(columns="reward").to_csv(
            index=False).encode(), "missing required field in every row"),
        "bad_reward.csv": (csv.replace(b",0.0,", b",zero,", 1), "expected a number"),
        # -- line-level parse problems
        "truncated_line.jsonl": (ok[:-25], "invalid JSON"),
        "invalid_json.jsonl": (ok + b"{not json}\n", "invalid JSON"),
        "array_line.jsonl": (ok + b"[1, 2]\n", "expected a JSON object, got array"),
        "scalar_line.jsonl": (ok + b"42\n", "expected a JSON object, got number"),
        "null_line.jsonl": (ok + b"null\n", "expected a JSON object, got null"),
        "raw_nul_in_line.jsonl": (ok.replace(b'"left"', b'"le\x00ft"', 1), "invalid JSON"),
        "deep_nesting.jsonl": (b'{"x": ' + b"[" * 3000 + b"]" * 3000 + b"}\n", "nesting too deep"),
        "deep_anchor.jsonl": (edit(0, anchor_obs=json.loads("[" * 150 + "]" * 150)),
                              "nested deeper than 100"),
        "huge_integer.jsonl": (raw_edit(0, '"reward": 0.0', '"reward": ' + "9" * 5000),
                               "4300 digits"),
        "steps_not_list.jsonl": (jsonl([{"group_id": "g", "traj_id": "t", "steps": 3}]),
                                 "expected a list of step objects"),
        "steps_item_not_object.jsonl": (jsonl([{"group_id": "g", "traj_id": "t", "steps": [1]}]),
                                        "expected a JSON object"),
        # -- wrong types and missing fields
        "missing_reward.jsonl": (drop(1, "reward"), "missing required field"),
        "missing_traj_column.jsonl": (jsonl([{k: v for k, v in r.items() if k != "traj_id"}
                                             for r in base_rows()]), "missing required field in every row"),
        "null_group_id.jsonl": (edit(2, group_id=None), "missing required field"),
        "reward_string.jsonl": (edit(0, reward="1.0"), "expected a number"),
        "reward_bool.jsonl": (edit(0, reward=True), "expected a number, got bool"),
        "reward_nan.jsonl": (raw_edit(0, '"reward": 0.0', '"reward": NaN'), "got NaN"),
        "reward_inf.jsonl": (raw_edit(0, '"reward": 0.0', '"reward": Infinity'), "got Infinity"),
        "reward_neg_inf.jsonl": (raw_edit(0, '"reward": 0.0', '"reward": -Infinity'), "got -Infinity"),
        "reward_overflow.jsonl": (raw_edit(0, '"reward": 0.0', '"reward": 1e400'), "finite number"),
        "reward_huge.jsonl": (edit(0, reward=1e300), "exceeds"),
        "episode_return_nan.jsonl": (raw_edit(1, '"reward": 1.0', '"reward": 1.0, "episode_return": NaN'),
                                     "got NaN"),
        "done_nan.jsonl": (raw_edit(1, '"done": true', '"done": NaN'), "expected true/false, got NaN"),
        "step_idx_float.jsonl": (edit(1, step_idx=1.5), "expected an integer"),
        "step_idx_string.jsonl": (edit(1, step_idx="1"), "expected an integer"),
        "step_idx_negative.jsonl": (edit(0, step_idx=-1), ">= 0"),
        "step_idx_huge.jsonl": (edit(1, step_idx=2**70), "out of range"),
        "step_idx_duplicate.jsonl": (edit(1, step_idx=0), "duplicate step_idx"),
        "step_idx_gap.jsonl": (edit(1, step_idx=2), "not contiguous"),
        "step_idx_missing_zero.jsonl": (jsonl([dict(r, step_idx=r["step_idx"] + 1)
                                               for r in base_rows()]), "not contiguous"),
        "group_id_object.jsonl": (edit(0, group_id={"a": 1}), "expected a string id"),
        "traj_id_list.jsonl": (edit(0, traj_id=["r0"]), "expected a string id"),
        "done_maybe.jsonl": (edit(1, done="maybe"), "expected true/false"),
        "success_yes.jsonl": (edit(1, success="yes"), "expected true/false"),
        "action_number.jsonl": (edit(0, action=3), "expected a string"),
        "anchor_number.jsonl": (edit(0, anchor_obs=3.5), "expected a string, array or object"),
        "train_step_text.jsonl": (edit(0, train_step="abc"), "expected an integer"),
        "long_bad_id.jsonl": (edit(1, group_id=["x" * 5000]), "expected a string id"),
        # -- valid but unusual: accepted
        "ok.jsonl": (ok, "accept"),
        "ok.jsonl.gz": (gz, "accept"),
        "ok.csv": (csv, "accept"),
        "ok.parquet": (pq, "accept"),
        "trajectory_rows.jsonl": (jsonl(trajs), "accept"),
        "bom.jsonl": (b"\xef\xbb\xbf" + ok, "accept"),
        "crlf.jsonl": (ok.replace(b"\n", b"\r\n"), "accept"),
        "nul_escape.jsonl": (edit(0, anchor_obs="s\u00000", action="le\u0000ft"), "accept"),
        "rtl_marks.jsonl": (jsonl([dict(r, action="\u202eright\u200f", observation="\u2067abc\u2069")
                                   for r in base_rows()]), "accept"),
        "lone_surrogates.jsonl": (raw_edit(0, '"action": "left"', '"action": "le\\ud800ft", '
                                           '"observation": "\\udfff", "x\\udc00": 1'), "accept"),
        "emoji_pairs.jsonl": (raw_edit(0, '"action": "left"', '"action": "\\ud83d\\ude00"'), "accept"),
        "markup_everywhere.jsonl": (jsonl([dict(r, action=PAYLOAD + r["action"], observation=PAYLOAD,
                                                response=PAYLOAD, anchor_obs=PAYLOAD + r["anchor_obs"],
                                                group_id=PAYLOAD) for r in base_rows()]), "accept"),
        "traj_split_across_groups.jsonl": (jsonl(base_rows() + [dict(r, group_id="g2")
                                                                for r in base_rows()]), "accept"),
        "integer_ids.jsonl": (jsonl([dict(r, group_id=7, traj_id=i // 2) for i, r in
                                     enumerate(base_rows())]), "accept"),
        "extra_fields.jsonl": (jsonl([dict(r, _line="kept", my_field={"nested": [1, {"a": None}]})
                                      for r in base_rows()]), "accept"),
        "array_anchor.jsonl": (jsonl([dict(r, anchor_obs=[[0, 1], [r["step_idx"], 2]])
                                      for r in base_rows()]), "accept"),
        "object_anchor.jsonl": (jsonl([dict(r, anchor_obs={"room": r["step_idx"], "inv": []})
                                       for r in base_rows()]), "accept"),
        "long_anchor.jsonl": (jsonl([dict(r, anchor_obs="room " * 3000 + str(r["step_idx"]))
                                     for r in base_rows()]), "accept"),
        "missing_optional.jsonl": (jsonl([{k: r[k] for k in ("group_id", "traj_id", "step_idx", "reward")}
                                          for r in base_rows()]), "accept"),
        "single_step.jsonl": (jsonl([dict(base_rows()[0], done=True)]), "accept"),
        "self_loops.jsonl": (jsonl([dict(r, anchor_obs="same") for r in base_rows()]), "accept"),
        "truncated_episode.jsonl": (edit(1, done=False), "accept"),
        "shuffled_rows.jsonl": (jsonl(base_rows()[::-1]), "accept"),
    }
    return c


def main() -> None:
    OUT.mkdir(exist_ok=True)
    manifest = {}
    for name, (data, expect) in sorted(cases().items()):
        (OUT / name).write_bytes(data)
        manifest[name] = expect
    (OUT / "MANIFEST.json").write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    total = sum(len(d) for d, _ in cases().values())
    print(f"wrote {len(manifest)} files ({total / 1024:.0f} KiB) to {OUT}")


if __name__ == "__main__":
    main()
