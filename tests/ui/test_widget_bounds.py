"""Parameter widgets take their range from the registry, and a link's value that the registry or
the widget refuses is reported, never a crash (`streamlit.testing.v1.AppTest` over ``app.py``).

For every parameter of every registered estimator, hostile link values (below the lower bound,
above the upper, 1e-300, nan, ±inf, text) give either the value itself in the widget (when the
parameter's declared bounds allow it, worked out here from the bounds, not by the app's code) or
a sidebar warning naming the parameter, the value and what is allowed, with the default in the
widget. Values just inside an open or closed bound are held exactly.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from crbc_viz.estimators import registry
from crbc_viz.ui.params import MAX_URL_PROBLEMS
from crbc_viz.ui.sidebar import PARAMS_OPEN

REPO = Path(__file__).resolve().parents[2]
PAGE = "crbc_viz/app/app_pages/estimators.py"  # the lightest page that draws the shared sidebar
TIMEOUT = 120
#: Parameters set per link: each refused one is one warning, and a link's warnings are capped.
CHUNK = MAX_URL_PROBLEMS
#: The depth control offers 0 … 30 and ∞ (a select-slider); the registry allows more.
DEPTH_MAX_SHOWN = 30


def is_depth(info) -> bool:
    return info.name == "depth" or (isinstance(info.default, float) and math.isinf(info.default))


def hostile(info) -> list[str]:
    """The link values tried for parameter ``info``."""
    out = ["1e-300", "nan", "inf", "-inf", "abc"]
    if info.type in (int, float) and info.choices is None:
        one = 1 if info.type is int else 1.0
        if info.low is not None:
            out.append(str(info.type(info.low) - one))
        if info.high is not None:
            out.append(str(info.type(info.high) + one))
    else:
        out.append("-1")
    return out


def expected(info, raw: str):
    """The value the widget must hold for link value ``raw``, or None when it must be refused:
    from the parameter's declared type and bounds (and the depth control's options)."""
    if info.choices is not None:
        return raw if raw in info.choices else None
    if info.type is bool:
        return {"true": True, "1": True, "yes": True, "false": False, "0": False, "no": False}.get(raw)
    try:
        v = int(raw) if info.type is int else float(raw)
    except ValueError:
        return None
    if v != v:
        return None
    if is_depth(info):
        if math.isinf(v):
            return math.inf if v > 0 else None
        return v if v == int(v) and 0 <= v <= DEPTH_MAX_SHOWN else None
    if math.isinf(v):
        return None
    if info.low is not None and (v <= info.low if info.low_open else v < info.low):
        return None
    if info.high is not None and (v >= info.high if info.high_open else v > info.high):
        return None
    return v


def widget_value(at: AppTest, name: str, info):
    key = f"param.{name}.{info.name}"
    for kind in ("select_slider", "selectbox", "checkbox", "slider", "number_input", "text_input"):
        found = [w for w in getattr(at.sidebar, kind) if w.key == key]
        if found:
            v = found[0].value
            if is_depth(info):
                return math.inf if v == "∞" else int(v)
            return v
    raise AssertionError(f"no widget with key {key}")


def run_link(at: AppTest, name: str, p: str) -> AppTest:
    at.query_params["estimator"] = name
    at.query_params["p"] = p
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def _inside(info) -> tuple[float, float]:
    """The lowest and highest values a float parameter's declared bounds allow."""
    lo, hi = float(info.low), float(info.high)
    return (
        math.nextafter(lo, math.inf) if info.low_open else lo,
        math.nextafter(hi, -math.inf) if info.high_open else hi,
    )


@pytest.fixture
def app() -> AppTest:
    """The app with the sidebar's parameter panel open (its widgets drawn)."""
    at = AppTest.from_file(str(REPO / "app.py"), default_timeout=TIMEOUT)
    at.switch_page(PAGE)
    at.session_state[PARAMS_OPEN] = True
    return at


@pytest.mark.parametrize("name", registry.names())
def test_link_values_for_every_parameter(app, name):
    infos = registry.param_infos(registry.get(name).params_cls)
    cases = [(info, raw) for info in infos for raw in hostile(info)]
    # One link per value position: each link sets a value for up to CHUNK parameters at once.
    rounds: list[list] = []
    for info in infos:
        for j, raw in enumerate(hostile(info)):
            while len(rounds) <= j:
                rounds.append([])
            rounds[j].append((info, raw))
    links = [r[i : i + CHUNK] for r in rounds for i in range(0, len(r), CHUNK)]
    assert sum(map(len, links)) == len(cases)
    for link in links:
        at = run_link(app, name, ";".join(f"{info.name}={raw}" for info, raw in link))
        warnings = [w.value for w in at.sidebar.warning]
        for info, raw in link:
            want = expected(info, raw)
            got = widget_value(at, name, info)
            mine = [w for w in warnings if f"'{info.name}'" in w]
            if want is None:
                assert got == info.default, (info.name, raw, got)
                assert len(mine) == 1, (info.name, raw, warnings)
                text = mine[0].lower()  # names the value (nan as "NaN"), what is allowed, the default
                assert raw.lower() in text and "allowed" in text and "default" in text, mine[0]
            else:
                assert got == want, (info.name, raw, got)
                assert not mine, (info.name, raw, mine)
    # The lowest and the highest value each bounded float allows: held exactly, no warning.
    floats = [
        i
        for i in infos
        if i.type is float
        and i.choices is None
        and not is_depth(i)
        and i.low is not None
        and i.high is not None
    ]
    for end in (0, 1) if floats else ():
        at = run_link(app, name, ";".join(f"{i.name}={_inside(i)[end]!r}" for i in floats))
        assert not [w.value for w in at.sidebar.warning], end
        for i in floats:
            assert widget_value(at, name, i) == _inside(i)[end], (i.name, end)


def test_gigpo_threshold_near_zero_is_held(app):
    at = run_link(app, "gigpo", "similarity_thresh=1e-300")
    assert at.sidebar.number_input(key="param.gigpo.similarity_thresh").value == 1e-300
    assert at.query_params["p"] == "similarity_thresh=1e-300"


@pytest.mark.parametrize("panel", ["open", "closed"])
@pytest.mark.parametrize(("raw", "why"), [("100", "beyond"), ("2.5", "whole number")])
def test_depth_the_control_does_not_offer_is_refused(app, raw, why, panel):
    """Refused alike whether the parameter panel is open (the widget) or closed (no widget)."""
    app.session_state[PARAMS_OPEN] = panel == "open"
    at = run_link(app, "crbc", f"depth={raw}")
    (w,) = [w.value for w in at.sidebar.warning]
    assert "'depth'" in w and raw in w and why in w and "30" in w
    if panel == "open":
        assert at.sidebar.select_slider(key="param.crbc.depth").value == "∞"
    else:
        assert not at.sidebar.select_slider  # closed: no widget drawn
        assert at.session_state["_params"]["crbc"]["depth"] == math.inf  # the default, kept
    assert "p" not in at.query_params  # the default again: nothing to link
    # Opening the panel afterwards shows the default, with no second warning.
    at.session_state[PARAMS_OPEN] = True
    at.run()
    assert not at.sidebar.warning
    assert at.sidebar.select_slider(key="param.crbc.depth").value == "∞"


def test_repeated_and_valueless_parameters_are_reported(app):
    at = run_link(app, "crbc", "beta=0.5;beta=0.6;w_step")
    warnings = " ".join(w.value for w in at.sidebar.warning)
    assert "more than once" in warnings and "'w_step'" in warnings
    assert at.sidebar.number_input(key="param.crbc.beta").value == 0.5


def test_many_bad_parameters_are_capped(app):
    at = run_link(app, "crbc", ";".join(f"nope{i}=1" for i in range(500)))
    warnings = [w.value for w in at.sidebar.warning]
    assert len(warnings) == MAX_URL_PROBLEMS + 1 and "490 more" in warnings[-1]


@pytest.mark.parametrize(
    ("page", "query", "field", "key"),
    [
        ("crbc_viz/app/app_pages/graph.py", {"max_nodes": "5"}, "max_nodes", "graph_max_nodes"),
        (
            "crbc_viz/app/app_pages/graph.py",
            {"max_nodes": "99999999999999999999"},
            "max_nodes",
            "graph_max_nodes",
        ),
        ("crbc_viz/app/app_pages/graph.py", {"max_nodes": "abc"}, "max_nodes", "graph_max_nodes"),
        ("crbc_viz/app/app_pages/learn.py", {"lesson": "5", "rr_jump": "0"}, "rr_jump", "learn_rr_jump"),
        ("crbc_viz/app/app_pages/learn.py", {"lesson": "6", "wg": "nan"}, "wg", "learn_wg"),
        ("crbc_viz/app/app_pages/learn.py", {"lesson": "4", "lk": "99"}, "lk", "learn_k"),
        (
            "crbc_viz/app/app_pages/learn.py",
            {"lesson": "1", "flip": "no_such_rollout"},
            "flip",
            "learn_flip_toy",
        ),
        ("crbc_viz/app/app_pages/learn.py", {"lesson": "2", "add": "nonsense"}, "add", "learn_add_toy"),
        ("crbc_viz/app/app_pages/learn.py", {"lesson": "2", "gamma": "2"}, "gamma", "learn_gamma"),
    ],
)
def test_page_control_value_outside_its_range_is_refused_with_a_message(page, query, field, key):
    at = AppTest.from_file(str(REPO / "app.py"), default_timeout=TIMEOUT)
    for k, v in query.items():
        at.query_params[k] = v
    at.switch_page(page)
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    msgs = [w.value for w in at.warning]
    assert any(m.startswith(f"{field} = '{query[field]}' from the link") for m in msgs), msgs
    assert field not in at.query_params  # the default is shown, and not linked


def test_rare_route_count_above_its_parent_is_reported():
    at = AppTest.from_file(str(REPO / "app.py"), default_timeout=TIMEOUT)
    for k, v in {"lesson": "5", "rr_jump": "2", "rr_lucky": "5"}.items():
        at.query_params[k] = v
    at.switch_page("crbc_viz/app/app_pages/learn.py")
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert any("rr_lucky = '5'" in w.value and "showing 2" in w.value for w in at.warning)
    assert at.slider(key="learn_rr_lucky").value == 2
