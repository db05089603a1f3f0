"""A small CPU worker pool that splits a kernel's outer range into chunks (the ctypes call releases the GIL).

The number of threads defaults to ``JITORCH_NUM_THREADS`` or the CPUs the process may run on, and is changed with
`set_num_threads`.
"""
from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor

CHUNKS_PER_THREAD = 4
_lock = threading.Lock()
def _usable_cpus():
    """CPUs this process may run on (its affinity mask, as torch counts them), else the machine's count: a process
    pinned to 2 of 64 cores (``taskset``, a container's cpuset) should not start 64 workers."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):
        return os.cpu_count() or 1


_state = {"threads": int(os.environ.get("JITORCH_NUM_THREADS", 0)) or _usable_cpus(), "pool": None}


def get_num_threads():
    """Threads `parallel_for` uses.

    >>> get_num_threads() >= 1
    True
    """
    return _state["threads"]


def set_num_threads(n):
    """Use ``n`` threads from now on (the pool is rebuilt lazily; `on_change` callbacks run with ``n``).

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
    for callback in list(_callbacks):
        callback(int(n))


_callbacks: list = []


def on_change(callback):
    """Call ``callback(n)`` whenever `set_num_threads` sets ``n`` threads (the native pool follows the count).

    >>> seen = []; on_change(seen.append); old = get_num_threads(); set_num_threads(3); set_num_threads(old)
    >>> seen[0], _callbacks.remove(seen.append)
    (3, None)
    """
    _callbacks.append(callback)


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
    """Call ``fn(start, stop)`` over chunks of ``range(n)``, in parallel; the calling thread takes part.

    The range is cut into `CHUNKS_PER_THREAD` chunks per thread (of at least ``grain`` items) that the threads take
    in turn from a shared queue, not one fixed half each: on a machine whose other cores are busy, a worker that
    starts late takes fewer chunks instead of finishing its whole half after everyone else (a fixed split made two
    threads no faster than one whenever the second core was taken).

    >>> seen = []
    >>> parallel_for(lambda a, b: seen.append((a, b)), 5, num_threads=2)
    >>> sorted(seen)
    [(0, 1), (1, 2), (2, 3), (3, 4), (4, 5)]
    """
    threads = num_threads or get_num_threads()
    pieces = chunks(n, threads * CHUNKS_PER_THREAD, grain)
    if len(pieces) == 1:
        fn(*pieces[0]) if n else None
        return
    queue = iter(pieces)  # next() on a list iterator is atomic under the GIL

    def work():
        for start, stop in queue:
            fn(start, stop)

    futures = [_pool().submit(work) for _ in range(min(threads, len(pieces)) - 1)]
    try:
        work()
    finally:
        for f in futures:
            f.result()
