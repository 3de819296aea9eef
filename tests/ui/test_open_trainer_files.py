"""The Data page opens what trainers write, as ``crbc-viz ingest`` reads it (`streamlit.testing`).

Each trainer's file (tests/fixtures/*_real, written by the trainers' own code) opens from a server
path with the counts the CLI gives: the oracle is ``crbc-viz ingest FILE --store S`` then
``crbc-viz info --store S --run RUN --json``, run here (the CLI reads it without the app). An
upload is read under the name it was uploaded under; a refusal is said once, naming the user's
file and the ``crbc-viz ingest`` command; the importer options reach the importer and the link.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shutil
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from crbc_viz.cli import main
from crbc_viz.io.importers import FORMATS
from crbc_viz.ui import files, sandbox, sources
from crbc_viz.ui.sandbox import ReadOptions, read_key, split_read_key
from crbc_viz.ui.sidebar import FILE_KEY

REPO = Path(__file__).resolve().parents[2]
FIX = REPO / "tests" / "fixtures"
TIMEOUT = 120

TRL = FIX / "trl_real/trl_run/completions/completions_00002.parquet"
#: (file or folder, the format the page must say it read)
TRAINER_FILES = [
    (TRL, "TRL completions parquet"),
    (FIX / "verl_real/rollout/1.jsonl", "verl rollout_data_dir file"),
    (FIX / "verl_agent_real/crbc_dump/crbc_step_000001.jsonl", "verl-agent dump"),
    (FIX / "rllm_real/train_logs/episodes", "rLLM episodes"),
    (FIX / "roll_real/rollout_dump/rollout_dump_data.step_1.jsonl", "ROLL dump"),
    (FIX / "swift_real/output/completions.jsonl", "ms-swift completions.jsonl"),
    (FIX / "verifiers_0110/outputs/evals/guess--scripted/0a1b2c3d/results.jsonl", "verifiers results.jsonl"),
    (FIX / "skyrl_b328/export/dumped_evals/global_step_10_evals/gsm8k.jsonl", "SkyRL dumped_evals file"),
    (REPO / "sample_rollouts/toy/toy_group.jsonl", "canonical log"),
]


def _cli(*args: str) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        assert main(list(args)) == 0, args
    return out.getvalue()


def cli_counts(path: Path, store: Path, *flags: str) -> dict[str, str]:
    """The Data page's metrics as the CLI gives them: ingest, then info on the store's run."""
    _cli("ingest", str(path), "--store", str(store), "-q", *flags)
    (run,) = json.loads(_cli("info", "--store", str(store), "--json"))["runs"]
    info = json.loads(_cli("info", "--store", str(store), "--run", run, "--json"))
    return {
        "Groups": str(info["groups"]),
        "Rollouts": str(info["trajectories"]),
        "Steps": str(info["steps"]),
        "Anchors": str(info["anchors"]),
        "Success rate": f"{info['success_rate']:.1%}",
    }


def metrics(at: AppTest) -> dict[str, str]:
    want = ("Groups", "Rollouts", "Steps", "Anchors", "Success rate")
    return {m.label: m.value for m in at.metric if m.label in want}


def ok(at: AppTest) -> None:
    assert not at.exception, [e.value for e in at.exception]


def seen(markdown: str) -> str:
    """Markdown source as a person reads it (the app backslash-escapes logged text)."""
    return re.sub(r"\\(.)", r"\1", markdown)


def errors(at: AppTest) -> list[str]:
    """Every error on the page and in the sidebar, as read."""
    return [seen(e.value) for e in at.error]


def app() -> AppTest:
    return AppTest.from_file(str(REPO / "app.py"), default_timeout=TIMEOUT).run()


def server_path(at: AppTest, path) -> AppTest:
    at.radio(key="data_source").set_value("Server path").run()
    at.text_input(key="server_path").input(str(path)).run()
    ok(at)
    return at


@pytest.fixture
def roots(monkeypatch, tmp_path):
    monkeypatch.setenv(files.ENV_ROOTS, os.pathsep.join([str(FIX), str(tmp_path)]))
    monkeypatch.setattr(files, "UPLOAD_DIR", tmp_path / "up")
    return tmp_path


def upload(at: AppTest, name: str, data: bytes) -> AppTest:
    """What the uploader's callback does, then a run (AppTest has no file uploader)."""
    ref = files.file_ref(files.save_upload(name, data))
    at.session_state[FILE_KEY] = ref
    at.session_state["data_upload"] = (name, ref)
    at.run()
    ok(at)
    return at


# ---------------------------------------------------------------- each trainer's file
@pytest.mark.parametrize(
    "path,title", TRAINER_FILES, ids=[p.parent.name + "/" + p.name for p, _ in TRAINER_FILES]
)
def test_each_trainer_format_opens_from_a_server_path_with_the_cli_counts(roots, path, title):
    want = cli_counts(path, roots / "store")
    at = server_path(app(), path)
    assert metrics(at) == want
    assert f"Read as: **{title}** (detected from its fields)" in [m.value for m in at.markdown]
    assert any(f"read as {title}" in s.value for s in at.success), [s.value for s in at.success]
    assert not errors(at)


def test_an_upload_is_read_under_its_name_not_the_servers_copy(roots):
    want = cli_counts(TRL, roots / "store")
    at = upload(app(), "completions_00002.parquet", TRL.read_bytes())
    assert metrics(at) == want
    # TRL's step is in the file name: train step 2, and the run is "upload", never the upload folder.
    labels = at.sidebar.selectbox(key="group_pick").options
    assert labels and all(lab.startswith("upload/2/") for lab in labels), labels
    shown = [seen(c.value) for c in at.sidebar.caption] + [seen(s.value) for s in at.success]
    assert "File: `completions_00002.parquet`" in shown
    assert any("Opened the upload completions_00002.parquet: 4 group(s), read as TRL" in s for s in shown)
    assert not any(str(files.UPLOAD_DIR) in s or "crbc-viz-" in s for s in shown + labels), shown


def test_a_refusal_is_said_once_with_the_name_and_the_ingest_command(roots):
    at = upload(app(), "my run.csv", b"epoch,loss\n1,0.5\n")
    said = errors(at)
    assert len(said) == 1, said
    assert said[0].startswith("The upload my run.csv could not be opened: my run.csv: cannot detect"), said
    assert "epoch, loss" in said[0] and str(files.UPLOAD_DIR) not in said[0], said
    assert [c.value for c in at.code] == ["crbc-viz ingest 'my run.csv' --store crbc-store"]
    assert not at.info and not metrics(at)


def test_a_file_that_does_not_parse_is_refused_by_its_first_bad_line(roots):
    at = upload(app(), "broken.jsonl", b'{"group_id": "g", \n')
    (said,) = errors(at)
    assert "broken.jsonl:line 1: invalid JSON" in said, said


def test_upload_shows_an_empty_state_until_a_file_is_chosen():
    at = app()
    assert metrics(at)  # the default sample's overview
    at.radio(key="data_source").set_value("Upload").run()
    ok(at)
    assert not metrics(at) and not at.dataframe
    assert any(i.value.startswith("Choose a file to upload") for i in at.info), [i.value for i in at.info]


def test_an_uploads_reader_failure_names_the_upload_not_a_temporary_path(roots, monkeypatch):
    stored = files.save_upload("run 7.jsonl", b"{}\n")

    def fails(path, options):
        raise OSError(f"cannot map {path}")

    monkeypatch.setattr(sandbox, "_read_file", fails)
    with pytest.raises(Exception, match=r"^OSError: cannot map run 7.jsonl$"):
        sandbox.read(str(stored), "run 7.jsonl")


# ---------------------------------------------------------------- importer options
def test_import_options_reach_the_importer_and_the_link(roots):
    flags = ("--reward-columns", "reward_won", "--success-column", "reward_won")
    want = cli_counts(TRL, roots / "store", *flags)
    at = server_path(app(), TRL)
    default_notes = [c.value for c in at.caption if c.value.startswith("reward = ")]
    assert default_notes, "the importer's choice of reward columns is said"
    at.text_input(key="import_rewards").input("reward_won").run()
    at.text_input(key="import_success").input("reward_won").run()
    ok(at)
    assert metrics(at) == want
    assert not [c.value for c in at.caption if c.value.startswith("reward = ")]
    link = at.query_params["file"]
    assert link.startswith("import:") and split_read_key(link)[1] == ReadOptions(
        "auto", ("reward_won",), "reward_won"
    )
    # The link opens the file read the same way, with the options shown.
    again = AppTest.from_file(str(REPO / "app.py"), default_timeout=TIMEOUT)
    again.query_params["file"] = link
    again.run()
    again.radio(key="data_source").set_value("Server path").run()
    ok(again)
    assert metrics(again) == want
    assert again.text_input(key="import_rewards").value == "reward_won"


def test_options_a_format_does_not_take_are_refused_naming_them(roots):
    at = server_path(app(), FIX / "verl_real/rollout/1.jsonl")
    at.text_input(key="import_success").input("score").run()
    ok(at)
    (said,) = errors(at)
    assert "--success-column: taken only by the " in said, said
    assert all(f in said for f in ("ms-swift", "trl", "art", "tinker-cookbook")), said
    assert [c.value for c in at.code][-1].endswith("--success-column score --store crbc-store")


def test_a_forced_format_reads_the_file_with_that_importer(roots):
    at = server_path(app(), TRL)
    at.selectbox(key="import_format").select("verl").run()
    ok(at)
    (said,) = errors(at)
    assert "input" in said and "verl" in said.lower(), said  # verl's own fields are missing
    assert at.query_params["file"].startswith("import:format=verl::")


# ---------------------------------------------------------------- folders and stores
def test_a_store_folder_is_opened_on_across_training(roots):
    store = roots / "store"
    cli_counts(TRL, store)
    at = server_path(app(), store)
    assert any("is a log store" in i.value for i in at.info), [i.value for i in at.info]
    (link,) = [p for p in at.get("page_link") if p.proto.label == "Open this store on Across training"]
    assert "training" in link.proto.page
    assert metrics(at)  # the open file is unchanged


def test_a_folder_that_links_out_of_the_roots_is_refused(roots, tmp_path_factory):
    outside = tmp_path_factory.mktemp("outside") / "secret.json"
    outside.write_text("{}")
    folder = roots / "episodes"
    shutil.copytree(FIX / "rllm_real/eval_run/episodes", folder)
    (folder / "zz.json").symlink_to(outside)
    with pytest.raises(ValueError, match="zz.json' resolves outside the allowed data folders"):
        sources.resolve(str(folder))
    at = server_path(app(), folder)
    assert any("resolves outside" in e for e in errors(at))


def test_a_folder_of_too_many_entries_is_refused(roots, monkeypatch):
    folder = roots / "many"
    folder.mkdir()
    for i in range(5):
        (folder / f"{i}.json").write_text("{}")
    monkeypatch.setattr(files, "MAX_FOLDER_ENTRIES", 4)
    with pytest.raises(ValueError, match="more than 4 files and folders"):
        sources.resolve(str(folder))


def test_a_folder_digest_follows_its_files(roots):
    folder = roots / "episodes"
    shutil.copytree(FIX / "rllm_real/eval_run/episodes", folder)
    first, stamp = files.file_digest(folder), files.source_stamp(folder)
    victim = sorted(folder.glob("*.json"))[0]
    victim.write_text(victim.read_text() + " ")
    assert files.file_digest(folder) != first and files.source_stamp(folder) != stamp


def test_the_same_bytes_at_two_paths_are_two_sources(roots):
    """Trainer dumps take their run from their folder: ``run_a/1.jsonl`` and ``run_b/1.jsonl``
    with the same bytes are different groups, so they must not share a cached batch."""
    a, b = roots / "run_a" / "1.jsonl", roots / "run_b" / "1.jsonl"
    for f in (a, b):
        f.parent.mkdir()
        shutil.copy(FIX / "verl_real/rollout/1.jsonl", f)
    sa, sb = sources.resolve(str(a)), sources.resolve(str(b))
    assert files.file_digest(sa.file) == files.file_digest(sb.file) and sa.read_tag != sb.read_tag
    got = {sandbox.open_batch(s.key).group_label(0).split("/")[0] for s in (sa, sb)}
    assert got == {"run_a", "run_b"}


# ---------------------------------------------------------------- the reference's grammar
def test_read_options_round_trip_through_a_reference():
    opts = ReadOptions("trl", ("reward_won", "format reward"), "reward_won")
    ref = read_key("upload:abc.parquet", opts)
    assert ref.startswith("import:format=trl&") and ref.endswith("::upload:abc.parquet")
    assert split_read_key(ref) == ("upload:abc.parquet", opts)
    assert read_key("a.jsonl", ReadOptions()) == "a.jsonl"
    assert sources.link_ref(read_key(str(files.UPLOAD_DIR / "abc.parquet"), opts)) == ref
    assert sources.is_upload(ref) and not sources.is_upload(read_key("a.jsonl", opts))
    assert set(sandbox.FORMAT_TITLES) == set(FORMATS)


@pytest.mark.parametrize(
    "ref,why",
    [
        ("import:format=nope::a.jsonl", "format 'nope' is not one of"),
        ("import:colour=red::a.jsonl", "unknown import option 'colour'"),
        ("import:format=trl&format=verl::a.jsonl", "given twice"),
        ("import:reward_columns=::a.jsonl", "'reward_columns' is empty"),
        ("import:format=trl", "import:<options>::<file>"),
        ("import:format=trl::store:s::r/0/g", "apply to a file or folder"),
    ],
)
def test_bad_import_options_in_a_link_are_refused_naming_them(ref, why):
    with pytest.raises(ValueError, match=why.replace("(", r"\(").replace("<", "<")):
        sources.resolve(ref)
    at = AppTest.from_file(str(REPO / "app.py"), default_timeout=TIMEOUT)
    at.query_params["file"] = ref
    at.run()
    ok(at)
    assert any(why in e for e in errors(at)), errors(at)
