"""The registry is the one source of truth (docs/architecture.md): every spec is documented,
every parameter is bounded, every public estimator call checks its parameters, the functions'
defaults are the dataclass's, and the README table and the Estimators page list exactly the
registered estimators with the backends each has."""

from __future__ import annotations

import dataclasses
import inspect
import math
import re
import sys
from pathlib import Path

import numpy as np
import pytest

from crbc_viz import build_graph, load_rollouts
from crbc_viz.errors import CrbcVizError, EstimatorInputError
from crbc_viz.estimators import registry

REPO = Path(__file__).resolve().parents[1]
TOY = "sample_rollouts/toy/toy_group.jsonl"
SPECS = registry.specs()
IDS = [s.name for s in SPECS]
#: Keywords a twin may take beyond the params dataclass (where it runs, not what it computes).
TWIN_ONLY = {"device", "dtype", "dense_max"}


@pytest.fixture(scope="module")
def toy():
    return build_graph(load_rollouts(REPO / TOY))


def keyword_defaults(fn) -> dict:
    return {n: p.default for n, p in inspect.signature(fn).parameters.items() if p.kind == p.KEYWORD_ONLY}


def dataclass_defaults(spec) -> dict:
    return {f.name: f.default for f in dataclasses.fields(spec.params_cls)}


def same(a, b) -> bool:
    return a == b or (isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b))


# --- every spec and parameter is documented ----------------------------------------------


@pytest.mark.parametrize("spec", SPECS, ids=IDS)
def test_spec_has_paper_equation_and_raises(spec):
    assert spec.title and spec.section.startswith("§"), spec.name
    assert re.search(r"arXiv \d{4}\.\d{4,5}", spec.paper), spec.paper
    assert spec.equation.strip() and "=" in spec.equation, spec.equation
    doc = inspect.getdoc(spec.fn)
    assert "\nPaper: " in doc, f"{spec.name}: no Paper paragraph"
    assert re.search(r"arXiv \d{4}\.\d{4,5}", doc.split("\nPaper: ", 1)[1].split("\n\n")[0]), spec.name
    raises = re.search(r"^Raises:\n((?:    .*\n?)+)", doc, re.M)
    assert raises, f"{spec.name}: the docstring has no Raises section"
    assert "EstimatorInputError:" in raises.group(1), raises.group(1)


@pytest.mark.parametrize("spec", SPECS, ids=IDS)
def test_every_parameter_has_help_and_bounds_or_choices(spec):
    infos = registry.param_infos(spec.params_cls)
    assert infos, spec.name
    for i in infos:
        where = f"{spec.name}.{i.name}"
        assert len(i.help) >= 10, where
        if i.type is bool:
            assert i.low is None and i.high is None and i.choices is None, where  # the type bounds it
        elif i.type is str:
            assert i.choices and i.default in i.choices, where
        else:
            assert i.type in (int, float) and i.choices is None, where
            assert i.low is not None, f"{where}: no lower bound"
            assert i.high is not None or i.default == math.inf, f"{where}: no upper bound"
    registry.check_params(spec, dataclass_defaults(spec))  # every default lies in its bounds


# --- every call checks its parameters ------------------------------------------------------


def test_direct_crbc_call_out_of_bounds_raises(toy):
    from crbc_viz.estimators.crbc import crbc

    with pytest.raises(EstimatorInputError) as e:
        crbc(toy, beta=1.5)
    assert str(e.value) == "parameter 'beta' of 'crbc': must be <= 1.0, got 1.5"
    assert isinstance(e.value, ValueError) and isinstance(e.value, CrbcVizError)
    with pytest.raises(EstimatorInputError, match=r"'beta' of 'crbc': must be > 0.0, got 0.0"):
        crbc(toy, beta=0.0)  # the open lower bound
    with pytest.raises(EstimatorInputError, match=r"'depth' of 'crbc': must be >= 0, got -1"):
        crbc(toy, depth=-1)
    with pytest.raises(EstimatorInputError, match=r"'sigma_min' of 'crbc': NaN is not allowed"):
        crbc(toy, sigma_min=float("nan"))
    with pytest.raises(EstimatorInputError, match=r"'beta' of 'crbc': expected float, got '0.5'"):
        crbc(toy, beta="0.5")
    # The bounds themselves are allowed: β = 1 and K = ∞ (spec vector of ESTIMATORS.md §14.1).
    r = crbc(toy, beta=1.0, depth=math.inf)
    assert np.all(np.isfinite(r.advantage))
    assert [round(float(v), 4) for v in crbc(toy).node_value] == [0.4636, 0.4802, 0.6533, 0.0, 0.4659]


def test_unknown_keyword_and_bad_choice_name_the_valid_ones(toy):
    from crbc_viz.estimators.grpo import grpo

    with pytest.raises(EstimatorInputError) as e:
        grpo(toy, norm="std", bogus=1, ddof=1)
    assert str(e.value) == (
        "unknown parameter(s) bogus for estimator 'grpo'; valid: norm, ddof, eps, stats, outcome"
    )
    with pytest.raises(EstimatorInputError) as e:
        grpo(toy, norm="l2")
    assert str(e.value) == "parameter 'norm' of 'grpo': expected one of std, mean, got 'l2'"


def _bad_values(spec):
    """(parameter, value, message fragment) past each bound and outside each choice set."""
    for i in registry.param_infos(spec.params_cls):
        if i.choices is not None:
            yield i.name, "not-a-choice", "expected one of"
        if i.high is not None:
            yield i.name, i.high + 1, f"must be {'<' if i.high_open else '<='} {i.high}"
        if i.low is not None:
            yield i.name, i.low - 1, f"must be {'>' if i.low_open else '>='} {i.low}"


@pytest.mark.parametrize("spec", SPECS, ids=IDS)
def test_every_public_entry_point_checks_every_bound(spec, toy):
    module_fn = getattr(sys.modules[spec.fn.__module__], spec.fn.__name__)
    assert module_fn is spec.fn, "the module's own name is the checked function"
    entries = [("numpy", spec.fn, {})]
    if spec.torch_fn is not None:
        entries.append(("torch", spec.torch_fn, {"device": "cpu"}))
    if spec.numba_fn is not None:
        entries.append(("numba", spec.numba_fn, {}))
    cases = list(_bad_values(spec))
    assert cases, spec.name
    for backend, fn, extra in entries:
        for name, value, fragment in cases:
            with pytest.raises(EstimatorInputError) as e:
                fn(toy, **extra, **{name: value})
            msg = str(e.value)
            assert f"parameter '{name}' of '{spec.name}'" in msg and fragment in msg, (backend, msg)
            assert repr(value) in msg or str(value) in msg, (backend, msg)
        with pytest.raises(EstimatorInputError, match=f"for estimator '{spec.name}'; valid: "):
            fn(toy, **extra, not_a_parameter=1)
    # make_params (the CLI / app path) raises the same error class, still a ValueError.
    name, value, fragment = cases[0]
    with pytest.raises(EstimatorInputError, match=re.escape(fragment)):
        registry.make_params(spec, **{name: str(value)})
    with pytest.raises(ValueError, match="unknown parameter"):
        registry.make_params(spec, not_a_parameter="1")


def test_make_params_coercion_errors_are_estimator_input_errors():
    spec = registry.get("graft")
    with pytest.raises(EstimatorInputError, match=r"parameter 'normalize' of 'graft': expected true/false"):
        registry.make_params(spec, normalize="maybe")
    with pytest.raises(EstimatorInputError, match=r"parameter 'gamma' of 'graft': expected float, got 'x'"):
        registry.make_params(spec, gamma="x")
    assert registry.make_params(spec, gamma="0.5", normalize="false") == spec.params_cls(
        gamma=0.5, normalize=False
    )


# --- one set of defaults -----------------------------------------------------------------


@pytest.mark.parametrize("spec", SPECS, ids=IDS)
def test_numpy_signature_defaults_equal_the_dataclass(spec):
    assert keyword_defaults(spec.fn) == dataclass_defaults(spec)


KERNELS = [(n, b, fn) for n, b, fn in registry.kernels() if b != "numpy"]


@pytest.mark.parametrize("name,backend,fn", KERNELS, ids=[f"{n}[{b}]" for n, b, _ in KERNELS])
def test_every_kernel_names_a_spec_and_takes_the_params_object(name, backend, fn):
    """A twin is ``kernel(graph, params, *, device, ...)``: no hyper-parameter of its own, so
    it repeats no default (the checked params object carries them)."""
    assert name in registry.names(), name
    assert backend in registry.BACKEND_ORDER
    sig = inspect.signature(fn)
    positional = [p.name for p in sig.parameters.values() if p.kind is p.POSITIONAL_OR_KEYWORD]
    assert positional == ["graph", "params"], (name, backend, positional)
    keywords = {p.name for p in sig.parameters.values() if p.kind is p.KEYWORD_ONLY}
    assert "device" in keywords and keywords <= TWIN_ONLY, (name, backend, keywords)
    assert not keywords & set(dataclass_defaults(registry.get(name))), (name, backend)
    assert fn.__module__.startswith("crbc_viz.backends." + backend), fn.__module__


def test_the_kernel_table_rejects_a_second_twin_for_the_same_row():
    with pytest.raises(ValueError, match="duplicate torch kernel for 'crbc'"):
        registry.implements("crbc", "torch")(lambda graph, params, *, device: None)


def test_numba_engine_defaults_equal_crbc_params():
    from crbc_viz.backends.numba.crbc import crbc_step_credit

    engine = keyword_defaults(crbc_step_credit)
    for cls in (registry.get("crbc"), registry.get("visit_local")):
        want = {k: v for k, v in dataclass_defaults(cls).items()}
        assert {k: engine.get(k, "MISSING") for k in want} == want, cls.name


@pytest.mark.parametrize(
    "spec",
    [s for s in SPECS if s.torch_fn or s.numba_fn],
    ids=[s.name for s in SPECS if s.torch_fn or s.numba_fn],
)
def test_twins_called_without_parameters_match_the_reference_at_its_defaults(spec, toy):
    ref = spec.fn(toy)
    runs = []
    if spec.torch_fn is not None and _has("torch"):
        runs.append(("torch", spec.torch_fn(toy, device="cpu")))
    if spec.numba_fn is not None:
        from crbc_viz.backends.numba import available

        if available():
            runs.append(("numba", spec.numba_fn(toy)))
    if not runs:
        pytest.skip("neither torch nor numba is installed")
    for backend, r in runs:
        assert r.params == ref.params, backend
        np.testing.assert_allclose(r.advantage, ref.advantage, rtol=0, atol=1e-9, err_msg=backend)


def _has(module: str) -> bool:
    try:
        __import__(module)
    except ImportError:
        return False
    return True


# --- the README table and the Estimators page equal the registry ---------------------------


def _readme_rows() -> list[dict]:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    section = text.split("\n## Estimators\n", 1)[1].split("\n## ", 1)[0]
    lines = [ln for ln in section.splitlines() if ln.startswith("|")]
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    assert set(header) >= {"name", "method", "spec", "needs logged fields", "backends"}, header
    assert set(lines[1].replace("|", "").split()) == {"---"}
    return [dict(zip(header, (c.strip() for c in ln.strip("|").split("|")))) for ln in lines[2:]]


def test_readme_estimator_table_equals_the_registry():
    rows = _readme_rows()
    assert [r["name"].strip("`") for r in rows] == registry.names()
    for r, spec in zip(rows, SPECS):
        assert r["method"].startswith(spec.title), (r["method"], spec.title)
        assert r["spec"] == spec.section, spec.name
        assert r["backends"] == ", ".join(registry.backends(spec)), spec.name
        fields = re.findall(r"`([^`]+)`", r["needs logged fields"])
        assert set(spec.requires) <= set(fields), (spec.name, spec.requires, fields)
        assert bool(spec.requires) == (r["needs logged fields"] != "—"), spec.name


def test_backends_are_what_is_registered():
    for spec in SPECS:
        got = registry.backends(spec)
        assert got[0] == "numpy"
        assert ("torch" in got) == (spec.torch_fn is not None)
        assert ("numba" in got) == (spec.numba_fn is not None)
    assert registry.backends(registry.get("crbc")) == ("numpy", "torch", "numba")
    assert registry.backends(registry.get("trace")) == ("numpy",)


def test_estimators_page_lists_exactly_the_registry_with_backends():
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(REPO / "app.py"), default_timeout=120)
    at.query_params["file"] = TOY
    at.run()
    at.switch_page("crbc_viz/app/app_pages/estimators.py").run()
    assert not at.exception, [e.value for e in at.exception]
    assert [s.value for s in at.subheader] == [s.title for s in SPECS]
    lines = {}
    for m in at.markdown:
        hit = re.match(r"`([a-z0-9_]+)` · .*backends: ([a-z, ]+)$", str(m.value))
        if hit:
            lines[hit.group(1)] = tuple(hit.group(2).split(", "))
    assert list(lines) == registry.names()
    assert lines == {s.name: registry.backends(s) for s in SPECS}


def test_an_open_upper_bound_refuses_the_bound():
    """GiGPO's similarity threshold is strictly in (0, 1): 1.0 is refused by the estimator call
    itself (it used to pass the bounds and fail deep inside similarity clustering)."""
    import crbc_viz
    from crbc_viz.errors import EstimatorInputError
    from crbc_viz.estimators.gigpo import gigpo
    from helpers import TOY

    g = crbc_viz.build_graph(crbc_viz.load_rollouts(TOY))
    with pytest.raises(EstimatorInputError, match="must be < 1.0"):
        gigpo(g, similarity=True, similarity_thresh=1.0)
    gigpo(g, similarity=True, similarity_thresh=0.999)
