"""`CreditResult`: what every estimator returns (per-step columns plus diagnostics)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from .graph import AnchorGraph

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa

__all__ = ["CreditResult", "OUTPUT_COLUMNS", "deferred_result", "scatter_steps"]

#: Columns of `CreditResult.to_frame` (and of ``crbc-viz score``), in order.
OUTPUT_COLUMNS = (
    "run_id",
    "train_step",
    "group_id",
    "traj_id",
    "step_idx",
    "anchor_key",
    "action",
    "estimator",
    "value",
    "q_value",
    "credit",
    "advantage",
)


@dataclass(frozen=True, eq=False)
class CreditResult:
    """Per-step output of one estimator on one graph.

    Attributes:
        estimator: registry name.
        params: the hyper-parameter dataclass the result was computed with.
        graph: the graph it was computed on.
        value: ``[S]`` the method's state value at the step (NaN where undefined).
        q_value: ``[S]`` its action value (NaN where undefined).
        credit: ``[S]`` the method's own step-level term.
        advantage: ``[S]`` what the method feeds the policy loss.
        node_value: ``[N]`` per-node value, where the method defines one.
        pair_q: ``[P]`` per-(node, action) value, where the method defines one.
        pair_credit: ``[P]`` per-(node, action) credit, where it is shared by all occurrences.
        diagnostics: scalars such as ``closure_residual`` or ``singleton_fraction``.
    """

    estimator: str
    params: Any
    graph: AnchorGraph
    value: np.ndarray
    q_value: np.ndarray
    credit: np.ndarray
    advantage: np.ndarray
    node_value: np.ndarray | None = None
    pair_q: np.ndarray | None = None
    pair_credit: np.ndarray | None = None
    diagnostics: dict = field(default_factory=dict)
    backend: str = "numpy"

    def to_frame(self) -> pd.DataFrame:
        """One row per step with `OUTPUT_COLUMNS`."""
        import pandas as pd

        steps = self.graph.batch.steps
        S = len(steps)
        action = steps["action"] if "action" in steps else pd.Series([None] * S)
        return pd.DataFrame(
            {
                # String columns keep their (Arrow) arrays: no per-step Python objects.
                "run_id": steps["run_id"].array,
                "train_step": steps["train_step"].to_numpy(dtype=np.int64),
                "group_id": steps["group_id"].array,
                "traj_id": steps["traj_id"].array,
                "step_idx": steps["step_idx"].to_numpy(dtype=np.int64),
                "anchor_key": steps["anchor_key"].array,
                "action": action.array,
                "estimator": np.full(S, self.estimator, dtype=object),
                "value": np.asarray(self.value, dtype=np.float64),
                "q_value": np.asarray(self.q_value, dtype=np.float64),
                "credit": np.asarray(self.credit, dtype=np.float64),
                "advantage": np.asarray(self.advantage, dtype=np.float64),
            },
            columns=list(OUTPUT_COLUMNS),
        )

    def to_arrow(self) -> pa.Table:
        """`to_frame` as an Arrow table (the table pandas would write to Parquet: strings as
        ``large_string``, a missing ``action`` column as nulls). Rows still in Arrow (the
        columnar lane) are taken as they are: no pandas."""
        import pyarrow as pa

        from ._arrow import array, cast, take, texts

        arrow = self.graph.batch.arrow_steps
        if arrow is None:
            return pa.Table.from_pandas(self.to_frame(), preserve_index=False).replace_schema_metadata()
        S = arrow.num_rows
        text = pa.large_string()
        action = cast(arrow.column("action"), text) if "action" in arrow.column_names else pa.nulls(S)
        cols = {
            "run_id": cast(arrow.column("run_id"), text),
            "train_step": cast(arrow.column("train_step"), pa.int64()),
            "group_id": cast(arrow.column("group_id"), text),
            "traj_id": cast(arrow.column("traj_id"), text),
            "step_idx": cast(arrow.column("step_idx"), pa.int64()),
            "anchor_key": cast(arrow.column("anchor_key"), text),
            "action": action,
            "estimator": take(cast(texts([self.estimator]), text), np.zeros(S, np.int64)),
            **{c: array(np.asarray(getattr(self, c), dtype=np.float64)) for c in OUTPUT_COLUMNS[-4:]},
        }
        return pa.table(cols)


_DEFERRED = ("node_value", "pair_q", "pair_credit")


def _deferred(name: str) -> property:
    def get(self):
        vals = self.__dict__.get("_deferred_values")
        if vals is None:
            vals = self.__dict__["_fill"]()
            self.__dict__["_deferred_values"] = vals
            self.__dict__.pop("_fill", None)
        return vals[name]

    return property(get, doc=f"`CreditResult.{name}`, computed on first use")


class _DeferredResult(CreditResult):
    """A `CreditResult` whose per-node / per-pair arrays are computed on first use (they
    need the graph's node and pair ids, which a kernel that merges by itself never built)."""

    node_value = _deferred("node_value")
    pair_q = _deferred("pair_q")
    pair_credit = _deferred("pair_credit")

    def __init__(self, _fill=None, **fields):  # noqa: D107 (dataclasses.replace passes every field)
        if _fill is None:
            vals = {k: fields.pop(k, None) for k in _DEFERRED}
            self.__dict__["_deferred_values"] = vals
        else:
            self.__dict__["_fill"] = _fill
        for k, v in fields.items():
            object.__setattr__(self, k, v)

    def __getstate__(self):
        self.node_value  # noqa: B018 (fill before pickling: the filler is a closure)
        return dict(self.__dict__)

    def __setstate__(self, state):
        self.__dict__.update(state)

    def __reduce__(self):
        return (_DeferredResult.__new__, (_DeferredResult,), self.__getstate__())


def deferred_result(fill, **fields) -> CreditResult:
    """A `CreditResult` from every field but ``node_value``, ``pair_q`` and ``pair_credit``,
    which ``fill()`` returns as a dict when one of them is first read."""
    missing = {f.name for f in dataclasses.fields(CreditResult)} - set(fields) - set(_DEFERRED)
    defaults = {
        f.name: (f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default)
        for f in dataclasses.fields(CreditResult)
        if f.name in missing
    }
    return _DeferredResult(fill, **defaults, **fields)


def scatter_steps(graph, value, q_value, credit):
    """A ``fill`` for `deferred_result` from per-step columns (a step-level kernel's output): each
    anchor's value, each (anchor, action) pair's Q and credit, read off the steps that visit them
    (every step of one anchor or pair holds the same number)."""

    def fill() -> dict:
        node_value = np.zeros(graph.num_nodes)
        node_value[graph.step_node] = value
        pair_q = np.zeros(graph.pair_node.shape[0])
        pair_q[graph.step_pair] = q_value
        pair_credit = np.zeros_like(pair_q)
        pair_credit[graph.step_pair] = credit
        return {"node_value": node_value, "pair_q": pair_q, "pair_credit": pair_credit}

    return fill
