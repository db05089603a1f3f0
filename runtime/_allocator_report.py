"""What the caching allocator tells its users: PyTorch's memory API, the snapshot, the summary and the OOM message."""
from __future__ import annotations

from ._allocator_stats import format_size, summary_table
from .alloc_config import ENV_VAR


def _block_state(block):
    if block.allocated:
        return "active_allocated"
    if block.event_count or block.stream_uses:
        return "active_pending_free"
    return "inactive"


class ReportingMixin:
    """Stats and introspection methods of :class:`~jitorch.runtime.allocator.CachingAllocator`.

    >>> from jitorch.runtime.allocator import CachingAllocator
    >>> from jitorch.runtime.alloc_config import AllocatorConfig
    >>> from jitorch.runtime.driver import FakeDriver
    >>> alloc = CachingAllocator(FakeDriver(), AllocatorConfig())
    >>> b = alloc.malloc(3000)
    >>> alloc.memory_stats()["allocated_bytes.small_pool.current"], alloc.max_memory_reserved()
    (3072, 2097152)
    >>> [blk["state"] for blk in alloc.memory_snapshot()[0]["blocks"]]
    ['active_allocated', 'inactive']
    """

    def memory_allocated(self) -> int:
        """Bytes in blocks handed out and not yet freed (rounded sizes)."""
        return self._stats.view("allocated_bytes")[0]

    def max_memory_allocated(self) -> int:
        return self._stats.view("allocated_bytes")[1]

    def memory_reserved(self) -> int:
        """Bytes obtained from the device and not yet returned (allocated plus cached)."""
        return self._stats.view("reserved_bytes")[0]

    def max_memory_reserved(self) -> int:
        return self._stats.view("reserved_bytes")[1]

    def reset_peak_memory_stats(self) -> None:
        """Set every ``peak`` to its ``current`` value."""
        self._stats.reset_peak()

    def reset_accumulated_memory_stats(self) -> None:
        """Zero every ``allocated``/``freed`` total and the event counters (``num_ooms``, ...)."""
        self._stats.reset_accumulated()

    def memory_stats(self) -> dict:
        """A flat dict in ``torch.cuda.memory_stats`` format: ``"<metric>.<all|small_pool|large_pool>.<stat>"``."""
        return self._stats.as_dict(self._max_split)

    def mem_get_info(self) -> tuple[int, int]:
        """``(free, total)`` bytes of the device, as the driver reports them."""
        return self.driver.mem_get_info()

    def memory_snapshot(self) -> list:
        """Every segment with its blocks in address order, in ``torch.cuda.memory_snapshot`` format."""
        out = []
        for addr in sorted(self._segments):
            segment = self._segments[addr]
            blocks = [{"address": b.ptr, "size": b.size, "requested_size": b.requested if b.allocated else 0,
                       "state": _block_state(b)} for b in segment.blocks()]
            out.append({
                "device": self.device, "address": addr, "total_size": segment.size, "stream": segment.stream,
                "segment_type": "small" if segment.pool.is_small else "large",
                "segment_pool_id": segment.pool.owner if segment.pool.owner is not None else (0, 0),
                "allocated_size": sum(b["size"] for b in blocks if b["state"] == "active_allocated"),
                "active_size": sum(b["size"] for b in blocks if b["state"] != "inactive"),
                "requested_size": sum(b["requested_size"] for b in blocks),
                "blocks": blocks,
            })
        return out

    def memory_summary(self, abbreviated: bool = False) -> str:
        """A readable table of the stats (like ``torch.cuda.memory_summary``)."""
        return summary_table(self._stats, self.device, abbreviated)

    def _oom_message(self, rounded):
        free, total = self.driver.mem_get_info()
        allocated = self.memory_allocated()
        reserved = self.memory_reserved()
        allowed = f"{format_size(self._allowed)} allowed; " if self._allowed is not None else ""
        return (f"CUDA out of memory. Tried to allocate {format_size(rounded)}. GPU {self.device} has a total capacity "
                f"of {format_size(total)} of which {format_size(free)} is free. Including non-jitorch memory, this "
                f"process has {format_size(total - free)} memory in use. {allowed}Of the allocated memory "
                f"{format_size(allocated)} is allocated by jitorch, and {format_size(reserved - allocated)} is "
                f"reserved by jitorch but unallocated. If reserved but unallocated memory is large try setting "
                f"max_split_size_mb in {ENV_VAR} to avoid fragmentation.")
