"""Optional packages: which extra of ``pip install 'crbc-viz[...]'`` brings each, and the one way
code that needs one imports it (`require`), so that a missing one is one line naming the extra
to install, never an ImportError traceback.

``pip install crbc-viz`` (the core: numpy, scipy, pandas, pyarrow, duckdb, tqdm, array-api-compat) is what
`load_rollouts`, `score`, the command line (``score``, ``info``, ``ingest``, ``export``,
``trends``, ``drop-incomplete``, ``estimators``), the log store and the trainer adapters
(`crbc_viz.integrations`, given the trainer's torch) need. The extras:

    app       streamlit, pyvis (and its jinja2), plotly, igraph, watchdog: the app and `crbc_viz.views`
    torch     torch: ``backend='torch'``, CUDA, the trainer adapters' tensors
    numba     numba: the compiled CPU engine (``backend='auto'`` uses it when installed)
    watch     watchdog: change events for ``ingest --watch`` (it polls every few seconds without)
    networkx  networkx: `AnchorGraph.to_networkx`
    wandb     wandb: `crbc_viz.integrations.wandb` (credit in a W&B run)
    tensorboard  tensorboard: what a ``SummaryWriter`` for `crbc_viz.integrations.tensorboard` needs
    ray       ray[data]: ``score --store S --all --engine ray`` (a whole store re-scored on Ray Data)
    s3        boto3: writing a log store on S3 (``--store s3://...``: its one-writer lease is a
              conditional write, which pyarrow cannot send; reading needs only pyarrow)
    all       every one of them

``torch``'s extra has no upper bound and never pins: installed beside a trainer, the trainer's
torch stays. Only the standard library and `crbc_viz.errors` are imported here.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys

from .errors import CrbcVizError

__all__ = ["EXTRA_OF", "MissingExtra", "install_hint", "installed", "missing_message", "require", "ensure"]

#: Optional top-level package -> the extra that installs it.
EXTRA_OF: dict[str, str] = {
    "streamlit": "app",
    "pyvis": "app",
    "plotly": "app",
    "jinja2": "app",
    "igraph": "app",
    "torch": "torch",
    "numba": "numba",
    "watchdog": "watch",
    "networkx": "networkx",
    "wandb": "wandb",
    "tensorboard": "tensorboard",
    "ray": "ray",
    "boto3": "s3",
    "botocore": "s3",
}


class MissingExtra(CrbcVizError, ImportError):
    """An optional package that is not installed; the message is one line naming the extra
    (``pip install 'crbc-viz[app]'``). Also an ``ImportError``, so ``except ImportError`` in
    existing callers still catches it; the CLI prints it as one line and exits with status 2."""


def install_hint(extra: str) -> str:
    """The command that installs ``extra``: ``pip install 'crbc-viz[extra]'``."""
    return f"pip install 'crbc-viz[{extra}]'"


def missing_message(package: str, what: str | None = None) -> str:
    """One line: what needs ``package``, that it is not installed, and the extra to install."""
    root = package.split(".")[0]
    need = f"{what} needs {root}" if what else root
    return f"{need}, which is not installed: {install_hint(EXTRA_OF[root])}"


def installed(package: str) -> bool:
    """``package`` can be imported (asked without importing it when it is not loaded yet)."""
    root = package.split(".")[0]
    if root in sys.modules:
        return sys.modules[root] is not None  # None: imports of it are blocked
    try:
        return importlib.util.find_spec(root) is not None
    except (ImportError, ValueError):  # a finder that refuses it
        return False


def require(module: str, what: str | None = None):
    """Import and return ``module`` (e.g. ``"pyvis.network"``), whose top-level package is one of
    `EXTRA_OF`'s.

    Raises:
        MissingExtra: the package is not installed (one line naming the extra to install; ``what``
            names the feature that needs it). A package that is installed but fails to import
            (a submodule or one of its own dependencies missing) raises its own error unchanged.
    """
    root = module.split(".")[0]
    if root not in EXTRA_OF:
        raise ValueError(f"{root!r} is not an optional package of crbc-viz (EXTRA_OF)")
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name != root:  # installed, but a part or a dependency of it is missing
            raise
        raise MissingExtra(missing_message(root, what), name=root) from None


def ensure(package: str, what: str | None = None) -> None:
    """`require` without importing: raise `MissingExtra` when ``package`` is not installed (for a
    package whose modules import it themselves, where importing it here would only cost time)."""
    root = package.split(".")[0]
    if root not in EXTRA_OF:
        raise ValueError(f"{root!r} is not an optional package of crbc-viz (EXTRA_OF)")
    if not installed(root):
        raise MissingExtra(missing_message(root, what), name=root)
