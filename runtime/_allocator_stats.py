"""Allocator statistics in PyTorch's key scheme, and the ``memory_summary`` table.

Storage is shaped for the hot path. Each pooled metric is a flat list of 12 ints. At offsets 4 (``small_pool``) and
8 (``large_pool``): ``current, peak, base, freed``, where ``base`` is ``current`` at the last
``reset_accumulated`` so ``allocated = current - base + freed`` needs no update on allocation. The ``all`` pool is
the sum of the two, except its ``peak`` (index 1), which must be tracked: the peak of a sum is not the sum of peaks.
Index 0, 2 and 3 are unused. :meth:`AllocatorStats.view` expands a metric to the usual ``current, peak, allocated,
freed`` for ``all``, ``small_pool`` and ``large_pool``; the dict ``memory_stats()`` returns is built only on request.

``active`` and ``active_bytes`` are not counted on the hot path: a block is active while allocated or waiting for
events ("pending"), so active = allocation + pending. Only their peaks need care, and only while something is
pending: with nothing pending, active equals allocation, whose peak is tracked anyway. The allocator calls
``track_active_peak`` after a malloc made while blocks were pending; the reported peak is the larger of the two.
"""
from __future__ import annotations

ALL, SMALL, LARGE = 0, 4, 8
POOL_NAMES = (("all", ALL), ("small_pool", SMALL), ("large_pool", LARGE))
FIELDS = ("current", "peak", "allocated", "freed")
METRICS = ("allocation", "segment", "active", "inactive_split", "allocated_bytes", "reserved_bytes", "active_bytes",
           "inactive_split_bytes", "requested_bytes")
STORED = ("allocation", "segment", "inactive_split", "allocated_bytes", "reserved_bytes", "inactive_split_bytes",
          "requested_bytes", "pending", "pending_bytes")
DERIVED = (("active", "allocation", "pending"), ("active_bytes", "allocated_bytes", "pending_bytes"))
COUNTERS = ("num_alloc_retries", "num_ooms", "num_sync_all_streams", "num_device_alloc", "num_device_free")


def stat_update(arr, off, n):
    """Add ``n`` (either sign) to the pool at ``off`` (SMALL or LARGE); growth may raise the peaks."""
    if n > 0:
        c = arr[off] + n
        arr[off] = c
        if c > arr[off + 1]:
            arr[off + 1] = c
        c = arr[4] + arr[8]
        if c > arr[1]:
            arr[1] = c
    elif n < 0:
        arr[off] += n
        arr[off + 3] -= n


def stat_update_unpooled(arr, n):
    """A 4-int stat without a pool breakdown (the oversize counters): ``current, peak, allocated, freed``."""
    arr[0] += n
    if n > 0:
        arr[2] += n
        arr[1] = max(arr[1], arr[0])
    else:
        arr[3] -= n


def _expand(arr):
    """``current, peak, allocated, freed`` for all, small_pool and large_pool from the stored layout."""
    small = [arr[4], arr[5], arr[4] - arr[6] + arr[7], arr[7]]
    large = [arr[8], arr[9], arr[8] - arr[10] + arr[11], arr[11]]
    every = [small[0] + large[0], arr[1], small[2] + large[2], small[3] + large[3]]
    return every + small + large


class AllocatorStats:
    """All counters of one allocator: the stored metric lists (see the module docstring) and plain ints.

    >>> s = AllocatorStats(); stat_update(s.allocated_bytes, SMALL, 512)
    >>> d = s.as_dict(max_split_size=0); d["allocated_bytes.all.current"], d["allocated_bytes.small_pool.peak"]
    (512, 512)
    """

    def __init__(self):
        for name in STORED:
            setattr(self, name, [0] * 12)
        # Peaks of active/active_bytes reached while blocks were pending (all, small, large; see above).
        self.active_peak = [0] * 3
        self.active_bytes_peak = [0] * 3
        self.oversize_allocations = [0] * 4
        self.oversize_segments = [0] * 4
        for name in COUNTERS:
            setattr(self, name, 0)

    def view(self, name):
        """The 12 ints ``current, peak, allocated, freed`` x (all, small_pool, large_pool) of metric ``name``."""
        for derived, base_name, pending_name in DERIVED:
            if name == derived:
                base, pending = _expand(getattr(self, base_name)), _expand(getattr(self, pending_name))
                peaks = getattr(self, name + "_peak")
                out = []
                for i, off in enumerate((ALL, SMALL, LARGE)):
                    current = base[off] + pending[off]
                    # Every active block started as an allocation; it stops being active when freed directly
                    # (allocation freed, never pending) or when its events complete (pending freed).
                    freed = base[off + 3] - pending[off + 2] + pending[off + 3]
                    out += [current, max(peaks[i], base[off + 1], current), base[off + 2], freed]
                return out
        return _expand(getattr(self, name))

    def track_active_peak(self):
        """Record the active peaks now; called after a malloc made while some blocks were pending."""
        for derived, base_name, pending_name in DERIVED:
            base, pending = getattr(self, base_name), getattr(self, pending_name)
            peaks = getattr(self, derived + "_peak")
            small, large = base[4] + pending[4], base[8] + pending[8]
            peaks[0] = max(peaks[0], small + large)
            peaks[1] = max(peaks[1], small)
            peaks[2] = max(peaks[2], large)

    def as_dict(self, max_split_size):
        out = {}
        for name in METRICS:
            arr = self.view(name)
            for pool, off in POOL_NAMES:
                for i, field in enumerate(FIELDS):
                    out[f"{name}.{pool}.{field}"] = arr[off + i]
        for name in ("oversize_allocations", "oversize_segments"):
            arr = getattr(self, name)
            for i, field in enumerate(FIELDS):
                out[f"{name}.{field}"] = arr[i]
        for name in COUNTERS:
            out[name] = getattr(self, name)
        out["max_split_size"] = max_split_size
        return dict(sorted(out.items()))

    def reset_peak(self):
        for derived, base_name, pending_name in DERIVED:
            view = self.view(derived)
            setattr(self, derived + "_peak", [view[0], view[4], view[8]])
        for name in STORED:
            arr = getattr(self, name)
            arr[5], arr[9], arr[1] = arr[4], arr[8], arr[4] + arr[8]
        for arr in (self.oversize_allocations, self.oversize_segments):
            arr[1] = arr[0]

    def reset_accumulated(self):
        for name in STORED:
            arr = getattr(self, name)
            arr[6], arr[7], arr[10], arr[11] = arr[4], 0, arr[8], 0
        for arr in (self.oversize_allocations, self.oversize_segments):
            arr[2] = arr[3] = 0
        for name in COUNTERS:
            setattr(self, name, 0)


def format_size(nbytes):
    """PyTorch's OOM-message size format.

    >>> format_size(512), format_size(1536), format_size(20 << 20), format_size(3 << 30)
    ('512 bytes', '1.50 KiB', '20.00 MiB', '3.00 GiB')
    """
    if nbytes <= 1024:
        return f"{nbytes} bytes"
    if nbytes <= 1 << 20:
        return f"{nbytes / 1024:.2f} KiB"
    if nbytes <= 1 << 30:
        return f"{nbytes / (1 << 20):.2f} MiB"
    return f"{nbytes / (1 << 30):.2f} GiB"


def _short(value, is_bytes):
    """A compact cell for the summary table: bytes scaled to B/KiB/MiB/GiB, counts scaled to K/M."""
    units = ("B", "KiB", "MiB", "GiB", "TiB") if is_bytes else ("", "K", "M", "G", "T")
    step = 1024 if is_bytes else 1000
    for unit in units[:-1]:
        if abs(value) < step * 10:  # up to five digits before switching to the next unit
            break
        value //= step
    else:
        unit = units[-1]
    return f"{value} {unit}".rstrip()


def summary_table(stats, device, abbreviated=False):
    """A readable table of ``stats`` in the layout of ``torch.cuda.memory_summary``."""
    width = 75
    rule, heavy = "|" + "-" * width + "|", "|" + "=" * width + "|"
    rows = [("Allocated memory", "allocated_bytes", True), ("Active memory", "active_bytes", True),
            ("Requested memory", "requested_bytes", True), ("GPU reserved memory", "reserved_bytes", True),
            ("Non-releasable memory", "inactive_split_bytes", True), ("Allocations", "allocation", False),
            ("Active allocs", "active", False), ("GPU reserved segments", "segment", False),
            ("Non-releasable allocs", "inactive_split", False)]
    lines = [heavy, "|" + f"jitorch CUDA memory summary, device ID {device}".center(width) + "|", rule,
             "|" + f"CUDA OOMs: {stats.num_ooms}".center(37) + "|"
             + f"cudaMalloc retries: {stats.num_alloc_retries}".center(width - 38) + "|", heavy,
             "|" + " Metric".ljust(23) + "|" + "|".join(h.center(12) for h in ("Cur Usage", "Peak Usage",
                                                                                "Tot Alloc", "Tot Freed")) + "|"]
    for title, name, is_bytes in rows:
        lines.append(rule)
        arr = stats.view(name)
        pools = ((title, ALL),) if abbreviated else ((title, ALL), ("      from large pool", LARGE),
                                                      ("      from small pool", SMALL))
        for label, off in pools:
            cells = "|".join(_short(arr[off + i], is_bytes).center(12) for i in range(4))
            lines.append("| " + label.ljust(22) + "|" + cells + "|")
    lines.append(rule)
    lines.append("|" + f"Oversize allocations: {stats.oversize_allocations[0]}".center(37) + "|"
                 + f"Oversize GPU segments: {stats.oversize_segments[0]}".center(width - 38) + "|")
    lines.append(heavy)
    return "\n".join(lines) + "\n"


def count_split(st, off, count, nbytes):
    """Change inactive_split by ``count`` blocks and inactive_split_bytes by ``nbytes`` (one call, either sign)."""
    if count:
        stat_update(st.inactive_split, off, count)
    if nbytes:
        stat_update(st.inactive_split_bytes, off, nbytes)
