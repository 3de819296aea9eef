"""One error hierarchy: every error the package raises on purpose is a CrbcVizError
and keeps its former built-in base, so old ``except ValueError`` callers still catch it."""

from __future__ import annotations

import pytest

from crbc_viz import load_rollouts, score
from crbc_viz.errors import BackendUnavailable, CrbcVizError, EstimatorInputError
from crbc_viz.estimators import MissingSignalError, UnknownEstimatorError
from crbc_viz.io import LoadError
from crbc_viz.store import LogStore, StoreError
from helpers import ROOT

TOY = ROOT / "sample_rollouts" / "toy" / "toy_group.jsonl"


@pytest.mark.parametrize(
    "cls, base",
    [
        (LoadError, ValueError),
        (StoreError, ValueError),
        (MissingSignalError, ValueError),
        (UnknownEstimatorError, KeyError),
        (EstimatorInputError, ValueError),
        (BackendUnavailable, RuntimeError),
    ],
)
def test_every_error_is_a_crbc_viz_error_and_keeps_its_base(cls, base):
    assert issubclass(cls, CrbcVizError) and issubclass(cls, base)


def test_raised_errors_are_caught_by_the_base(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"group_id": "g"}\n')
    with pytest.raises(CrbcVizError):
        load_rollouts(bad)
    with pytest.raises(CrbcVizError):
        LogStore(tmp_path / "nowhere")
    with pytest.raises(CrbcVizError):
        score(load_rollouts(TOY), "no_such_estimator")
    with pytest.raises(CrbcVizError):
        score(load_rollouts(TOY), "trace")  # needs gold_logprob
