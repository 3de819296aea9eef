"""One error hierarchy: every error the package raises on purpose derives from `CrbcVizError`,
so a caller (the CLI, the app, a trainer integration) catches one class and shows one line.

Each subclass also keeps the built-in base it had before (``ValueError``, ``KeyError``,
``RuntimeError``), so ``except ValueError`` in existing callers still works.

    CrbcVizError
    ├── LoadError            (a file's problems, each a `Problem` with file/line/field)
    │   ├── ParseAbortedError(its reading process died, or ran out of memory or time)
    │   └── Unclaimed *      (no importer claims the file's fields)
    ├── StoreError           (not a store, or a query that names nothing in it)
    ├── EstimatorInputError  (a parameter out of bounds or not a choice)
    ├── MissingSignalError   (an estimator needs optional logged fields the input lacks)
    ├── UnknownEstimatorError(no estimator of that name)
    ├── BackendUnavailable   (a requested backend or device is not installed / present)
    ├── BatchInvariantError  (a `RolloutBatch` whose arrays disagree: a bug in its builder)
    ├── MissingExtra *       (an optional package is not installed: names the extra to install)
    ├── OutputError *        (an output that must not or cannot be written)
    ├── OutputFormatError *  (an output name whose extension is not a known format)
    ├── HookError *          (a trainer batch the verl-agent dump hook cannot write faithfully)
    ├── IntegrationInputError * (a trainer adapter's input that cannot be scored as given)
    ├── DashboardInputError * (a W&B / TensorBoard logger's argument that cannot be logged)
    ├── UnknownGroupError *  (a group reference that names no group of the data, or several)
    ├── UsageError *         (a command line that cannot be run as given)
    ├── AnchorRuleError *    (an anchor rule that cannot be applied: a bad pattern or field list)
    ├── NoAdvantageError *   (``verify``: the data carries no trainer-written advantage)
    └── NoConventionError *  (``verify``: the format names no trainer estimator known here)

The classes marked * live beside their one raiser: `Unclaimed` in `crbc_viz.io.importers`,
`OutputError` and `OutputFormatError` in `crbc_viz.io.write`, `HookError` in
`crbc_viz.io.importers.verl_agent_hook`, `IntegrationInputError` in
`crbc_viz.integrations._core`, `DashboardInputError` in `crbc_viz.integrations.cadence`,
`UnknownGroupError` in `crbc_viz.views.share`, `UsageError` in `crbc_viz.cli._common`,
`AnchorRuleError` in `crbc_viz.io.anchor_rules`,
`NoAdvantageError` and `NoConventionError` in `crbc_viz.analysis.verify`. The rest are defined
here (`crbc_viz.store` and
`crbc_viz.estimators.registry` also export the ones they raise).
`MissingExtra` (marked *) is in `crbc_viz._extras`, the helper that imports optional packages.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "CrbcVizError",
    "Problem",
    "LoadError",
    "ParseAbortedError",
    "StoreError",
    "EstimatorInputError",
    "MissingSignalError",
    "UnknownEstimatorError",
    "BackendUnavailable",
    "BatchInvariantError",
    "MAX_LISTED",
]

#: Problems a `LoadError` lists in its message (the rest are counted).
MAX_LISTED = 50


class CrbcVizError(Exception):
    """Base of every error crbc-viz raises on purpose (the CLI maps it to exit status 2)."""


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


class ParseAbortedError(LoadError):
    """A file whose reading was stopped from outside its reader: the app reads uploads and
    server paths in a limited child process (`crbc_viz.ui.sandbox`), and that process died by
    a signal or ran out of memory or time. One line per problem, no "problems in input" head."""

    def render(self) -> str:
        return "\n".join(str(p) for p in self.problems[:MAX_LISTED])


class EstimatorInputError(CrbcVizError, ValueError):
    """A hyper-parameter or estimator input that is out of bounds or not one of the choices."""


class BackendUnavailable(CrbcVizError, RuntimeError):
    """A backend or device that was asked for explicitly is not available on this machine."""


class BatchInvariantError(CrbcVizError, ValueError):
    """A `RolloutBatch` whose arrays disagree (offsets, lengths, index ranges, dtypes). The
    loaders only build consistent batches, so this names a bug in the code that built the
    batch, not a problem in an input file; the message names the field and what is wrong."""

    def __init__(self, field: str, what: str, source: str = ""):
        self.field, self.what = field, what
        where = f" (from {source})" if source else ""
        super().__init__(f"RolloutBatch{where}: {field}: {what}")


class StoreError(CrbcVizError, ValueError):
    """A store folder that is missing, not a store, or a query that names nothing in it."""


class UnknownEstimatorError(CrbcVizError, KeyError):
    """No estimator is registered under that name (the message lists close matches)."""

    def __str__(self) -> str:
        return str(self.args[0])


class MissingSignalError(CrbcVizError, ValueError):
    """An estimator needs optional logged fields that the batch lacks."""

    def __init__(self, estimator: str, fields: list[str]):
        self.estimator, self.fields = estimator, list(fields)
        super().__init__(
            f"estimator '{estimator}' needs logged field(s) "
            f"{', '.join(repr(f) for f in fields)} (SCHEMA.md, optional fields); "
            f"the input has none"
        )
