"""Allocator costs: the caching allocator's malloc+free pairs, the host buffer cache, and (with a GPU) the device.

Policy cases (pure Python, on the FakeDriver, no GPU needed):

- ``hot exact fit``: a 4 KiB request whose cached block fits exactly (no split, no merge);
- ``hot split+merge``: a 4 KiB request carved from a partly used 2 MiB segment and merged back on free;
- ``mixed trace``: a fixed pseudo-random trace (small tensors, activations of a few MiB, a few large buffers, two
  streams, about 200 live blocks), replayed on a warm cache; reported per malloc+free pair.

Each case runs on jitorch's allocator and on a minimal baseline: a dict of free lists keyed by the 512-byte rounded
size (no streams, pools, splitting, stats), the floor a Python caching allocator could reach.

Host buffers: ``np.add(x, 1)`` into a fresh NumPy array versus into ``jitorch.runtime.host_cache.empty`` (freed
buffers reused, pages already mapped), and into one preallocated array (the floor), at 4, 32 and 64 MiB.

GPU (only with a device): the same hot pair and mixed trace on jitorch's allocator over ``CupyDriver`` (real
``cudaMalloc``), CuPy's ``cupy.cuda.MemoryPool`` and, when torch with CUDA is installed, torch's caching allocator
(``torch.cuda.caching_allocator_alloc``/``delete``). Without a GPU the output says so.

Run: ``python bench/bench_alloc.py``. Prints a table and writes ``bench/results/alloc-<date>.{json,md}``.
"""
from __future__ import annotations

import common

common.single_thread()

import random  # noqa: E402

from jitorch.runtime.alloc_config import AllocatorConfig  # noqa: E402
from jitorch.runtime.allocator import CachingAllocator  # noqa: E402
from jitorch.runtime.driver import FakeDriver  # noqa: E402

KiB, MiB = 1 << 10, 1 << 20
TARGET_PAIR_US = 2.0


class DictOfFreeLists:
    """The baseline: exact-size reuse keyed by 512-byte rounded size, bump-pointer addresses on a miss."""

    def __init__(self):
        self.free_lists = {}
        self.next = 0

    def malloc(self, size, stream=0):
        size = -(-max(size, 1) // 512) * 512
        cached = self.free_lists.get(size)
        if cached:
            return cached.pop()
        ptr = self.next
        self.next += size
        return (ptr, size)

    def free(self, handle):
        entries = self.free_lists.get(handle[1])
        if entries is None:
            self.free_lists[handle[1]] = [handle]
        else:
            entries.append(handle)


def make_trace(n_ops=20000, seed=0):
    """(op, arg) pairs: ("m", (slot, size, stream)) or ("f", slot); every block is freed by the end."""
    rng = random.Random(seed)
    trace, live, next_slot = [], [], 0
    for _ in range(n_ops):
        if live and (len(live) > 200 or rng.random() < 0.5):
            trace.append(("f", live.pop(rng.randrange(len(live)))))
            continue
        r = rng.random()
        if r < 0.70:
            size = rng.choice((4, 256, 1000, 4 * KiB, 64 * KiB, 200 * KiB))
        elif r < 0.95:
            size = rng.choice((1, 2, 4, 6)) * MiB + rng.randrange(0, 4096)
        else:
            size = rng.choice((12, 24, 48)) * MiB
        trace.append(("m", (next_slot, size, 0 if rng.random() < 0.8 else 1)))
        live.append(next_slot)
        next_slot += 1
    trace.extend(("f", slot) for slot in live)
    return trace, next_slot


def replay(alloc, trace, n_slots):
    slots = [None] * n_slots
    malloc, free = alloc.malloc, alloc.free
    for op, arg in trace:
        if op == "m":
            slot, size, stream = arg
            slots[slot] = malloc(size, stream)
        else:
            free(slots[arg])
            slots[arg] = None


def jitorch_allocator():
    return CachingAllocator(FakeDriver(capacity=1 << 40), AllocatorConfig())


def hot_cases(alloc, exact):
    """A zero-argument malloc+free pair on a warm cache."""
    keep = [alloc.malloc(4 * KiB) for _ in range(4)]
    if exact:  # free one block between two live ones: its 4 KiB stay a separate exact-size block
        alloc.free(keep.pop(1))
    malloc, free = alloc.malloc, alloc.free

    def pair():
        free(malloc(4 * KiB, 0))

    pair.keep = keep  # keep the neighbours alive while the case runs
    return pair


class CupyPoolAdapter:
    """``cupy.cuda.MemoryPool`` with the allocator's interface: freeing is dropping the pointer (refcounting)."""

    def __init__(self, pool):
        self.pool = pool

    def malloc(self, size, stream=0):
        return self.pool.malloc(size)

    def free(self, ptr):
        pass  # the replay drops its reference right after; the pool takes the memory back then


class TorchAdapter:
    """torch's CUDA caching allocator through its raw-pointer API."""

    def __init__(self, torch):
        self.alloc, self.delete = torch.cuda.caching_allocator_alloc, torch.cuda.caching_allocator_delete

    def malloc(self, size, stream=0):
        return self.alloc(size)

    def free(self, ptr):
        self.delete(ptr)


def gpu_cases(trace, n_slots):
    """The GPU allocators' cases, or (None, why not) without a device."""
    try:
        import cupy

        if cupy.cuda.runtime.getDeviceCount() < 1:
            raise RuntimeError("no device")
    except Exception as err:  # no CuPy, driver or device
        return None, f"not run: no GPU ({type(err).__name__}: {err})"
    from jitorch.runtime.cupy_driver import CupyDriver

    allocators = {"jitorch (CupyDriver)": lambda: CachingAllocator(CupyDriver(0), AllocatorConfig()),
                  "cupy MemoryPool": lambda: CupyPoolAdapter(cupy.cuda.MemoryPool())}
    note = "torch: not installed"
    try:
        import torch

        if torch.cuda.is_available():
            allocators["torch caching allocator"] = lambda: TorchAdapter(torch)
            note = f"torch {torch.__version__}"
        else:
            note = "torch: no CUDA build"
    except ImportError:
        pass
    fns = {}
    for name, make in allocators.items():
        alloc = make()
        malloc, free = alloc.malloc, alloc.free
        keep = [malloc(4 * KiB, 0) for _ in range(3)]

        def pair(malloc=malloc, free=free, keep=keep):
            free(malloc(4 * KiB, 0))

        fns[f"GPU {name} hot pair"] = pair
        warm = make()
        fns[f"GPU {name} mixed trace"] = (lambda warm=warm: replay(warm, trace, n_slots))
    return fns, note


def host_cases():
    """``np.add`` into a fresh array, a cached buffer, and a preallocated one, per size (MiB)."""
    import numpy as np

    from jitorch.runtime.host_cache import HostCache

    cache = HostCache(threshold=1 << 20)
    fns = {}
    for mib in (4, 32, 64):
        x = np.ones(mib * MiB // 4, np.float32)
        out = np.empty_like(x)
        fns[f"host {mib} MiB fresh np.empty"] = (lambda x=x: np.add(x, 1.0))
        fns[f"host {mib} MiB host_cache"] = (lambda x=x: np.add(x, 1.0, out=cache.empty(x.shape, x.dtype)))
        fns[f"host {mib} MiB preallocated"] = (lambda x=x, out=out: np.add(x, 1.0, out=out))
    return fns


def main():
    trace, n_slots = make_trace()
    pairs = sum(1 for op, _ in trace if op == "m")
    fns = {
        "jitorch hot exact fit": hot_cases(jitorch_allocator(), exact=True),
        "baseline hot exact fit": hot_cases(DictOfFreeLists(), exact=True),
        "jitorch hot split+merge": hot_cases(jitorch_allocator(), exact=False),
    }
    warm = jitorch_allocator()
    baseline = DictOfFreeLists()
    fns["jitorch mixed trace"] = lambda: replay(warm, trace, n_slots)
    fns["baseline mixed trace"] = lambda: replay(baseline, trace, n_slots)
    gpu_fns, gpu_note = gpu_cases(trace, n_slots)
    timings = common.measure(fns, repeats=15, target_s=0.02)
    timings.update(common.measure(host_cases(), repeats=9, target_s=0.02))
    if gpu_fns:
        timings.update(common.measure(gpu_fns, repeats=9, target_s=0.02))
    rows = []
    for name, t in timings.items():
        per = pairs if "trace" in name else 1
        rows.append({"case": name, "us_per_pair": t["median_s"] / per * 1e6, "pairs_per_s": per / t["median_s"],
                     "min_us_per_pair": t["min_s"] / per * 1e6})
    by_case = {row["case"]: row["us_per_pair"] for row in rows}
    host_notes = []
    for mib in (4, 32, 64):
        fresh, cached = by_case[f"host {mib} MiB fresh np.empty"], by_case[f"host {mib} MiB host_cache"]
        floor = by_case[f"host {mib} MiB preallocated"]
        host_notes.append(f"{mib} MiB: fresh {fresh / 1e3:.2f} ms, cached {cached / 1e3:.2f} ms "
                          f"({fresh / cached:.2f}x), preallocated {floor / 1e3:.2f} ms")
    stats = warm.memory_stats()
    notes = (f"malloc+free pairs in pure Python on FakeDriver; target: a cached pair under {TARGET_PAIR_US} us. "
             f"Mixed trace: {len(trace)} ops, {pairs} pairs, device mallocs on the warm run: "
             f"{stats['num_device_alloc']}, peak reserved {stats['reserved_bytes.all.peak'] / MiB:.0f} MiB. "
             f"Host buffers (np.add into the output; 'us/pair' is us per call): {'; '.join(host_notes)}. "
             f"GPU: {gpu_note}.")
    common.report("alloc", rows, [("case", "case", ""), ("us/pair (median)", "us_per_pair", ".3f"),
                                  ("us/pair (min)", "min_us_per_pair", ".3f"), ("pairs/s", "pairs_per_s", ",.0f")],
                  notes, gpu=gpu_note)


if __name__ == "__main__":
    main()
