"""Load errors that name the file, the line (or row) and the field."""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import CrbcVizError

__all__ = ["Problem", "LoadError", "MAX_LISTED"]

MAX_LISTED = 50


@dataclass(frozen=True)
class Problem:
    """One problem in an input file.

    ``line`` is the 1-based line of a JSONL/CSV/JSON file, or the 0-based row of a Parquet
    table (``where`` says which); ``None`` when the problem concerns the whole file.
    """

    path: str
    line: int | None
    field: str | None
    message: str
    where: str = "line"

    def __str__(self) -> str:
        loc = self.path if self.line is None else f"{self.path}:{self.where} {self.line}"
        fld = f" field '{self.field}':" if self.field else ""
        return f"{loc}:{fld} {self.message}"


class LoadError(CrbcVizError, ValueError):
    """Raised when an input file has problems; lists every one (up to ``MAX_LISTED``)."""

    def __init__(self, problems: list[Problem], total: int | None = None):
        self.problems = list(problems)
        self.total = len(self.problems) if total is None else total
        super().__init__(self.render())

    def render(self) -> str:
        shown = self.problems[:MAX_LISTED]
        head = f"{self.total} problem{'s' if self.total != 1 else ''} in input"
        lines = [head + ":"] + [f"  {p}" for p in shown]
        if self.total > len(shown):
            lines.append(f"  ... and {self.total - len(shown)} more")
        return "\n".join(lines)
