"""The large host buffer cache: a buffer is reused only once nothing derived from it is alive.

Each liveness test fills a handed-out array with a pattern, derives something that shares its memory, drops the
array, asks the cache for a buffer of the same size class and fills that with a sentinel: the derived object must
still read the pattern (and share no memory with the new buffer). Once the derived object dies too, the next request
gets the original block back (same address), which proves the test could have failed.
"""
import gc
import pickle
import threading

import numpy as np
import pytest

from jitorch.runtime import host_cache
from jitorch.runtime.alloc_config import AllocConfigError
from jitorch.runtime.host_cache import HostCache, size_class

MiB = 1 << 20
SHAPE = (512, 1024)  # 2 MiB of float32


@pytest.fixture
def cache():
    return HostCache(threshold=MiB, max_cached_bytes=64 * MiB)


def _filled(cache, value=7.0, shape=SHAPE, dtype=np.float32):
    a = cache.empty(shape, dtype)
    a[...] = value
    return a


def _assert_not_reused(cache, derived, read, value=7.0):
    """``derived`` still alive: a new buffer of the same class must be elsewhere, and writing it leaves derived."""
    gc.collect()
    b = cache.empty(SHAPE, np.float32)
    b.fill(-1.0)
    assert np.all(read(derived) == value)
    assert not np.shares_memory(b, np.asarray(read(derived)))
    return b


DERIVATIONS = {
    "slice": (lambda a: a[3:, ::2], lambda d: d),
    "row": (lambda a: a[5], lambda d: d),
    "reshape": (lambda a: a.reshape(-1), lambda d: d),
    "transpose": (lambda a: a.T, lambda d: d),
    "asarray": (lambda a: np.asarray(a), lambda d: d),
    "view_dtype": (lambda a: a.view(np.int32), lambda d: d.view(np.float32)),
    "memoryview": (lambda a: memoryview(a), lambda d: np.asarray(d)),
    "frombuffer": (lambda a: np.frombuffer(a, np.float32), lambda d: d),
    "from_dlpack": (lambda a: np.from_dlpack(a), lambda d: d),
    "ctypes": (lambda a: a.ctypes, lambda d: np.ctypeslib.as_array(
        d.data_as(np.ctypeslib.ctypes.POINTER(np.ctypeslib.ctypes.c_float)), SHAPE)),
    "nested_views": (lambda a: a[1:][::2].T[3], lambda d: d),
    "as_strided": (lambda a: np.lib.stride_tricks.as_strided(a, (4, 4), (8, 4)), lambda d: d),
}


@pytest.mark.parametrize("name", sorted(DERIVATIONS))
def test_derived_objects_keep_the_block(cache, name):
    derive, read = DERIVATIONS[name]
    a = _filled(cache)
    address = a.ctypes.data
    derived = derive(a)
    del a
    b = _assert_not_reused(cache, derived, read)
    assert b.ctypes.data != address
    del derived, b
    gc.collect()
    c = cache.empty(SHAPE, np.float32)  # both blocks are free now; the most recently freed one comes first
    d = cache.empty(SHAPE, np.float32)
    assert address in (c.ctypes.data, d.ctypes.data)


def test_dlpack_capsule_keeps_the_block(cache):
    a = _filled(cache)
    capsule = a.__dlpack__()
    address = a.ctypes.data
    del a
    b = cache.empty(SHAPE, np.float32)
    assert b.ctypes.data != address
    del b, capsule  # the capsule's block is freed last, so it is reused first
    gc.collect()
    assert cache.empty(SHAPE, np.float32).ctypes.data == address


def test_jitorch_tensor_sharing_memory_keeps_the_block(cache):
    import jitorch

    a = _filled(cache)
    t = jitorch.from_numpy(a)[2:]
    del a
    _assert_not_reused(cache, t, lambda d: d.numpy())
    assert float(t.sum()) == 7.0 * (SHAPE[0] - 2) * SHAPE[1]


def test_torch_from_numpy_keeps_the_block(cache):
    torch = pytest.importorskip("torch")
    a = _filled(cache)
    t = torch.from_numpy(a)
    del a
    _assert_not_reused(cache, t, lambda d: d.numpy())


def test_pickle_round_trip_is_a_copy_and_frees(cache):
    a = _filled(cache, 3.0)
    address = a.ctypes.data
    restored = pickle.loads(pickle.dumps(a))
    del a
    gc.collect()
    b = cache.empty(SHAPE, np.float32)
    assert b.ctypes.data == address  # the copy does not hold the block
    b.fill(-1.0)
    assert np.all(restored == 3.0)


@pytest.mark.parametrize("order", ["array_first", "view_first"])
def test_delete_order(cache, order):
    a = _filled(cache)
    v = a[10:20]
    address = a.ctypes.data
    first, second = ("a", "v") if order == "array_first" else ("v", "a")
    ns = {"a": a, "v": v}
    del a, v
    ns.pop(first)
    gc.collect()
    b = cache.empty(SHAPE, np.float32)
    assert b.ctypes.data != address
    b.fill(-1.0)
    assert np.all(ns[second] == 7.0)
    ns.pop(second)
    gc.collect()
    assert cache.empty(SHAPE, np.float32).ctypes.data == address


def test_reference_cycle_frees_only_after_collection(cache):
    gc.disable()
    try:
        holder = {"arr": _filled(cache)}
        holder["self"] = holder
        address = holder["arr"].ctypes.data
        view = holder["arr"][1:]
        del holder
        b = cache.empty(SHAPE, np.float32)
        assert b.ctypes.data != address
        del view
        gc.collect()
        assert cache.empty(SHAPE, np.float32).ctypes.data == address
    finally:
        gc.enable()


def test_shape_dtype_alignment_and_small_path(cache):
    big = cache.empty((3, 1000, 100), np.float64)
    assert big.shape == (3, 1000, 100) and big.dtype == np.float64 and big.flags.c_contiguous
    assert big.flags.writeable and big.ctypes.data % 64 == 0
    assert cache.empty(300_000, "int32").shape == (300_000,)
    small = cache.empty((10, 10), np.float32)
    assert small.flags.owndata  # plain np.empty below the threshold
    assert cache.stats()["misses"] == 2
    assert cache.empty((0, 1 << 30), np.float32).shape == (0, 1 << 30)
    obj = cache.empty(1 << 18, object)
    assert obj.dtype == object and obj[0] is None
    with pytest.raises(ValueError, match="negative"):
        cache.empty((-1, 4), np.float32)


def test_size_classes_round_up_at_most_a_quarter():
    sizes = [MiB, MiB + 1, 3 * MiB - 7, 5 * MiB + 12345, 64 * MiB, 100 * MiB + 1]
    for n in sizes:
        c = size_class(n)
        assert n <= c <= n * 1.25 + 4096 and c % 4096 == 0
    assert size_class(2 * MiB + 1) == size_class(5 * MiB // 2)  # one class: (2 MiB, 2.5 MiB]
    assert size_class(2 * MiB + 1) != size_class(2 * MiB)


def test_same_class_different_shapes_reuse(cache):
    a = cache.empty((1000, 600), np.float32)  # 2.29 MiB -> 2.5 MiB class
    address = a.ctypes.data
    del a
    b = cache.empty((2, 300, 1000), np.float32)
    assert b.ctypes.data == address and b.shape == (2, 300, 1000)
    stats = cache.stats()
    assert stats["hits"] == 1 and stats["misses"] == 1 and stats["live_blocks"] == 1


def test_cap_evicts_least_recently_freed(cache):
    small_cap = HostCache(threshold=MiB, max_cached_bytes=6 * MiB)
    arrays = [small_cap.empty(MiB // 4 * (4 + i), np.uint8) for i in range(3)]  # classes 1, 1.25, 1.5 MiB
    addresses = [a.ctypes.data for a in arrays]
    del arrays[0]  # freed first: the oldest
    del arrays[0]
    del arrays[0]
    stats = small_cap.stats()
    assert stats["cached_bytes"] == int(3.75 * MiB) and stats["evictions"] == 0
    big = small_cap.empty(4 * MiB, np.uint8)
    del big  # 4 + 3.75 > 6: the 1 MiB and 1.25 MiB blocks (freed first) go
    stats = small_cap.stats()
    assert stats["evictions"] == 2 and stats["cached_bytes"] == int(5.5 * MiB)
    assert small_cap.empty(MiB // 4 * 6, np.uint8).ctypes.data == addresses[2]  # the 1.5 MiB block survived
    misses = small_cap.stats()["misses"]
    small_cap.empty(MiB, np.uint8)  # evicted: a fresh allocation (the OS may hand out the same address again)
    assert small_cap.stats()["misses"] == misses + 1


def test_block_larger_than_cap_is_not_kept(cache):
    tiny = HostCache(threshold=MiB, max_cached_bytes=MiB)
    a = tiny.empty(4 * MiB, np.uint8)
    del a
    assert tiny.stats()["cached_bytes"] == 0 and tiny.stats()["evictions"] == 1


def test_empty_cache_and_set_max(cache):
    a, b = _filled(cache), _filled(cache)
    live = cache.empty(SHAPE, np.float32)
    del a, b
    assert cache.stats()["cached_blocks"] == 2
    cache.set_max_cached_bytes(size_class(SHAPE[0] * SHAPE[1] * 4))
    assert cache.stats()["cached_blocks"] == 1
    cache.empty_cache()
    stats = cache.stats()
    assert stats["cached_bytes"] == 0 and stats["cached_blocks"] == 0 and stats["live_blocks"] == 1
    live.fill(1.0)  # the block in use is untouched
    assert live.sum() == SHAPE[0] * SHAPE[1]
    with pytest.raises(ValueError, match="set_max_cached_bytes"):
        cache.set_max_cached_bytes(-1)


def test_stats_track_live_and_peak(cache):
    arrays = [cache.empty(SHAPE, np.float32) for _ in range(3)]
    cls = size_class(SHAPE[0] * SHAPE[1] * 4)
    stats = cache.stats()
    assert stats["live_blocks"] == 3 and stats["live_bytes"] == 3 * cls and stats["peak_live_bytes"] == 3 * cls
    del arrays
    stats = cache.stats()
    assert stats["live_blocks"] == 0 and stats["live_bytes"] == 0
    assert stats["cached_bytes"] == 3 * cls and stats["peak_cached_bytes"] == 3 * cls


def test_config_from_env(monkeypatch):
    monkeypatch.setenv("JITORCH_ALLOC_CONF", "max_split_size_mb:64,host_cache_max_mb:3")
    assert HostCache().get_max_cached_bytes() == 3 * MiB
    monkeypatch.setenv("JITORCH_ALLOC_CONF", "host_cache_max_mb:-2")
    with pytest.raises(AllocConfigError, match="host_cache_max_mb must be >= 0"):
        HostCache()
    with pytest.raises(ValueError, match="max_cached_bytes"):
        HostCache(max_cached_bytes=-1)


def test_threads_never_share_live_blocks(cache):
    errors = []

    def worker(seed):
        rng = np.random.default_rng(seed)
        for _ in range(40):
            n = int(rng.integers(1, 4)) * MiB
            a = cache.empty(n, np.uint8)
            a.fill(seed)
            threading.Event().wait(0)  # let the other threads run while this one holds a
            if not np.all(a == seed):
                errors.append(seed)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    stats = cache.stats()
    assert stats["live_blocks"] == 0 and stats["hits"] + stats["misses"] == 160 and stats["hits"] > 0


def test_module_level_functions():
    a = host_cache.empty((host_cache.THRESHOLD // 4,), np.float32)
    assert a.shape == (host_cache.THRESHOLD // 4,) and not a.flags.owndata
    before = host_cache.stats()
    assert before["live_blocks"] >= 1
    del a
    host_cache.empty_cache()
    assert host_cache.stats()["cached_bytes"] == 0
    assert host_cache.get_max_cached_bytes() >= 0


# -- the eager dispatcher puts large pointwise outputs in cached buffers ---------------------------------------------
BIG = host_cache.THRESHOLD // 4  # float32 elements of the smallest output that goes through the cache


def _from_cache(array):
    return not array.flags.owndata and not isinstance(array.base, np.ndarray)


EAGER_CASES = {
    "add": (lambda j, a, b: a + b, lambda a, b: a + b),
    "sub_scalar": (lambda j, a, b: a - 1.5, lambda a, b: a - np.float32(1.5)),
    "mul": (lambda j, a, b: a * b, lambda a, b: a * b),
    "div": (lambda j, a, b: a / b, lambda a, b: a / b),
    "maximum": (lambda j, a, b: j.maximum(a, b), np.maximum),
    "neg": (lambda j, a, b: -a, lambda a, b: -a),
    "exp": (lambda j, a, b: a.exp(), lambda a, b: np.exp(a)),
    "sqrt": (lambda j, a, b: b.sqrt(), lambda a, b: np.sqrt(b)),
    "tanh": (lambda j, a, b: a.tanh(), lambda a, b: np.tanh(a)),
    "log": (lambda j, a, b: b.log(), lambda a, b: np.log(b)),
}


@pytest.mark.parametrize("name", sorted(EAGER_CASES))
def test_eager_large_outputs_use_the_cache_and_match(name):
    import jitorch

    ours, reference = EAGER_CASES[name]
    rng = np.random.default_rng(0)
    x = rng.standard_normal(BIG, dtype=np.float32)
    y = rng.uniform(0.5, 2.0, BIG).astype(np.float32)
    got = ours(jitorch, jitorch.from_numpy(x), jitorch.from_numpy(y))
    assert got.dtype == jitorch.float32 and got.shape == (BIG,)
    assert _from_cache(got._data)
    np.testing.assert_array_equal(got.numpy(), reference(x, y))


def test_eager_small_layout_and_broadcast_outputs_bypass_the_cache():
    import jitorch

    small = jitorch.ones(1000) * 2
    assert small._data.flags.owndata
    x = np.ones((BIG // 1024, 1024), np.float32)
    t = jitorch.from_numpy(x).t()  # F-ordered: NumPy keeps the input's layout for the output, as torch does
    out = t * 3
    assert out.stride() == t.stride() and not _from_cache(out._data)
    # The small operand first: an output of the broadcast shape, not of the first operand's (a cached one is taken
    # for that shape where the generated broadcast kernel runs: `ops.native_broadcast`).
    broadcast = jitorch.from_numpy(x[:1]) + jitorch.from_numpy(x)
    assert broadcast.shape == x.shape
    np.testing.assert_array_equal(broadcast.numpy(), x + 1)
    wide = jitorch.from_numpy(x[:1].astype(np.float64)) + jitorch.from_numpy(x.astype(np.float64))  # NumPy's loop
    assert not _from_cache(wide._data) and wide.shape == x.shape


def test_eager_large_output_dtypes_and_autograd():
    import jitorch

    for dtype in (np.float64, np.float16):
        x = np.full(host_cache.THRESHOLD // np.dtype(dtype).itemsize, 1.25, dtype)
        out = jitorch.from_numpy(x) * 2
        assert out._data.dtype == dtype and _from_cache(out._data) and float(out[7]) == 2.5
    a = jitorch.full((BIG,), 0.5, requires_grad=True)
    y = a.exp()  # saves its output, which lives in a cached buffer
    assert _from_cache(y._data)
    g = jitorch.from_numpy(np.random.default_rng(1).standard_normal(BIG, dtype=np.float32))
    y.backward(g)
    np.testing.assert_allclose(a.grad.numpy(), g.numpy() * np.exp(np.float32(0.5)), rtol=1e-6)
