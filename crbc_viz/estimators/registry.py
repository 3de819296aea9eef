"""The one estimator registry (STYLE.md): the UI, the CLI, the reference page and the
coverage test all iterate it.

Each estimator registers an `EstimatorSpec`: its pure numpy function
``fn(graph, *, <hyper-parameters>) -> CreditResult``, an optional batched torch twin with
the same signature plus ``device=``, and a frozen params dataclass whose fields carry a
default, one-line help and bounds (built with `param`).

`register` wraps the numpy function and each twin so that every call, direct or through
`crbc_viz.score`, checks its keyword parameters against the dataclass's bounds and choices
(`check_params`) and raises `EstimatorInputError` naming the estimator, the parameter, the
bound and the value.
"""
from __future__ import annotations

import dataclasses
import functools
import inspect
import math
import sys
from dataclasses import dataclass, field
from typing import Any, Callable

from ..errors import CrbcVizError, EstimatorInputError

__all__ = ["param", "ParamInfo", "EstimatorSpec", "register", "get", "names", "specs",
           "param_infos", "make_params", "check_params", "backends", "UnknownEstimatorError",
           "MissingSignalError", "EstimatorInputError"]


class UnknownEstimatorError(CrbcVizError, KeyError):
    def __str__(self) -> str:
        return str(self.args[0])


class MissingSignalError(CrbcVizError, ValueError):
    """An estimator needs optional logged fields that the batch lacks."""

    def __init__(self, estimator: str, fields: list[str]):
        self.estimator, self.fields = estimator, list(fields)
        super().__init__(f"estimator '{estimator}' needs logged field(s) "
                         f"{', '.join(repr(f) for f in fields)} (SCHEMA.md, optional fields); "
                         f"the input has none")


def param(default, help: str, *, low=None, high=None, choices=None, low_open=False):
    """A params-dataclass field with its help text and bounds."""
    return field(default=default, metadata={"help": help, "low": low, "high": high,
                                            "choices": choices, "low_open": low_open})


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


@dataclass(frozen=True)
class EstimatorSpec:
    name: str
    title: str
    paper: str
    equation: str
    section: str
    fn: Callable
    params_cls: type
    torch_fn: Callable | None = None
    requires: tuple[str, ...] = ()
    numba_fn: Callable | None = None


_REGISTRY: dict[str, EstimatorSpec] = {}


def register(spec: EstimatorSpec) -> EstimatorSpec:
    """Register ``spec`` with its functions wrapped by the parameter check (`_checked`).

    The numpy function's name in its own module is rebound to the checked one, so
    ``from crbc_viz.estimators.crbc import crbc; crbc(graph, beta=1.5)`` raises too. The
    twins get the dataclass defaults for every parameter not passed (one source of defaults).
    """
    if spec.name in _REGISTRY:
        old = _REGISTRY[spec.name]
        raise ValueError(f"duplicate estimator name '{spec.name}': {old.fn.__module__}.{old.fn.__name__} "
                         f"and {spec.fn.__module__}.{spec.fn.__name__}")
    checked = dataclasses.replace(
        spec, fn=_checked(spec, spec.fn),
        torch_fn=spec.torch_fn and _checked(spec, spec.torch_fn, fill_defaults=True),
        numba_fn=spec.numba_fn and _checked(spec, spec.numba_fn, fill_defaults=True))
    module = sys.modules.get(spec.fn.__module__)
    if module is not None and getattr(module, spec.fn.__name__, None) is spec.fn:
        setattr(module, spec.fn.__name__, checked.fn)
    _REGISTRY[spec.name] = checked
    return checked


def backends(spec: EstimatorSpec) -> tuple[str, ...]:
    """The backends ``spec`` has, in the order the README and the Estimators page list them."""
    return ("numpy",) + (("torch",) if spec.torch_fn else ()) + (("numba",) if spec.numba_fn else ())


def names() -> list[str]:
    return list(_REGISTRY)


def specs() -> list[EstimatorSpec]:
    return list(_REGISTRY.values())


def get(name: str) -> EstimatorSpec:
    try:
        return _REGISTRY[name]
    except KeyError:
        raise UnknownEstimatorError(
            f"unknown estimator '{name}'; valid: {', '.join(_REGISTRY)}") from None


def param_infos(params_cls: type) -> list[ParamInfo]:
    hints = {f.name: f.type for f in dataclasses.fields(params_cls)}
    out = []
    for f in dataclasses.fields(params_cls):
        md = f.metadata
        typ = hints[f.name]
        if isinstance(typ, str):
            typ = {"float": float, "int": int, "bool": bool, "str": str}.get(typ, str)
        out.append(ParamInfo(f.name, typ, f.default, md.get("help", ""), md.get("low"),
                             md.get("high"), tuple(md["choices"]) if md.get("choices") else None,
                             md.get("low_open", False)))
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
                raise _input_error(estimator, info,
                                   f"expected {info.type.__name__}, got {value!r}") from None
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
        if above and (i.high is None or v <= i.high or v == i.default):  # e.g. depth = inf
            return None
    except TypeError:
        return _input_error(estimator, i, f"expected {i.type.__name__}, got {v!r}")
    if v != v:
        return _input_error(estimator, i, "NaN is not allowed")
    if not above:
        return _input_error(estimator, i, f"must be {'>' if i.low_open else '>='} {i.low}, got {v}")
    return _input_error(estimator, i, f"must be <= {i.high}, got {v}")


def _input_error(estimator: str, i: ParamInfo, what: str) -> EstimatorInputError:
    return EstimatorInputError(f"parameter '{i.name}' of '{estimator}': {what}")


@functools.lru_cache(maxsize=None)
def _infos_by_name(params_cls: type) -> dict[str, ParamInfo]:
    return {i.name: i for i in param_infos(params_cls)}


def _reject_unknown(spec: EstimatorSpec, names, infos: dict[str, ParamInfo]) -> None:
    unknown = [n for n in names if n not in infos]
    if unknown:
        raise EstimatorInputError(f"unknown parameter(s) {', '.join(unknown)} for estimator "
                                  f"'{spec.name}'; valid: {', '.join(infos) or '(none)'}")


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


def _checked(spec: EstimatorSpec, fn: Callable, *, fill_defaults: bool = False) -> Callable:
    """``fn`` behind `check_params`. Keywords of ``fn``'s own that are not parameters
    (``graph``, a twin's ``device``) pass unchecked; ``fill_defaults`` passes every parameter
    not given at its dataclass default."""
    defaults = {f.name: f.default for f in dataclasses.fields(spec.params_cls)}
    own = frozenset(n for n, p in inspect.signature(fn).parameters.items()
                    if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL) and n not in defaults)

    @functools.wraps(fn)
    def call(*args, **kw):
        if kw:
            check_params(spec, {k: v for k, v in kw.items() if k not in own} if own & kw.keys() else kw)
        return fn(*args, **({**defaults, **kw} if fill_defaults else kw))

    return call


def make_params(spec: EstimatorSpec, **overrides):
    """Build and check ``spec``'s params; unknown names and out-of-bounds values raise
    `EstimatorInputError` (a ``ValueError``); strings are coerced to the field's type."""
    infos = _infos_by_name(spec.params_cls)
    _reject_unknown(spec, overrides, infos)
    values = {k: _coerce(spec.name, infos[k], v) for k, v in overrides.items()}
    check_params(spec, values)
    return spec.params_cls(**values)
