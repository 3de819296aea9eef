"""crbc-viz: browse rollout groups, see the merged anchor graph with its boundaries, compare
credit estimators and read credit on every step.

    streamlit run app.py        (or: make run; from an installed package: crbc-viz view PATH)

A thin entry: the router and its pages ship inside the package (`crbc_viz.app.router`,
``crbc_viz/app/app_pages/``); Streamlit reruns this script, and each run draws the app.
"""

from crbc_viz.app.router import main

main()
