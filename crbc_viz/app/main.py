"""The script ``crbc-viz view`` gives ``streamlit run``: the packaged router, run once per rerun."""

from crbc_viz.app.router import main

main()
