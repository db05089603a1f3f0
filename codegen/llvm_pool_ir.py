"""The native worker pool's code (`llvm_pool`): its worker loop, job entry point and stop, and the
trampolines that call any kernel from a context array, as LLVM IR text.

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
"""
from __future__ import annotations

import platform
import sys

from .codeblock import LLVMBuilder

__all__ = ["MAX_CHUNKS", "STATE_BYTES", "available", "emit_pool", "emit_trampoline"]

SPIN_POLLS = 256  # ``pause`` polls (~10-40 us) before yielding: a hand-off between back-to-back kernels stays cheap
YIELD_POLLS = 64  # ``sched_yield`` polls before sleeping on the futex
MAX_CHUNKS = 0xFFFF  # the chunk count and index share 32 bits of the ticket
_FUTEX = {"x86_64": 202, "amd64": 202, "aarch64": 98, "arm64": 98}  # SYS_futex
_FUTEX_WAIT, _FUTEX_WAKE = 128, 129  # the _PRIVATE forms: the block is never shared between processes
STATE_BYTES = 320
# The generation (32 bits) and epoch wrap after 2^32 jobs: a stale claim would need one worker to sleep between its
# ticket load and its compare-and-swap through exactly that many jobs.
_TICKET, _EPOCH, _STOP, _BUSY, _SLEEPERS, _DONE, _FN, _CTX, _N, _CHUNK = 0, 64, 68, 72, 128, 192, 256, 264, 272, 280


def available():
    """Whether this platform has the native pool (Linux on x86-64 or AArch64: it sleeps with the futex call).

    >>> isinstance(available(), bool)
    True
    """
    return sys.platform.startswith("linux") and platform.machine().lower() in _FUTEX


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


def emit_trampoline(types, name, array_field=None):
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

    An ``array`` entry is the address of a NumPy array object, and the kernel gets the data pointer stored
    ``array_field`` bytes into it (`runtime.host_pointer.ARRAY_DATA_OFFSET`): the caller passes ``id(a)``.
    """
    b = LLVMBuilder()
    b.label("entry")
    fn, args = b.emit("load ptr, ptr %ctx"), []
    for i, ty in enumerate(types, start=1):
        at = b.emit(f"getelementptr i64, ptr %ctx, i64 {i}")
        if ty == "array":
            field = b.emit(f"getelementptr i8, ptr {b.emit(f'load ptr, ptr {at}')}, i64 {int(array_field)}")
            args.append(f"ptr {b.emit(f'load ptr, ptr {field}')}")
        else:
            args.append(f"{ty} {b.emit(f'load {ty}, ptr {at}')}")
    b.line(f"call void {fn}(i64 %start, i64 %stop{''.join(', ' + a for a in args)})")
    b.line("ret void")
    return f"define void @{name}(i64 %start, i64 %stop, ptr %ctx) nounwind {{\n{b}\n}}\n"
