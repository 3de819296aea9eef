"""Each hyper-parameter's default is written once, in its params dataclass: the public keyword
functions, their ``help()``, the engines' raw-array entry points and the Learn page's helpers
read it from there, and `register` hands the public function back to its module instead of
setting attributes on it."""

from __future__ import annotations

import ast
import dataclasses
import inspect
import math
import pydoc
import sys
import types
from pathlib import Path

import pytest

from crbc_viz import build_graph, load_rollouts
from crbc_viz.errors import EstimatorInputError
from crbc_viz.estimators import registry
from crbc_viz.estimators.crbc import CRBCParams
from helpers import TOY

ROOT = Path(__file__).resolve().parents[2]
SPECS = registry.specs()
IDS = [s.name for s in SPECS]
ESTIMATOR_FILES = sorted(
    p for p in (ROOT / "crbc_viz" / "estimators").glob("*.py") if p.name not in ("__init__.py", "registry.py")
)
#: Modules outside estimators/ whose signatures carry CRBC hyper-parameters (the numba engine
#: is checked by tests/test_registry.py).
CRBC_USERS = [
    ROOT / "crbc_viz" / "teaching.py",
    ROOT / "crbc_viz" / "backends" / "torch" / "fused.py",
    ROOT / "crbc_viz" / "backends" / "checks.py",
]


def dataclass_defaults(cls) -> dict:
    return {f.name: f.default for f in dataclasses.fields(cls)}


def same(a, b) -> bool:
    return a == b and type(a) is type(b) or (a != a and b != b)


@pytest.fixture(scope="module")
def toy():
    return build_graph(load_rollouts(TOY))


# --- the public function is built from the dataclass ----------------------------------------


@pytest.mark.parametrize("spec", SPECS, ids=IDS)
def test_signature_and_help_are_built_from_the_dataclass(spec):
    params = list(inspect.signature(spec.fn).parameters.values())
    assert [(p.name, p.kind) for p in params[:1]] == [("graph", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    fields = dataclasses.fields(spec.params_cls)
    assert [p.name for p in params[1:]] == [f.name for f in fields], spec.name
    for p, f in zip(params[1:], fields):
        assert p.kind is inspect.Parameter.KEYWORD_ONLY, (spec.name, p.name)
        assert same(p.default, f.default), (spec.name, p.name, p.default, f.default)
    text = " ".join(pydoc.render_doc(spec.fn, renderer=pydoc.plaintext).split())
    assert "Paper:" in text and "Raises:" in text, spec.name
    for f in fields:
        want = " ".join(f"{f.name} ({f.type}): {f.metadata['help'].rstrip('.')}.".split())
        assert want in text, (spec.name, f.name)
        assert f"Default {f.default!r}" in text.split(want, 1)[1][:400], (spec.name, f.name)
    assert "\n    p: " not in inspect.getdoc(spec.fn), "the kernel's p: entry is replaced"


@pytest.mark.parametrize("spec", SPECS, ids=IDS)
def test_kernel_takes_the_params_object_and_the_public_call_builds_it(spec, toy):
    sig = inspect.signature(spec.kernel)
    # graph and the params object; beyond them only what an estimator written once against
    # the array API takes from its torch row (the array converter `to`, a device solver),
    # keyword-only with the numpy default, never a hyper-parameter.
    params = list(sig.parameters.values())
    assert len(params) >= 2 and all(p.default is inspect.Parameter.empty for p in params[:2]), spec.name
    extra = {p.name for p in params[2:]}
    assert extra <= {"to", "distances"}, (spec.name, sig)
    assert all(p.kind is p.KEYWORD_ONLY and p.default is not p.empty for p in params[2:]), spec.name
    # The reference page shows the numpy reference's own source.
    assert inspect.getsource(spec.fn).lstrip().startswith(f"def {spec.kernel.__name__}("), spec.name
    if spec.requires:
        return  # the toy group lacks the logged fields
    assert registry.kernel(spec.name, "numpy")(toy, spec.check(), device="cpu").params == spec.check()
    assert spec.fn(toy).params == spec.params_cls()
    # One closed bound other than the default, given as a keyword, lands in the params object.
    name, value = next(
        (i.name, v)
        for i in registry.param_infos(spec.params_cls)
        for v, closed in ((i.low, not i.low_open), (i.high, not i.high_open))
        if i.type in (int, float) and v is not None and closed and v != i.default
    )
    assert spec.fn(toy, **{name: value}).params == spec.params_cls(**{name: value})


def test_torch_and_numba_views_show_the_dataclass_defaults():
    spec = registry.get("crbc")
    for view in (spec.torch_fn, spec.numba_fn):
        sig = inspect.signature(view)
        kw = {n: p.default for n, p in sig.parameters.items() if p.kind is p.KEYWORD_ONLY}
        assert kw.pop("device") == "auto"
        assert kw == dataclass_defaults(CRBCParams)


# --- no module writes a default of its own ---------------------------------------------------


def _field_owners() -> dict[str, set[str]]:
    """Field name -> the params classes that have it."""
    owners: dict[str, set[str]] = {}
    for spec in SPECS:
        for f in dataclasses.fields(spec.params_cls):
            owners.setdefault(f.name, set()).add(spec.params_cls.__name__)
    return owners


def _own_defaults(path: Path, owners: dict[str, set[str]]) -> list[str]:
    """Each ``def`` parameter named like a params field whose default does not read a field of
    a params class (``beta: float = CRBCParams.beta``)."""
    bad = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        a = node.args
        positional = a.posonlyargs + a.args
        pairs = list(zip(positional[len(positional) - len(a.defaults) :], a.defaults))
        pairs += [(k, d) for k, d in zip(a.kwonlyargs, a.kw_defaults) if d is not None]
        for arg, default in pairs:
            if arg.arg not in owners:
                continue
            reads_field = (  # `<a params class>.<one of its fields>`
                isinstance(default, ast.Attribute)
                and isinstance(default.value, ast.Name)
                and default.value.id in owners.get(default.attr, ())
            )
            if not reads_field:
                bad.append(
                    f"{path.as_posix().removeprefix(ROOT.as_posix() + '/')}:{node.lineno} {node.name}({arg.arg}={ast.unparse(default)})"
                )
    return bad


def test_no_estimator_module_repeats_a_default_in_a_signature(tmp_path):
    probe = tmp_path / "mod.py"  # the check itself sees a literal and a foreign class
    probe.write_text("def f(g, *, beta=0.98, gamma=Other.gamma, sigma_min=CRBCParams.sigma_min):\n    pass\n")
    owners = {"beta": {"CRBCParams"}, "gamma": {"GiGPOParams"}, "sigma_min": {"CRBCParams"}}
    assert [b.split(" ", 1)[1] for b in _own_defaults(probe, owners)] == [
        "f(beta=0.98)",
        "f(gamma=Other.gamma)",
    ]
    owners = _field_owners()
    bad = [b for p in ESTIMATOR_FILES for b in _own_defaults(p, owners)]
    assert not bad, "defaults written outside the params dataclass:\n" + "\n".join(bad)


def test_no_crbc_user_repeats_a_crbc_default():
    owners = {n: {"CRBCParams"} for n in dataclass_defaults(CRBCParams)}
    bad = [b for p in CRBC_USERS for b in _own_defaults(p, owners)]
    assert not bad, "CRBC defaults written outside CRBCParams:\n" + "\n".join(bad)


def test_engine_and_teaching_defaults_are_crbc_params():
    from crbc_viz import teaching
    from crbc_viz.backends.checks import check_engine_params
    from crbc_viz.backends.torch.fused import crbc_step_credit_torch

    engine = {n: p.default for n, p in inspect.signature(crbc_step_credit_torch).parameters.items()}
    defaults = dataclass_defaults(CRBCParams)
    assert {n: engine[n] for n in defaults if n != "depth"} == {
        n: v for n, v in defaults.items() if n != "depth"
    }
    for fn in (teaching.anchor_visits, teaching.teaching_anchor):
        assert inspect.signature(fn).parameters["beta"].default == CRBCParams().beta
    params, dense_max = check_engine_params("probe", dense_max=3)
    assert params == CRBCParams() and dense_max == 3 and math.isinf(params.depth)
    params, _ = check_engine_params("probe", dense_max=0, beta=0.5)
    assert params == CRBCParams(beta=0.5)
    with pytest.raises(
        EstimatorInputError, match=r"^probe: unknown parameter\(s\) gamma for estimator 'crbc'"
    ):
        check_engine_params("probe", dense_max=0, gamma=0.5)
    with pytest.raises(EstimatorInputError, match=r"^probe: parameter 'min_actions' must be an integer"):
        check_engine_params("probe", dense_max=0, min_actions=2.0)


# --- register returns the function; the module binds it --------------------------------------


@pytest.mark.parametrize("spec", SPECS, ids=IDS)
def test_each_module_binds_what_register_returns(spec):
    module = sys.modules[spec.kernel.__module__]
    assert getattr(module, spec.name) is spec.fn
    tree = ast.parse(inspect.getsource(module))
    bound = [
        n.targets[0].id
        for n in tree.body
        if isinstance(n, ast.Assign)
        and isinstance(n.value, ast.Call)
        and isinstance(n.value.func, ast.Name)
        and n.value.func.id == "register"
    ]
    assert spec.name in bound, (spec.name, bound)


@dataclasses.dataclass(frozen=True)
class _ProbeParams:
    scale: float = registry.param(2.0, "a probe's multiplier", low=0.0, high=10.0)


def _probe_kernel(graph, p):
    return ("ran", p)


@pytest.fixture
def probe_module():
    """A module object whose function `register` sees, removed afterwards (registry included)."""
    name = "crbc_viz_test_probe_module"
    module = types.ModuleType(name)
    kernel = types.FunctionType(_probe_kernel.__code__, module.__dict__, "probe_once")
    kernel.__module__, kernel.__qualname__ = name, "probe_once"
    module.probe_once = kernel
    sys.modules[name] = module
    try:
        yield module
    finally:
        sys.modules.pop(name, None)
        registry._REGISTRY.pop("probe_once", None)
        registry.KERNELS.pop(("probe_once", "numpy"), None)


def _probe_spec(module, **kw) -> registry.EstimatorSpec:
    fields = dict(
        name="probe_once",
        title="probe",
        paper="—",
        equation="—",
        section="test",
        kernel=module.probe_once,
        params_cls=_ProbeParams,
    )
    return registry.EstimatorSpec(**{**fields, **kw})


def test_register_sets_no_module_attribute_and_returns_the_checked_function(probe_module):
    before = dict(vars(probe_module))
    fn = registry.register(_probe_spec(probe_module))
    assert dict(vars(probe_module)) == before, "register changed the module"
    assert registry.get("probe_once").fn is fn and fn is not probe_module.probe_once
    assert fn("g") == ("ran", _ProbeParams())
    assert fn("g", scale=3) == ("ran", _ProbeParams(scale=3))
    with pytest.raises(
        EstimatorInputError, match=r"^parameter 'scale' of 'probe_once': must be <= 10.0, got 11"
    ):
        fn("g", scale=11)
    assert str(inspect.signature(fn)) == "(graph, *, scale: float = 2.0)"


def test_a_taken_name_raises_naming_both_kernels(probe_module):
    with pytest.raises(ValueError) as e:
        registry.register(_probe_spec(probe_module, name="crbc"))
    assert str(e.value) == (
        "duplicate estimator name 'crbc': crbc_viz.estimators.crbc._crbc and "
        "crbc_viz_test_probe_module.probe_once"
    )
    assert registry.get("crbc").kernel.__name__ == "_crbc"


def test_a_spec_with_fn_set_is_refused(probe_module):
    with pytest.raises(ValueError, match=r"EstimatorSpec.fn is built by register\(\)"):
        registry.register(_probe_spec(probe_module, fn=probe_module.probe_once))
    assert "probe_once" not in registry.names()
