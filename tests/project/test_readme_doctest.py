"""The README's Python examples run: each ```pycon block is executed as a doctest from the
repository root (the paths in it are relative to it), so a renamed function or a changed
number fails here instead of in a reader's terminal."""

import doctest
import re

import pytest

from helpers import ROOT

_BLOCK = re.compile(r"^```pycon\n(.*?)^```", re.S | re.M)


def readme_blocks() -> list[str]:
    return _BLOCK.findall((ROOT / "README.md").read_text())


def test_readme_has_a_python_example():
    blocks = readme_blocks()
    assert blocks, "README.md has no ```pycon block (the Python API example is written as a doctest)"
    assert all(">>> " in b for b in blocks), "a ```pycon block without a >>> prompt runs nothing"


@pytest.mark.parametrize("index", range(len(readme_blocks())))
def test_readme_python_block_runs(index, monkeypatch):
    monkeypatch.chdir(ROOT)
    text = readme_blocks()[index]
    test = doctest.DocTestParser().get_doctest(text, {}, f"README.md pycon block {index}", "README.md", 0)
    runner = doctest.DocTestRunner(optionflags=doctest.NORMALIZE_WHITESPACE)
    out: list[str] = []
    result = runner.run(test, out=out.append)
    assert result.attempted > 0
    assert result.failed == 0, "".join(out)
