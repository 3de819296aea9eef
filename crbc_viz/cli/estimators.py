"""``crbc-viz estimators [--json]``: the registry, with every parameter's default, bounds and help."""

from __future__ import annotations

import json
import math

HELP = "list the registered estimators"


def add_arguments(p) -> None:
    p.add_argument("--json", action="store_true")


def _fmt_default(v):
    if isinstance(v, float) and math.isinf(v):
        return "inf"
    return v


def run(args) -> int:
    from ..estimators import param_infos, specs

    items = []
    for s in specs():
        items.append(
            {
                "name": s.name,
                "title": s.title,
                "paper": s.paper,
                "equation": s.equation,
                "section": s.section,
                "requires": list(s.requires),
                "torch": s.torch_fn is not None,
                "parameters": [
                    {
                        "name": p.name,
                        "type": p.type.__name__,
                        "default": _fmt_default(p.default),
                        "help": p.help,
                        "low": p.low,
                        "high": p.high,
                        "choices": list(p.choices) if p.choices else None,
                    }
                    for p in param_infos(s.params_cls)
                ],
            }
        )
    if args.json:
        print(json.dumps(items, indent=2, ensure_ascii=False))
        return 0
    for it in items:
        params = ", ".join(f"{p['name']}={p['default']}" for p in it["parameters"])
        print(f"{it['name']:<14} {it['title']}  [{it['section']}]")
        print(f"{'':<14} {params}")
    return 0
