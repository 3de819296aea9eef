"""The one estimator registry (STYLE.md): the UI, the CLI, the reference page and the
coverage test all iterate it.

Each estimator registers an `EstimatorSpec`: its pure numpy function
``fn(graph, *, <hyper-parameters>) -> CreditResult``, an optional batched torch twin with
the same signature plus ``device=``, and a frozen params dataclass whose fields carry a
default, one-line help and bounds (built with `param`).
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any, Callable

from ..errors import CrbcVizError

__all__ = ["param", "ParamInfo", "EstimatorSpec", "register", "get", "names", "specs",
           "param_infos", "make_params", "UnknownEstimatorError", "MissingSignalError"]


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
    if spec.name in _REGISTRY:
        old = _REGISTRY[spec.name]
        raise ValueError(f"duplicate estimator name '{spec.name}': {old.fn.__module__}.{old.fn.__name__} "
                         f"and {spec.fn.__module__}.{spec.fn.__name__}")
    _REGISTRY[spec.name] = spec
    return spec


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


def _coerce(info: ParamInfo, value):
    if isinstance(value, str):
        s = value.strip()
        if info.type is bool:
            if s.lower() in ("true", "1", "yes"):
                return True
            if s.lower() in ("false", "0", "no"):
                return False
            raise ValueError(f"parameter '{info.name}': expected true/false, got {value!r}")
        if info.type in (int, float):
            if s.lower() in ("inf", "infinity", "∞"):
                return math.inf
            try:
                return int(s) if info.type is int else float(s)
            except ValueError:
                raise ValueError(f"parameter '{info.name}': expected {info.type.__name__}, "
                                 f"got {value!r}") from None
        return s
    if info.type is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    return value


def make_params(spec: EstimatorSpec, **overrides):
    """Build and check ``spec``'s params; unknown names and out-of-bounds values raise."""
    infos = {i.name: i for i in param_infos(spec.params_cls)}
    unknown = [k for k in overrides if k not in infos]
    if unknown:
        raise ValueError(f"unknown parameter(s) {', '.join(unknown)} for estimator '{spec.name}'; "
                         f"valid: {', '.join(infos) or '(none)'}")
    values = {k: _coerce(infos[k], v) for k, v in overrides.items()}
    for k, v in values.items():
        i = infos[k]
        if i.choices is not None and v not in i.choices:
            raise ValueError(f"parameter '{k}' of '{spec.name}': expected one of "
                             f"{', '.join(map(str, i.choices))}, got {v!r}")
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            if isinstance(v, float) and math.isnan(v):
                raise ValueError(f"parameter '{k}' of '{spec.name}': NaN is not allowed")
            if i.low is not None and (v < i.low or (i.low_open and v == i.low)):
                raise ValueError(f"parameter '{k}' of '{spec.name}': must be "
                                 f"{'>' if i.low_open else '>='} {i.low}, got {v}")
            if i.high is not None and v > i.high:
                raise ValueError(f"parameter '{k}' of '{spec.name}': must be <= {i.high}, got {v}")
    return spec.params_cls(**values)
