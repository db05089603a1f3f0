"""A native worker pool: generated kernels split their outer range over threads that never touch Python.

The Python pool (`runtime.threads.parallel_for`) hands each chunk to a Python thread, which needs the GIL to start
its ctypes call: on two busy cores a 256 KB ReLU backward took 350-580 us at two threads against 80 us at one,
the chunks waiting on GIL hand-offs and thread wake-ups. Here the workers are Python threads that make ONE ctypes
call, `jitorch_pool_worker`, and stay in native code until the pool closes. A job is published in a small shared
block of memory; every participant claims chunks with a compare-and-swap, so the calling thread finishes the job on
its own when the workers are late (descheduled, or gone after a ``fork``), and no answer depends on a worker waking.

The shared block (byte offsets; hot words on their own cache lines):

- 0: ``ticket`` (i64) = generation << 32 | chunk count << 16 | next chunk. A claim is a compare-and-swap of
  ``ticket`` to ``ticket + 1``: it fails once the generation moves on, so a late worker never runs a chunk of a
  job it did not see published. The job's fields are read after the claim succeeds (the job cannot end while a
  claimed chunk is unfinished, so they stay put).
- 64: ``epoch`` (i32, the futex word workers sleep on), 68: ``stop`` (i32), 72: ``busy`` (i32): a job is running.
  A caller that finds the pool busy (another thread's job) runs its kernel alone instead of waiting.
- 128: ``sleepers`` (i32): workers in ``futex_wait``; the caller makes the system call only when it is not zero.
- 192: ``done`` (i64): finished chunks of the current job.
- 256: the job: kernel (a `trampoline`), its context, the range's size, the chunk size.

An idle worker polls ``epoch`` (``pause``), then yields its core (``sched_yield``), then sleeps on the futex:
OpenBLAS's workers, told to sleep at once (`runtime._blas_threads`), and the kernels' share two cores without a
spinning thread holding one.

The worker loop as emitted starts::

    define void @jitorch_pool_worker(ptr %state) nounwind {
    entry:
      %t0 = alloca i32
      %t1 = alloca i32
      %t2 = getelementptr i8, ptr %state, i64 64
      %t3 = getelementptr i8, ptr %state, i64 68
      %t4 = getelementptr i8, ptr %state, i64 128
      %t5 = load atomic i32, ptr %t2 acquire, align 4
      store i32 %t5, ptr %t0
      br label %idle
    idle:
      store i32 0, ptr %t1
      br label %poll

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
import platform
import sys
import threading
import warnings
import weakref



from .codeblock import LLVMBuilder
from .ir_params import arguments, bits
from .llvm_compile import compile_function, compile_functions
from .llvm_objcache import default_cache

__all__ = ["NativePool", "available", "emit_pool", "emit_trampoline", "grain_rows", "shared_pool", "split_call",
           "split_threads", "worth_splitting"]

SPIN_POLLS = 256  # ``pause`` polls (~10-40 us) before yielding: a hand-off between back-to-back kernels stays cheap
YIELD_POLLS = 64  # ``sched_yield`` polls before sleeping on the futex
# Splitting pays once a kernel's one-thread time clearly exceeds a hand-off (~5-15 us): measured on 2 cores, a
# negation over 2^16 float32 took 9-11 us alone and 13-19 split, over 2^18 55-75 us alone and 34-59 split; tanh over
# 2^16 31-40 us alone and 25-29 split. Work = elements x (1 + 4 per transcendental) against SPLIT_WORK.
SPLIT_WORK = 1 << 18
_TRANSCENDENTAL = frozenset({"exp", "log", "tanh", "sigmoid", "erf", "sin", "cos", "pow"})
MAX_CHUNKS = 0xFFFF  # the chunk count and index share 32 bits of the ticket
_FUTEX = {"x86_64": 202, "amd64": 202, "aarch64": 98, "arm64": 98}  # SYS_futex
_FUTEX_WAIT, _FUTEX_WAKE = 128, 129  # the _PRIVATE forms: the block is never shared between processes
_STATE_BYTES = 320
# The generation (32 bits) and epoch wrap after 2^32 jobs: a stale claim would need one worker to sleep between its
# ticket load and its compare-and-swap through exactly that many jobs.
_TICKET, _EPOCH, _STOP, _BUSY, _SLEEPERS, _DONE, _FN, _CTX, _N, _CHUNK = 0, 64, 68, 72, 128, 192, 256, 264, 272, 280


def available():
    """Whether this platform has the native pool (Linux on x86-64 or AArch64: it sleeps with the futex call).

    >>> isinstance(available(), bool)
    True
    """
    return sys.platform.startswith("linux") and platform.machine().lower() in _FUTEX


def _block():
    """A zeroed, cache-line aligned shared block outside Python's heap, never freed: workers poll it until they see
    ``stop``, so memory a garbage collector could hand to someone else must not hold it (a dropped pool's workers once
    ran whatever the reused bytes pointed at)."""
    libc = ctypes.CDLL(None)
    libc.aligned_alloc.restype, libc.aligned_alloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t, ctypes.c_size_t]
    address = libc.aligned_alloc(64, _STATE_BYTES + (-_STATE_BYTES) % 64)
    if not address:
        raise MemoryError("NativePool: could not allocate its shared block")
    ctypes.memset(address, 0, _STATE_BYTES)
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


def _field(b, state, offset):
    return b.emit(f"getelementptr i8, ptr {state}, i64 {offset}") if offset else state


def _pause():
    return "call void @llvm.x86.sse2.pause()" if platform.machine().lower() in ("x86_64", "amd64") else ""


def _futex(b, word, op, value):
    b.emit(f"call i64 (i64, ...) @syscall(i64 {_FUTEX.get(platform.machine().lower(), 202)}, ptr {word}, "
           f"i64 {op}, i64 {value}, ptr null)")


def _claim_function():
    """``pool_claim(state)``: claim chunks of the published job and run them until none is left."""
    b = LLVMBuilder()
    b.label("entry")
    ticket, done = "%state", _field(b, "%state", _DONE)
    fn_at, ctx_at = _field(b, "%state", _FN), _field(b, "%state", _CTX)
    n_at, chunk_at = _field(b, "%state", _N), _field(b, "%state", _CHUNK)
    b.line("br label %claim")
    b.label("claim")
    t = b.emit(f"load atomic i64, ptr {ticket} acquire, align 8")
    nxt = b.emit(f"and i64 {t}, 65535")
    count = b.emit(f"and i64 {b.emit(f'lshr i64 {t}, 16')}, 65535")
    b.line(f"br i1 {b.emit(f'icmp ult i64 {nxt}, {count}')}, label %try, label %out")
    b.label("try")
    pair = b.emit(f"cmpxchg ptr {ticket}, i64 {t}, i64 {b.emit(f'add i64 {t}, 1')} acq_rel acquire")
    b.line(f"br i1 {b.emit(f'extractvalue {{ i64, i1 }} {pair}, 1')}, label %run, label %claim")
    b.label("run")
    fn, ctx = b.emit(f"load ptr, ptr {fn_at}"), b.emit(f"load ptr, ptr {ctx_at}")
    n, chunk = b.emit(f"load i64, ptr {n_at}"), b.emit(f"load i64, ptr {chunk_at}")
    start = b.emit(f"mul i64 {nxt}, {chunk}")
    end = b.emit(f"add i64 {start}, {chunk}")
    stop = b.emit(f"select i1 {b.emit(f'icmp slt i64 {end}, {n}')}, i64 {end}, i64 {n}")
    b.line(f"call void {fn}(i64 {start}, i64 {stop}, ptr {ctx})")
    b.emit(f"atomicrmw add ptr {done}, i64 1 release")
    b.line("br label %claim")
    b.label("out")
    b.line("ret void")
    return f"define internal void @pool_claim(ptr %state) nounwind {{\n{b}\n}}"


def _backoff(b, polls, label):
    """Count one more poll: ``pause`` for the first `SPIN_POLLS`, then ``sched_yield``; jump back to ``label``.
    Returns whether the yields are used up (the caller may sleep then)."""
    n = b.emit(f"load i32, ptr {polls}")
    b.line(f"store i32 {b.emit(f'add i32 {n}, 1')}, ptr {polls}")
    b.line(f"br i1 {b.emit(f'icmp ult i32 {n}, {SPIN_POLLS}')}, label %{label}_pause, label %{label}_late")
    b.label(f"{label}_pause")
    if _pause():
        b.line(_pause())
    b.line(f"br label %{label}")
    b.label(f"{label}_late")
    return b.emit(f"icmp uge i32 {n}, {SPIN_POLLS + YIELD_POLLS}")


def _worker_function():
    """``jitorch_pool_worker(state)``: wait for a new epoch, run chunks, repeat until ``stop``."""
    b = LLVMBuilder()
    b.label("entry")
    seen, polls = b.emit("alloca i32"), b.emit("alloca i32")
    epoch, stop = _field(b, "%state", _EPOCH), _field(b, "%state", _STOP)
    sleepers = _field(b, "%state", _SLEEPERS)
    b.line(f"store i32 {b.emit(f'load atomic i32, ptr {epoch} acquire, align 4')}, ptr {seen}")
    b.line("br label %idle")
    b.label("idle")
    b.line(f"store i32 0, ptr {polls}")
    b.line("br label %poll")
    b.label("poll")
    now, was = b.emit(f"load atomic i32, ptr {epoch} acquire, align 4"), b.emit(f"load i32, ptr {seen}")
    b.line(f"br i1 {b.emit(f'icmp ne i32 {now}, {was}')}, label %wake, label %stopped")
    # ``stop`` is read on every poll as well: a worker that starts after the pool closed sees no epoch change.
    b.label("stopped")
    stopping = b.emit(f"load atomic i32, ptr {stop} acquire, align 4")
    b.line(f"br i1 {b.emit(f'icmp ne i32 {stopping}, 0')}, label %out, label %wait")
    b.label("wait")
    tired = _backoff(b, polls, "poll")
    b.line(f"br i1 {tired}, label %sleep, label %yield")
    b.label("yield")
    b.emit("call i32 @sched_yield()")
    b.line("br label %poll")
    b.label("sleep")
    # Announce the sleep, then look again (both sequentially consistent, as the caller's epoch bump and sleeper
    # read): either the caller sees this sleeper and wakes it, or this load sees the new epoch.
    b.emit(f"atomicrmw add ptr {sleepers}, i32 1 seq_cst")
    again = b.emit(f"load atomic i32, ptr {epoch} seq_cst, align 4")
    b.line(f"br i1 {b.emit(f'icmp eq i32 {again}, {was}')}, label %futex, label %woken")
    b.label("futex")
    _futex(b, epoch, _FUTEX_WAIT, b.emit(f"zext i32 {was} to i64"))
    b.line("br label %woken")
    b.label("woken")
    b.emit(f"atomicrmw sub ptr {sleepers}, i32 1 seq_cst")
    b.line("br label %poll")
    b.label("wake")
    b.line(f"store i32 {now}, ptr {seen}")
    quit_ = b.emit(f"icmp ne i32 {b.emit(f'load atomic i32, ptr {stop} acquire, align 4')}, 0")
    b.line(f"br i1 {quit_}, label %out, label %work")
    b.label("work")
    b.line("call void @pool_claim(ptr %state)")
    b.line("br label %idle")
    b.label("out")
    b.line("ret void")
    return f"define void @jitorch_pool_worker(ptr %state) nounwind {{\n{b}\n}}"


def _run_function():
    """``jitorch_pool_run(state, fn, ctx, n, chunk, count)``: publish a job, wake sleepers, take part, wait."""
    b = LLVMBuilder()
    b.label("entry")
    polls = b.emit("alloca i32")
    b.line(f"store i32 0, ptr {polls}")
    epoch, sleepers = _field(b, "%state", _EPOCH), _field(b, "%state", _SLEEPERS)
    done, busy = _field(b, "%state", _DONE), _field(b, "%state", _BUSY)
    # One chunk, or more than the ticket can count (a caller's bug: the job could never finish), runs alone.
    several = b.emit("icmp ugt i64 %count, 1")
    fits = b.emit(f"icmp ule i64 %count, {MAX_CHUNKS}")
    b.line(f"br i1 {b.emit(f'and i1 {several}, {fits}')}, label %lock, label %alone")
    b.label("lock")
    pair = b.emit(f"cmpxchg ptr {busy}, i32 0, i32 1 acquire monotonic")
    b.line(f"br i1 {b.emit(f'extractvalue {{ i32, i1 }} {pair}, 1')}, label %publish, label %alone")
    b.label("alone")
    b.line("call void %fn(i64 0, i64 %n, ptr %ctx)")
    b.line("ret void")
    b.label("publish")
    for offset, value, ty in ((_FN, "%fn", "ptr"), (_CTX, "%ctx", "ptr"), (_N, "%n", "i64"), (_CHUNK, "%chunk", "i64")):
        b.line(f"store {ty} {value}, ptr {_field(b, '%state', offset)}")
    b.line(f"store atomic i64 0, ptr {done} monotonic, align 8")
    generation = b.emit(f"lshr i64 {b.emit('load atomic i64, ptr %state monotonic, align 8')}, 32")
    next_generation = b.emit(f"add i64 {generation}, 1")
    high, middle = b.emit(f"shl i64 {next_generation}, 32"), b.emit("shl i64 %count, 16")
    ticket = b.emit(f"or i64 {high}, {middle}")
    b.line(f"store atomic i64 {ticket}, ptr %state seq_cst, align 8")
    b.emit(f"atomicrmw add ptr {epoch}, i32 1 seq_cst")
    asleep = b.emit(f"load atomic i32, ptr {sleepers} seq_cst, align 4")
    b.line(f"br i1 {b.emit(f'icmp ne i32 {asleep}, 0')}, label %wake, label %join")
    b.label("wake")
    _futex(b, epoch, _FUTEX_WAKE, 2147483647)
    b.line("br label %join")
    b.label("join")
    b.line("call void @pool_claim(ptr %state)")
    b.line("br label %check")
    b.label("check")
    finished = b.emit(f"icmp eq i64 {b.emit(f'load atomic i64, ptr {done} acquire, align 8')}, %count")
    b.line(f"br i1 {finished}, label %out, label %wait")
    b.label("wait")
    _backoff(b, polls, "check")  # a worker still runs a chunk: spin briefly, then give it this core
    b.emit("call i32 @sched_yield()")
    b.line("br label %check")
    b.label("out")
    b.line(f"store atomic i32 0, ptr {busy} release, align 4")
    b.line("ret void")
    return ("define void @jitorch_pool_run(ptr %state, ptr %fn, ptr %ctx, i64 %n, i64 %chunk, i64 %count) "
            f"nounwind {{\n{b}\n}}")


def _stop_function():
    b = LLVMBuilder()
    b.label("entry")
    epoch, stop = _field(b, "%state", _EPOCH), _field(b, "%state", _STOP)
    b.line(f"store atomic i32 1, ptr {stop} seq_cst, align 4")
    b.emit(f"atomicrmw add ptr {epoch}, i32 1 seq_cst")
    _futex(b, epoch, _FUTEX_WAKE, 2147483647)
    b.line("ret void")
    return f"define void @jitorch_pool_stop(ptr %state) nounwind {{\n{b}\n}}"


def emit_pool():
    """The pool's LLVM module: ``jitorch_pool_worker``, ``jitorch_pool_run``, ``jitorch_pool_stop``."""
    decls = ["declare i64 @syscall(i64, ...)", "declare i32 @sched_yield()"]
    if _pause():
        decls.append("declare void @llvm.x86.sse2.pause()")
    return "\n\n".join(["\n".join(decls), _claim_function(), _worker_function(), _run_function(), _stop_function(),
                        ""])


def emit_trampoline(types, name):
    """``void @name(i64 %start, i64 %stop, ptr %ctx)``: calls the kernel at ``ctx[0]`` with ``ctx[1:]`` as its
    arguments of LLVM ``types`` (a float in the low bytes of its i64 entry), so one worker loop runs any kernel::

        define void @jitorch_pool_call_ptr_ptr_i64(i64 %start, i64 %stop, ptr %ctx) nounwind {
        entry:
          %t0 = load ptr, ptr %ctx
          %t1 = getelementptr i64, ptr %ctx, i64 1
          %t2 = load ptr, ptr %t1
          ...
          call void %t0(i64 %start, i64 %stop, ptr %t2, ptr %t4, i64 %t6)
          ret void
        }
    """
    b = LLVMBuilder()
    b.label("entry")
    fn, args = b.emit("load ptr, ptr %ctx"), []
    for i, ty in enumerate(types, start=1):
        at = b.emit(f"getelementptr i64, ptr %ctx, i64 {i}")
        args.append(f"{ty} {b.emit(f'load {ty}, ptr {at}')}")
    b.line(f"call void {fn}(i64 %start, i64 %stop{''.join(', ' + a for a in args)})")
    b.line("ret void")
    return f"define void @{name}(i64 %start, i64 %stop, ptr %ctx) nounwind {{\n{b}\n}}\n"


_trampolines: dict = {}


def trampoline_address(types, cache=None):
    """The compiled `emit_trampoline` for argument ``types`` (one per signature, shared by every kernel)."""
    types = tuple(types)
    found = _trampolines.get(types)
    if found is None:
        name = "jitorch_pool_call_" + "_".join(types)
        found = _trampolines[types] = compile_function(emit_trampoline(types, name), name, cache)
    return found


class NativePool:
    """``threads - 1`` native workers plus the calling thread; `run_kernel` splits a kernel's outer range.

    One job runs at a time: a caller that finds the pool busy (another Python thread's kernel) runs its kernel on
    its own thread instead of waiting. After a ``fork`` the child has no workers: its caller runs every chunk.
    """

    def __init__(self, threads, cache=None):
        self.threads, self.cache = int(threads), cache
        self._state = self.state = _block()
        self._pid = os.getpid()
        worker, run, stop = compile_functions(emit_pool(), ["jitorch_pool_worker", "jitorch_pool_run",
                                                             "jitorch_pool_stop"], cache)
        self.run_address = run  # native callers (`llvm_program`) call it directly
        self._worker = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(worker)
        self._run = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64,
                                     ctypes.c_int64, ctypes.c_int64)(run)
        self._stop = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(stop)
        self._workers = [threading.Thread(target=self._worker, args=(self._state,), daemon=True,
                                          name=f"jitorch-native-{i}") for i in range(self.threads - 1)]
        for w in self._workers:
            w.start()
        # A pool dropped without close() (or alive at exit) still stops its workers; the block itself is never freed,
        # since a worker may read it for a moment after the stop.
        weakref.finalize(self, self._stop, self._state)

    def run(self, fn_address, ctx_address, n, chunk):
        """Run ``fn(start, stop, ctx)`` over ``range(n)`` in chunks of ``chunk``; returns when every chunk is done."""
        count = -(-n // chunk)
        if count > MAX_CHUNKS:
            raise ValueError(f"NativePool.run: {count} chunks of {chunk} exceed {MAX_CHUNKS}; use larger chunks")
        self._run(self._state, fn_address, ctx_address, n, chunk, count)

    def run_kernel(self, kernel, addresses, grain=1, chunks_per_thread=4):
        """Run a `llvm_compile.CompiledKernel` over its outer range with buffers at ``addresses``, in chunks of at
        least ``grain`` rows, ``chunks_per_thread`` chunks a thread (late threads take fewer)."""
        call = kernel.__dict__.get("_pool_call")
        if call is None:  # per kernel, once: its trampoline and its integer arguments as ctx entries
            types = ["ptr"] * len(addresses) + list(arguments(kernel.kernel))
            values = [bits(v, ty) for v, ty in zip(kernel.values, types[len(addresses):])]
            call = kernel._pool_call = (trampoline_address(types, self.cache), ctypes.c_int64 * (1 + len(types)),
                                        kernel.address, values)
        fn, ctx_type, address, values = call
        ctx = ctx_type(address, *addresses, *values)
        self.run(fn, ctypes.addressof(ctx), kernel.outer, self.chunking(kernel.outer, grain, chunks_per_thread)[0])

    def run_function(self, address, types, args, n, grain=1, chunks_per_thread=4):
        """Run the native function at ``address``, ``f(i64 start, i64 stop, args...)`` with ``args`` of LLVM
        ``types`` (pointers and integers), over ``range(n)`` split as `run_kernel` does."""
        ctx = (ctypes.c_int64 * (1 + len(args)))(address, *(bits(a, ty) if ty != "ptr" else a
                                                            for a, ty in zip(args, types, strict=True)))
        self.run(trampoline_address(tuple(types), self.cache), ctypes.addressof(ctx), n,
                 self.chunking(n, grain, chunks_per_thread)[0])

    def chunking(self, n, grain=1, chunks_per_thread=4):
        """``(chunk size, chunk count)`` for ``range(n)``: ``chunks_per_thread`` chunks a thread (late threads take
        fewer), at least ``grain`` rows each."""
        chunk = max(grain, -(-n // (self.threads * chunks_per_thread)), -(-n // MAX_CHUNKS), 1)
        return chunk, -(-n // chunk)

    def close(self):
        """Stop and join the workers (the pool is unusable afterwards)."""
        if os.getpid() == self._pid and self._workers:
            self._stop(self._state)
            for w in self._workers:
                w.join(timeout=10)
                if w.is_alive():  # never hang the caller: the worker only holds its own stack
                    warnings.warn(f"NativePool.close: worker {w.name} did not stop within 10 s", RuntimeWarning,
                                  stacklevel=2)
        self._workers = []


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


_shared = {"pool": None, "retired": []}  # replaced pools stay allocated: compiled programs hold their block
_shared_lock = threading.Lock()


def _after_fork_in_child():
    # The lock may have been held by another thread of the parent (building a pool) at the fork.
    global _shared_lock
    _shared_lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def shared_pool(threads):
    """The process's pool with ``threads`` participants (rebuilt when the count changes or after ``fork``), or None
    where the native pool is not `available` or one thread is asked for. Its code is cached on disk with the
    kernels' (`llvm_objcache.default_cache`)."""
    if threads <= 1 or not available():
        return None
    pool = _shared["pool"]
    if pool is not None and pool.threads == threads and pool._pid == os.getpid():
        return pool
    with _shared_lock:
        pool = _shared["pool"]
        if pool is None or pool.threads != threads or pool._pid != os.getpid():
            if pool is not None:
                pool.close()  # a program still calling it runs every chunk on its caller's thread
                _shared["retired"].append(pool)
            pool = _shared["pool"] = NativePool(threads, default_cache())
        return pool
