"""Load errors that name the file, the line (or row) and the field (defined in
`crbc_viz.errors`; this module keeps the old import path)."""

from __future__ import annotations

from ..errors import MAX_LISTED, LoadError, Problem

__all__ = ["Problem", "LoadError", "MAX_LISTED"]
