"""Compatibility alias of `crbc_viz.analysis.summary` (moved there in issue 12)."""

from .analysis.summary import batch_summary, group_table, truncation_known

__all__ = ["batch_summary", "group_table", "truncation_known"]
