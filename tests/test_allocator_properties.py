"""Random alloc/free/record_stream/event/empty_cache/private-pool sequences keep the allocator's invariants."""
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from jitorch.runtime.alloc_config import parse_alloc_conf
from jitorch.runtime.allocator import CachingAllocator, OutOfMemoryError
from jitorch.runtime.driver import FakeDriver

MiB = 1 << 20
CAPACITY = 48 * MiB
POOL = (7, 7)

sizes = st.one_of(st.integers(0, 4096), st.integers(1, 2 * MiB), st.integers(MiB, 30 * MiB))
streams = st.integers(0, 2)
ops = st.one_of(
    st.tuples(st.just("alloc"), sizes, streams),
    st.tuples(st.just("alloc_private"), sizes, streams),
    st.tuples(st.just("free"), st.integers(0, 1 << 16)),
    st.tuples(st.just("record"), st.integers(0, 1 << 16), streams),
    st.tuples(st.just("complete"), st.integers(0, 1 << 16)),
    st.tuples(st.just("empty_cache")),
    st.tuples(st.just("reset_peak")),
)
configs = st.sampled_from(["", "max_split_size_mb:24", "roundup_power2_divisions:4", "max_split_size_mb:30,"
                           "garbage_collection_threshold:0.5"])


def check_invariants(alloc, driver, live):
    stats = alloc.memory_stats()
    for pool in ("all", "small_pool", "large_pool"):
        allocated = stats[f"allocated_bytes.{pool}.current"]
        assert 0 <= stats[f"requested_bytes.{pool}.current"] <= allocated
        assert allocated <= stats[f"active_bytes.{pool}.current"] <= stats[f"reserved_bytes.{pool}.current"]
        for metric in ("allocated_bytes", "reserved_bytes", "active_bytes", "allocation", "segment"):
            cur, peak = stats[f"{metric}.{pool}.current"], stats[f"{metric}.{pool}.peak"]
            assert cur <= peak
            assert cur == stats[f"{metric}.{pool}.allocated"] - stats[f"{metric}.{pool}.freed"]
    snapshot = alloc.memory_snapshot()
    assert sum(seg["total_size"] for seg in snapshot) == stats["reserved_bytes.all.current"] == driver.used
    assert sum(seg["allocated_size"] for seg in snapshot) == stats["allocated_bytes.all.current"]
    assert sum(seg["active_size"] for seg in snapshot) == stats["active_bytes.all.current"]
    assert len(snapshot) == stats["segment.all.current"]
    split_blocks = split_bytes = 0
    end_of_previous = 0
    for seg in snapshot:
        assert seg["address"] >= end_of_previous  # segments never overlap
        end_of_previous = seg["address"] + seg["total_size"]
        if seg["segment_type"] == "small":
            assert seg["total_size"] == 2 * MiB
        address, previous_state = seg["address"], None
        for block in seg["blocks"]:
            assert block["address"] == address and block["size"] > 0 and block["size"] % 512 == 0  # tiled exactly
            address += block["size"]
            # Free neighbours always merge.
            assert not (block["state"] == previous_state == "inactive")
            previous_state = block["state"]
            if block["state"] == "inactive" and len(seg["blocks"]) > 1:
                split_blocks += 1
                split_bytes += block["size"]
        assert address == seg["address"] + seg["total_size"]
    assert split_blocks == stats["inactive_split.all.current"]
    assert split_bytes == stats["inactive_split_bytes.all.current"]
    # Live blocks: distinct addresses, allocated in the snapshot, in the pool they were allocated from.
    live_ptrs = [block.ptr for block, _ in live]
    assert len(set(live_ptrs)) == len(live_ptrs)
    allocated = {b["address"] for seg in snapshot for b in seg["blocks"] if b["state"] == "active_allocated"}
    assert allocated == set(live_ptrs)
    for block, private in live:
        assert (block.pool.owner == POOL) == private


@settings(derandomize=True, max_examples=200, deadline=None)
@given(st.lists(ops, min_size=10, max_size=80), configs)
def test_random_sequences_keep_invariants(sequence, conf):
    driver = FakeDriver(capacity=CAPACITY)
    alloc = CachingAllocator(driver, parse_alloc_conf(conf))
    if "garbage" in conf:
        alloc.set_per_process_memory_fraction(0.9)
    live = []  # (block, allocated inside the private pool)
    for op in sequence:
        kind = op[0]
        try:
            if kind == "alloc":
                live.append((alloc.malloc(op[1], op[2]), False))
            elif kind == "alloc_private":
                alloc.begin_allocate_to_pool(POOL)
                try:
                    live.append((alloc.malloc(op[1], op[2]), True))
                finally:
                    alloc.end_allocate_to_pool(POOL)
                    alloc.release_pool(POOL)
        except OutOfMemoryError:
            assert alloc.memory_stats()["num_ooms"] >= 1
        if kind == "free" and live:
            block, _ = live.pop(op[1] % len(live))
            alloc.free(block)
        elif kind == "record" and live:
            alloc.record_stream(live[op[1] % len(live)][0], op[2])
        elif kind == "complete":
            events = [event for queue in alloc._events.values() for event, _ in queue]
            if events:
                driver.complete(events[op[1] % len(events)])
        elif kind == "empty_cache":
            alloc.empty_cache()
        elif kind == "reset_peak":
            alloc.reset_peak_memory_stats()
        check_invariants(alloc, driver, live)
    for block, _ in live:
        alloc.free(block)
    alloc.empty_cache()
    check_invariants(alloc, driver, [])
    stats = alloc.memory_stats()
    assert driver.live == {} and alloc.memory_reserved() == 0
    assert all(value == 0 for key, value in stats.items() if key.endswith(".current"))
