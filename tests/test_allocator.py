"""The caching allocator's rules, one by one, on the deterministic FakeDriver (no GPU needed)."""
from __future__ import annotations

import pytest

from jitorch.runtime.allocator import round_size, segment_size
from jitorch.runtime.driver import DeviceOutOfMemory, Driver, FakeDriver

from allocator_helpers import KiB, MiB, make


def blocks_of(alloc):
    return [(b["size"], b["state"]) for seg in alloc.memory_snapshot() for b in seg["blocks"]]


# -- the fake driver ----------------------------------------------------------------------------------------------
def test_fake_driver_is_deterministic_and_capped():
    d = FakeDriver(capacity=3 * MiB, alignment=4096, base=0x10000)
    assert isinstance(d, Driver)
    assert d.malloc(100, 0) == 0x10000
    assert d.malloc(100, 0) == 0x11000
    with pytest.raises(DeviceOutOfMemory):
        d.malloc(3 * MiB, 0)
    assert d.calls["malloc"] == 3 and d.calls["malloc_failed"] == 1
    d.free(0x10000)
    assert d.mem_get_info() == (3 * MiB - 100, 3 * MiB)
    with pytest.raises(ValueError):
        d.free(0x10000)
    ev = d.event_create()
    d.event_record(ev, 1)
    assert not d.event_query(ev)
    d.complete(ev)
    assert d.event_query(ev)


def test_cupy_driver_module_imports_without_a_gpu():
    from jitorch.runtime import cupy_driver

    for name in ("malloc", "free", "mem_get_info", "event_create", "event_record", "event_query",
                 "event_synchronize", "stream_is_capturing"):
        assert callable(getattr(cupy_driver.CupyDriver, name))


# -- rounding and pool choice -------------------------------------------------------------------------------------
@pytest.mark.parametrize("size, allocated, reserved", [
    (1, 512, 2 * MiB), (512, 512, 2 * MiB), (513, 1024, 2 * MiB), (MiB, MiB, 2 * MiB),
    (MiB + 1, MiB + 512, 20 * MiB), (3 * MiB, 3 * MiB, 20 * MiB), (11 * MiB, 12 * MiB, 12 * MiB),
    (10 * MiB, 10 * MiB, 10 * MiB)])
def test_rounding_and_segment_sizes(size, allocated, reserved):
    alloc, _ = make()
    block = alloc.malloc(size)
    # An 11 MiB request occupies its whole 12 MiB segment: the 1 MiB rest is too small to split off.
    assert alloc.memory_allocated() == allocated
    assert alloc.memory_reserved() == reserved
    assert block.requested == size


def test_small_and_large_pool_boundary():
    alloc, _ = make()
    alloc.malloc(MiB)
    alloc.malloc(MiB + 1)
    stats = alloc.memory_stats()
    assert stats["allocation.small_pool.current"] == 1 and stats["allocation.large_pool.current"] == 1
    assert stats["reserved_bytes.small_pool.current"] == 2 * MiB
    assert stats["reserved_bytes.large_pool.current"] == 20 * MiB


def test_round_size_power2_divisions():
    assert [segment_size(s) for s in (1, MiB, MiB + 512, 10 * MiB - 512, 10 * MiB)] == \
        [2 * MiB, 2 * MiB, 20 * MiB, 20 * MiB, 10 * MiB]
    assert round_size(1200 * KiB, 4) == 1280 * KiB
    assert round_size(1200 * KiB, 0) == 1200 * KiB
    alloc, _ = make(conf="roundup_power2_divisions:4")
    alloc.malloc(5 * MiB + 1)
    assert alloc.memory_allocated() == 6 * MiB  # quarter steps between 4 and 8 MiB


# -- split and merge ----------------------------------------------------------------------------------------------
def test_small_split_and_merge():
    alloc, _ = make()
    a, b = alloc.malloc(KiB), alloc.malloc(KiB)
    assert b.ptr == a.ptr + KiB
    stats = alloc.memory_stats()
    assert stats["inactive_split.small_pool.current"] == 1
    assert stats["inactive_split_bytes.all.current"] == 2 * MiB - 2 * KiB
    alloc.free(a)
    assert blocks_of(alloc) == [(KiB, "inactive"), (KiB, "active_allocated"), (2 * MiB - 2 * KiB, "inactive")]
    assert alloc.memory_stats()["inactive_split.all.current"] == 2
    alloc.free(b)
    assert blocks_of(alloc) == [(2 * MiB, "inactive")]
    stats = alloc.memory_stats()
    assert stats["inactive_split.all.current"] == 0 and stats["inactive_split_bytes.all.current"] == 0
    assert alloc.malloc(KiB).ptr == a.ptr  # best fit, lowest address


def test_large_pool_split_rules():
    alloc, _ = make()
    big = alloc.malloc(19 * MiB + 512 * KiB)  # 19.5 MiB from a 20 MiB segment: the 0.5 MiB rest is not kept apart
    assert big.size == 20 * MiB and alloc.memory_stats()["inactive_split.all.current"] == 0
    alloc.free(big)
    part = alloc.malloc(3 * MiB)  # 17 MiB rest > 1 MiB: split
    assert part.size == 3 * MiB and blocks_of(alloc) == [(3 * MiB, "active_allocated"), (17 * MiB, "inactive")]


def test_best_fit_prefers_the_smallest_block():
    alloc, _ = make()
    blocks = [alloc.malloc(s) for s in (4 * KiB, KiB, 8 * KiB, KiB, 2 * KiB, KiB)]
    ptrs = [b.ptr for b in blocks]
    for i in (0, 2, 4):
        alloc.free(blocks[i])
    assert alloc.malloc(2 * KiB).ptr == ptrs[4]
    assert alloc.malloc(3 * KiB).ptr == ptrs[0]


# -- streams ------------------------------------------------------------------------------------------------------
def test_blocks_are_per_stream():
    alloc, driver = make()
    a = alloc.malloc(KiB, stream=1)
    ptr = a.ptr
    alloc.free(a)  # a freed Block object may be merged or reused: keep the address, not the handle
    assert alloc.malloc(KiB, stream=1).ptr == ptr
    other = alloc.malloc(KiB, stream=2)
    assert other.stream == 2 and alloc.memory_reserved() == 4 * MiB and driver.calls["malloc"] == 2


def test_record_stream_waits_for_the_event():
    alloc, driver = make()
    block = alloc.malloc(KiB, stream=0)
    alloc.record_stream(block, 0)  # its own stream: nothing to wait for
    alloc.record_stream(block, 7)
    alloc.free(block)
    assert driver.calls["event_record"] == 1
    assert blocks_of(alloc)[0] == (KiB, "active_pending_free")
    stats = alloc.memory_stats()
    assert stats["allocated_bytes.all.current"] == 0 and stats["active_bytes.all.current"] == KiB
    assert alloc.malloc(KiB).ptr != block.ptr  # the event has not completed: not reusable
    stats = alloc.memory_stats()  # the peak of active memory counts the pending block
    assert stats["active_bytes.all.peak"] == 2 * KiB and stats["allocated_bytes.all.peak"] == KiB
    (event,) = [ev for queue in alloc._events.values() for ev, _ in queue]
    driver.complete(event)
    again = alloc.malloc(KiB)  # malloc polls the events first
    stats = alloc.memory_stats()
    assert again.ptr == block.ptr and stats["active.all.current"] == 2
    assert stats["active.small_pool.freed"] == 1 and stats["active.small_pool.allocated"] == 3


def test_record_stream_multiple_streams_need_all_events():
    alloc, driver = make()
    block = alloc.malloc(KiB)
    alloc.record_stream(block, 1)
    alloc.record_stream(block, 2)
    alloc.free(block)
    events = {s: q[0][0] for s, q in alloc._events.items()}
    driver.complete(events[2])
    assert alloc.malloc(KiB).ptr != block.ptr
    driver.complete(events[1])
    assert alloc.malloc(KiB).ptr == block.ptr
    assert driver.calls["event_create"] == 2
    # Completed events are pooled and reused instead of created again.
    b2 = alloc.malloc(KiB)
    alloc.record_stream(b2, 3)
    alloc.free(b2)
    assert driver.calls["event_create"] == 2


def test_empty_cache_synchronizes_pending_frees():
    alloc, driver = make()
    block = alloc.malloc(KiB)
    alloc.record_stream(block, 1)
    alloc.free(block)
    alloc.empty_cache()
    assert alloc.memory_reserved() == 0 and driver.calls["event_synchronize"] == 1
    assert alloc.memory_stats()["num_sync_all_streams"] == 1


def test_capture_defers_cross_stream_events():
    alloc, driver = make()
    pid = alloc.create_pool_id()
    block = alloc.malloc(KiB)
    alloc.record_stream(block, 1)
    with alloc.use_pool(pid, stream=5):
        alloc.free(block)
        assert driver.calls["event_record"] == 0
        assert blocks_of(alloc)[0] == (KiB, "active_pending_free")
    assert driver.calls["event_record"] == 1


# -- empty_cache --------------------------------------------------------------------------------------------------
def test_empty_cache_releases_only_whole_free_segments():
    alloc, driver = make()
    live = alloc.malloc(KiB)
    dead = alloc.malloc(3 * MiB)  # a second segment (large pool)
    alloc.free(dead)
    before = alloc.memory_reserved()
    alloc.empty_cache()
    assert alloc.memory_reserved() == before - 20 * MiB == 2 * MiB
    assert driver.calls["free"] == 1 and alloc.memory_stats()["num_device_free"] == 1
    alloc.free(live)
    alloc.empty_cache()
    assert alloc.memory_reserved() == 0 and driver.live == {}
