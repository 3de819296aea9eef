"""What `crbc_viz.io.importers` asks of an importer: a module of the package with these members,
listed once in ``IMPORTERS`` (the detection order).

An importer is the only place that knows one trainer's field names; its ``read`` returns the
file's rows under canonical names (SCHEMA.md), every problem named by file, line and field.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from ._common import Imported

__all__ = ["Importer", "ReadsFolder", "SniffsFile", "OwnSuffixes"]


@runtime_checkable
class Importer(Protocol):
    """An importer module.

    Attributes:
        NAME: the format's name, as ``--format`` takes it (``verl-agent``, ``trl`` ...).
        TITLE: what the app calls the format (``verl rollout_data_dir file``).
        SIGNATURE: the fields that identify the format, named when no importer claims a file.
        FOLDER: whether the format is a folder of files read as one source (rLLM's episodes
            folder); such an importer is also a `ReadsFolder`, and its ``read`` takes the folder.
        OPTIONS: the import options (``crbc_viz.io.importers.IMPORT_OPTIONS``) it takes, each a
            keyword-only parameter of ``read`` (TRL's ``reward_columns``, ``success_column``).
    """

    NAME: str
    TITLE: str
    SIGNATURE: tuple[str, ...]
    FOLDER: bool
    OPTIONS: tuple[str, ...]

    def sniff(self, fields: set[str]) -> bool:
        """Whether a file whose first record has ``fields`` is this format's."""
        ...

    def read(self, path: str) -> Imported:
        """The canonical rows of the file (or, for a ``FOLDER`` format, the folder) ``path``.
        Its ``OPTIONS`` are keyword-only parameters of ``read``: an importer gets the ones it
        names.

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


@runtime_checkable
class ReadsFolder(Protocol):
    """A ``FOLDER`` importer: which files of a folder are its own. The folder walk
    (``expand_sources``) makes one source of each folder holding them, detection sniffs the
    first one's first record, the watcher groups a followed folder's files by them."""

    def is_folder_file(self, path: str) -> bool:
        """Whether the file ``path`` (by its name) is one of the format's files."""
        ...

    def folder_files(self, folder: str) -> list[str]:
        """The format's files under ``folder`` (every depth), sorted."""
        ...


@runtime_checkable
class OwnSuffixes(Protocol):
    """An importer whose files end in what the table readers do not read
    (``crbc_viz.io.readers.SUFFIXES``): slime's and GraphGPO's ``.pt`` / ``.pth``. The folder
    walk reads these endings too."""

    FILE_SUFFIXES: tuple[str, ...]
