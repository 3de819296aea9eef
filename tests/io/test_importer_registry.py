"""The importers' one registration table: every importer module of the package is listed in
``IMPORTERS`` and has the members of the `Importer` protocol; ``FORMATS`` and detection follow
the table; the log file endings are one list, which the app's upload check uses too."""

from __future__ import annotations

import inspect
import json
import pkgutil
import types

import pytest

import crbc_viz.io.importers as importers
from crbc_viz.errors import LoadError
from crbc_viz.io.importers import FORMATS, IMPORTERS, Importer, detect
from crbc_viz.io.importers._protocol import SniffsFile
from crbc_viz.io.readers import SUFFIXES, detect_format
from crbc_viz.ui import files

#: Modules of the package that are not importers: the hook a trainer runs to write its dump.
NOT_IMPORTERS = {"verl_agent_hook"}


def _importer_modules() -> set[str]:
    return {
        m.name
        for m in pkgutil.iter_modules(importers.__path__)
        if not m.name.startswith("_") and m.name not in NOT_IMPORTERS
    }


def test_every_importer_module_is_registered():
    registered = {m.__name__.rsplit(".", 1)[-1] for m in IMPORTERS}
    assert registered == _importer_modules()
    assert all(m.__name__ == f"{importers.__name__}.{m.__name__.rsplit('.', 1)[-1]}" for m in IMPORTERS)


@pytest.mark.parametrize("module", IMPORTERS, ids=lambda m: m.__name__.rsplit(".", 1)[-1])
def test_each_importer_satisfies_the_protocol(module):
    assert isinstance(module, Importer)
    assert isinstance(module.NAME, str) and module.NAME
    assert isinstance(module.TITLE, str) and module.TITLE
    sig = module.SIGNATURE
    assert isinstance(sig, tuple) and sig and all(isinstance(f, str) and f for f in sig)
    inspect.signature(module.sniff).bind({"a"})
    inspect.signature(module.read).bind("file.jsonl")  # the options are keywords with defaults
    assert all(
        p.kind is p.KEYWORD_ONLY and p.default is not p.empty
        for p in list(inspect.signature(module.read).parameters.values())[1:]
    )
    if isinstance(module, SniffsFile):
        inspect.signature(module.sniff_file).bind("file.jsonl", {"a"})


def test_a_module_lacking_a_member_is_not_an_importer():
    complete = {
        "NAME": "x",
        "TITLE": "x file",
        "SIGNATURE": ("a",),
        "FOLDER": False,
        "OPTIONS": (),
        "sniff": lambda fields: True,
        "read": lambda path: None,
    }
    assert isinstance(types.SimpleNamespace(**complete), Importer)
    for member in complete:
        assert not isinstance(
            types.SimpleNamespace(**{k: v for k, v in complete.items() if k != member}), Importer
        )


def test_names_are_unique_and_a_duplicate_raises_naming_both():
    assert len(set(FORMATS)) == len(IMPORTERS)
    first, second = types.ModuleType("pkg.first"), types.ModuleType("pkg.second")
    for m in (first, second):
        m.NAME, m.TITLE, m.SIGNATURE = "same", "same file", ("a",)
        m.sniff, m.read = lambda f: True, lambda p: None
    with pytest.raises(ValueError, match=r"'same'.*pkg\.first.*pkg\.second"):
        importers._by_name((first, second))


def test_formats_and_detection_follow_the_table(tmp_path):
    assert FORMATS == tuple(m.NAME for m in IMPORTERS)
    unknown = tmp_path / "x.jsonl"
    unknown.write_text(json.dumps({"nothing": 1}) + "\n")
    with pytest.raises(LoadError) as err:
        detect(str(unknown))
    listed = str(err.value).split("expected one of: ", 1)[1]
    assert [part.split(" (", 1)[0] for part in listed.split("; ")] == list(FORMATS)
    # A record carrying two signatures is the earlier importer's: verl-agent's (uid, traj_uid)
    # and verl's (input, output, score); the table lists verl-agent first.
    both = tmp_path / "both.jsonl"
    both.write_text(json.dumps({"uid": "u", "traj_uid": "t", "input": "i", "output": "o", "score": 1}) + "\n")
    names = [m.NAME for m in IMPORTERS]
    assert names.index("verl-agent") < names.index("verl")
    assert detect(str(both)) == "verl-agent"


def test_one_list_of_log_file_endings():
    """The readers' `SUFFIXES` are the one list of log file endings; the app opens those and
    the importers' own (torch dumps, as ingest walks them), the latter only with torch."""
    from crbc_viz.io.importers import WALK_SUFFIXES

    assert files.LOG_SUFFIXES is SUFFIXES
    # Every log ending is one the readers read, and every ending the readers name is listed.
    assert {detect_format(f"log{s}") for s in SUFFIXES} == {"jsonl", "json", "parquet", "csv"}
    assert {".jsonl", ".ndjson", ".json", ".parquet", ".pq", ".csv", ".jsonl.gz", ".csv.gz"} <= set(SUFFIXES)
    # The app's list is that list, then the dumps' endings (ingest's walk) where torch is here.
    assert files.DUMP_SUFFIXES == (".pt", ".pth")
    assert tuple(SUFFIXES) + files.DUMP_SUFFIXES == tuple(WALK_SUFFIXES)
    want = tuple(WALK_SUFFIXES) if files.TORCH_INSTALLED else tuple(SUFFIXES)
    assert files.ALLOWED_SUFFIXES == want
    assert files.suffix_of("run.NDJSON.GZ") == ".ndjson.gz"
