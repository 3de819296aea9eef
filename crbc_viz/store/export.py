"""Compatibility alias of `crbc_viz.analysis.export` (moved there in issue 12)."""

from ..analysis.export import export_scores

__all__ = ["export_scores"]
