"""The caching allocator's rules, one by one, on the deterministic FakeDriver (no GPU needed)."""
from __future__ import annotations

import pytest

from jitorch.runtime.alloc_config import AllocConfigError, AllocatorConfig, parse_alloc_conf
from jitorch.runtime.allocator import CachingAllocator, OutOfMemoryError, round_size, segment_size
from jitorch.runtime.driver import DeviceOutOfMemory, Driver, FakeDriver

KiB, MiB = 1 << 10, 1 << 20


def make(capacity=1 << 30, conf="", **driver_kwargs):
    driver = FakeDriver(capacity=capacity, **driver_kwargs)
    return CachingAllocator(driver, parse_alloc_conf(conf)), driver


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


# -- out of memory ------------------------------------------------------------------------------------------------
def test_oom_retry_succeeds_after_releasing_cache():
    alloc, driver = make(capacity=40 * MiB)
    a, b = alloc.malloc(3 * MiB), alloc.malloc(11 * MiB)
    alloc.free(a)
    alloc.free(b)  # b was carved from a's 20 MiB segment (best fit): 20 MiB cached, nothing allocated
    big = alloc.malloc(30 * MiB)  # 20 + 30 > 40: fails, releases the cache, retries
    assert big.size == 30 * MiB
    stats = alloc.memory_stats()
    assert stats["num_alloc_retries"] == 1 and stats["num_ooms"] == 0
    assert alloc.memory_reserved() == 30 * MiB and stats["num_device_free"] == 1
    assert list(driver.live.values()) == [30 * MiB]


def test_oom_raises_with_a_pytorch_style_message():
    alloc, _ = make(capacity=64 * MiB)
    keep = alloc.malloc(30 * MiB)
    cached = alloc.malloc(KiB)
    alloc.malloc(KiB)
    alloc.free(cached)
    with pytest.raises(OutOfMemoryError) as info:
        alloc.malloc(40 * MiB)
    assert isinstance(info.value, RuntimeError)
    msg = str(info.value)
    assert msg.startswith("CUDA out of memory. Tried to allocate 40.00 MiB. GPU 0 has a total capacity of 64.00 MiB "
                          "of which 32.00 MiB is free.")
    assert "this process has 32.00 MiB memory in use" in msg
    assert "Of the allocated memory 30.00 MiB is allocated by jitorch, and 2.00 MiB is reserved by jitorch but " \
           "unallocated." in msg
    stats = alloc.memory_stats()
    assert stats["num_ooms"] == 1 and stats["num_alloc_retries"] == 1
    assert keep.allocated


def test_per_process_memory_fraction():
    alloc, driver = make(capacity=100 * MiB)
    alloc.set_per_process_memory_fraction(0.5)
    alloc.malloc(40 * MiB)
    with pytest.raises(OutOfMemoryError, match="50.00 MiB allowed"):
        alloc.malloc(12 * MiB)
    assert driver.calls["malloc"] == 1  # refused before asking the device
    with pytest.raises(ValueError):
        alloc.set_per_process_memory_fraction(1.5)


def test_garbage_collection_releases_old_blocks_first():
    alloc, _ = make(capacity=100 * MiB, conf="garbage_collection_threshold:0.5")
    alloc.set_per_process_memory_fraction(1.0)  # GC needs a fraction; threshold = 50 MiB
    old, young = alloc.malloc(20 * MiB), alloc.malloc(20 * MiB)
    old_ptr, young_ptr = old.ptr, young.ptr
    alloc.free(old)
    for _ in range(6):  # large-pool lookups on another stream age the cached blocks
        alloc.free(alloc.malloc(2 * MiB, stream=1))
    alloc.free(young)
    assert alloc.memory_reserved() == 60 * MiB
    alloc.malloc(30 * MiB)  # miss with 60 MiB > 50 MiB reserved: GC frees the oldest cached segment only
    addresses = [seg["address"] for seg in alloc.memory_snapshot()]
    assert old_ptr not in addresses and young_ptr in addresses
    assert alloc.memory_reserved() == 70 * MiB and alloc.memory_stats()["num_alloc_retries"] == 0


# -- max_split_size -----------------------------------------------------------------------------------------------
def test_max_split_size_rules():
    alloc, _ = make(conf="max_split_size_mb:40")
    big = alloc.malloc(50 * MiB)
    alloc.free(big)
    small = alloc.malloc(3 * MiB)  # never served from an oversize block
    assert small.ptr != big.ptr and alloc.memory_reserved() == 70 * MiB
    reuse = alloc.malloc(45 * MiB)  # oversize block within the 20 MiB tolerance: taken whole, not split
    assert reuse.ptr == big.ptr and reuse.size == 50 * MiB
    alloc.free(reuse)
    assert alloc.malloc(41 * MiB).ptr == big.ptr
    stats = alloc.memory_stats()
    assert stats["max_split_size"] == 40 * MiB and stats["oversize_segments.current"] == 1


def test_max_split_size_tolerance_rejects_far_larger_blocks():
    alloc, _ = make(conf="max_split_size_mb:40")
    big = alloc.malloc(100 * MiB)
    alloc.free(big)
    assert alloc.malloc(42 * MiB).ptr != big.ptr  # 100 MiB >= 42 + 20 MiB: not handed out


def test_oversize_blocks_are_released_before_the_full_flush():
    alloc, driver = make(capacity=130 * MiB, conf="max_split_size_mb:40")
    small = alloc.malloc(3 * MiB)
    alloc.free(small)
    a, b = alloc.malloc(50 * MiB), alloc.malloc(50 * MiB)
    alloc.free(a)
    alloc.free(b)
    alloc.malloc(60 * MiB)  # both oversize blocks go (largest first); the small cached segment survives
    assert alloc.memory_stats()["num_alloc_retries"] == 0
    assert sorted(driver.live.values()) == [20 * MiB, 60 * MiB]


# -- config -------------------------------------------------------------------------------------------------------
def test_config_parsing():
    cfg = parse_alloc_conf(" max_split_size_mb:128 , garbage_collection_threshold:0.6,roundup_power2_divisions:4")
    assert cfg.max_split_size == 128 * MiB and cfg.garbage_collection_threshold == 0.6
    assert set(cfg.roundup_power2_divisions) == {4}
    cfg = parse_alloc_conf("roundup_power2_divisions:[256:1,512:2,>:8]")
    assert cfg.divisions_for(MiB) == 0 and cfg.divisions_for(300 * MiB) == 1
    assert cfg.divisions_for(600 * MiB) == 2 and cfg.divisions_for(4096 * MiB) == 8
    assert parse_alloc_conf("").max_split_size == AllocatorConfig().max_split_size
    assert AllocatorConfig.from_env({"JITORCH_ALLOC_CONF": "max_split_size_mb:64"}).max_split_size == 64 * MiB


@pytest.mark.parametrize("text, words", [
    ("max_split_size_mb:20", "must be > 20"), ("max_split_size_mb:abc", "expects an integer"),
    ("garbage_collection_threshold:1.0", "between 0 and 1"), ("garbage_collection_threshold:x", "expects a number"),
    ("roundup_power2_divisions:3", "power of two"), ("roundup_power2_divisions:[3:2]", "powers of two"),
    ("roundup_power2_divisions:[64:2,32:4]", "must increase"), ("expandable:True", "unknown option 'expandable'"),
    ("max_split_size_mb", "expected 'key:value'"), ("roundup_power2_divisions:[1:2", "must end with")])
def test_config_errors(text, words):
    with pytest.raises(AllocConfigError, match="JITORCH_ALLOC_CONF") as info:
        parse_alloc_conf(text)
    assert words in str(info.value)


# -- private pools ------------------------------------------------------------------------------------------------
def test_private_pool_memory_is_never_handed_to_others():
    alloc, driver = make()
    pid = alloc.create_pool_id()
    with alloc.use_pool(pid):
        inside = alloc.malloc(KiB)
    inside_ptr = inside.ptr
    alloc.free(inside)
    outside = alloc.malloc(KiB)
    assert outside.ptr != inside_ptr and driver.calls["malloc"] == 2
    assert {seg["segment_pool_id"] for seg in alloc.memory_snapshot()} == {pid, (0, 0)}
    with alloc.use_pool(pid):  # the pool's own later allocations do reuse it
        assert alloc.malloc(KiB).ptr == inside_ptr


def test_private_pool_stream_filter():
    alloc, _ = make()
    pid = alloc.create_pool_id()
    with alloc.use_pool(pid, stream=3):
        captured = alloc.malloc(KiB, stream=3)
        eager = alloc.malloc(KiB, stream=0)
    pools = {seg["address"]: seg["segment_pool_id"] for seg in alloc.memory_snapshot()}
    assert pools[captured.segment.addr] == pid and pools[eager.segment.addr] == (0, 0)


def test_shared_private_pool_released_at_zero_uses():
    alloc, driver = make()
    pid = alloc.create_pool_id()
    with alloc.use_pool(pid):
        a = alloc.malloc(3 * MiB)
    with alloc.use_pool(pid):  # a second capture shares the pool
        b = alloc.malloc(KiB)
    assert alloc.pool_use_count(pid) == 2
    alloc.free(a)
    alloc.release_pool(pid)
    alloc.empty_cache()  # still used once: its memory stays reserved
    assert alloc.memory_reserved() == 22 * MiB
    alloc.release_pool(pid)  # last use: the whole free large segment goes back at once
    assert alloc.memory_reserved() == 2 * MiB and alloc.pool_use_count(pid) == 0
    alloc.free(b)
    alloc.empty_cache()
    assert alloc.memory_reserved() == 0 and driver.live == {} and pid not in alloc._private
    with pytest.raises(ValueError):
        alloc.release_pool(pid)


def test_end_allocate_to_unknown_pool_raises():
    alloc, _ = make()
    with pytest.raises(ValueError, match="not active"):
        alloc.end_allocate_to_pool((9, 9))


# -- stats API ----------------------------------------------------------------------------------------------------
def test_memory_stats_keys_and_peaks():
    alloc, _ = make()
    a = alloc.malloc(3 * MiB)
    b = alloc.malloc(KiB)
    alloc.free(a)
    stats = alloc.memory_stats()
    for metric in ("allocation", "segment", "active", "inactive_split", "allocated_bytes", "reserved_bytes",
                   "active_bytes", "inactive_split_bytes", "requested_bytes"):
        for pool in ("all", "small_pool", "large_pool"):
            for field in ("current", "peak", "allocated", "freed"):
                assert f"{metric}.{pool}.{field}" in stats
    for key in ("num_alloc_retries", "num_ooms", "num_sync_all_streams", "num_device_alloc", "num_device_free"):
        assert stats[key] >= 0
    assert stats["allocated_bytes.all.peak"] == 3 * MiB + KiB == alloc.max_memory_allocated()
    assert stats["allocated_bytes.large_pool.freed"] == 3 * MiB
    assert stats["requested_bytes.small_pool.current"] == KiB
    assert stats["reserved_bytes.large_pool.allocated"] == 20 * MiB
    alloc.reset_peak_memory_stats()
    assert alloc.max_memory_allocated() == KiB and alloc.max_memory_reserved() == 22 * MiB
    alloc.reset_accumulated_memory_stats()
    assert alloc.memory_stats()["allocated_bytes.all.allocated"] == 0
    alloc.free(b)
    c = alloc.malloc(2 * KiB)
    stats = alloc.memory_stats()
    assert stats["allocated_bytes.small_pool.allocated"] == 2 * KiB and stats["allocated_bytes.all.freed"] == KiB
    assert stats["allocation.all.allocated"] == 1 and stats["active.all.freed"] == 1
    alloc.free(c)
    assert alloc.memory_allocated() == 0


def test_memory_summary_and_mem_get_info():
    alloc, driver = make(capacity=64 * MiB)
    alloc.malloc(KiB)
    text = alloc.memory_summary()
    assert "memory summary, device ID 0" in text and "Allocated memory" in text and "from small pool" in text
    assert "GPU reserved memory" in text and "2048 KiB" in text
    assert "from small pool" not in alloc.memory_summary(abbreviated=True)
    assert alloc.mem_get_info() == (62 * MiB, 64 * MiB)


def test_double_free_and_bad_sizes_raise():
    alloc, _ = make()
    block = alloc.malloc(KiB)
    alloc.free(block)
    with pytest.raises(ValueError, match="double free"):
        alloc.free(block)
    with pytest.raises(ValueError):
        alloc.malloc(-1)
    with pytest.raises(ValueError):
        alloc.record_stream(block, 1)
