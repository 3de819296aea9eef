"""Compatibility alias of `crbc_viz.analysis.trends` (moved there in issue 12)."""

from ..analysis.trends import GROUP_COLUMNS, TREND_COLUMNS, Trends, step_trends, store_trends

__all__ = ["Trends", "step_trends", "store_trends", "TREND_COLUMNS", "GROUP_COLUMNS"]
