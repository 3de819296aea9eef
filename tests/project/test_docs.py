"""The README stays true to the registry and the set-up rules."""

from crbc_viz.estimators import names
from helpers import ROOT


def test_readme_starts_with_the_two_commands():
    head = (ROOT / "README.md").read_text().splitlines()[:6]
    assert any(line.strip().startswith("make run") for line in head)
    assert any(line.strip().startswith("make test") for line in head)


def test_readme_estimator_table_lists_every_registered_name():
    text = (ROOT / "README.md").read_text()
    for name in names():
        assert f"| `{name}` |" in text, name


def test_ci_calls_make_test():
    assert "make test" in (ROOT / ".ci" / "run").read_text()
