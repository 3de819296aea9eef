"""The one estimator registry (STYLE.md): the UI, the CLI, the reference page and the
coverage test all iterate it.

Each estimator registers an `EstimatorSpec`: its frozen params dataclass, whose fields carry a
default, one-line help and bounds (built with `param`), and its numpy reference
``kernel(graph, params) -> CreditResult`` taking the checked params object. The dataclass is the
one place a default is written: `register` builds from it the public keyword function
``fn(graph, *, <hyper-parameters>) -> CreditResult`` (its signature and the parameter list of
its docstring come from the dataclass) and returns it for the module to bind::

    grpo = register(EstimatorSpec(name="grpo", ..., kernel=_grpo, params_cls=GRPOParams))

Every call of that function, direct or through `crbc_viz.score`, checks its keyword parameters
against the dataclass's bounds and choices (`check_params`) and raises `EstimatorInputError`
naming the estimator, the parameter, the bound and the value. `register` sets no attribute of
any module.

The kernel table: ``KERNELS[(name, backend)]`` is a function
``kernel(graph, params, *, device) -> CreditResult`` taking the already-checked params object.
`register` fills the ``numpy`` row; the backend packages (``crbc_viz.backends.torch``,
``crbc_viz.backends.numba``) add theirs with ``@implements(name, backend)`` when imported. A row
registered with ``should_run=`` (``@implements(name, backend, should_run=check)``) takes the
backend's place for a call where ``check(graph, params, device)`` is True (the fused CUDA path of
``crbc`` at depth ∞): `kernel_for` picks the row a call runs, and `crbc_viz.api.score` runs what
it picks. Adding a kernel is adding a row. This
module never imports them: the package facade installs the one function that loads them
(``crbc_viz._hooks.kernel_loader``, which calls `crbc_viz.api.load_backends`), run the first
time the table is read.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import math
import re
import textwrap
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .._hooks import load_kernels
from ..errors import EstimatorInputError, MissingSignalError, UnknownEstimatorError

__all__ = [
    "param",
    "ParamInfo",
    "EstimatorSpec",
    "register",
    "get",
    "names",
    "specs",
    "param_infos",
    "make_params",
    "check_params",
    "backends",
    "UnknownEstimatorError",
    "MissingSignalError",
    "EstimatorInputError",
    "implements",
    "kernel",
    "kernels",
    "kernel_for",
    "guarded_rows",
    "BACKEND_ORDER",
]


def param(default, help: str, *, low=None, high=None, choices=None, low_open=False, high_open=False):
    """A params-dataclass field with its help text and bounds (``low_open`` / ``high_open``:
    the bound itself is excluded)."""
    return field(
        default=default,
        metadata={
            "help": help,
            "low": low,
            "high": high,
            "choices": choices,
            "low_open": low_open,
            "high_open": high_open,
        },
    )


@dataclass(frozen=True)
class ParamInfo:
    name: str
    type: type
    default: Any
    help: str
    low: Any = None
    high: Any = None
    choices: tuple | None = None
    low_open: bool = False
    high_open: bool = False


@dataclass(frozen=True)
class EstimatorSpec:
    """An estimator: what the reference page shows (title, paper, equation, spec section), its
    numpy reference ``kernel(graph, params) -> CreditResult``, its params dataclass and the logged
    fields it needs. ``fn`` is the public keyword function; `register` builds it (leave it None)."""

    name: str
    title: str
    paper: str
    equation: str
    section: str
    kernel: Callable
    params_cls: type
    requires: tuple[str, ...] = ()
    #: Its reference solves the closure (a linear solve per group at depth ∞): its cost grows
    #: with each group's anchors, not only its steps (`crbc_viz.backends.numpy_seconds`).
    solves: bool = False
    #: What a node's colour means on the graph: (legend title, higher is better, SUCCESS label,
    #: FAILURE label); None: a state value V(s), higher is better.
    value_meaning: tuple[str, bool, str, str] | None = None
    fn: Callable | None = field(default=None, repr=False, compare=False)

    @property
    def torch_fn(self) -> Callable | None:
        """Read-only view of the torch kernel with the numpy signature plus ``device=``
        (``spec.torch_fn(graph, device="cpu", beta=0.9)``), or None."""
        return _keyword_view(self, "torch")

    @property
    def numba_fn(self) -> Callable | None:
        """Read-only view of the numba kernel with the numpy signature, or None."""
        return _keyword_view(self, "numba")

    def check(self, **overrides):
        """The checked params object (`make_params`)."""
        return make_params(self, **overrides)


_REGISTRY: dict[str, EstimatorSpec] = {}

#: Backends in the order the README and the Estimators page list them.
BACKEND_ORDER = ("numpy", "torch", "numba")
#: ``(estimator, backend) -> kernel(graph, params, *, device)``.
KERNELS: dict[tuple[str, str], Callable] = {}


#: ``(estimator, backend) -> [(should_run, kernel), ...]``: rows that take the backend's place
#: where their ``should_run(graph, params, device)`` is True, asked in registration order.
GUARDED: dict[tuple[str, str], list[tuple[Callable, Callable]]] = {}


def implements(
    name: str, backend: str, *, should_run: Callable | None = None
) -> Callable[[Callable], Callable]:
    """Register the decorated ``kernel(graph, params, *, device)`` as ``name``'s ``backend`` row;
    with ``should_run``, as a row that runs in the backend's place for the calls where
    ``should_run(graph, params, device)`` is True (`kernel_for`)."""

    def add(fn: Callable) -> Callable:
        if should_run is not None:
            rows = GUARDED.setdefault((name, backend), [])
            if all(f is not fn for _, f in rows):
                rows.append((should_run, fn))
            return fn
        old = KERNELS.get((name, backend))
        if old is not None and old is not fn:
            raise ValueError(
                f"duplicate {backend} kernel for '{name}': {old.__module__}.{old.__name__} "
                f"and {fn.__module__}.{fn.__name__}"
            )
        KERNELS[(name, backend)] = fn
        return fn

    return add


def kernel(name: str, backend: str) -> Callable | None:
    """``name``'s kernel on ``backend``, or None when it has none."""
    if backend != "numpy":
        load_kernels()
    return KERNELS.get((name, backend))


def kernel_for(name: str, backend: str, graph, params, device: str) -> Callable | None:
    """The row a call of ``name`` on ``backend`` runs: the first guarded row whose
    ``should_run(graph, params, device)`` is True, else the backend's row (None: it has none)."""
    general = kernel(name, backend)
    if general is None:
        return None
    for should_run, fn in GUARDED.get((name, backend), ()):
        if should_run(graph, params, device) is True:
            return fn
    return general


def guarded_rows() -> list[tuple[str, str, Callable, Callable]]:
    """Every guarded row as ``(estimator, backend, should_run, kernel)``."""
    load_kernels()
    return [(n, b, check, fn) for (n, b), rows in GUARDED.items() for check, fn in rows]


def kernels() -> list[tuple[str, str, Callable]]:
    """Every registered ``(estimator, backend, kernel)``, registry order then `BACKEND_ORDER`."""
    load_kernels()
    return [(n, b, KERNELS[(n, b)]) for n in _REGISTRY for b in BACKEND_ORDER if (n, b) in KERNELS]


def _keyword_view(spec: EstimatorSpec, backend: str) -> Callable | None:
    fn = kernel(spec.name, backend)
    if fn is None:
        return None

    def call(graph, *, device: str = "auto", **params):
        return fn(graph, make_params(spec, **params), device=device)

    call.__name__ = call.__qualname__ = f"{spec.name}_{backend}"
    call.__module__, call.__doc__ = fn.__module__, fn.__doc__
    where = inspect.Parameter("device", inspect.Parameter.KEYWORD_ONLY, default="auto", annotation=str)
    call.__signature__ = _signature(spec, extra=(where,))
    return call


def register(spec: EstimatorSpec) -> Callable:
    """Register ``spec`` and return its public keyword function, for its module to bind:
    ``crbc = register(EstimatorSpec(..., kernel=_crbc, params_cls=CRBCParams))``.

    The function takes ``graph`` and the dataclass's fields as keyword-only parameters with the
    dataclass's defaults (its ``__signature__``, so ``help()`` and `inspect.signature` show
    them), checks the given ones (`check_params`: no coercion of strings in a direct call),
    builds the params object and calls the kernel. Its docstring is the kernel's, with the
    kernel's ``p:`` entry of Args replaced by one entry per field (help, default, bounds).
    The kernel is also the ``numpy`` row of the kernel table.

    Raises:
        ValueError: the name is taken (naming both kernels), ``spec.fn`` is set, or
            ``params_cls`` is not a dataclass.
    """
    if spec.name in _REGISTRY:
        old = _REGISTRY[spec.name]
        raise ValueError(
            f"duplicate estimator name '{spec.name}': {_where(old.kernel)} and {_where(spec.kernel)}"
        )
    if spec.fn is not None:
        raise ValueError(
            f"estimator '{spec.name}': EstimatorSpec.fn is built by register() from kernel= and "
            f"params_cls=; got fn={_where(spec.fn)}"
        )
    if not (isinstance(spec.params_cls, type) and dataclasses.is_dataclass(spec.params_cls)):
        raise ValueError(f"estimator '{spec.name}': params_cls must be a dataclass, got {spec.params_cls!r}")
    fn = _public(spec)
    implements(spec.name, "numpy")(_numpy_row(spec))
    _REGISTRY[spec.name] = dataclasses.replace(spec, fn=fn)
    return fn


def _where(fn) -> str:
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', repr(fn))}"


def _signature(spec: EstimatorSpec, extra: tuple[inspect.Parameter, ...] = ()) -> inspect.Signature:
    """``(graph, *, <extra>, <field>=<dataclass default>, ...) -> <the kernel's return>``."""
    own = inspect.signature(spec.kernel)
    first = next(iter(own.parameters.values()), None)
    graph = inspect.Parameter(
        "graph",
        inspect.Parameter.POSITIONAL_OR_KEYWORD,
        annotation=inspect.Parameter.empty if first is None else first.annotation,
    )
    fields = [
        inspect.Parameter(i.name, inspect.Parameter.KEYWORD_ONLY, default=i.default, annotation=i.type)
        for i in param_infos(spec.params_cls)
    ]
    return inspect.Signature([graph, *extra, *fields], return_annotation=own.return_annotation)


def _public(spec: EstimatorSpec) -> Callable:
    """The keyword function of ``spec`` (see `register`)."""
    kernel_fn, params_cls = spec.kernel, spec.params_cls

    def call(graph, **params):
        if params:
            check_params(spec, params)
        return kernel_fn(graph, params_cls(**params))

    call.__name__ = call.__qualname__ = spec.name
    call.__module__ = kernel_fn.__module__
    call.__doc__ = _public_doc(spec)
    call.__signature__ = _signature(spec)
    call.__wrapped__ = kernel_fn  # inspect.getsource shows the reference itself
    return call


def _numpy_row(spec: EstimatorSpec) -> Callable:
    kernel_fn = spec.kernel

    def numpy_kernel(graph, params, *, device: str = "cpu"):
        return kernel_fn(graph, params)

    numpy_kernel.__name__ = numpy_kernel.__qualname__ = f"{spec.name}_numpy"
    numpy_kernel.__module__, numpy_kernel.__doc__ = kernel_fn.__module__, kernel_fn.__doc__
    return numpy_kernel


def _describe(i: ParamInfo) -> str:
    """One Args entry: the help, the default and the allowed values."""
    if i.choices is not None:
        allowed = "one of " + ", ".join(repr(c) for c in i.choices)
    elif i.low is not None or i.high is not None:
        lo = "-inf" if i.low is None else f"{i.low:g}"
        hi = "inf" if i.high is None else f"{i.high:g}"
        allowed = f"in {'(' if i.low_open else '['}{lo}, {hi}{')' if i.high_open else ']'}"
        if (i.low is not None and i.default < i.low) or (i.high is not None and i.default > i.high):
            allowed += f" or {i.default!r}"  # e.g. depth = inf
    else:
        allowed = ""
    tail = f"Default {i.default!r}" + (f"; {allowed}." if allowed else ".")
    return textwrap.fill(
        f"{i.name} ({i.type.__name__}): {i.help.rstrip('.')}. {tail}",
        width=100,
        initial_indent="    ",
        subsequent_indent="        ",
        break_on_hyphens=False,
    )


#: The kernel docstring's Args entry for its params object: ``p:`` and its continuation lines.
_P_ENTRY = re.compile(r"^    p: .*\n(?:        .*\n)*", re.M)


def _public_doc(spec: EstimatorSpec) -> str:
    """The kernel's docstring with its ``p:`` Args entry replaced by the fields' entries."""
    doc = inspect.cleandoc(spec.kernel.__doc__ or "") + "\n"
    entries = "".join(_describe(i) + "\n" for i in param_infos(spec.params_cls))
    return _P_ENTRY.sub(lambda _: entries, doc, count=1).rstrip("\n")


def backends(spec: EstimatorSpec) -> tuple[str, ...]:
    """The backends ``spec`` has, in the order the README and the Estimators page list them."""
    return tuple(b for b in BACKEND_ORDER if kernel(spec.name, b) is not None)


def names() -> list[str]:
    return list(_REGISTRY)


def specs() -> list[EstimatorSpec]:
    return list(_REGISTRY.values())


def get(name: str) -> EstimatorSpec:
    try:
        return _REGISTRY[name]
    except KeyError:
        raise UnknownEstimatorError(f"unknown estimator '{name}'; valid: {', '.join(_REGISTRY)}") from None


def param_infos(params_cls: type) -> list[ParamInfo]:
    hints = {f.name: f.type for f in dataclasses.fields(params_cls)}
    out = []
    for f in dataclasses.fields(params_cls):
        md = f.metadata
        typ = hints[f.name]
        if isinstance(typ, str):
            typ = {"float": float, "int": int, "bool": bool, "str": str}.get(typ, str)
        out.append(
            ParamInfo(
                f.name,
                typ,
                f.default,
                md.get("help", ""),
                md.get("low"),
                md.get("high"),
                tuple(md["choices"]) if md.get("choices") else None,
                md.get("low_open", False),
                md.get("high_open", False),
            )
        )
    return out


def _coerce(estimator: str, info: ParamInfo, value):
    if isinstance(value, str):
        s = value.strip()
        if info.type is bool:
            if s.lower() in ("true", "1", "yes"):
                return True
            if s.lower() in ("false", "0", "no"):
                return False
            raise _input_error(estimator, info, f"expected true/false, got {value!r}")
        if info.type in (int, float):
            if s.lower() in ("inf", "infinity", "∞"):
                return math.inf
            try:
                return int(s) if info.type is int else float(s)
            except ValueError:
                raise _input_error(estimator, info, f"expected {info.type.__name__}, got {value!r}") from None
        return s
    if info.type is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    return value


def _out_of_bounds(estimator: str, i: ParamInfo, v) -> EstimatorInputError | None:
    """The error for value ``v`` of parameter ``i``, or None when it is allowed (the message
    is built only on the error path: this runs on every estimator call)."""
    if i.choices is not None:
        if v in i.choices:
            return None
        return _input_error(estimator, i, f"expected one of {', '.join(map(str, i.choices))}, got {v!r}")
    if i.low is None and i.high is None:
        return None
    try:
        above = i.low is None or (v > i.low if i.low_open else v >= i.low)
        below = i.high is None or (v < i.high if i.high_open else v <= i.high)
        if above and (below or v == i.default):  # e.g. depth = inf
            return None
    except TypeError:
        return _input_error(estimator, i, f"expected {i.type.__name__}, got {v!r}")
    if v != v:
        return _input_error(estimator, i, "NaN is not allowed")
    if not above:
        return _input_error(estimator, i, f"must be {'>' if i.low_open else '>='} {i.low}, got {v}")
    return _input_error(estimator, i, f"must be {'<' if i.high_open else '<='} {i.high}, got {v}")


def _input_error(estimator: str, i: ParamInfo, what: str) -> EstimatorInputError:
    return EstimatorInputError(f"parameter '{i.name}' of '{estimator}': {what}")


@functools.cache
def _infos_by_name(params_cls: type) -> dict[str, ParamInfo]:
    return {i.name: i for i in param_infos(params_cls)}


def _reject_unknown(spec: EstimatorSpec, names, infos: dict[str, ParamInfo]) -> None:
    unknown = [n for n in names if n not in infos]
    if unknown:
        raise EstimatorInputError(
            f"unknown parameter(s) {', '.join(unknown)} for estimator "
            f"'{spec.name}'; valid: {', '.join(infos) or '(none)'}"
        )


def check_params(spec: EstimatorSpec, params: dict) -> None:
    """Raise `EstimatorInputError` for an unknown name or a value outside its bounds/choices."""
    infos = _infos_by_name(spec.params_cls)
    for k, v in params.items():
        i = infos.get(k)
        if i is None:
            _reject_unknown(spec, params, infos)
        err = _out_of_bounds(spec.name, i, v)
        if err is not None:
            raise err


def make_params(spec: EstimatorSpec, **overrides):
    """Build and check ``spec``'s params; unknown names and out-of-bounds values raise
    `EstimatorInputError` (a ``ValueError``); strings are coerced to the field's type."""
    infos = _infos_by_name(spec.params_cls)
    _reject_unknown(spec, overrides, infos)
    values = {k: _coerce(spec.name, infos[k], v) for k, v in overrides.items()}
    check_params(spec, values)
    return spec.params_cls(**values)
