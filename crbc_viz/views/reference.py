"""The estimator reference (``docs/estimators.md``), written from the registry: each
estimator's formula, source, parameters with defaults and bounds, the logged fields it needs,
its backends and the edge cases its docstring states, after a common introduction.

    .venv/bin/python -m crbc_viz.views.reference > docs/estimators.md

Pure: returns markdown text. ``tests/ui/test_app.py`` checks the committed file is current.
"""

from __future__ import annotations

import inspect
import math
import re

__all__ = [
    "estimators_markdown",
    "anchor_of",
    "edge_cases",
    "specs",
    "spec_backends",
    "params_table",
    "source_of",
]

INTRO = """\
# Estimator reference

What every credit estimator in crbc-viz computes, with its source, defaults and edge cases.
This file is generated from the estimator registry (`crbc_viz/estimators/registry.py`) by
`python -m crbc_viz.views.reference > docs/estimators.md`; the app's **Estimators** page shows
the same cards. The log format these estimators read is described in [schema.md](schema.md).

## How to read the numbers

- A **group** is a set of rollouts of one task (one `run_id` / `train_step` / `group_id`). All
  estimators work within a group; nothing is shared across groups.
- An **anchor** is an environment state that several rollouts can reach (the `anchor_obs`, or
  a precomputed `anchor_key`). Steps of different rollouts standing on the same anchor are
  merged into one node of the **anchor graph**; their actions become its out-edges.
- **SUCCESS** and **FAILURE** are absorbing boundary nodes: every rollout ends in one of them.
  A truncated rollout (step limit reached) ends at FAILURE.
- **Credit** is the estimator's own step term (e.g. CRBC's normalised advantage A^S); the
  **advantage** is what it hands to the policy-gradient loss (usually credit combined with the
  trajectory-level GRPO term). The app shows either (Compare → *Quantity*).
- **Value** is the estimator's state value where it has one. Its meaning differs: a success
  probability-like V(s) for the Bellman methods (higher is better), a hop distance d(s) to
  SUCCESS for `shortest_path` (lower is better), a mean return for `grpo`. The Graph page's
  legend says which.
- Scales differ between estimators; compare them by rank (Spearman ρ) or sign, as the Compare
  page does. ρ is undefined (shown as such) when one side is constant on a group.
- An estimator that needs a logged signal the file does not have (e.g. `gold_logprob`) is not
  run; the app says which field is missing.
- **Zero spread gives 0, within round-off.** Wherever an estimator divides by a spread (a
  z-score's std, CRBC's max(σ, σ_min), GRAFT's |A| for a lone edge, IAPO's feature std ...),
  values that agree within round-off count as equal and give exactly 0, at any eps or σ_min:
  their max − min is at most {ulps:g} · u · n · m, with u the round-off unit ({f64:.3g} in
  float64; {f32:.3g} on the float32 torch paths), m the largest magnitude the values were
  computed from, and n the segment's members (logged values) or the steps of the group (values
  from the closure solve or from discounted sums, whose rounding grows with the group). So an
  all-success group at γ = β = 1 gets no step credit, while values 1e-6 apart at magnitude
  1e-6 keep theirs (`crbc_viz.ops.segments.roundoff_tol`: the one rule and its constants).

## Contents

"""


def anchor_of(title: str) -> str:
    """GitHub-style heading anchor of ``title``."""
    s = re.sub(r"[^\w\- ]", "", title.lower(), flags=re.UNICODE)
    return s.strip().replace(" ", "-")


def edge_cases(fn) -> str:
    """The ``Notes:`` paragraph of ``fn``'s docstring (the estimator's stated edge cases)."""
    doc = inspect.getdoc(fn) or ""
    m = re.search(r"^Notes:\n(.*?)(?:\n\S[^\n]*:\n|\n>>>|\Z)", doc, flags=re.S | re.M)
    if not m:
        return ""
    return " ".join(line.strip() for line in m.group(1).splitlines() if line.strip())


def _bounds(info, markdown: bool = True) -> str:
    """A parameter's choices or interval: markdown (a table cell) or plain text (app table)."""
    if info.choices is not None:
        return (
            " \\| ".join(f"`{c}`" for c in info.choices) if markdown else " | ".join(map(str, info.choices))
        )
    if info.low is None and info.high is None:
        return "—" if markdown else ""
    lo = "−∞" if info.low is None else f"{info.low:g}"
    hi = "∞" if info.high is None else f"{info.high:g}"
    return f"{'(' if info.low_open else '['}{lo}, {hi}{')' if info.high_open else ']'}"


def _default(v, markdown: bool = True) -> str:
    if isinstance(v, float) and math.isinf(v):
        return "∞"
    return f"`{v}`" if markdown else str(v)


def specs() -> list:
    """Every registered estimator spec, in registry order."""
    from ..estimators import registry

    return registry.specs()


def spec_backends(spec) -> list[str]:
    """The backends that implement ``spec``."""
    from ..estimators import registry

    return list(registry.backends(spec))


def params_table(spec):
    """The Estimators page's parameter table of ``spec`` (a DataFrame)."""
    import pandas as pd

    from ..estimators import registry

    return pd.DataFrame(
        [
            {
                "parameter": i.name,
                "type": getattr(i.type, "__name__", str(i.type)),
                "default": _default(i.default, False),
                "range": _bounds(i, False),
                "meaning": i.help,
            }
            for i in registry.param_infos(spec.params_cls)
        ]
    )


def source_of(spec) -> tuple[str | None, str | None]:
    """(the numpy reference's source, None) or (None, why it is unavailable)."""
    try:
        return inspect.getsource(spec.fn), None
    except (OSError, TypeError) as e:
        return None, str(e)


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def estimators_markdown() -> str:
    from ..estimators import registry
    from ..ops.segments import F32_EPS, F64_EPS, SPREAD_ULPS

    specs = registry.specs()
    out = [INTRO.format(ulps=SPREAD_ULPS, f64=F64_EPS, f32=F32_EPS)]
    for s in specs:
        out.append(f"- [{s.title}](#{anchor_of(s.title)}) (`{s.name}`)\n")
    out.append("\n")
    for s in specs:
        out.append(f"## {s.title}\n\n")
        out.append(
            f"`{s.name}` · spec section {s.section} · backends: "
            f"{', '.join(registry.backends(s)) if hasattr(registry, 'backends') else 'numpy'}\n\n"
        )
        out.append(f"**Source:** {s.paper}\n\n")
        out.append(f"```\n{s.equation}\n```\n\n")
        doc = (inspect.getdoc(s.fn) or "").split("\n\n")[0].replace("\n", " ")
        if doc:
            out.append(f"{doc}\n\n")
        infos = registry.param_infos(s.params_cls)
        if infos:
            out.append("| parameter | default | range | meaning |\n| --- | --- | --- | --- |\n")
            for i in infos:
                out.append(f"| `{i.name}` | {_default(i.default)} | {_bounds(i)} | {_cell(i.help)} |\n")
            out.append("\n")
        else:
            out.append("No parameters.\n\n")
        out.append(
            "**Needs logged fields:** "
            + (
                ", ".join(f"`{f}`" for f in s.requires)
                if s.requires
                else "none beyond the schema's required fields and the anchors"
            )
            + "\n\n"
        )
        notes = edge_cases(s.fn)
        if notes:
            out.append(f"**Edge cases:** {notes}\n\n")
    return "".join(out).rstrip() + "\n"


if __name__ == "__main__":
    print(estimators_markdown(), end="")
