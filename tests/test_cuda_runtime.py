"""The CUDA runtime pieces that run without a GPU: the CuPy allocator hook on a FakeDriver, and ``plot_snapshot``.

The hook hands CuPy ``MemoryPointer``s over caching-allocator blocks; ``UnownedMemory`` needs no device when given its
device id, so the whole ownership protocol (views keep blocks alive, the last reference frees, cross-stream frees wait
for events) is checked here with fake addresses that are never dereferenced.
"""
import gc

import pytest

import jitorch.cuda
from jitorch.cuda._plot import STATE_STYLE, block_kind, plot_snapshot
from jitorch.runtime.alloc_config import AllocConfigError, parse_alloc_conf
from jitorch.runtime.allocator import CachingAllocator
from jitorch.runtime.driver import FakeDriver

KiB, MiB = 1 << 10, 1 << 20


# -- the CuPy allocator hook ------------------------------------------------------------------------------------------
class FakeCuda:
    """Current device and stream, as the hook asks for them; drivers per device, kept for inspection."""

    def __init__(self):
        self.device, self.stream, self.drivers = 0, 0, {}

    def make_allocator(self, device):
        driver = self.drivers[device] = FakeDriver(capacity=1 << 30, device=device)
        return CachingAllocator(driver)


@pytest.fixture
def fake():
    pytest.importorskip("cupy")
    from jitorch.runtime.cuda_memory import CupyAllocatorHook

    cuda = FakeCuda()
    cuda.hook = CupyAllocatorHook(cuda.make_allocator, lambda: cuda.device, lambda: cuda.stream)
    return cuda


class FakeArray:
    """What the hook reads from a CuPy array: ``array.data`` (a MemoryPointer)."""

    def __init__(self, data):
        self.data = data


def test_hook_pointers_are_allocator_blocks(fake):
    hook = fake.hook
    p = hook.malloc(1000)
    alloc = hook.allocator(0)
    block = hook.block_of(FakeArray(p))
    address = block.ptr
    assert p.ptr == address and p.device_id == 0 and p.mem.size == 1000
    assert alloc.memory_allocated() == 1024 and block.requested == 1000 and block.allocated
    del p
    assert alloc.memory_allocated() == 0 and not block.allocated
    q = hook.malloc(1000)
    assert q.ptr == address  # the cached block, reused
    assert fake.drivers[0].calls["malloc"] == 1


def test_views_keep_the_block_until_the_last_one_dies(fake):
    hook = fake.hook
    p = hook.malloc(4 * MiB)
    view = p + 1024  # what a CuPy slice holds: the same memory object, shifted
    address = p.ptr
    del p
    gc.collect()
    assert hook.allocator(0).memory_allocated() == 4 * MiB
    other = hook.malloc(4 * MiB)
    assert other.ptr != address
    del view
    assert hook.allocator(0).memory_allocated() == 4 * MiB  # only `other` left
    assert hook.malloc(4 * MiB).ptr == address


def test_allocators_per_device_and_stream(fake):
    hook = fake.hook
    a = hook.malloc(2048)
    fake.device = 1
    b = hook.malloc(2048)
    assert b.device_id == 1 and set(hook.allocators()) == {0, 1}
    assert hook.allocator(1).memory_allocated() == 2048 and hook.allocator(0).memory_allocated() == 2048
    fake.device, fake.stream = 0, 7
    c = hook.malloc(2048)
    assert hook.block_of(FakeArray(c)).stream == 7 and hook.block_of(FakeArray(a)).stream == 0
    address = c.ptr
    del c
    fake.stream = 0
    assert hook.malloc(2048).ptr != address  # a block freed on stream 7 never serves stream 0
    del a, b


def test_record_stream_delays_reuse_until_the_event(fake):
    hook = fake.hook
    p = hook.malloc(8192)
    address = p.ptr
    hook.record_stream(FakeArray(p), 5)
    del p
    alloc = hook.allocator(0)
    assert alloc.memory_allocated() == 0 and alloc.memory_stats()["active_bytes.all.current"] == 8192
    assert hook.malloc(8192).ptr != address
    driver = fake.drivers[0]
    (event, _), = alloc._events[5]
    driver.complete(event)
    assert hook.malloc(8192).ptr == address
    hook.record_stream(FakeArray(object()), 5)  # memory not from the hook: ignored


def test_frees_during_a_held_lock_are_queued_and_drained(fake):
    hook = fake.hook
    p = hook.malloc(4096)
    alloc = hook.allocator(0)
    with hook._lock:  # as if another thread (or a GC inside malloc) held it
        del p
        assert alloc.memory_allocated() == 4096 and len(hook._pending) == 1
    assert hook.synced().allocator(0).memory_allocated() == 0


def test_hook_empty_cache_releases_segments(fake):
    hook = fake.hook
    p = hook.malloc(3 * MiB)
    del p
    assert fake.drivers[0].used == 20 * MiB  # a large-pool segment stays cached
    hook.empty_cache()
    assert fake.drivers[0].used == 0 and hook.allocator(0).memory_reserved() == 0


def test_install_and_uninstall_route_cupy():
    cupy = pytest.importorskip("cupy")
    from jitorch.runtime import cuda_memory

    before = cupy.cuda.get_allocator()
    hook = cuda_memory.CupyAllocatorHook(lambda d: CachingAllocator(FakeDriver()), lambda: 0, lambda: 0)
    previous_hook = cuda_memory.installed_hook()
    try:
        assert cuda_memory.install(hook) is hook and cuda_memory.installed_hook() is hook
        assert cupy.cuda.get_allocator() == hook.malloc
    finally:
        cuda_memory.uninstall()
        if previous_hook is not None:
            cuda_memory.install(previous_hook)
    assert cupy.cuda.get_allocator() == before or previous_hook is not None


def test_backend_option():
    assert parse_alloc_conf("").backend == "native"
    assert parse_alloc_conf("backend:cupy,max_split_size_mb:64").backend == "cupy"
    with pytest.raises(AllocConfigError, match="backend must be 'native' or 'cupy'"):
        parse_alloc_conf("backend:cudaMallocAsync")


def test_memory_snapshot_without_cuda_fails_like_torch():
    if jitorch.cuda.is_available():
        pytest.skip("checks the CPU-only behaviour")
    with pytest.raises(AttributeError, match="memory_snapshot"):
        jitorch.cuda.memory_snapshot()
    with pytest.raises(AttributeError):
        jitorch.cuda.plot_snapshot("unused.png")


# -- plot_snapshot ----------------------------------------------------------------------------------------------------
def _fragmented_allocator():
    driver = FakeDriver(capacity=1 << 30)
    alloc = CachingAllocator(driver)
    small = [alloc.malloc(300 * KiB) for _ in range(5)]
    alloc.free(small[1])
    alloc.free(small[3])
    large = [alloc.malloc(3 * MiB), alloc.malloc(5 * MiB)]
    alloc.record_stream(large[0], 9)
    alloc.free(large[0])  # waits on stream 9's event: pending free
    whole = alloc.malloc(30 * MiB)
    alloc.free(whole)  # a whole free segment
    return alloc, (small, large)


def _rects(fig):
    return {p.get_gid(): p for p in fig.axes[0].patches if p.get_gid()}


@pytest.mark.parametrize("suffix", ["png", "svg"])
def test_plot_snapshot_writes_the_file(tmp_path, suffix):
    alloc, keep = _fragmented_allocator()
    path = tmp_path / f"memory.{suffix}"
    plot_snapshot(path, alloc.memory_snapshot())
    assert path.stat().st_size > 1000
    head = path.read_bytes()[:64]
    assert head.startswith(b"\x89PNG") if suffix == "png" else b"<?xml" in head or b"<svg" in head


def test_plot_snapshot_rectangles_match_the_snapshot():
    from matplotlib.colors import to_rgba

    alloc, keep = _fragmented_allocator()
    snapshot = alloc.memory_snapshot()
    fig = plot_snapshot(None, snapshot)
    rects = _rects(fig)
    assert len(rects) == sum(len(seg["blocks"]) for seg in snapshot) == len(fig.axes[0].patches)
    kinds = set()
    for row, seg in enumerate(snapshot):
        covered = 0.0
        for block in seg["blocks"]:
            rect = rects[f"{seg['address']:#x}:{block['address']:#x}"]
            assert rect.get_x() == pytest.approx((block["address"] - seg["address"]) / seg["total_size"])
            assert rect.get_width() == pytest.approx(block["size"] / seg["total_size"])
            assert rect.get_y() + rect.get_height() / 2 == pytest.approx(row)
            kind = block_kind(block, seg)
            kinds.add(kind)
            assert rect.get_facecolor() == to_rgba(STATE_STYLE[kind][1])
            covered += rect.get_width()
        assert covered == pytest.approx(1.0)  # the blocks tile their segment
    assert kinds == set(STATE_STYLE)  # the fixture has every state
    texts = {t.get_text() for t in fig.axes[0].texts}
    assert "5.0 MiB" in texts and "30.0 MiB" in texts
    labels = [t.get_text() for t in fig.axes[0].get_yticklabels()]
    assert len(labels) == len(snapshot) and all(f"{seg['address']:#x}" in lab for seg, lab in zip(snapshot, labels))


def test_plot_snapshot_accepts_torch_dict_and_empty():
    alloc, keep = _fragmented_allocator()
    snapshot = alloc.memory_snapshot()
    fig = plot_snapshot(None, {"segments": snapshot, "device_traces": []})
    assert len(_rects(fig)) == sum(len(seg["blocks"]) for seg in snapshot)
    assert len(plot_snapshot(None, []).axes[0].patches) == 0
