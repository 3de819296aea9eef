"""One widget builder for every estimator's params dataclass (``registry.param_infos``):
sliders / number inputs with bounds and help for numbers, a selectbox for choices, a checkbox
for bools, and slider + "∞" for a depth.

Values persist per estimator in ``st.session_state["_params"]`` even while the estimator's
widgets are not shown (Streamlit drops the state of widgets that are not drawn).
"""

from __future__ import annotations

import math

import streamlit as st

from ..estimators import registry

__all__ = [
    "param_widgets",
    "current_params",
    "set_params",
    "params_to_url",
    "params_from_url",
    "DEPTH_OPTIONS",
    "INF_LABEL",
    "defaults",
    "estimator_names",
]

INF_LABEL = "∞"
#: The finite-depth choices offered for a depth parameter (0 … 30, then the exact closure).
DEPTH_OPTIONS: list = list(range(31)) + [INF_LABEL]
_STORE = "_params"


def estimator_names() -> list[str]:
    """The registered estimators' names, in registry order (what every picker offers)."""
    return registry.names()


def defaults(name: str) -> dict:
    return {i.name: i.default for i in registry.param_infos(registry.get(name).params_cls)}


def _store() -> dict:
    return st.session_state.setdefault(_STORE, {})


def current_params(name: str) -> dict:
    """The parameters last set for estimator ``name`` (its defaults for anything never set)."""
    out = defaults(name)
    out.update(_store().get(name, {}))
    return out


def set_params(name: str, values: dict) -> None:
    _store().setdefault(name, {}).update(values)


def _is_depth(info) -> bool:
    return info.name == "depth" or (isinstance(info.default, float) and math.isinf(info.default))


def _slider_step(lo: float, hi: float) -> float:
    span = hi - lo
    return 0.01 if span <= 1.0 else 0.05 if span <= 10.0 else 0.5


def _widget_value(info, value):
    """Store value → the value the widget holds."""
    if _is_depth(info):
        return INF_LABEL if math.isinf(float(value)) else min(int(value), DEPTH_OPTIONS[-2])
    return value


def param_widgets(name: str, *, container=None, key_prefix: str = "param") -> dict:
    """Draw one widget per parameter of estimator ``name`` in ``container`` and return the
    current values (also stored for `current_params`)."""
    c = container if container is not None else st
    spec = registry.get(name)
    values = current_params(name)
    out = {}
    for info in registry.param_infos(spec.params_cls):
        key = f"{key_prefix}.{name}.{info.name}"
        if key not in st.session_state:
            st.session_state[key] = _widget_value(info, values[info.name])
        label, helptext = info.name, info.help or None
        if _is_depth(info):
            v = c.select_slider(f"{label} (K)", options=DEPTH_OPTIONS, key=key, help=helptext)
            val = math.inf if v == INF_LABEL else int(v)
        elif info.choices is not None:
            val = c.selectbox(label, options=list(info.choices), key=key, help=helptext)
        elif info.type is bool:
            val = c.checkbox(label, key=key, help=helptext)
        elif info.type is int:
            lo = None if info.low is None else int(info.low) + (1 if info.low_open else 0)
            hi = None if info.high is None else int(info.high) - (1 if info.high_open else 0)
            if lo is not None and hi is not None and hi - lo <= 100:
                val = c.slider(label, min_value=lo, max_value=hi, step=1, key=key, help=helptext)
            else:
                val = c.number_input(label, min_value=lo, max_value=hi, step=1, key=key, help=helptext)
        elif info.type is float:
            lo = None if info.low is None else float(info.low)
            hi = None if info.high is None else float(info.high)
            default = float(info.default)
            if (
                lo is not None
                and hi is not None
                and hi - lo <= 10.0
                and (default == 0.0 or abs(default) >= _slider_step(lo, hi))
            ):
                step = _slider_step(lo, hi)
                val = c.slider(
                    label,
                    min_value=lo + (step if info.low_open else 0.0),
                    max_value=hi - (step if info.high_open else 0.0),
                    step=step,
                    key=key,
                    help=helptext,
                )
            else:
                fmt = "%.2e" if default != 0.0 and abs(default) < 1e-3 else "%g"
                val = c.number_input(
                    label,
                    min_value=lo,
                    max_value=hi,
                    key=key,
                    help=helptext,
                    format=fmt,
                    step=None if lo is None or hi is None else max((hi - lo) / 100.0, 1e-9),
                )
            val = float(val)
        else:
            val = c.text_input(label, key=key, help=helptext)
        out[info.name] = val
    set_params(name, out)
    return out


def params_to_url(name: str, values: dict) -> str:
    """Non-default parameters as ``k=v;k=v`` (``inf`` for ∞), for the shareable URL."""
    d = defaults(name)
    parts = []
    for k, v in values.items():
        if v != d.get(k):
            parts.append(f"{k}={'inf' if isinstance(v, float) and math.isinf(v) else v}")
    return ";".join(parts)


def params_from_url(name: str, text: str) -> tuple[dict, list[str]]:
    """Parse ``k=v;k=v`` for estimator ``name``: (valid values, problems)."""
    spec = registry.get(name)
    good, problems = {}, []
    for part in filter(None, (p.strip() for p in text.split(";"))):
        k, _, v = part.partition("=")
        try:
            p = registry.make_params(spec, **{k.strip(): v})
            good[k.strip()] = getattr(p, k.strip())
        except (ValueError, TypeError) as e:
            problems.append(str(e))
    return good, problems
