"""Peak RSS of one (workload, method) in a fresh process: ``python -m bench.rss c crbc_numba``.

Prints ``{"peak_rss_mb": ..., "baseline_rss_mb": ...}`` where the baseline is the peak after
building the workload and warming up, before the measured call (so the estimator's own
increment is the difference)."""

from __future__ import annotations

import json
import resource
import sys


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def main() -> None:
    from bench.__main__ import METHODS, prepare
    from bench.workloads import load

    workload, method = sys.argv[1], sys.argv[2]
    batch = load(workload)
    fn = METHODS[method]
    args = prepare(method, batch)
    base = _peak_mb()
    fn(*args)
    print(json.dumps({"peak_rss_mb": round(_peak_mb(), 1), "baseline_rss_mb": round(base, 1)}))


if __name__ == "__main__":
    main()
