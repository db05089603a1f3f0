"""A native worker pool: generated kernels split their outer range over threads that never touch Python.

The Python pool (`runtime.threads.parallel_for`) hands each chunk to a Python thread, which needs the GIL to start
its ctypes call: on two busy cores a 256 KB ReLU backward took 350-580 us at two threads against 80 us at one,
the chunks waiting on GIL hand-offs and thread wake-ups. Here the workers are Python threads that make ONE ctypes
call, `jitorch_pool_worker`, and stay in native code until the pool closes. A job is published in a small shared
block of memory; every participant claims chunks with a compare-and-swap, so the calling thread finishes the job on
its own when the workers are late (descheduled, or gone after a ``fork``), and no answer depends on a worker waking.

An idle worker polls (``pause``), then yields its core (``sched_yield``), then sleeps on a futex:
OpenBLAS's workers, told to sleep at once (`runtime._blas_threads`), and the kernels' share two cores without a
spinning thread holding one.

The protocol and the generated code: `llvm_pool_ir`.

>>> import numpy as np
>>> from jitorch.codegen.ir import Buffer, Kernel, Store, load, op
>>> from jitorch.codegen.llvm_compile import compile_kernel
>>> k = compile_kernel(Kernel((1000,), (Buffer("f32", (1,)), Buffer("f32", (1,))),
...                           (Store(1, op("neg", load(0, "f32"))),)))
>>> x, y = np.arange(1000, dtype=np.float32), np.zeros(1000, np.float32)
>>> pool = NativePool(2)
>>> pool.run_kernel(k, [x.ctypes.data, y.ctypes.data], grain=64)
>>> bool((y == -x).all())
True
>>> pool.close()
"""
from __future__ import annotations

import ctypes
import math
import os
import threading
import warnings
import weakref

from .ir_params import arguments, bits
from .llvm_compile import compile_function, compile_functions
from .llvm_objcache import default_cache
from .llvm_pool_ir import MAX_CHUNKS, STATE_BYTES, available, emit_pool, emit_trampoline

__all__ = ["NativePool", "available", "chunking", "current_cell", "emit_pool", "emit_trampoline", "grain_rows",
           "run_address", "shared_pool", "split_call", "split_threads", "worth_splitting"]

# Splitting pays once a kernel's one-thread time clearly exceeds a hand-off (~5-15 us): measured on 2 cores, a
# negation over 2^16 float32 took 9-11 us alone and 13-19 split, over 2^18 55-75 us alone and 34-59 split; tanh over
# 2^16 31-40 us alone and 25-29 split. Work = elements x (1 + 4 per transcendental) against SPLIT_WORK.
SPLIT_WORK = 1 << 18
_TRANSCENDENTAL = frozenset({"exp", "log", "tanh", "sigmoid", "erf", "sin", "cos", "pow"})
def _block():
    """A zeroed, cache-line aligned shared block outside Python's heap, never freed: workers poll it until they see
    ``stop``, so memory a garbage collector could hand to someone else must not hold it (a dropped pool's workers once
    ran whatever the reused bytes pointed at)."""
    libc = ctypes.CDLL(None)
    libc.aligned_alloc.restype, libc.aligned_alloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t, ctypes.c_size_t]
    address = libc.aligned_alloc(64, STATE_BYTES + (-STATE_BYTES) % 64)
    if not address:
        raise MemoryError("NativePool: could not allocate its shared block")
    ctypes.memset(address, 0, STATE_BYTES)
    return address


def worth_splitting(kernel, numel):
    """Whether a kernel (`llvm_compile.CompiledKernel` or IR `Kernel`) over ``numel`` elements is worth splitting
    across threads (see `SPLIT_WORK`).

    >>> from jitorch.codegen.ir import Buffer, Kernel, Store, load, op
    >>> tanh = Store(1, op("tanh", load(0, "f32")))
    >>> k = Kernel((8,), (Buffer("f32", (1,)), Buffer("f32", (1,))), (tanh,))
    >>> worth_splitting(k, 1 << 14), worth_splitting(k, 1 << 16)
    (False, True)
    """
    weight = kernel.__dict__.get("_split_weight")
    if weight is None:
        ir = getattr(kernel, "source", kernel)
        weight = 1 + 4 * sum(e.op in _TRANSCENDENTAL for e in ir.nodes())
        object.__setattr__(kernel, "_split_weight", weight)  # IR kernels are frozen dataclasses
    return numel * weight >= SPLIT_WORK


def split_threads(threads):
    """`llvm_program.KernelCall.split` for programs planned at ``threads`` threads: ``threads`` where the pool is
    `available` and more than one thread is set, else 0 (every kernel on the program's thread).

    >>> split_threads(1)
    0
    """
    return threads if threads > 1 and available() else 0


def grain_rows(kernel, outer):
    """The fewest rows of a (collapsed) outer range of size ``outer`` that a chunk takes: ~2^15 elements, so a
    chunk amortizes its claim.

    >>> from jitorch.codegen.ir import Buffer, Kernel, Store, load
    >>> grain_rows(Kernel((64, 1024), (Buffer("f32", (1024, 1)),) * 2, (Store(1, load(0, "f32")),)), 64)
    32
    """
    return max(1, (1 << 15) // max(1, math.prod(kernel.shape) // max(outer, 1)))


_trampolines: dict = {}


def trampoline_address(types, cache=None, array_field=None):
    """The compiled `emit_trampoline` for argument ``types`` (one per signature, shared by every kernel)."""
    types = tuple(types)
    found = _trampolines.get(types)
    if found is None:
        name = "jitorch_pool_call_" + "_".join(types)
        found = _trampolines[types] = compile_function(emit_trampoline(types, name, array_field), name, cache)
    return found


class NativePool:
    """``threads - 1`` native workers plus the calling thread; `run_kernel` splits a kernel's outer range.

    One job runs at a time: a caller that finds the pool busy (another Python thread's kernel) runs its kernel on
    its own thread instead of waiting. After a ``fork`` the child has no workers: its caller runs every chunk.
    """

    def __init__(self, threads, cache=None):
        self.threads, self.cache = int(threads), cache
        self.state = _block()
        self._pid = os.getpid()
        worker, run, stop = _pool_functions(cache)
        self._worker = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(worker)
        self._run = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64,
                                     ctypes.c_int64, ctypes.c_int64)(run)
        self._stop = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(stop)
        self._workers = [threading.Thread(target=self._worker, args=(self.state,), daemon=True,
                                          name=f"jitorch-native-{i}") for i in range(self.threads - 1)]
        for w in self._workers:
            w.start()
        # A pool dropped without close() (or alive at exit) still stops its workers; the block itself is never freed,
        # since a worker may read it for a moment after the stop.
        weakref.finalize(self, self._stop, self.state)

    def run(self, fn_address, ctx_address, n, chunk):
        """Run ``fn(start, stop, ctx)`` over ``range(n)`` in chunks of ``chunk``; returns when every chunk is done.
        (A chunk count past `MAX_CHUNKS` runs on the caller alone: the native entry point checks it.)"""
        self._run(self.state, fn_address, ctx_address, n, chunk, -(-n // chunk))

    def run_kernel(self, kernel, addresses, grain=1, chunks_per_thread=4, extent=None):
        """Run a `llvm_compile.CompiledKernel` over its outer range (or ``range(extent)`` of it) with buffers at
        ``addresses``, in chunks of at least ``grain`` rows, ``chunks_per_thread`` chunks a thread (late threads take
        fewer)."""
        call = kernel.__dict__.get("_pool_call")
        if call is None:  # per kernel, once: its argument types and its integer arguments as ctx entries
            types = ("ptr",) * len(addresses) + tuple(arguments(kernel.kernel))
            call = kernel._pool_call = (types, [bits(v, ty) for v, ty in zip(kernel.values, types[len(addresses):])])
        types, values = call
        self._call(kernel.address, types, [*addresses, *values], kernel.outer if extent is None else extent, grain,
                   chunks_per_thread)

    def run_function(self, address, types, args, n, grain=1, chunks_per_thread=4):
        """Run the native function at ``address``, ``f(i64 start, i64 stop, args...)`` with ``args`` of LLVM
        ``types`` (pointers and integers), over ``range(n)`` split as `run_kernel` does."""
        ints = [a if ty == "ptr" else bits(a, ty) for a, ty in zip(args, types, strict=True)]
        self._call(address, tuple(types), ints, n, grain, chunks_per_thread)

    def _call(self, address, types, ints, n, grain, chunks_per_thread):
        # The context the signature's trampoline reads: the function, then its arguments as int64 entries.
        ctx = (ctypes.c_int64 * (1 + len(ints)))(address, *ints)
        self.run(trampoline_address(types, self.cache), ctypes.addressof(ctx), n,
                 self.chunking(n, grain, chunks_per_thread)[0])

    def chunking(self, n, grain=1, chunks_per_thread=4):
        """`chunking` for this pool's thread count."""
        return chunking(n, self.threads, grain, chunks_per_thread)

    def close(self):
        """Stop and join the workers (the pool is unusable afterwards)."""
        if os.getpid() == self._pid and self._workers:
            self._stop(self.state)
            for w in self._workers:
                w.join(timeout=10)
                if w.is_alive():  # never hang the caller: the worker only holds its own stack
                    warnings.warn(f"NativePool.close: worker {w.name} did not stop within 10 s", RuntimeWarning,
                                  stacklevel=2)
        self._workers = []


def chunking(n, threads, grain=1, chunks_per_thread=4):
    """``(chunk size, chunk count)`` for ``range(n)`` over ``threads``: ``chunks_per_thread`` chunks a thread (late
    threads take fewer), at least ``grain`` rows each, at most `MAX_CHUNKS` chunks.

    >>> chunking(1000, 2), chunking(1000, 2, grain=300), chunking(10, 4)
    ((125, 8), (300, 4), (1, 10))
    """
    chunk = max(grain, -(-n // (threads * chunks_per_thread)), -(-n // MAX_CHUNKS), 1)
    return chunk, -(-n // chunk)


def split_call(parallel, fn, address, types, args, n):
    """Run ``fn(start, stop, *args)`` (the ctypes callable of the native function at ``address``, whose arguments
    after the range have LLVM ``types``) over ``range(n)``: on the caller when ``parallel`` is None, through a
    `NativePool`, or through a Python ``parallel(run, n)`` such as `runtime.threads.parallel_for`."""
    if parallel is None:
        fn(0, n, *args)
    elif isinstance(parallel, NativePool):
        parallel.run_function(address, types, args, n)
    else:
        parallel(lambda start, stop: fn(start, stop, *args), n)


_shared: dict = {"pools": {}, "cell": None, "idle": None}  # pools by thread count, kept: programs may hold their block
_shared_lock = threading.Lock()


def _after_fork_in_child():
    # The lock may have been held by another thread of the parent (building a pool) at the fork, and the parent's
    # workers do not exist here: the child starts new pools on demand, and programs run alone until then.
    global _shared_lock
    _shared_lock = threading.Lock()
    _shared["pools"] = {}
    if _shared["cell"] is not None:
        ctypes.c_void_p.from_address(_shared["cell"]).value = _shared["idle"]


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def current_cell():
    """The address of a process-wide pointer to the block of the pool `shared_pool` chose last: native programs
    read their pool from it on every call, so they follow `set_num_threads` without a recompile. At one thread it
    points to an idle block (no workers: the caller runs every chunk)."""
    if _shared["cell"] is None:
        with _shared_lock:
            if _shared["cell"] is None:
                idle = _block()
                cell = _block()
                ctypes.c_void_p.from_address(cell).value = idle
                _shared["idle"], _shared["cell"] = idle, cell
    return _shared["cell"]


def shared_pool(threads):
    """The process's pool with ``threads`` participants (one per thread count, started on first use and after
    ``fork``), or None where the native pool is not `available` or one thread is asked for; `current_cell` points
    to its block from now on. Its code is cached on disk with the kernels' (`llvm_objcache.default_cache`)."""
    if not available():
        return None
    cell = ctypes.c_void_p.from_address(current_cell())
    if threads <= 1:
        cell.value = _shared["idle"]
        return None
    pool = _shared["pools"].get(threads)
    if pool is None:
        with _shared_lock:
            pool = _shared["pools"].get(threads)
            if pool is None:
                pool = _shared["pools"][threads] = NativePool(threads, default_cache())
    cell.value = pool.state
    return pool


def _pool_functions(cache=None):
    """Addresses of the pool's ``jitorch_pool_worker``, ``jitorch_pool_run`` and ``jitorch_pool_stop`` (one module,
    compiled once, shared by every pool)."""
    return compile_functions(emit_pool(), ["jitorch_pool_worker", "jitorch_pool_run", "jitorch_pool_stop"], cache)


def run_address():
    """The address of the pool's entry point ``jitorch_pool_run(state, fn, ctx, n, chunk, count)``, which native
    programs call with the block `current_cell` points to."""
    return _pool_functions(default_cache())[1]
