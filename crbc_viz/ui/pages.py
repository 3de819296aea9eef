"""The app's pages as facts: each script in `PAGES_DIR` declares a ``PAGE`` dict about itself,
read here without running it. Imports nothing of the app or of the rest of `crbc_viz.ui`, so
the router (`crbc_viz.app.router`), the page links (`crbc_viz.ui.links`) and the view
(`crbc_viz.ui.view`) all read the same facts."""

from __future__ import annotations

import ast
from pathlib import Path

__all__ = ["PAGES_DIR", "page_facts"]

#: The page scripts, shipped inside the package (`crbc_viz.app`).
PAGES_DIR = Path(__file__).resolve().parents[1] / "app" / "app_pages"


def page_facts() -> list[dict]:
    """Every page of the app, in menu order: the ``PAGE`` dict each script in `PAGES_DIR`
    declares about itself (order, title, icon, optional url_path and own_data, ready, and the
    URL ``fields`` the page keeps: name -> session-state key of its control, None where the page
    keeps the value itself), read with `ast.literal_eval` (a page is not run to be listed), plus
    its script ``name``. Adding a page is adding its script; nothing else lists pages."""
    out = []
    for f in sorted(PAGES_DIR.glob("*.py")):
        tree = ast.parse(f.read_text(encoding="utf-8"), str(f))
        for node in tree.body:
            if isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == ["PAGE"]:
                out.append({"name": f.stem, **ast.literal_eval(node.value)})
    return sorted(out, key=lambda p: p["order"])
