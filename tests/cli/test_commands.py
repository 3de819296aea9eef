"""The command table: every command has a summary and its own help; --help and the parser
import no pandas; the store is a data source declared once (``--run`` without ``--store`` is
refused); a requested backend that cannot run is one line, exit 2."""

import importlib
import subprocess
import sys

import pytest

from crbc_viz.cli import COMMANDS, main
from helpers import ROOT, TOY


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_command_has_help_and_a_run(name, capsys):
    mod = importlib.import_module(COMMANDS[name])
    assert mod.HELP and callable(mod.add_arguments) and callable(mod.run)
    with pytest.raises(SystemExit) as e:
        main([name, "--help"])
    assert e.value.code == 0
    assert mod.HELP.lower() in capsys.readouterr().out.lower()


def test_top_level_help_lists_the_table(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    assert all(name in out for name in COMMANDS)


@pytest.mark.parametrize("argv", [["--help"], ["score", "--help"], ["info", "--help"]])
def test_help_imports_no_pandas(argv):
    code = (
        f"import sys\nfrom crbc_viz.cli import main\ntry:\n    main({argv!r})\nexcept SystemExit:\n    pass\n"
        "print('PANDAS' if 'pandas' in sys.modules else 'CLEAN', file=sys.stderr)"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert proc.stderr.strip().splitlines()[-1] == "CLEAN", proc.stderr


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["info", str(TOY), "--run", "toy"], "--store"),
        (["score", str(TOY), "--train-step", "0", "--out", "x.csv"], "--store"),
        (["info"], "give a log file, or --store DIR"),
    ],
)
def test_store_filters_need_a_store(argv, needle, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert needle in err and "Traceback" not in err


def test_a_backend_that_cannot_run_is_one_line(monkeypatch, capsys, tmp_path):
    from crbc_viz.backends import numba as nb

    monkeypatch.setattr(nb, "available", lambda: False)
    rc = main(["score", str(TOY), "--backend", "numba", "-e", "crbc", "--out", str(tmp_path / "x.csv")])
    err = capsys.readouterr().err
    assert rc == 2 and "numba" in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1, err
