"""The caching allocator (over a fake driver): out-of-memory retry and errors, memory fraction, garbage collection,
``max_split_size``, configuration parsing, private pools and the stats API.
"""
from __future__ import annotations

import pytest

from jitorch.runtime.alloc_config import AllocConfigError, AllocatorConfig, parse_alloc_conf
from jitorch.runtime.allocator import OutOfMemoryError

from allocator_helpers import KiB, MiB, make


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
