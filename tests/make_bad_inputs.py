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
            rows.append(
                {
                    "run_id": "bad",
                    "train_step": 0,
                    "group_id": "g",
                    "traj_id": traj,
                    "step_idx": i,
                    "anchor_obs": f"s{i}" if i == 0 else f"s{i}-{traj}",
                    "action": "left" if traj == "r0" else "right",
                    "reward": float(ok and i == 1),
                    "done": i == 1,
                    "success": ok,
                }
            )
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


def ok_jsonl() -> bytes:
    return jsonl(base_rows())


def ok_gzip() -> bytes:
    return gzip.compress(ok_jsonl(), mtime=0)


def ok_parquet() -> bytes:
    buf = io.BytesIO()
    pd.DataFrame(base_rows()).to_parquet(buf)
    return buf.getvalue()


def ok_csv() -> bytes:
    return pd.DataFrame(base_rows()).to_csv(index=False).encode()


def file_cases() -> dict[str, tuple[bytes, str]]:
    """Whole-file problems."""
    ok, gz, pq, csv = ok_jsonl(), ok_gzip(), ok_parquet(), ok_csv()
    return {
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
        "missing_column.csv": (
            pd.DataFrame(base_rows()).drop(columns="reward").to_csv(index=False).encode(),
            "missing required field in every row",
        ),
        "bad_reward.csv": (csv.replace(b",0.0,", b",zero,", 1), "expected a number"),
    }


def line_cases() -> dict[str, tuple[bytes, str]]:
    """Line-level parse problems."""
    ok = ok_jsonl()
    return {
        "truncated_line.jsonl": (ok[:-25], "invalid JSON"),
        "invalid_json.jsonl": (ok + b"{not json}\n", "invalid JSON"),
        "array_line.jsonl": (ok + b"[1, 2]\n", "expected a JSON object, got array"),
        "scalar_line.jsonl": (ok + b"42\n", "expected a JSON object, got number"),
        "null_line.jsonl": (ok + b"null\n", "expected a JSON object, got null"),
        "raw_nul_in_line.jsonl": (ok.replace(b'"left"', b'"le\x00ft"', 1), "invalid JSON"),
        "deep_nesting.jsonl": (b'{"x": ' + b"[" * 3000 + b"]" * 3000 + b"}\n", "nesting too deep"),
        "deep_anchor.jsonl": (
            edit(0, anchor_obs=json.loads("[" * 150 + "]" * 150)),
            "nested deeper than 100",
        ),
        "huge_integer.jsonl": (raw_edit(0, '"reward": 0.0', '"reward": ' + "9" * 5000), "4300 digits"),
        "steps_not_list.jsonl": (
            jsonl([{"group_id": "g", "traj_id": "t", "steps": 3}]),
            "expected a list of step objects",
        ),
        "steps_item_not_object.jsonl": (
            jsonl([{"group_id": "g", "traj_id": "t", "steps": [1]}]),
            "expected a JSON object",
        ),
    }


def field_cases() -> dict[str, tuple[bytes, str]]:
    """Wrong types and missing fields."""
    return {
        "missing_reward.jsonl": (drop(1, "reward"), "missing required field"),
        "missing_traj_column.jsonl": (
            jsonl([{k: v for k, v in r.items() if k != "traj_id"} for r in base_rows()]),
            "missing required field in every row",
        ),
        "null_group_id.jsonl": (edit(2, group_id=None), "missing required field"),
        "reward_string.jsonl": (edit(0, reward="1.0"), "expected a number"),
        "reward_bool.jsonl": (edit(0, reward=True), "expected a number, got bool"),
        "reward_nan.jsonl": (raw_edit(0, '"reward": 0.0', '"reward": NaN'), "got NaN"),
        "reward_inf.jsonl": (raw_edit(0, '"reward": 0.0', '"reward": Infinity'), "got Infinity"),
        "reward_neg_inf.jsonl": (raw_edit(0, '"reward": 0.0', '"reward": -Infinity'), "got -Infinity"),
        "reward_overflow.jsonl": (raw_edit(0, '"reward": 0.0', '"reward": 1e400'), "finite number"),
        "reward_huge.jsonl": (edit(0, reward=1e300), "exceeds"),
        "episode_return_nan.jsonl": (
            raw_edit(1, '"reward": 1.0', '"reward": 1.0, "episode_return": NaN'),
            "got NaN",
        ),
        "done_nan.jsonl": (raw_edit(1, '"done": true', '"done": NaN'), "expected true/false, got NaN"),
        "step_idx_float.jsonl": (edit(1, step_idx=1.5), "expected an integer"),
        "step_idx_string.jsonl": (edit(1, step_idx="1"), "expected an integer"),
        "step_idx_negative.jsonl": (edit(0, step_idx=-1), ">= 0"),
        "step_idx_huge.jsonl": (edit(1, step_idx=2**70), "out of range"),
        "step_idx_duplicate.jsonl": (edit(1, step_idx=0), "duplicate step_idx"),
        "step_idx_gap.jsonl": (edit(1, step_idx=2), "not contiguous"),
        "step_idx_missing_zero.jsonl": (
            jsonl([dict(r, step_idx=r["step_idx"] + 1) for r in base_rows()]),
            "not contiguous",
        ),
        "group_id_object.jsonl": (edit(0, group_id={"a": 1}), "expected a string id"),
        "traj_id_list.jsonl": (edit(0, traj_id=["r0"]), "expected a string id"),
        "done_maybe.jsonl": (edit(1, done="maybe"), "expected true/false"),
        "success_yes.jsonl": (edit(1, success="yes"), "expected true/false"),
        "action_number.jsonl": (edit(0, action=3), "expected a string"),
        "anchor_number.jsonl": (edit(0, anchor_obs=3.5), "expected a string, array or object"),
        "train_step_text.jsonl": (edit(0, train_step="abc"), "expected an integer"),
        "long_bad_id.jsonl": (edit(1, group_id=["x" * 5000]), "expected a string id"),
    }


def accepted_cases() -> dict[str, tuple[bytes, str]]:
    """Valid but unusual: accepted."""
    ok = ok_jsonl()
    trajs = []
    for t in ("r0", "r1"):
        steps = [
            {k: v for k, v in r.items() if k not in ("group_id", "traj_id")}
            for r in base_rows()
            if r["traj_id"] == t
        ]
        trajs.append({"group_id": "g", "traj_id": t, "steps": steps})
    return {
        "ok.jsonl": (ok, "accept"),
        "ok.jsonl.gz": (ok_gzip(), "accept"),
        "ok.csv": (ok_csv(), "accept"),
        "ok.parquet": (ok_parquet(), "accept"),
        "trajectory_rows.jsonl": (jsonl(trajs), "accept"),
        "bom.jsonl": (b"\xef\xbb\xbf" + ok, "accept"),
        "crlf.jsonl": (ok.replace(b"\n", b"\r\n"), "accept"),
        "nul_escape.jsonl": (edit(0, anchor_obs="s\u00000", action="le\u0000ft"), "accept"),
        "rtl_marks.jsonl": (
            jsonl([dict(r, action="\u202eright\u200f", observation="\u2067abc\u2069") for r in base_rows()]),
            "accept",
        ),
        "lone_surrogates.jsonl": (
            raw_edit(
                0, '"action": "left"', '"action": "le\\ud800ft", "observation": "\\udfff", "x\\udc00": 1'
            ),
            "accept",
        ),
        "emoji_pairs.jsonl": (raw_edit(0, '"action": "left"', '"action": "\\ud83d\\ude00"'), "accept"),
        "markup_everywhere.jsonl": (
            jsonl(
                [
                    dict(
                        r,
                        action=PAYLOAD + r["action"],
                        observation=PAYLOAD,
                        response=PAYLOAD,
                        anchor_obs=PAYLOAD + r["anchor_obs"],
                        group_id=PAYLOAD,
                    )
                    for r in base_rows()
                ]
            ),
            "accept",
        ),
        "traj_split_across_groups.jsonl": (
            jsonl(base_rows() + [dict(r, group_id="g2") for r in base_rows()]),
            "accept",
        ),
        "integer_ids.jsonl": (
            jsonl([dict(r, group_id=7, traj_id=i // 2) for i, r in enumerate(base_rows())]),
            "accept",
        ),
        "extra_fields.jsonl": (
            jsonl([dict(r, _line="kept", my_field={"nested": [1, {"a": None}]}) for r in base_rows()]),
            "accept",
        ),
        "array_anchor.jsonl": (
            jsonl([dict(r, anchor_obs=[[0, 1], [r["step_idx"], 2]]) for r in base_rows()]),
            "accept",
        ),
        "object_anchor.jsonl": (
            jsonl([dict(r, anchor_obs={"room": r["step_idx"], "inv": []}) for r in base_rows()]),
            "accept",
        ),
        "long_anchor.jsonl": (
            jsonl([dict(r, anchor_obs="room " * 3000 + str(r["step_idx"])) for r in base_rows()]),
            "accept",
        ),
        "missing_optional.jsonl": (
            jsonl([{k: r[k] for k in ("group_id", "traj_id", "step_idx", "reward")} for r in base_rows()]),
            "accept",
        ),
        "single_step.jsonl": (jsonl([dict(base_rows()[0], done=True)]), "accept"),
        "self_loops.jsonl": (jsonl([dict(r, anchor_obs="same") for r in base_rows()]), "accept"),
        "truncated_episode.jsonl": (edit(1, done=False), "accept"),
        "shuffled_rows.jsonl": (jsonl(base_rows()[::-1]), "accept"),
    }


def cases() -> dict[str, tuple[bytes, str]]:
    """Every committed case: file name -> (bytes, expected message or ``"accept"``)."""
    c: dict[str, tuple[bytes, str]] = {}
    for part in (file_cases(), line_cases(), field_cases(), accepted_cases(), hostile_cases()):
        assert not c.keys() & part.keys(), sorted(c.keys() & part.keys())
        c.update(part)
    return c


SQL_FIELDS = (
    'a"b',
    'x"; COPY (SELECT 42) TO \'/tmp/crbc-sql-pwned.csv\'; --',
    "'); DROP TABLE steps; --",
    "read_text('/etc/passwd')",
)
MARKDOWN = (
    "[click](http://evil.invalid/x)",
    "![img](http://evil.invalid/a.png)",
    "**bold** :red[red] <b>b</b> http://evil.invalid www.evil.invalid",
)
FORMULAS = ('=HYPERLINK("http://evil.invalid","open")', "+1+1", "@SUM(1)", "-2+3", "\t=1", "\r=1")
TERMINAL = ("\x1b]0;pwned\x07", "\x1b[2J\x1b[H", "\x9b31m", "\x1b[31mred\x1b[0m")


def hostile_cases() -> dict[str, tuple[bytes, str]]:
    """Hostile input: at least one case per attack below. Files are small;
    what they expand to (rows, fields, problems) is what the limits count."""
    rows = base_rows()
    parquet = io.BytesIO()
    pd.DataFrame(rows).to_parquet(parquet)
    n = 2_000_001  # one past the default row limit, constant columns: ~30 KB of Parquet
    big = io.BytesIO()
    pd.DataFrame(
        {"group_id": ["g"] * n, "traj_id": ["t"] * n, "step_idx": [0] * n, "reward": [0.0] * n}
    ).to_parquet(big, row_group_size=n, compression="zstd")
    many_keys = [dict(rows[0], **{f"k{i}": 1 for i in range(1001)})] + rows[1:]
    colliding = []
    for run, step, gid in (("a/0", 1, "x"), ("a", 0, "1/x"), ("a", 0, "1/x #2")):
        colliding += [dict(r, run_id=run, train_step=step, group_id=gid) for r in rows]
    return {
        # item 1: field names that are SQL (the store pastes none of them into a statement)
        "sql_field_names.jsonl": (
            jsonl([dict(r, **{f: f"v{i}" for i, f in enumerate(SQL_FIELDS)}) for r in rows]),
            "accept",
        ),
        # item 2: what a small file expands to
        "many_fields.jsonl": (jsonl(many_keys), "more than the limit of 1,000 distinct field names"),
        "many_fields.jsonl.gz": (
            gzip.compress(jsonl(many_keys), mtime=0),
            "more than the limit of 1,000 distinct field names",
        ),
        "garbage_lines.jsonl": (b"x\n" * 10_001, "more than 10,000 problems"),
        "many_rows.parquet": (big.getvalue(), "more than the limit of 2,000,000 rows"),
        # item 4: scored onto itself by the test (score LOG -o LOG is refused)
        "output_is_input.jsonl": (jsonl(rows), "accept"),
        # item 5: markdown in ids and values (rendered as text in the app)
        "markdown_ids.jsonl": (
            jsonl(
                [
                    dict(
                        r,
                        group_id=MARKDOWN[0],
                        traj_id=MARKDOWN[1] + r["traj_id"],
                        action=MARKDOWN[2] + r["action"],
                    )
                    for r in rows
                ]
            ),
            "accept",
        ),
        # item 6: ids that look like paths (partition folders and cache names stay in the store)
        "traversal_ids.jsonl": (
            jsonl([dict(r, run_id="../../../../tmp/crbc-escape", group_id="../../g") for r in rows]),
            "accept",
        ),
        # item 7: cells a spreadsheet would run as formulas (escaped in CSV outputs)
        "formula_cells.jsonl": (
            jsonl(
                [
                    dict(
                        r,
                        group_id=FORMULAS[0],
                        action=FORMULAS[i] + r["action"],
                        traj_id=FORMULAS[4 + (r["traj_id"] == "r1")] + r["traj_id"],
                    )
                    for i, r in enumerate(rows)
                ]
            ),
            "accept",
        ),
        # item 9: a Parquet writer that skipped UTF-8 validation; a long non-ASCII run id
        "parquet_bad_utf8.parquet": (parquet.getvalue().replace(b"right", b"r\xffght"), "not valid UTF-8"),
        "long_unicode_run_id.jsonl": (jsonl([dict(r, run_id="\u00fc" * 300) for r in rows]), "accept"),
        # item 10: a group whose anchors GiGPO's similarity mode compares pairwise
        "similarity_anchors.jsonl": (
            jsonl(
                [
                    dict(
                        rows[0],
                        traj_id=f"t{i}",
                        step_idx=0,
                        done=True,
                        anchor_obs=f"{i:04d} " + "".join(chr(97 + (i * 7 + k * k) % 26) for k in range(120)),
                    )
                    for i in range(120)
                ]
            ),
            "accept",
        ),
        # item 11: terminal escapes in ids and values
        "terminal_escapes.jsonl": (
            jsonl(
                [
                    dict(
                        r,
                        group_id=TERMINAL[0] + "g",
                        traj_id=TERMINAL[1] + r["traj_id"],
                        action=TERMINAL[3] + r["action"],
                        run_id=TERMINAL[2] + "run",
                    )
                    for r in rows
                ]
            ),
            "accept",
        ),
        # item 12: nesting in the first record (the ingest sniff names it); a 60 KB bad value
        "deep_first_record.jsonl": (
            b'{"group_id": "g", "x": ' + b"[" * 5000 + b"]" * 5000 + b"}\n" + jsonl(rows),
            "nesting too deep",
        ),
        "big_bad_value.jsonl": (edit(0, reward="x" * 60_000), "expected a number"),
        # item 13: two groups whose run/train_step/group_id labels spell the same text
        "colliding_labels.jsonl": (jsonl(colliding), "accept"),
    }


def special_cases() -> dict[str, tuple[str, str]]:
    """Inputs git cannot hold or that must never be read by tools that walk the corpus:
    made at test time by ``tests/test_hostile.py`` (name -> (kind, expected message))."""
    return {
        "fifo.jsonl": ("fifo", "is a FIFO"),
        "dev_zero.jsonl": ("link:/dev/zero", "is a character device"),
        "link_loop.jsonl": ("loop", "symbolic link loop"),
    }


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
