"""One group, shareable: its anchor graph under each estimator side by side, its rollouts with
their per-step credit, and where the numbers came from, as one self-contained HTML fragment
(`Shared._repr_html_`, what a notebook shows) or page (`Shared.page`, what
``crbc-viz html`` writes).

Nothing reaches the network: each graph is the Graph page's pyvis drawing
(`crbc_viz.views.graph_view.graph_drawing`, vis-network inlined, physics off) placed in an
``<iframe srcdoc>``; the rest is HTML with inline styles and no script. Every piece of logged
or given text (ids, actions, anchors, file names, parameter values, refusals) is HTML-escaped
(`crbc_viz.views.graph_page.esc`).

    >>> v = show("sample_rollouts/toy/toy_group.jsonl", estimators=("crbc", "grpo"))
    >>> v.group_label, sorted(v.results)
    ('toy/0/toy', ['crbc', 'grpo'])
    >>> "<iframe" in v._repr_html_() and "<script" not in v._repr_html_().split("<iframe")[0]
    True
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import hashlib
import math
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..errors import CrbcVizError
from .graph_page import FIT_CANVAS_PX, esc
from .trajectories import outcome_label, trajectory_table

__all__ = ["Shared", "UnknownGroupError", "Provenance", "show", "share", "read_log", "resolve_group"]

#: Each graph's canvas height (px) in the fragment and the page where the browser cannot size
#: its frame from its width (no CSS container units); elsewhere the frame takes the drawing's
#: shape: its canvas as tall as its width × the drawing's height over width, within
#: the page's bounds (`crbc_viz.views.graph_page.FIT_CANVAS_PX`), plus `FRAME_HEAD_PX` for the
#: legend row above it.
GRAPH_HEIGHT = 520
FRAME_HEAD_PX = 70
#: Rows of the per-step credit table at most (a longer group says how many it leaves out).
MAX_STEP_ROWS = 5000


class UnknownGroupError(CrbcVizError, ValueError):
    """A group reference that names no group of the data (or several): the message lists some
    of the groups there are."""


@dataclass(frozen=True)
class Provenance:
    """Where a shared view's numbers came from."""

    file_name: str
    read_as: str
    run_id: str
    train_step: str
    group_id: str
    group_index: int
    num_groups: int
    version: str
    params: dict
    backend: str
    sha256: str | None = None
    notes: tuple[str, ...] = ()
    generated: str = ""

    def rows(self) -> list[tuple[str, str]]:
        """(what, value) pairs, in the order the page lists them (plain text, unescaped)."""
        out = [
            ("file", self.file_name),
            ("read as", self.read_as),
            ("run", self.run_id),
            ("train step", self.train_step),
            ("group", f"{self.group_id} ({self.group_index + 1} of {self.num_groups} in the file)"),
        ]
        if self.sha256:
            out.append(("file SHA-256", self.sha256))
        for name, p in self.params.items():
            out.append((f"params [{name}]", ", ".join(f"{k}={v!r}" for k, v in p.items()) or "—"))
        out += [("backend", self.backend), ("crbc-viz version", self.version)]
        out += [("note", n) for n in self.notes]
        if self.generated:
            out.append(("generated", self.generated))
        return out


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("crbc-viz")
    except PackageNotFoundError:
        return "unknown (not installed)"


def _sha256(path: str) -> str | None:
    if not os.path.isfile(path):
        return None
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


# -- reading ----------------------------------------------------------------------------------
def read_log(path: str | os.PathLike, fmt: str = "auto"):
    """A log file (or an rLLM episode folder) in any format the importers read, as
    ``(batch, read_as, notes)``: ``read_as`` names the importer and whether it was detected
    from the file's fields or chosen; ``notes`` are the importer's (what it could not recover).
    The anchors are keyed by the anchor rule in force (`crbc_viz.io.anchor_rules.using`).

    Raises:
        LoadError: the file's problems (or no importer claims it).
    """
    from ..anchor_merge import merge_anchors
    from ..io.anchor_rules import active
    from ..io.importers import TITLES, read_file

    got = read_file(path, fmt)
    how = "detected" if got.detected else "chosen"
    batch = merge_anchors(got.batch, active())  # RTMC signatures, similarity: the whole batch
    return batch, f"{TITLES.get(got.fmt, got.fmt)} ({how})", got.notes


def resolve_group(batch, group) -> int:
    """The index of the group ``group`` names in ``batch``: its label ``run/train_step/group_id``
    (`RolloutBatch.group_labels`), or a ``group_id`` that only one group has; None: the first
    group.

    Raises:
        UnknownGroupError: no group (or several) of that name, listing some there are.
    """
    labels = batch.group_labels()
    if not labels:
        raise UnknownGroupError("the data has no group")
    if group is None:
        return 0
    ref = str(group)
    if ref in labels:
        return labels.index(ref)
    ids = batch.groups["group_id"].astype(str).tolist()
    hits = [i for i, g in enumerate(ids) if g == ref]
    if len(hits) == 1:
        return hits[0]
    shown = ", ".join(labels[:8]) + (" …" if len(labels) > 8 else "")
    if hits:
        raise UnknownGroupError(
            f"group {ref!r} is ambiguous ({len(hits)} groups have that group_id); give "
            f"run/train_step/group_id, one of: {', '.join(labels[i] for i in hits[:8])}"
        )
    raise UnknownGroupError(f"no group {ref!r} in the data ({len(labels)} groups: {shown})")


# -- the view ---------------------------------------------------------------------------------
@dataclass
class Shared:
    """One group's shared view: `fragment` (one self-contained HTML fragment; a notebook shows
    it through `_repr_html_`), `page` (the same as a whole HTML document), the estimators'
    `results` on the one-group `graph`, the ones that `refused` the input (with the reason),
    and its `provenance`."""

    graph: object
    results: dict
    refused: dict
    provenance: Provenance
    group_label: str
    fragment: str = field(repr=False, default="")

    def _repr_html_(self) -> str:
        return self.fragment

    def page(self) -> str:
        """The whole HTML document: `fragment` with a title, nothing to fetch."""
        title = f"crbc-viz · {self.group_label}"
        return (
            "<!doctype html>\n<html lang='en'><head><meta charset='utf-8'>"
            "<meta name='viewport' content='width=device-width, initial-scale=1'>"
            f"<title>{esc(title)}</title><style>body{{margin:16px;background:#fff}}</style></head>"
            f"<body>{self.fragment}</body></html>\n"
        )

    def save(self, path: str | os.PathLike) -> Path:
        """Write `page` to ``path`` (a temporary name renamed over it)."""
        from ..io.write import atomic_path

        with atomic_path(path) as tmp:
            Path(tmp).write_text(self.page(), encoding="utf-8")
        return Path(path)


def _param_sets(estimators, params: dict) -> tuple[list[str], dict]:
    """The estimator names (each once, checked) and `crbc_viz.api.score_each`'s params: a
    keyword named like an estimator with a dict value is that estimator's; any other keyword
    applies to every estimator that has it."""
    from ..estimators import registry

    names = [estimators] if isinstance(estimators, str) else list(estimators)
    if not names:
        raise CrbcVizError("no estimator given; name at least one (e.g. estimators=('crbc',))")
    names = [registry.get(str(n)).name for n in dict.fromkeys(names)]
    out: dict[str, dict] = {"*": {}}
    for k, v in params.items():
        if k in names and isinstance(v, dict):
            out[k] = dict(v)
        else:
            out["*"][k] = v
    return names, out


def share(
    batch,
    group=None,
    estimators=("crbc",),
    *,
    params: dict | None = None,
    backend: str = "auto",
    file_name: str | None = None,
    read_as: str = "",
    notes: tuple[str, ...] = (),
    sha256: str | None = None,
) -> Shared:
    """Score group ``group`` of ``batch`` with each of ``estimators`` and build its view.

    ``params``: as `crbc_viz.api.score_each` takes them (``"*"`` for every estimator that has
    the parameter, an estimator's name for its own). An estimator that refuses the input
    (`crbc_viz.api.REFUSALS`) is named in the view with its reason; the others are drawn.

    Raises:
        UnknownGroupError: ``group`` names no group of ``batch``.
        UnknownEstimatorError: an estimator name that is not registered.
        EstimatorInputError: a parameter no chosen estimator has, or out of bounds.
        MissingSignalError: every estimator refused the input (the first refusal is raised).
    """
    from ..api import score_each
    from ..graph import build_graph

    names, pset = _param_sets(estimators, {})
    for k, v in (params or {}).items():
        pset.setdefault(k, {}).update(v)
    g = resolve_group(batch, group)
    label = batch.group_label(g)
    graph = build_graph(batch.select_groups([g]))
    results, refused = score_each(graph, names, pset, backend=backend)
    if not results:
        raise next(iter(refused.values())).with_traceback(None)
    row = batch.groups.iloc[g]
    prov = Provenance(
        file_name=file_name if file_name is not None else (Path(batch.source).name or "(a batch)"),
        read_as=read_as or "a RolloutBatch given in Python",
        run_id=str(row["run_id"]),
        train_step=str(row["train_step"]),
        group_id=str(row["group_id"]),
        group_index=g,
        num_groups=int(batch.num_groups),
        version=_version(),
        params={n: _params_dict(r.params) for n, r in results.items()},
        backend=f"{backend} (ran: {', '.join(f'{n} on {r.backend}' for n, r in results.items())})",
        sha256=sha256,
        notes=tuple(notes),
        generated=_dt.datetime.now(_dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
    )
    view = Shared(graph, results, refused, prov, label)
    view.fragment = fragment(view)
    return view


def _params_dict(p) -> dict:
    return dataclasses.asdict(p) if dataclasses.is_dataclass(p) else dict(p or {})


def show(
    source, group=None, estimators=("crbc",), *, fmt: str = "auto", backend: str = "auto", **params
) -> Shared:
    """One group of a rollout log (a path, read by any importer) or of a `RolloutBatch`, as an
    object a notebook shows: its graph with SUCCESS / FAILURE and credit on the edges under
    each estimator side by side, its rollouts with per-step credit, and where it came from.

    Args:
        source: a log file or rLLM folder (``fmt``: an importer's name, or ``auto``), or a batch.
        group: ``run/train_step/group_id``, or a ``group_id`` only one group has; None: the first.
        estimators: registry names (or one name).
        backend: as `crbc_viz.api.score`.
        **params: ``key=value`` for every estimator that has it; ``<estimator>={key: value}``
            for one.

    Returns:
        `Shared`: ``_repr_html_()`` is the fragment, ``save(path)`` writes the page.

    Raises:
        LoadError, UnknownGroupError, UnknownEstimatorError, EstimatorInputError, and the
        refusal when every estimator refuses the input (one refusing among several is shown).
    """
    names, pset = _param_sets(estimators, params)
    if isinstance(source, (str, os.PathLike)):
        batch, how, notes = read_log(source, fmt)
        return share(
            batch,
            group,
            names,
            params=pset,
            backend=backend,
            file_name=Path(source).name,
            read_as=how,
            notes=notes,
            sha256=_sha256(str(source)),
        )
    return share(source, group, names, params=pset, backend=backend)


# -- the HTML ---------------------------------------------------------------------------------
_STYLE = """<style>
.crbc-share { font-family: sans-serif; font-size: 13px; color: #222; line-height: 1.35; }
.crbc-share h2 { font-size: 18px; margin: 4px 0 8px; }
.crbc-share h3 { font-size: 15px; margin: 16px 0 6px; }
.crbc-share .crbc-graphs { display: grid; gap: 10px;
  grid-template-columns: repeat(auto-fit, minmax(460px, 1fr)); }
.crbc-share .crbc-graph { border: 1px solid #ddd; border-radius: 4px; padding: 4px; min-width: 0;
  container-type: inline-size; }
.crbc-share .crbc-graph iframe { width: 100%; border: 0; display: block; }
.crbc-share table.crbc-prov td { padding: 1px 8px 1px 0; vertical-align: top; }
.crbc-share table.crbc-prov td:first-child { color: #666; white-space: nowrap; }
.crbc-share table.crbc-prov td:last-child { word-break: break-all; }
.crbc-share .crbc-refused { background: #fdecea; border: 1px solid #f5c2bd; padding: 6px 8px;
  margin: 6px 0; border-radius: 4px; }
.crbc-share .crbc-steps { max-height: 420px; overflow: auto; border: 1px solid #e3e3e3; }
.crbc-share table.crbc-step-table { border-collapse: collapse; }
.crbc-share table.crbc-step-table th { position: sticky; top: 0; background: #f6f6f6; }
.crbc-share table.crbc-step-table td, .crbc-share table.crbc-step-table th {
  border: 1px solid #e3e3e3; padding: 2px 6px; text-align: left; white-space: nowrap; }
.crbc-share table.crbc-step-table td.num { text-align: right; font-variant-numeric: tabular-nums; }
</style>"""


def fragment(view: Shared) -> str:
    """The view as one HTML fragment: style, heading, provenance, graphs, rollouts, steps."""
    g = view.graph
    head = (
        f"<h2>Group {esc(view.group_label)}</h2><div>{g.batch.num_trajectories} rollouts · "
        f"{g.num_nodes} anchors · {g.batch.num_steps} steps · estimators: "
        f"{esc(', '.join([*view.results, *view.refused]))}</div>"
    )
    return (
        f"<div class='crbc-share'>{_STYLE}{head}"
        + "".join(
            f"<div class='crbc-refused' data-crbc-refused='{esc(n)}'><b>{esc(n)}</b> refused the "
            f"input: {esc(e)}</div>"
            for n, e in view.refused.items()
        )
        + "<h3>Anchor graph</h3>"
        + graphs_html(g, view.results)
        + "<h3>Rollouts</h3><div style='color:#555;margin-bottom:4px'>each step: its action, its "
        "reward and one credit chip per estimator (red negative, blue positive)</div>"
        + trajectory_table(g, {**view.results, **{n: str(e) for n, e in view.refused.items()}})
        + "<h3>Per-step credit</h3>"
        + step_table(g, view.results)
        + "<h3>Provenance</h3>"
        + provenance_html(view.provenance)
        + "</div>"
    )


def graphs_html(graph, results: dict, *, height_px: int = GRAPH_HEIGHT) -> str:
    """Each estimator's drawing of the graph (the Graph page's), side by side, each a
    self-contained page in an ``<iframe srcdoc>`` (no request: its scripts are inlined).

    Each frame takes its drawing's shape with no script in this page (a notebook may strip
    one): its CSS height is its width (``100cqw`` of its box, a size container) × the
    drawing's height over width (`GraphDrawing.ratio`), within `FIT_CANVAS_PX`, plus the
    legend row; the drawing's canvas fills the frame below that row (``fill_frame``). A
    browser without container units keeps the ``height`` attribute: ``height_px``."""
    from .graph_view import graph_drawing

    lo, hi = FIT_CANVAS_PX
    out = ["<div class='crbc-graphs'>"]
    for name, res in results.items():
        d = graph_drawing(graph, res, group=0, height_px=height_px, estimator=name, fill_frame=True)
        note = f"<div style='color:#555;font-size:12px'>{esc(d.note)}</div>" if d.note else ""
        shape = f"height: calc(clamp({lo}px, 100cqw * {d.ratio:.4f}, {hi}px) + {FRAME_HEAD_PX}px)"
        out.append(
            f"<div class='crbc-graph' data-crbc-estimator='{esc(name)}'>{note}"
            f"<iframe title='anchor graph, {esc(name)}' height='{height_px + 12}' style='{shape}' "
            f"data-crbc-ratio='{d.ratio:.4f}' srcdoc=\"{srcdoc(d.html)}\"></iframe></div>"
        )
    out.append("</div>")
    return "".join(out)


def srcdoc(page: str) -> str:
    """``page`` as the value of a double-quoted ``srcdoc`` attribute: ``&`` and ``"`` escaped,
    which is all such an attribute needs (``<`` and ``'`` stand for themselves there); the
    page itself escapes the logged text it holds."""
    return page.replace("&", "&amp;").replace('"', "&quot;")


def step_table(graph, results: dict, *, max_rows: int = MAX_STEP_ROWS) -> str:
    """Every step of the group (up to ``max_rows``) with each estimator's credit, to four
    decimals; each credit cell carries the exact value in ``data-value`` (and its title)."""
    b = graph.batch
    steps = b.steps
    ids = steps["traj_id"].astype(str).to_numpy()
    pos = b.step_pos
    idx = steps["step_idx"].to_numpy() if "step_idx" in steps else pos
    acts = steps["action"].fillna("").astype(str).to_numpy() if "action" in steps else None
    rewards = steps["reward"].to_numpy(dtype=np.float64)
    lo = int(graph.group_node_offsets[0])
    credit = {n: np.asarray(r.credit, dtype=np.float64) for n, r in results.items()}
    n = min(b.num_steps, max_rows)
    head = "".join(f"<th>credit [{esc(k)}]</th>" for k in credit)
    rows = [
        "<div class='crbc-steps'><table class='crbc-step-table'><tr><th>rollout</th><th>t</th>"
        f"<th>step_idx</th><th>action</th><th>anchor</th><th>reward</th><th>outcome</th>{head}</tr>"
    ]
    for s in range(n):
        t = int(b.step_traj[s])
        act = acts[s] if acts is not None else ""
        short = act if len(act) <= 40 else act[:39] + "…"
        cells = "".join(
            f"<td class='num' data-crbc-credit='{esc(k)}' data-value='{float(c[s])!r}' "
            f"title='{float(c[s])!r}'>{'—' if not math.isfinite(c[s]) else f'{c[s]:+.4f}'}</td>"
            for k, c in credit.items()
        )
        rows.append(
            f"<tr data-crbc-traj='{esc(ids[s])}' data-crbc-step-idx='{int(idx[s])}'>"
            f"<td>{esc(ids[s])}</td><td>{int(pos[s])}</td><td>{int(idx[s])}</td>"
            f"<td title='{esc(act)}'>{esc(short)}</td><td>s{int(graph.step_node[s]) - lo}</td>"
            f"<td class='num'>{rewards[s]:.4g}</td><td>{esc(outcome_label(graph, t))}</td>{cells}</tr>"
        )
    rows.append("</table></div>")
    if b.num_steps > n:
        rows.append(f"<div>… {b.num_steps - n:,} more steps not listed</div>")
    return "".join(rows)


def provenance_html(p: Provenance) -> str:
    """The provenance as a two-column table (every value escaped)."""
    return (
        "<table class='crbc-prov'>"
        + "".join(
            f"<tr data-crbc-prov='{esc(k)}'><td>{esc(k)}</td><td>{esc(v)}</td></tr>" for k, v in p.rows()
        )
        + "</table>"
    )
