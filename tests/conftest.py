"""Puts ``tests/`` on ``sys.path`` so a test in any subfolder (``tests/io/``, ``tests/cli/``, ...)
can ``from helpers import ...`` (pytest's prepend mode only adds the test file's own folder)."""

import sys
from pathlib import Path

_TESTS = str(Path(__file__).resolve().parent)
if _TESTS not in sys.path:
    sys.path.insert(0, _TESTS)

# Pristine copies of trainer files (tests/fixtures/trainer_sources/): patched by a test, never
# imported; fixture generators run in throw-away venvs holding the trainer's package, not here.
collect_ignore_glob = ["fixtures/trainer_sources/*", "fixtures/generators/*", "fixtures/authors_code/*"]
