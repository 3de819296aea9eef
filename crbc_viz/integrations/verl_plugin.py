"""The ``verl.plugins`` entry point: importing this module registers ``crbc`` and
``crbc_viz.<name>`` (every registry estimator) with verl's ``register_adv_est``.

verl loads it from ``import verl`` (``VERL_USE_EXTERNAL_PLUGINS`` unset or ``auto``); it is the
one module of the package that imports verl. verl swallows a failing plugin at debug level, so
`registered` lists what this import did, for a check such as
``python -c "import verl, crbc_viz.integrations.verl_plugin as p; print(p.registered)"``.
"""

from __future__ import annotations

from ..estimators import registry
from .verl import make_estimator

try:
    from verl.trainer.ppo import core_algos
except ImportError:  # imported without verl (a doctest sweep, a stray import): nothing to register
    core_algos = None

__all__ = ["registered", "register_all"]

registered: dict[str, object] = {}


def register_all() -> dict[str, object]:
    """Register ``crbc`` and ``crbc_viz.<name>`` once (idempotent: verl refuses a second,
    different function under one name, so the first registered function is kept)."""
    if core_algos is None:
        return registered
    for est, name in [("crbc", "crbc")] + [(n, f"crbc_viz.{n}") for n in registry.names()]:
        if name in registered:
            continue
        fn = core_algos.ADV_ESTIMATOR_REGISTRY.get(name)
        if fn is None or getattr(fn, "crbc_viz_estimator", None) != est:
            fn = core_algos.register_adv_est(name)(make_estimator(est))
        registered[name] = fn
    return registered


register_all()
