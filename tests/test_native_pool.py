"""The native worker pool (codegen/llvm_pool.py): every chunk runs exactly once, answers equal one thread's, late or
missing workers (busy pool, other Python threads, fork) never hang or change a result, and jitorch's kernels at 2
threads equal 1 thread through it."""
from __future__ import annotations

import ctypes
import multiprocessing
import threading

import numpy as np
import pytest

import jitorch
from jitorch.codegen import llvm_pool, llvm_pool_ir
from jitorch.codegen.ir import Buffer, Kernel, Store, load, op
from jitorch.codegen.llvm_compile import compile_function, compile_kernel
from jitorch.codegen.llvm_pool import NativePool, emit_pool, shared_pool, worth_splitting

pytestmark = pytest.mark.skipif(not llvm_pool.available(), reason="the native pool is Linux x86-64/AArch64 only")


def _tanh_kernel(n):
    return compile_kernel(Kernel((n,), (Buffer("f32", (1,)), Buffer("f32", (1,))),
                                 (Store(1, op("tanh", load(0, "f32"))),)))


@pytest.fixture(scope="module")
def pool():
    p = NativePool(3)  # more participants than this machine's cores: workers are often late
    yield p
    p.close()


# A kernel that counts its calls per row: out[i] += 1 for i in [start, stop), through the trampoline ABI.
_COUNT_IR = """define void @pool_test_count(i64 %start, i64 %stop, ptr %ctx) nounwind {
entry:
  %base = load ptr, ptr %ctx
  br label %check
check:
  %i = phi i64 [%start, %entry], [%next, %body]
  %more = icmp slt i64 %i, %stop
  br i1 %more, label %body, label %out
body:
  %at = getelementptr i32, ptr %base, i64 %i
  %old = atomicrmw add ptr %at, i32 1 monotonic
  %next = add i64 %i, 1
  br label %check
out:
  ret void
}
"""


@pytest.mark.parametrize("n,chunk", [(1, 1), (7, 1), (1000, 7), (1000, 1000), (1000, 999), (65535, 1), (4097, 64)])
def test_every_index_runs_exactly_once(pool, n, chunk):
    fn = compile_function(_COUNT_IR, "pool_test_count")
    for _ in range(20):
        counts = np.zeros(n, np.int32)
        ctx = (ctypes.c_int64 * 1)(counts.ctypes.data)
        pool.run(fn, ctypes.addressof(ctx), n, chunk)
        assert (counts == 1).all(), (n, chunk, np.flatnonzero(counts != 1)[:10])


@pytest.mark.parametrize("n", [5, 4096, 100_003])
def test_kernels_split_equal_one_thread(pool, n):
    rng = np.random.default_rng(n)
    k = _tanh_kernel(n)
    x = (rng.standard_normal(n) * 3).astype(np.float32)
    one, split = np.empty_like(x), np.full_like(x, np.nan)
    k(0, k.outer, x.ctypes.data, one.ctypes.data)
    pool.run_kernel(k, [x.ctypes.data, split.ctypes.data], grain=17)
    np.testing.assert_array_equal(split, one)


def test_row_reductions_split_by_rows_equal_one_thread(pool):
    rows, cols = 300, 257
    x = np.random.default_rng(0).standard_normal((rows, cols)).astype(np.float32)
    kernel = Kernel((rows, cols), (Buffer("f32", (cols, 1)), Buffer("f32", (1, 0))),
                    (Store(1, op("exp", load(0, "f32")), "sum"),), 1)
    k = compile_kernel(kernel)
    one, split = np.empty(rows, np.float32), np.empty(rows, np.float32)
    k(0, k.outer, x.ctypes.data, one.ctypes.data)
    pool.run_kernel(k, [x.ctypes.data, split.ctypes.data], grain=3)
    np.testing.assert_array_equal(split, one)


def test_back_to_back_jobs_with_sleeping_workers_lose_no_wakeup(pool):
    # Between bursts the workers go to sleep on the futex; each burst must still finish (the caller runs what the
    # workers do not), and every answer is right.
    import time

    fn = compile_function(_COUNT_IR, "pool_test_count")
    for burst in range(30):
        counts = np.zeros(5000, np.int32)
        ctx = (ctypes.c_int64 * 1)(counts.ctypes.data)
        for _ in range(10):
            pool.run(fn, ctypes.addressof(ctx), 5000, 50)
        assert (counts == 10).all()
        if burst % 3 == 0:
            time.sleep(0.002)  # long enough for the workers to stop polling and sleep


def test_callers_on_several_python_threads_each_get_their_answer(pool):
    k = _tanh_kernel(50_000)
    x = np.random.default_rng(1).standard_normal(50_000).astype(np.float32)
    want = np.empty_like(x)
    k(0, k.outer, x.ctypes.data, want.ctypes.data)
    failures = []

    def work():
        out = np.empty_like(x)
        for _ in range(50):
            out[:] = np.nan
            pool.run_kernel(k, [x.ctypes.data, out.ctypes.data], grain=100)  # busy pool: runs alone
            if not np.array_equal(out, want):
                failures.append(1)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures


def _child_runs_the_shared_pool(queue, stale):
    k = _tanh_kernel(300_000)
    x = np.linspace(-4, 4, 300_000, dtype=np.float32)
    one, split = np.empty_like(x), np.empty_like(x)
    k(0, k.outer, x.ctypes.data, one.ctypes.data)
    stale.run_kernel(k, [x.ctypes.data, split.ctypes.data], grain=10)  # the parent's pool: no workers here
    fresh = shared_pool(2)
    queue.put((bool(np.array_equal(split, one)), fresh is not stale, len(fresh._workers)))


def test_a_forked_child_neither_hangs_nor_reuses_the_parents_workers():
    parent = shared_pool(2)
    k = _tanh_kernel(1000)
    x, y = np.zeros(1000, np.float32), np.empty(1000, np.float32)
    parent.run_kernel(k, [x.ctypes.data, y.ctypes.data], grain=10)
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    child = ctx.Process(target=_child_runs_the_shared_pool, args=(queue, parent))
    child.start()
    child.join(60)
    assert child.exitcode == 0, "the child hung or failed"
    assert queue.get(timeout=5) == (True, True, 1)


def test_close_stops_and_joins_the_workers():
    p = NativePool(3)
    workers = list(p._workers)
    assert all(w.is_alive() for w in workers)
    p.close()
    assert not any(w.is_alive() for w in workers)


def test_a_dropped_pool_stops_its_workers():
    # Its block is never freed (a worker reads it for a moment after the stop), and collecting the pool stops them.
    import gc

    p = NativePool(3)
    k = _tanh_kernel(5000)
    x, y = np.zeros(5000, np.float32), np.empty(5000, np.float32)
    p.run_kernel(k, [x.ctypes.data, y.ctypes.data], grain=10)
    workers = list(p._workers)
    del p
    gc.collect()
    for w in workers:
        w.join(timeout=60)  # a bound against a hang, not a timing: a stopped worker returns at once
    assert not any(w.is_alive() for w in workers)


def test_a_count_the_ticket_cannot_hold_runs_alone(pool):
    # The native entry point refuses a count over 65535 by running the kernel on the caller (never a job that could
    # not finish, nor skipped rows).
    fn = compile_function(_COUNT_IR, "pool_test_count")
    counts = np.zeros(70000, np.int32)
    ctx = (ctypes.c_int64 * 1)(counts.ctypes.data)
    pool._run(pool.state, fn, ctypes.addressof(ctx), 70000, 1, 70000)
    assert (counts == 1).all()


def test_a_pool_closed_before_its_workers_start_still_joins():
    # close() right after start: a worker reaching its loop after the stop signal must see ``stop`` and return
    # (it once waited for an epoch change that had already happened, and close() hung).
    for _ in range(30):
        p = NativePool(3)
        workers = list(p._workers)
        p.close()
        assert not any(w.is_alive() for w in workers)


def test_shared_pool_follows_the_thread_count_and_programs_follow_it():
    from jitorch.codegen.llvm_program import KernelCall, Ref, compile_program
    from jitorch.runtime.threads import get_num_threads, set_num_threads

    cell = ctypes.c_void_p.from_address(llvm_pool.current_cell())
    old = get_num_threads()
    try:
        set_num_threads(2)
        two = shared_pool(2)
        assert two is shared_pool(2) and two.threads == 2 and cell.value == two.state
        # A program planned at 2 threads reads its pool from the cell on every call.
        n = 300_000
        k = Kernel((n,), (Buffer("f32", (1,)), Buffer("f32", (1,))), (Store(1, op("tanh", load(0, "f32"))),))
        program = compile_program([KernelCall(k, (Ref(0), Ref(1)), split=2)])
        x = np.linspace(-3, 3, n, dtype=np.float32)
        want = np.empty_like(x)
        compile_kernel(k).run([x, want])
        for threads in (3, 1, 2):
            set_num_threads(threads)  # repoints the cell: a new pool, the idle block (the caller alone), the first
            assert cell.value == (shared_pool(threads).state if threads > 1 else llvm_pool._shared["idle"])
            y = np.full_like(x, np.nan)
            table = np.array([x.ctypes.data, y.ctypes.data], np.uint64)
            program(table.ctypes.data)
            np.testing.assert_array_equal(y, want)
        three = shared_pool(3)
        assert three is not two and len(three._workers) == 2 and two is shared_pool(2)  # kept per count
    finally:
        set_num_threads(old)


def test_only_work_worth_a_hand_off_is_split():
    k = _tanh_kernel(8)
    cheap = compile_kernel(Kernel((8,), (Buffer("f32", (1,)), Buffer("f32", (1,))),
                                  (Store(1, op("neg", load(0, "f32"))),)))
    assert not worth_splitting(cheap, 1 << 16) and worth_splitting(cheap, llvm_pool.SPLIT_WORK)
    assert not worth_splitting(k, 1 << 14) and worth_splitting(k, 1 << 16)


def test_the_worker_loop_reads_as_its_docstring_shows():
    text = emit_pool()
    start = text.index("define void @jitorch_pool_worker")
    shown = [line.strip() for line in llvm_pool_ir.__doc__.split("The worker loop as emitted starts::")[1]
             .split(">>>")[0].strip().splitlines()]
    emitted = [line.strip() for line in text[start:].splitlines()[:len(shown)]]
    assert emitted == shown


@pytest.mark.parametrize("name", ["erf", "sigmoid", "gelu", "relu_backward"])
def test_eager_rows_at_two_threads_equal_one_thread_through_the_pool(name, monkeypatch):
    x = jitorch.randn(600, 1000)
    g = jitorch.randn(600, 1000)
    old = jitorch.get_num_threads()
    splits = []
    real = NativePool.run_kernel
    monkeypatch.setattr(NativePool, "run_kernel", lambda self, *a, **k: splits.append(1) or real(self, *a, **k))

    def run():
        if name == "relu_backward":
            leaf = x.clone().requires_grad_()
            jitorch.relu(leaf).backward(g)
            return leaf.grad
        return getattr(jitorch.nn.functional, name)(x) if name == "gelu" else getattr(jitorch, name)(x)

    try:
        jitorch.set_num_threads(1)
        one = run()
        assert not splits
        jitorch.set_num_threads(2)
        two = run()
    finally:
        jitorch.set_num_threads(old)
    assert splits, "the row did not reach the native pool"
    np.testing.assert_array_equal(one.numpy(), two.numpy())


def test_the_default_thread_count_follows_the_affinity_mask():
    # A process pinned to one CPU (taskset, a container's cpuset) must not start a worker per machine core.
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "JITORCH_NUM_THREADS"}
    probe = "import os; os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]}); import jitorch; " \
            "print(jitorch.get_num_threads())"
    out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "1"
