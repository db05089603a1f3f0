"""A small CPU worker pool that splits a kernel's outer range into chunks (the ctypes call releases the GIL).

The number of threads defaults to ``JITORCH_NUM_THREADS`` or the CPU count, and is changed with `set_num_threads`.
"""
from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor

_lock = threading.Lock()
_state = {"threads": int(os.environ.get("JITORCH_NUM_THREADS", 0)) or os.cpu_count() or 1, "pool": None}


def get_num_threads():
    """Threads `parallel_for` uses.

    >>> get_num_threads() >= 1
    True
    """
    return _state["threads"]


def set_num_threads(n):
    """Use ``n`` threads from now on (the pool is rebuilt lazily).

    >>> old = get_num_threads(); set_num_threads(2); get_num_threads()
    2
    >>> set_num_threads(old)
    """
    if int(n) < 1:
        raise ValueError(f"set_num_threads: need at least 1 thread, got {n}")
    with _lock:
        if _state["pool"] is not None:
            _state["pool"].shutdown(wait=True)
        _state.update(threads=int(n), pool=None)


def _pool():
    with _lock:
        if _state["pool"] is None:
            _state["pool"] = ThreadPoolExecutor(_state["threads"], thread_name_prefix="jitorch-cpu")
        return _state["pool"]


def chunks(n, parts, grain=1):
    """Split ``range(n)`` into at most ``parts`` contiguous ``(start, stop)`` pieces of at least ``grain`` items.

    >>> chunks(10, 3)
    [(0, 4), (4, 7), (7, 10)]
    >>> chunks(10, 4, grain=8)
    [(0, 10)]
    """
    parts = max(1, min(parts, n // max(grain, 1)))
    base, extra = divmod(n, parts)
    out, start = [], 0
    for p in range(parts):
        stop = start + base + (p < extra)
        out.append((start, stop))
        start = stop
    return out


def parallel_for(fn, n, grain=1, num_threads=None):
    """Call ``fn(start, stop)`` over chunks of ``range(n)``, in parallel; the calling thread runs the first chunk.

    >>> seen = []
    >>> parallel_for(lambda a, b: seen.append((a, b)), 5, num_threads=2)
    >>> sorted(seen)
    [(0, 3), (3, 5)]
    """
    pieces = chunks(n, num_threads or get_num_threads(), grain)
    if len(pieces) == 1:
        fn(*pieces[0]) if n else None
        return
    futures = [_pool().submit(fn, a, b) for a, b in pieces[1:]]
    fn(*pieces[0])
    for f in futures:
        f.result()
