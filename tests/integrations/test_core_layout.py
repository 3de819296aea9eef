"""The adapters' shared core stays split by responsibility: no module of the package over 700
lines, `_assemble` takes its rows as one record, and every name the adapters, benches and tests
import from `crbc_viz.integrations._core` is still there."""

import inspect
from pathlib import Path

import crbc_viz.integrations as integrations
from crbc_viz.integrations import _core

PKG = Path(integrations.__file__).parent
MAX_LINES = 700
#: What callers import from `_core` (adapters, bench/integrations_bench.py, tests).
IMPORTED = (
    "IntegrationInputError Steps canonical_steps score_steps check_steps as_device ROW_REWARD "
    "transition_actions token_steps trajectory_credit rows_as_steps Turns masked masked_row_sum "
    "broadcast token_tensors any_per_trajectory row_flags row_numbers with_anchor_rule "
    "anchor_rule_scope as_anchor_rule anchor_hashes resolve_params _on_device _begin "
    "_assemble _action_codes _anchor_codes _id_codes _pair_codes CodedRows"
).split()


def test_no_integrations_module_over_700_lines():
    long = {p.name: n for p in PKG.glob("*.py") if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not long, long


def test_assemble_takes_at_most_8_positional_parameters():
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    positional = [p for p in inspect.signature(_core._assemble).parameters.values() if p.kind in kinds]
    assert len(positional) <= 8, [p.name for p in positional]


def test_every_name_callers_use_is_importable_from_core():
    missing = [name for name in IMPORTED if not hasattr(_core, name)]
    assert not missing, missing
