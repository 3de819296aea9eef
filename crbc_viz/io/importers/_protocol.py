"""What `crbc_viz.io.importers` asks of an importer: a module of the package with these members,
listed once in ``IMPORTERS`` (the detection order).

An importer is the only place that knows one trainer's field names; its ``read`` returns the
file's rows under canonical names (SCHEMA.md), every problem named by file, line and field.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from ._common import Imported

__all__ = ["Importer", "SniffsFile"]


@runtime_checkable
class Importer(Protocol):
    """An importer module.

    Attributes:
        NAME: the format's name, as ``--format`` takes it (``verl-agent``, ``trl`` ...).
        TITLE: what the app calls the format (``verl rollout_data_dir file``).
        SIGNATURE: the fields that identify the format, named when no importer claims a file.
    """

    NAME: str
    TITLE: str
    SIGNATURE: tuple[str, ...]

    def sniff(self, fields: set[str]) -> bool:
        """Whether a file whose first record has ``fields`` is this format's."""
        ...

    def read(self, path: str) -> Imported:
        """The canonical rows of the file (or rLLM episode folder) ``path``. Options
        (``crbc_viz.io.importers.IMPORT_OPTIONS``) are keyword-only parameters of ``read``: an
        importer gets the ones it names.

        Raises:
            LoadError: naming the file, line and field of every problem.
        """
        ...


@runtime_checkable
class SniffsFile(Protocol):
    """An importer whose first record's fields do not decide (ms-swift 3.x against TRL): it
    looks at the file itself when ``sniff`` says no."""

    def sniff_file(self, path: str, fields: set[str]) -> bool:
        """Whether the file ``path`` (first record's fields ``fields``) is this format's."""
        ...
