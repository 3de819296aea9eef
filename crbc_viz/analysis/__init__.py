"""Analysis of scored batches: pure functions above `crbc_viz.api` (numpy / pandas in, numbers
and tables out; no streamlit, no plotting). The app's pages, the CLI and the store's trends call
them, so each statistic has one copy: estimator agreement (`agreement`), the finite-depth CRBC
family and its Corollary-3 bound (`depth`), batch summaries, trends across training, export.
"""
