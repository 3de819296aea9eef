"""One widget builder for every estimator's params dataclass (``registry.param_infos``):
sliders / number inputs for numbers, a selectbox for choices, a checkbox for bools, and
slider + "∞" for a depth.

Each widget's range is the registry's bounds (`control`): every value the registry accepts is
one the widget can hold, except a depth the select-slider does not offer. A link's parameter
(``p=k=v;k=v``) that the registry or the widget refuses is reported (`params_from_url`: the
parameter, the value, what is `allowed`) and the default is used.

Values persist per estimator in ``st.session_state["_params"]`` even while the estimator's
widgets are not shown (Streamlit drops the state of widgets that are not drawn).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import streamlit as st

from ..estimators import registry
from .text import md

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
    "Control",
    "control",
    "allowed",
    "refusal",
    "MAX_URL_PROBLEMS",
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


#: Largest integer a browser number holds exactly (Streamlit refuses widget values beyond it).
_JS_MAX_INT = 2**53 - 1


@dataclass(frozen=True)
class Control:
    """How one parameter is drawn: the widget ``kind`` ("depth", "choice", "bool", "slider",
    "number", "text") and, for numbers, the closed range ``[low, high]`` it offers (None: no
    bound), its ``step`` and display ``format``."""

    kind: str
    low: float | int | None = None
    high: float | int | None = None
    step: float | int | None = None
    format: str | None = None


def control(info) -> Control:
    """The widget for parameter ``info``, with its range taken from the registry's bounds.

    An open bound becomes the nearest representable number inside it (``(0, 1)`` offers
    ``[5e-324, 1 - 2**-53]``), so every value the registry accepts is a value the widget can
    hold; a float with an open bound gets a number input (a slider could only start at a
    step from the bound). Floats are displayed with ``%g``: the value as stored, not rounded.
    """
    if _is_depth(info):
        return Control("depth")
    if info.choices is not None:
        return Control("choice")
    if info.type is bool:
        return Control("bool")
    if info.type is int:
        lo = None if info.low is None else int(info.low) + (1 if info.low_open else 0)
        hi = None if info.high is None else int(info.high) - (1 if info.high_open else 0)
        kind = "slider" if lo is not None and hi is not None and hi - lo <= 100 else "number"
        return Control(kind, lo, hi, 1)
    if info.type is float:
        lo = None if info.low is None else float(info.low)
        hi = None if info.high is None else float(info.high)
        if lo is not None and info.low_open:
            lo = math.nextafter(lo, math.inf)
        if hi is not None and info.high_open:
            hi = math.nextafter(hi, -math.inf)
        default = float(info.default)
        bounded = lo is not None and hi is not None and math.isfinite(lo) and math.isfinite(hi)
        if bounded and not (info.low_open or info.high_open) and hi - lo <= 10.0:
            step = _slider_step(lo, hi)
            if default == 0.0 or abs(default) >= step:
                return Control("slider", lo, hi, step, "%g")
        # The step comes from the declared bounds: (0, 1) steps by 0.01, not by 0.0099….
        step = max((float(info.high) - float(info.low)) / 100.0, 1e-9) if bounded else None
        return Control("number", lo, hi, step, "%g")
    return Control("text")


def _num(v) -> str:
    return "∞" if isinstance(v, float) and math.isinf(v) else f"{v:g}" if isinstance(v, float) else str(v)


def allowed(info) -> str:
    """The values parameter ``info`` takes, as its widget offers them: ``(0, 1]``,
    ``one of std, mean``, ``true or false``, ``0 … 30 or ∞``."""
    if _is_depth(info):
        return f"a whole number {DEPTH_OPTIONS[0]} … {DEPTH_OPTIONS[-2]}, or {INF_LABEL} (inf)"
    if info.choices is not None:
        return "one of " + ", ".join(map(str, info.choices))
    if info.type is bool:
        return "true or false"
    if info.type in (int, float):
        if info.low is None and info.high is None:
            return "any finite " + ("whole number" if info.type is int else "number")
        lo = "−∞" if info.low is None else _num(info.low)
        hi = "∞" if info.high is None else _num(info.high)
        left = "(" if info.low_open or info.low is None else "["
        right = ")" if info.high_open or info.high is None else "]"
        return ("whole numbers in " if info.type is int else "") + f"{left}{lo}, {hi}{right}"
    return "text"


def refusal(info, value) -> str | None:
    """Why parameter ``info``'s widget cannot hold ``value`` (already accepted by the registry),
    or None when it can."""
    c = control(info)
    if c.kind in ("depth", "slider", "number") and (
        isinstance(value, bool) or not isinstance(value, (int, float))
    ):
        return f"{value!r} is not a number"
    if c.kind == "depth":
        v = float(value)
        if math.isinf(v) and v > 0:
            return None
        if not (math.isfinite(v) and v == int(v)):
            return f"{_num(v)} is not a whole number"
        if not DEPTH_OPTIONS[0] <= int(v) <= DEPTH_OPTIONS[-2]:
            return f"{int(v)} is beyond what the control offers"
        return None
    if c.kind in ("slider", "number"):
        if not math.isfinite(value):
            return f"{_num(float(value))} cannot be shown by the control"
        if isinstance(value, int) and abs(value) > _JS_MAX_INT:
            return f"{value} is too large for the control"
        if (c.low is not None and value < c.low) or (c.high is not None and value > c.high):
            return f"{_num(value)} is outside the control's range"
    if c.kind == "choice" and value not in info.choices:
        return f"{value!r} is not one of the choices"
    return None


def _widget_value(info, value):
    """Store value → the value the widget holds (`refusal` has passed it)."""
    if _is_depth(info):
        return INF_LABEL if math.isinf(float(value)) else int(value)
    if info.type is float and info.choices is None:
        return float(value)
    return value


def param_widgets(name: str, *, container=None, key_prefix: str = "param") -> dict:
    """Draw one widget per parameter of estimator ``name`` in ``container`` and return the
    current values (also stored for `current_params`).

    A stored value the widget cannot hold (set by code, not by the widget) is replaced by the
    default, with a warning naming the parameter, the value and what is allowed."""
    c = container if container is not None else st
    spec = registry.get(name)
    values = current_params(name)
    out = {}
    for info in registry.param_infos(spec.params_cls):
        key = f"{key_prefix}.{name}.{info.name}"
        if key not in st.session_state:
            v = values[info.name]
            why = refusal(info, v)
            if why is not None:
                c.warning(md(_refused(name, info, v, why)))
                v = info.default
            st.session_state[key] = _widget_value(info, v)
        label, helptext = info.name, info.help or None
        w = control(info)
        if w.kind in ("slider", "number"):
            helptext = f"{helptext or ''} (allowed: {allowed(info)})".strip()
        if w.kind == "depth":
            v = c.select_slider(f"{label} (K)", options=DEPTH_OPTIONS, key=key, help=helptext)
            val = math.inf if v == INF_LABEL else int(v)
        elif w.kind == "choice":
            val = c.selectbox(label, options=list(info.choices), key=key, help=helptext)
        elif w.kind == "bool":
            val = c.checkbox(label, key=key, help=helptext)
        elif w.kind == "slider":
            kw = {"format": w.format} if w.format else {}
            val = c.slider(
                label, min_value=w.low, max_value=w.high, step=w.step, key=key, help=helptext, **kw
            )
        elif w.kind == "number":
            kw = {"format": w.format} if w.format else {}
            val = c.number_input(
                label, min_value=w.low, max_value=w.high, step=w.step, key=key, help=helptext, **kw
            )
        else:
            val = c.text_input(label, key=key, help=helptext)
        out[info.name] = float(val) if info.type is float and w.kind in ("slider", "number") else val
    set_params(name, out)
    return out


def checked_params(name: str, *, container=None) -> dict:
    """The current values of estimator ``name``'s parameters without drawing their widgets
    (their panel is closed): a stored value a widget could not hold is replaced by the
    default, as `param_widgets` would, with the same warning in ``container``."""
    c = container if container is not None else st
    values = current_params(name)
    for info in registry.param_infos(registry.get(name).params_cls):
        why = refusal(info, values[info.name])
        if why is not None:
            c.warning(md(_refused(name, info, values[info.name], why)))
            values[info.name] = info.default
    set_params(name, values)
    return values


def _refused(name: str, info, value, why: str) -> str:
    return (
        f"parameter '{info.name}' of '{name}': {why}; allowed: {allowed(info)}; "
        f"using the default {_num(info.default)}"
    )


def params_to_url(name: str, values: dict) -> str:
    """Non-default parameters as ``k=v;k=v`` (``inf`` for ∞), for the shareable URL."""
    d = defaults(name)
    parts = []
    for k, v in values.items():
        if v != d.get(k):
            parts.append(f"{k}={'inf' if isinstance(v, float) and math.isinf(v) else v}")
    return ";".join(parts)


#: Most problems listed for one link's parameters; the rest are counted in one more line.
MAX_URL_PROBLEMS = 10


def params_from_url(name: str, text: str) -> tuple[dict, list[str]]:
    """Parse ``k=v;k=v`` for estimator ``name``: (valid values, problems).

    A value is kept only when the registry accepts it (`registry.make_params`) and its widget
    can hold it (`refusal`); otherwise the problem names the parameter, the value and what is
    allowed, and the parameter keeps its default. A name given twice keeps its first value."""
    spec = registry.get(name)
    infos = {i.name: i for i in registry.param_infos(spec.params_cls)}
    good: dict = {}
    problems: list[str] = []
    seen: set[str] = set()
    for part in filter(None, (p.strip() for p in text.split(";"))):
        k, eq, raw = part.partition("=")
        k = k.strip()
        info = infos.get(k)
        if info is None:
            problems.append(
                f"unknown parameter '{k}' for estimator '{name}' in the link; valid: {', '.join(infos) or '(none)'}"
            )
            continue
        if k in seen:
            problems.append(
                f"parameter '{k}' of '{name}' is given more than once in the link; the first is used"
            )
            continue
        seen.add(k)
        if not eq:
            problems.append(_refused(name, info, "", "expected name=value in the link, got no value"))
            continue
        try:
            value = getattr(registry.make_params(spec, **{k: raw}), k)
        except (ValueError, TypeError) as e:
            problems.append(f"{e}; allowed: {allowed(info)}; using the default {_num(info.default)}")
            continue
        why = refusal(info, value)
        if why is not None:
            problems.append(_refused(name, info, value, why))
            continue
        good[k] = value
    if len(problems) > MAX_URL_PROBLEMS:
        more = len(problems) - MAX_URL_PROBLEMS
        problems = problems[:MAX_URL_PROBLEMS] + [f"… and {more} more problem(s) with the link's parameters"]
    return good, problems
