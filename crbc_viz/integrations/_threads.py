"""The adapters' host-side passes spread over the cores the estimator's kernel uses.

The passes over ``[B, L]`` token tensors (`crbc_viz.integrations._tokens`) and the hash-table
factorisation of id, anchor and action columns (`crbc_viz.integrations._rows`) are cut into
chunks of whole rows that run in a thread pool: numpy releases the GIL in its loops
(``nonzero``, ``count_nonzero``, ufuncs, ``repeat``), and pandas' string hash table hashes
and compares the strings' bytes without it. Each chunk computes exactly what the whole pass
computes on its rows (the same operations in the same order per element, row or segment), so
the results are bit for bit those of one thread; chunks are put back in row order.

How many threads: numba's (`numba.get_num_threads`, the kernel's) once numba is loaded, else
torch's (`torch.get_num_threads`), else the machine's cores; `using` overrides the count and the
chunk size (tests force one thread, or odd chunks).
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np

#: The fewest items (tokens, or column values) a chunk gets: below it a pass stays on one
#: thread (handing a chunk to a thread costs tens of microseconds).
MIN_CHUNK = 1 << 16

_forced: dict = {"threads": None, "chunk": None}
_pool: dict = {}
_lock = threading.Lock()


def num_threads() -> int:
    """The threads the host passes use (module doc)."""
    if _forced["threads"] is not None:
        return _forced["threads"]
    for name, get in (("numba", "get_num_threads"), ("torch", "get_num_threads")):
        mod = sys.modules.get(name)
        if mod is not None and hasattr(mod, get):
            try:
                return max(1, int(getattr(mod, get)()))
            except Exception:  # a threading layer that cannot start: count the cores instead
                continue
    return max(1, os.cpu_count() or 1)


@contextlib.contextmanager
def using(threads: int | None = None, chunk: int | None = None):
    """Within the block the host passes use ``threads`` threads and chunks of ``chunk`` rows or
    values (None: as the module doc says). For tests and benchmarks."""
    saved = dict(_forced)
    _forced.update(threads=threads, chunk=chunk)
    try:
        yield
    finally:
        _forced.update(saved)


def spans(n: int, per_item: int = 1, max_items: int | None = None) -> list[tuple[int, int]]:
    """``[(lo, hi), ...]``: ``range(n)`` cut into consecutive chunks, one per thread, each of at
    least `MIN_CHUNK` items (a row holds ``per_item`` items) and at most ``max_items`` (to bound
    a chunk's temporary memory); one span when it is not worth cutting. Always at least one
    span (``(0, 0)`` when ``n`` is 0)."""
    per_item = max(int(per_item), 1)
    if _forced["chunk"] is not None:
        size = max(1, int(_forced["chunk"]))
    else:
        size = max(-(-n // num_threads()), -(-MIN_CHUNK // per_item), 1)
        if max_items is not None:
            size = min(size, max(1, max_items // per_item))
    if n <= size:
        return [(0, n)]
    return [(lo, min(lo + size, n)) for lo in range(0, n, size)]


def run(fn, chunks) -> list:
    """``[fn(lo, hi) for (lo, hi) in chunks]``, the chunks run in the pool when there are more
    than one (results in the chunks' order)."""
    if len(chunks) == 1:
        return [fn(*chunks[0])]
    return list(_executor().map(lambda c: fn(*c), chunks))


def _executor() -> ThreadPoolExecutor:
    n = max(num_threads(), 2)
    with _lock:
        if _pool.get("pid") != os.getpid():  # a forked child has the pool but not its threads
            _pool.clear()
            _pool["pid"] = os.getpid()
        pool = _pool.get(n)
        if pool is None:
            for key, old in list(_pool.items()):
                if key != "pid":
                    old.shutdown(wait=False)
                    del _pool[key]
            pool = _pool[n] = ThreadPoolExecutor(max_workers=n, thread_name_prefix="crbc-viz-host")
        return pool


def factorize(values: np.ndarray):
    """``pandas.factorize(values)`` (codes in first-occurrence order, -1 for a missing value,
    and the uniques) computed chunk by chunk in the pool when ``values`` is a long object
    array: each chunk is factorised on its own, the chunks' uniques (in chunk order) are
    factorised once more, and each chunk's codes are mapped through that. A value's first
    occurrence is in the first chunk that holds it, at its place there, so the order of the
    uniques, and every code, are what one pass gives. The merge is taken only when every
    chunk's uniques are strings (`str` itself: equal exactly when their text is); otherwise
    (numbers and text mixed, say, where ``1 == 1.0 == True``) the column is factorised again
    in one pass, as before. A column of many distinct values (trajectory ids: each chunk
    would hold most of them, and the merge would hash them once per chunk) is factorised in one
    pass (`_few_distinct`)."""
    import pandas as pd

    chunks = spans(len(values)) if values.dtype == object else [(0, len(values))]
    if len(chunks) == 1 or not _few_distinct(values, len(chunks)):
        return pd.factorize(values)
    parts = run(lambda lo, hi: pd.factorize(values[lo:hi]), chunks)
    if not all(type(u) is str for _, uniques in parts for u in uniques.tolist()):
        return pd.factorize(values)
    sizes = np.array([len(u) for _, u in parts], np.int64)
    merged, uniques = pd.factorize(np.concatenate([np.asarray(u, dtype=object) for _, u in parts]))
    remap = np.append(merged.astype(np.int64, copy=False), -1)  # a local -1 stays -1
    offsets = np.cumsum(sizes) - sizes
    codes = np.empty(len(values), np.int64)

    def place(k: int, lo: int, hi: int) -> None:
        local = parts[k][0].astype(np.int64)
        np.add(local, offsets[k], out=local, where=local >= 0)
        local[local < 0] = len(remap) - 1
        codes[lo:hi] = remap[local]

    run(lambda lo, hi: place(chunks.index((lo, hi)), lo, hi), chunks)
    return codes, uniques


#: Values `_few_distinct` looks at.
SAMPLE = 4096


def _few_distinct(values: np.ndarray, n_chunks: int) -> bool:
    """Whether ``values`` looks to hold few distinct values (a sample of every k-th value has
    at most an eighth distinct, and as many per chunk, summed over the chunks, are at most an
    eighth of the column), so that merging the chunks' uniques costs little beside the column.
    A sample that cannot be hashed: False (the one pass then says why)."""
    import pandas as pd

    sample = values[:: max(1, len(values) // SAMPLE)]
    try:
        distinct = len(pd.unique(sample))
    except TypeError:
        return False
    return distinct * 8 <= len(sample) and distinct * n_chunks * 8 <= len(values)
