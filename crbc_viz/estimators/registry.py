"""The one estimator registry (STYLE.md): the UI, the CLI, the reference page and the
coverage test all iterate it.

Each estimator registers an `EstimatorSpec`: its pure numpy function
``fn(graph, *, <hyper-parameters>) -> CreditResult`` and a frozen params dataclass whose
fields carry a default, one-line help and bounds (built with `param`).

`register` wraps the numpy function so that every call, direct or through `crbc_viz.score`,
checks its keyword parameters against the dataclass's bounds and choices (`check_params`) and
raises `EstimatorInputError` naming the estimator, the parameter, the bound and the value.

The kernel table: ``KERNELS[(name, backend)]`` is a function
``kernel(graph, params, *, device) -> CreditResult`` taking the already-checked params object.
`register` fills the ``numpy`` row; the backend packages (``crbc_viz.backends.torch``,
``crbc_viz.backends.numba``) add theirs with ``@implements(name, backend)`` when imported. This
module never imports them: the package facade installs the one function that loads them
(``crbc_viz._hooks.kernel_loader``, which calls `crbc_viz.api.load_backends`), run the first
time the table is read.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import math
import sys
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
    name: str
    title: str
    paper: str
    equation: str
    section: str
    fn: Callable
    params_cls: type
    requires: tuple[str, ...] = ()

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


def implements(name: str, backend: str) -> Callable[[Callable], Callable]:
    """Register the decorated ``kernel(graph, params, *, device)`` as ``name``'s ``backend`` row."""

    def add(fn: Callable) -> Callable:
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


def kernels() -> list[tuple[str, str, Callable]]:
    """Every registered ``(estimator, backend, kernel)``, registry order then `BACKEND_ORDER`."""
    load_kernels()
    return [(n, b, KERNELS[(n, b)]) for n in _REGISTRY for b in BACKEND_ORDER if (n, b) in KERNELS]


def _keyword_view(spec: EstimatorSpec, backend: str) -> Callable | None:
    fn = kernel(spec.name, backend)
    if fn is None:
        return None

    @functools.wraps(fn)
    def call(graph, *, device: str = "auto", **params):
        return fn(graph, make_params(spec, **params), device=device)

    return call


def register(spec: EstimatorSpec) -> EstimatorSpec:
    """Register ``spec`` with its functions wrapped by the parameter check (`_checked`).

    The numpy function's name in its own module is rebound to the checked one, so
    ``from crbc_viz.estimators.crbc import crbc; crbc(graph, beta=1.5)`` raises too. The
    numpy kernel row calls the unwrapped function with the params object's fields.
    """
    if spec.name in _REGISTRY:
        old = _REGISTRY[spec.name]
        raise ValueError(
            f"duplicate estimator name '{spec.name}': {old.fn.__module__}.{old.fn.__name__} "
            f"and {spec.fn.__module__}.{spec.fn.__name__}"
        )
    checked = dataclasses.replace(spec, fn=_checked(spec, spec.fn))
    raw = spec.fn

    def numpy_kernel(graph, params, *, device: str = "cpu"):
        return raw(graph, **{f: getattr(params, f) for f in params.__dataclass_fields__})

    implements(spec.name, "numpy")(functools.wraps(raw)(numpy_kernel))
    module = sys.modules.get(spec.fn.__module__)
    if module is not None and getattr(module, spec.fn.__name__, None) is spec.fn:
        setattr(module, spec.fn.__name__, checked.fn)
    _REGISTRY[spec.name] = checked
    return checked


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


def _checked(spec: EstimatorSpec, fn: Callable) -> Callable:
    """``fn`` behind `check_params`. Keywords of ``fn``'s own that are not parameters
    (``graph``) pass unchecked."""
    defaults = {f.name: f.default for f in dataclasses.fields(spec.params_cls)}
    own = frozenset(
        n
        for n, p in inspect.signature(fn).parameters.items()
        if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL) and n not in defaults
    )

    @functools.wraps(fn)
    def call(*args, **kw):
        if kw:
            check_params(spec, {k: v for k, v in kw.items() if k not in own} if own & kw.keys() else kw)
        return fn(*args, **kw)

    return call


def make_params(spec: EstimatorSpec, **overrides):
    """Build and check ``spec``'s params; unknown names and out-of-bounds values raise
    `EstimatorInputError` (a ``ValueError``); strings are coerced to the field's type."""
    infos = _infos_by_name(spec.params_cls)
    _reject_unknown(spec, overrides, infos)
    values = {k: _coerce(spec.name, infos[k], v) for k, v in overrides.items()}
    check_params(spec, values)
    return spec.params_cls(**values)
