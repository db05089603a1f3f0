"""CUDA graphs, the CPU-side suite: private-pool capture against the fake driver, the capture guards (forbidden ops
end the capture; random draws replay and advance the generator) with CPU arrays standing in for device memory, and
the no-GPU behaviour of ``jitorch.cuda``'s graph API against CPU-only torch. The GPU suite is test_cuda_graphs_gpu.py.
"""
import pytest
from hypothesis import given, settings, strategies as st

import jitorch
from jitorch.runtime.alloc_config import AllocatorConfig
from jitorch.runtime.allocator import CachingAllocator, PoolCapture
from jitorch.runtime.driver import FakeDriver

from cuda_graphs_helpers import CAPTURE, KiB, MiB, make


def private_spans(alloc, pool_id):
    return [(s["address"], s["address"] + s["total_size"]) for s in alloc.memory_snapshot()
            if s["segment_pool_id"] == pool_id]


def inside(block, spans):
    return any(lo <= block.ptr < hi for lo, hi in spans)


# -- private pools under capture (runtime, FakeDriver) -------------------------------------------------------------
def test_capture_allocations_stay_private_while_the_graph_lives():
    alloc, driver = make()
    cap = PoolCapture(alloc, driver)
    cap.begin(CAPTURE)
    assert driver.stream_is_capturing(CAPTURE) and alloc.capturing()
    captured = [alloc.malloc(n, stream=CAPTURE) for n in (512, 3 * KiB, 700 * KiB, 3 * MiB, 12 * MiB)]
    eager_elsewhere = alloc.malloc(3 * KiB, stream=0)  # other streams keep using the default pools
    graph = cap.end()
    assert not driver.stream_is_capturing(CAPTURE) and not alloc.capturing() and graph.stream == CAPTURE
    spans = private_spans(alloc, cap.pool_id)
    assert all(inside(b, spans) for b in captured) and not inside(eager_elsewhere, spans)
    for b in captured:  # the user drops the graph's outputs: blocks go back to the private pool, not the default one
        alloc.free(b)
    eager = [alloc.malloc(n, stream=s) for s in (0, CAPTURE) for n in (512, 3 * KiB, 700 * KiB, 3 * MiB, 12 * MiB)]
    assert not any(inside(b, spans) for b in eager)
    assert alloc.memory_allocated() == sum(b.size for b in eager) + eager_elsewhere.size


def test_graphs_sharing_a_pool_reuse_each_others_freed_blocks():
    alloc, driver = make()
    first, second, third = PoolCapture(alloc, driver), PoolCapture(alloc, driver), PoolCapture(alloc, driver)
    first.begin(CAPTURE)
    temp = alloc.malloc(64 * KiB, stream=CAPTURE)
    temp_ptr = temp.ptr
    alloc.free(temp)  # an intermediate that died inside the capture
    out = alloc.malloc(4 * MiB, stream=CAPTURE)
    out_ptr = out.ptr
    first.end()
    alloc.free(out)  # an output the user dropped after capture
    second.begin(CAPTURE, pool=first.pool_id)
    assert alloc.pool_use_count(first.pool_id) == 2
    reused = alloc.malloc(64 * KiB, stream=CAPTURE)
    reused_large = alloc.malloc(4 * MiB, stream=CAPTURE)
    second.end()
    assert reused.ptr == temp_ptr and reused_large.ptr == out_ptr
    third.begin(CAPTURE)  # a fresh pool sees none of it
    fresh = alloc.malloc(64 * KiB, stream=CAPTURE)
    third.end()
    assert fresh.ptr != temp_ptr and not inside(fresh, private_spans(alloc, first.pool_id))


def test_reset_returns_memory_once_no_graph_uses_the_pool():
    alloc, driver = make()
    base = alloc.malloc(KiB)
    before = alloc.memory_reserved()
    a, b = PoolCapture(alloc, driver), PoolCapture(alloc, driver)
    a.begin(CAPTURE)
    alloc.free(alloc.malloc(5 * MiB, stream=CAPTURE))
    kept = alloc.malloc(KiB, stream=CAPTURE)
    a.end()
    b.begin(CAPTURE, pool=a.pool_id)
    b.end()
    reserved = alloc.memory_reserved()
    a.reset()
    assert alloc.pool_use_count(b.pool_id) == 1 and alloc.memory_reserved() == reserved  # b still uses the pool
    b.reset()
    # The free large segment goes back at once; the small one waits for its last block (a tensor still alive).
    assert alloc.pool_use_count(b.pool_id) == 0 and alloc.memory_reserved() == before + 2 * MiB
    alloc.free(kept)
    alloc.empty_cache()
    assert alloc.memory_reserved() == before and driver.used == before
    alloc.free(base)
    stats = alloc.memory_stats()
    assert stats["allocated_bytes.all.current"] == 0 and stats["segment.all.current"] == 1


def test_invalidated_capture_ends_and_leaves_the_stream_usable():
    alloc, driver = make()
    cap = PoolCapture(alloc, driver)
    cap.begin(CAPTURE)
    alloc.malloc(KiB, stream=CAPTURE)
    driver.invalidate_capture(CAPTURE)
    with pytest.raises(RuntimeError, match="invalidated"):
        cap.end()
    assert not driver.stream_is_capturing(CAPTURE) and not alloc.capturing() and cap.graph is None
    assert alloc.pool_use_count(cap.pool_id) == 0
    cap.begin(CAPTURE)  # the same graph and stream capture again
    assert cap.end() is not None and alloc.pool_use_count(cap.pool_id) == 1


def test_abort_is_idempotent_and_begin_errors_leave_no_routing():
    alloc, driver = make()
    cap = PoolCapture(alloc, driver)
    with pytest.raises(RuntimeError, match="default"):
        cap.begin(0)  # the legacy default stream cannot capture
    assert not alloc.capturing() and not cap.capturing and not cap.holds_pool
    cap.begin(CAPTURE)
    with pytest.raises(RuntimeError, match="already capturing"):
        cap.begin(CAPTURE)
    cap.abort()
    cap.abort()
    assert not driver.stream_is_capturing(CAPTURE) and not alloc.capturing()
    with pytest.raises(RuntimeError, match="not capturing"):
        cap.end()


def test_cross_stream_frees_during_capture_record_no_events():
    alloc, driver = make()
    cap = PoolCapture(alloc, driver)
    shared = alloc.malloc(MiB, stream=0)
    alloc.record_stream(shared, CAPTURE)
    cap.begin(CAPTURE)
    alloc.free(shared)  # the fake driver raises if an event is recorded on the capturing stream
    cap.end()
    assert driver.calls["event_record"] == 1  # recorded once the capture ended


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["malloc", "free", "begin", "end", "reset", "share"]),
                          st.integers(0, 2), st.sampled_from([512, 4 * KiB, 900 * KiB, 3 * MiB, 11 * MiB])),
                max_size=40))
def test_pool_routing_properties(ops):
    """Whatever the interleaving: eager blocks never lie in a live graph's pool, and the statistics stay exact."""
    alloc, driver = make()
    graphs = [PoolCapture(alloc, driver) for _ in range(3)]
    live, eager = [], []
    for op, i, size in ops:
        g = graphs[i]
        active = next((x for x in graphs if x.capturing), None)
        if op == "malloc":
            stream = CAPTURE if active is not None and i else 0
            block = alloc.malloc(size, stream=stream)
            live.append(block)
            if active is None or stream != CAPTURE:
                eager.append(block)
        elif op == "free" and live:
            block = live.pop(i % len(live))
            alloc.free(block)
            if block in eager:
                eager.remove(block)
        elif op in ("begin", "share") and active is None and not g.capturing and g.graph is None:
            donor = next((x for x in graphs if x.holds_pool and x is not g), None)
            g.begin(CAPTURE, pool=donor.pool_id if op == "share" and donor is not None else None)
        elif op == "end" and active is not None:
            active.end()
        elif op == "reset" and not g.capturing:
            g.reset()
        for x in graphs:
            if x.holds_pool:
                spans = private_spans(alloc, x.pool_id)
                assert not any(inside(b, spans) for b in eager)
        assert alloc.memory_allocated() == sum(b.size for b in live)
        assert alloc.memory_reserved() == driver.used
    for g in graphs:
        g.reset()
    for block in live:
        alloc.free(block)
    alloc.empty_cache()
    assert alloc.memory_reserved() == 0 and driver.used == 0 and not alloc.capturing()


# -- the API without a GPU (CPU-only torch is the oracle) ----------------------------------------------------------
def _error(fn):
    try:
        fn()
    except Exception as e:  # noqa: BLE001 - comparing the exception type and text
        return type(e), str(e)
    return None


@pytest.mark.skipif(jitorch.cuda.is_available(), reason="checks the no-GPU behaviour")
@pytest.mark.parametrize("call", [
    lambda m: m.cuda.is_current_stream_capturing(),
    lambda m: m.cuda.CUDAGraph(),
    lambda m: m.cuda.graph_pool_handle(),
    lambda m: m.cuda.graph(None),
    lambda m: m.cuda.make_graphed_callables(lambda x: x * 2, (m.zeros(2),)),
])
def test_without_cuda_the_graph_api_fails_like_cpu_only_torch(call):
    import torch  # the oracle (imported here: the GPU machine may run this file without torch's CUDA build)

    assert _error(lambda: call(jitorch)) == _error(lambda: call(torch))


# -- CUDAGraph and graph() over a fake CuPy: the state machine, streams and pools, without a GPU -------------------
class _FakeStream:
    """A CuPy stream stand-in whose capture is the FakeDriver's."""

    def __init__(self, ptr, state):
        self.ptr, self.state = ptr, state

    def begin_capture(self, mode=None):
        self.state["driver"].begin_capture(self.ptr)

    def end_capture(self):
        return self.state["driver"].end_capture(self.ptr)

    def is_capturing(self):
        return self.state["driver"].stream_is_capturing(self.ptr)

    def use(self):
        self.state["current"] = self


class _FakeCuda:
    class runtime:  # noqa: N801 - CuPy's spelling
        streamCaptureModeRelaxed = 2  # noqa: N815
        CUDARuntimeError = type("CUDARuntimeError", (RuntimeError,), {})

        @staticmethod
        def getDevice():  # noqa: N802
            return 0

    def __init__(self, state):
        self.state = state

    def get_current_stream(self):
        return self.state["current"]

    def Device(self):  # noqa: N802
        return type("D", (), {"synchronize": lambda self: None})()


@pytest.fixture
def fake_cuda(monkeypatch):
    from jitorch.cuda import graphs
    from jitorch.runtime.cuda_memory import CupyAllocatorHook

    driver = FakeDriver()
    state = {"driver": driver}
    state["current"] = _FakeStream(0, state)
    hook = CupyAllocatorHook(lambda dev: CachingAllocator(driver, AllocatorConfig()), current_device=lambda: 0,
                             current_stream=lambda: state["current"].ptr)
    fake = type("cupy", (), {"cuda": _FakeCuda(state)})()
    monkeypatch.setattr(graphs, "cupy", lambda: fake)
    monkeypatch.setattr(graphs, "has_cuda", lambda: True)
    monkeypatch.setattr(graphs, "_hook", lambda: hook)
    side = type("Stream", (), {})()
    side._cp = _FakeStream(CAPTURE, state)
    state.update(hook=hook, alloc=hook.allocator(0), side=side)
    return state


def test_cuda_graph_capture_replay_reset_over_fake_cupy(fake_cuda):
    from jitorch.cuda.graphs import CUDAGraph, graph

    hook, alloc, driver = fake_cuda["hook"], fake_cuda["alloc"], fake_cuda["driver"]
    g = CUDAGraph()
    with pytest.raises(RuntimeError, match="non-default stream"):
        g.capture_begin()
    with pytest.raises(RuntimeError, match="without a preceding successful capture"):
        g.replay()
    with graph(g, stream=fake_cuda["side"]):
        assert fake_cuda["current"].ptr == CAPTURE and driver.stream_is_capturing(CAPTURE)
        out = hook.malloc(4096)  # what CuPy asks for while the region runs
    assert fake_cuda["current"].ptr == 0 and not driver.stream_is_capturing(CAPTURE)
    spans = private_spans(alloc, g.pool())
    assert any(lo <= out.ptr < hi for lo, hi in spans)
    g.replay()
    g.replay()
    assert g._exec.launches == 2 and "jitorch CUDAGraph" in g.debug_dump()
    del out
    eager = hook.malloc(4096)
    assert not any(lo <= eager.ptr < hi for lo, hi in spans)
    pid = g.pool()
    g.reset()
    hook.empty_cache()
    assert private_spans(alloc, pid) == [] and alloc.pool_use_count(pid) == 0


def test_graph_context_ends_the_capture_on_errors_over_fake_cupy(fake_cuda):
    from jitorch.cuda.graphs import CUDAGraph, graph

    driver, alloc = fake_cuda["driver"], fake_cuda["alloc"]
    g1, g2 = CUDAGraph(), CUDAGraph()
    with pytest.raises(ZeroDivisionError):
        with graph(g1, stream=fake_cuda["side"]):
            1 / 0
    assert fake_cuda["current"].ptr == 0 and not driver.stream_is_capturing(CAPTURE) and not alloc.capturing()
    with pytest.raises(RuntimeError, match="capture_end"):
        with graph(g1, stream=fake_cuda["side"]):
            driver.invalidate_capture(CAPTURE)
    assert not driver.stream_is_capturing(CAPTURE) and not alloc.capturing()
    with graph(g1, stream=fake_cuda["side"]):
        fake_cuda["hook"].malloc(KiB)
    with graph(g2, pool=g1.pool(), stream=fake_cuda["side"]):
        pass
    assert g2.pool() == g1.pool() and alloc.pool_use_count(g1.pool()) == 2
    with pytest.raises(RuntimeError, match="already holds a capture"):
        with graph(g1, stream=fake_cuda["side"]):
            pass
    assert fake_cuda["current"].ptr == 0
    g1.reset()
    g2.reset()
    assert alloc.pool_use_count(g1.pool()) == 0
