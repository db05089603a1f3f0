"""Creation (jitorch/_creation.py), conversion (jitorch/_conversion.py) and random sampling (jitorch/_random.py)
against PyTorch: values, dtypes and shapes of every creation function, dtype casts, and the bad-input errors."""
import numpy as np
import pytest
import torch
from helpers import DTYPES, FLOAT_DTYPES, assert_same, check_error, check_op, make_array, np_dtype

import jitorch


def _both(fn, *args, **kwargs):
    """``fn(T, ...)`` in both frameworks, compared (creation functions take no tensor inputs)."""
    jt, th = fn(jitorch, *args, **kwargs), fn(torch, *args, **kwargs)
    if isinstance(th, (tuple, list)):
        for a, b in zip(jt, th):
            assert_same(a, b, atol=1e-6, rtol=1e-6)
    else:
        assert_same(jt, th, atol=1e-6, rtol=1e-6)
    return jt, th


def _dt(T, name):
    return None if name is None else getattr(T, name)


DATA = [1, 2.5, True, [1, 2, 3], [1.0, 2], [True, False], [[1, 2], [3, 4]], [[1.5], [2]], [], [[]], 3 + 4j,
        [1, 2.5j], np.float32(1.5), np.int16(3), np.array([1, 2], dtype=np.int8), np.array([[1.5]], dtype=np.float16),
        # NumPy scalars in a sequence keep their dtype, promoted with the Python numbers' (floats: the default dtype)
        [np.float64(1.5), np.float64(2.5)], [1.0, np.float64(2)], [[np.float64(1)]], (np.float64(1), 2),
        [np.float32(1), np.float64(2)], [np.float16(1), 2], [np.float16(1), 2.0], [np.int32(1), np.int32(2)],
        [np.int32(1), 2], [np.int8(1), 2.5], [np.complex128(1 + 2j)], [np.array([1.0, 2.0]), np.array([3.0, 4.0])]]


@pytest.mark.parametrize("data", DATA, ids=[repr(d)[:20] for d in DATA])
def test_tensor_infers_dtype_and_shape(data):
    _both(lambda T: T.tensor(data))
    complex_data = isinstance(data, complex) or (isinstance(data, list) and any(isinstance(v, complex) for v in data))
    for name in ("float64", "int32", "bool"):
        numpy_scalars = isinstance(data, np.generic) or (isinstance(data, list) and any(
            isinstance(v, np.generic) for v in data))
        if not complex_data and not numpy_scalars:  # torch rejects NumPy scalars with a dtype=
            _both(lambda T: T.tensor(data, dtype=_dt(T, name)))
    _both(lambda T: T.as_tensor(data))


@pytest.mark.filterwarnings("ignore:To copy construct from a tensor:UserWarning")
def test_tensor_from_tensors_and_requires_grad():
    _both(lambda T: T.tensor([T.tensor(1.0), T.tensor(2.0)]))
    _both(lambda T: T.tensor([T.tensor(1.0, dtype=T.float64), T.tensor(2.0, dtype=T.float64)]))
    _both(lambda T: T.tensor([T.tensor(1.0), np.float64(2.0)]))  # was a TypeError: the NumPy scalar was iterated
    _both(lambda T: T.tensor(T.arange(3)))
    j, t = _both(lambda T: T.tensor([1.0, 2.0], requires_grad=True))
    assert j.requires_grad and j.is_leaf
    check_error(lambda: jitorch.tensor([1, 2], requires_grad=True), lambda: torch.tensor([1, 2], requires_grad=True))


def test_default_dtype_controls_float_creation():
    old = jitorch.get_default_dtype()
    try:
        jitorch.set_default_dtype(jitorch.float64)
        torch.set_default_dtype(torch.float64)
        for fn in (lambda T: T.tensor(1.5), lambda T: T.zeros(2), lambda T: T.arange(0.0, 1.0, 0.5),
                   lambda T: T.tensor([1, 2]) / 2, lambda T: T.full((2,), 1.5), lambda T: T.linspace(0, 1, 3),
                   lambda T: T.tensor(1 + 2j), lambda T: T.tensor([np.float32(1), 2.0]), lambda T: T.tensor([1j])):
            _both(fn)
    finally:
        jitorch.set_default_dtype(old)
        torch.set_default_dtype(torch.float32)
    check_error(lambda: jitorch.set_default_dtype(jitorch.int64), lambda: torch.set_default_dtype(torch.int64))


@pytest.mark.parametrize("dtype", [None] + list(DTYPES))
def test_filled_creation(dtype):
    for shape in ((), (0,), (2, 3), (1, 0, 2)):
        for name in ("zeros", "ones"):
            _both(lambda T: getattr(T, name)(shape, dtype=_dt(T, dtype)))
            if shape:
                _both(lambda T: getattr(T, name)(*shape, dtype=_dt(T, dtype)))
        _both(lambda T: T.full(shape, 1, dtype=_dt(T, dtype)))
        j, t = _both(lambda T: T.empty(shape, dtype=_dt(T, dtype)).fill_(0))
    src = make_array((2, 3), dtype or "float32", np.random.default_rng(0))
    for name in ("zeros_like", "ones_like", "empty_like"):
        fn = (lambda x: getattr(jitorch, name)(x).zero_()) if name == "empty_like" else getattr(jitorch, name)
        tfn = (lambda x: getattr(torch, name)(x).zero_()) if name == "empty_like" else getattr(torch, name)
        check_op(fn, tfn, [src], grad=False)
    check_op(lambda x: jitorch.full_like(x, 2), lambda x: torch.full_like(x, 2), [src], grad=False)
    check_op(lambda x: jitorch.zeros_like(x, dtype=jitorch.float64), lambda x: torch.zeros_like(x, dtype=torch.float64),
             [src], grad=False)


def test_full_infers_dtype_from_the_value():
    for value in (1, 2.5, True, -3):
        _both(lambda T: T.full((2, 2), value))
    _both(lambda T: T.full((2,), 1.5, dtype=T.int64))
    _both(lambda T: T.scalar_tensor(3))
    _both(lambda T: T.scalar_tensor(2, dtype=T.int32))


RANGES = [(5,), (2, 7), (1, 10, 3), (5, 0, -1), (0.0, 1.0, 0.1), (0, 1, 0.25), (-1.5, 2.5, 0.5), (3, 3), (0, -3, -0.7)]


@pytest.mark.parametrize("args", RANGES, ids=[str(a) for a in RANGES])
def test_arange(args):
    _both(lambda T: T.arange(*args))
    for dtype in ("int32", "float64", "float16"):
        _both(lambda T: T.arange(*args, dtype=getattr(T, dtype)))


@pytest.mark.parametrize("steps", [0, 1, 2, 5, 11])
def test_linspace_logspace(steps):
    for start, end in ((0, 1), (-3.5, 7), (10, -10), (2, 2)):
        _both(lambda T: T.linspace(start, end, steps))
        _both(lambda T: T.linspace(start, end, steps, dtype=T.float64))
        _both(lambda T: T.linspace(start, end, steps, dtype=T.int64))
        _both(lambda T: T.logspace(start / 4, end / 4, steps))
        _both(lambda T: T.logspace(start / 4, end / 4, steps, base=2.0, dtype=T.float64))


def test_eye_and_triangle_indices():
    for args in ((3,), (2, 4), (4, 2), (0,), (1, 0)):
        _both(lambda T: T.eye(*args))
        _both(lambda T: T.eye(*args, dtype=T.int32))
    for row, col, offset in ((3, 3, 0), (4, 3, 1), (3, 5, -1), (0, 3, 0), (3, 3, 5)):
        _both(lambda T: T.tril_indices(row, col, offset))
        _both(lambda T: T.triu_indices(row, col, offset))
    _both(lambda T: T.empty_strided((2, 3), (3, 1)).zero_())


def test_from_numpy_and_as_tensor_share_memory():
    for dtype in DTYPES:
        arr = make_array((2, 3), dtype, np.random.default_rng(1))
        j = jitorch.from_numpy(arr)
        assert j.dtype.name == dtype and j.tolist() == arr.tolist()
        arr[0, 0] = arr[1, 1]
        assert j.tolist() == arr.tolist()  # writes on the NumPy side are visible
    arr = np.arange(6.0)
    jitorch.as_tensor(arr).mul_(2)
    assert arr.tolist() == [0.0, 2.0, 4.0, 6.0, 8.0, 10.0]
    assert jitorch.as_tensor(arr, dtype=jitorch.float32).dtype is jitorch.float32
    assert jitorch.asarray(arr).data_ptr() == jitorch.as_tensor(arr).data_ptr()
    check_error(lambda: jitorch.from_numpy(np.array(["a"])), lambda: torch.from_numpy(np.array(["a"])))
    check_error(lambda: jitorch.from_numpy([1, 2]), lambda: torch.from_numpy([1, 2]))


def test_complex_and_polar(rng):
    a, b = make_array((3,), "float32", rng), make_array((3,), "float32", rng)
    check_op(jitorch.complex, torch.complex, [a, b], grad=False)
    check_op(jitorch.polar, torch.polar, [np.abs(a), b], grad=False)


def test_creation_errors():
    for fn in (lambda T: T.tensor([[1, 2], [3]]), lambda T: T.zeros(-1), lambda T: T.ones(2, -3),
               lambda T: T.arange(0, 1, 0), lambda T: T.arange(0, -1, 1), lambda T: T.linspace(0, 1, -1),
               lambda T: T.tensor([object()]), lambda T: T.zeros(2, dtype=T.int64, requires_grad=True),
               lambda T: T.zeros("a")):
        check_error(lambda: fn(jitorch), lambda: fn(torch))


# -- conversion ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("src", DTYPES)
def test_casts_between_all_dtypes(src, rng):
    a = make_array((3, 4), src, rng, -100, 100)
    if src in FLOAT_DTYPES:
        a = a.astype(np.float64).clip(0, 100).astype(np_dtype(src))  # negative floats -> uint8 is undefined
    for dst in DTYPES:
        check_op(lambda x: x.to(getattr(jitorch, dst)), lambda x: x.to(getattr(torch, dst)), [a], grad=False)
    for method in ("float", "double", "half", "bfloat16", "long", "int", "short", "char", "byte", "bool"):
        check_op(lambda x: getattr(x, method)(), lambda x: getattr(x, method)(), [a], grad=False)


def test_float_to_int_truncates_and_overflow_saturates_to_inf():
    a = np.array([-2.7, -0.5, 0.5, 2.7, 1e5], dtype=np.float64)
    check_op(lambda x: x.to(jitorch.int32), lambda x: x.to(torch.int32), [a[:4]])
    check_op(lambda x: x.half(), lambda x: x.half(), [a])
    check_op(lambda x: (x * 1e300).float(), lambda x: (x * 1e300).float(), [a])


def test_to_variants_and_gradients(rng):
    a = make_array((2, 3), "float32", rng)
    check_op(lambda x: x.to(jitorch.float64) * 2, lambda x: x.to(torch.float64) * 2, [a])
    check_op(lambda x: x.double().half().float(), lambda x: x.double().half().float(), [a], atol=1e-3, rtol=1e-3)
    check_op(lambda x: x.to(dtype=jitorch.float64, copy=True), lambda x: x.to(dtype=torch.float64, copy=True), [a])
    check_op(lambda x, y: x.to(y), lambda x, y: x.to(y), [a, make_array((1,), "int8", rng)], grad=False)
    check_op(lambda x, y: x.type_as(y), lambda x, y: x.type_as(y), [a, make_array((1,), "float64", rng)])
    check_op(lambda x: x.to("cpu", jitorch.float16), lambda x: x.to("cpu", torch.float16), [a], atol=1e-3, rtol=1e-3)
    j = jitorch.tensor(a)
    assert j.to(jitorch.float32) is j and j.to("cpu") is j and j.cpu() is j
    assert j.to(jitorch.float32, copy=True) is not j
    assert jitorch.tensor([1, 2]).type() == torch.tensor([1, 2]).type() == "torch.LongTensor"
    check_op(lambda x: x.type(jitorch.int32), lambda x: x.type(torch.int32), [a], grad=False)


def test_scalar_conversions():
    for value, dtype in ((3.7, "float32"), (-2, "int64"), (True, "bool"), (0.5, "float16")):
        j, t = jitorch.tensor(value, dtype=getattr(jitorch, dtype)), torch.tensor(value, dtype=getattr(torch, dtype))
        assert j.item() == t.item() and type(j.item()) is type(t.item())
        assert float(j) == float(t) and int(j) == int(t) and bool(j) == bool(t)
    assert jitorch.tensor([[1, 2]]).tolist() == torch.tensor([[1, 2]]).tolist()
    for fn in (lambda T: T.ones(2).item(), lambda T: bool(T.ones(2)), lambda T: T.ones(2, requires_grad=True).numpy(),
               lambda T: T.tensor([1.5]).__index__()):
        check_error(lambda: fn(jitorch), lambda: fn(torch))


@pytest.mark.parametrize("convert", [float, int])
def test_python_number_of_multi_element_tensor_is_value_error(convert):
    check_error(lambda: convert(jitorch.ones(2)), lambda: convert(torch.ones(2)), match="elements")


def test_cast_to_integer_drops_requires_grad():
    j = jitorch.ones(2, requires_grad=True)
    assert not j.long().requires_grad and not j.to(jitorch.bool).requires_grad and j.double().requires_grad


def test_reduction_to_integer_dtype_of_grad_tensor():
    for red in ("sum", "prod"):
        err = check_error(lambda: getattr(jitorch.ones(2, requires_grad=True), red)(dtype=jitorch.int64),
                          lambda: getattr(torch.ones(2, requires_grad=True), red)(dtype=torch.int64))
        assert "Long" in str(err)
    check_error(lambda: jitorch.ones(2, requires_grad=True).cumsum(0, dtype=jitorch.int32),
                lambda: torch.ones(2, requires_grad=True).cumsum(0, dtype=torch.int32))
    # No grad needed: the integer result is fine.
    assert jitorch.ones(2).sum(dtype=jitorch.int64).item() == 2


# -- random sampling: same shapes, dtypes and ranges as torch (the streams differ) ----------------------------------
def test_random_shapes_dtypes_and_ranges():
    for fn in (lambda T: T.rand(2, 3), lambda T: T.randn((4,), dtype=T.float64), lambda T: T.randint(3, (5,)),
               lambda T: T.randint(-2, 2, (2, 2), dtype=T.int16), lambda T: T.randperm(6),
               lambda T: T.normal(1.0, 2.0, (3,)), lambda T: T.rand_like(T.ones(2, dtype=T.float64)),
               lambda T: T.randn_like(T.zeros(3)), lambda T: T.randint_like(T.zeros(3), 5),
               lambda T: T.bernoulli(T.full((4,), 0.5)), lambda T: T.multinomial(T.ones(2, 5), 3),
               lambda T: T.normal(T.zeros(3), T.ones(3))):
        j, t = fn(jitorch), fn(torch)
        assert tuple(j.shape) == tuple(t.shape) and j.dtype.name == str(t.dtype).split(".")[1]
    assert sorted(jitorch.randperm(6).tolist()) == list(range(6))
    r = jitorch.randint(-2, 2, (1000,))
    assert r.min().item() == -2 and r.max().item() == 1
    u = jitorch.rand(1000)
    assert 0 <= u.min().item() and u.max().item() < 1 and abs(u.mean().item() - 0.5) < 0.05
    rows = jitorch.multinomial(jitorch.ones(3, 5), 5)
    assert all(sorted(row) == list(range(5)) for row in rows.tolist())  # without replacement: a permutation


def test_random_is_reproducible_under_manual_seed():
    jitorch.manual_seed(123)
    a = (jitorch.rand(3), jitorch.randn(2), jitorch.randint(0, 10, (4,)), jitorch.randperm(5))
    jitorch.manual_seed(123)
    b = (jitorch.rand(3), jitorch.randn(2), jitorch.randint(0, 10, (4,)), jitorch.randperm(5))
    assert all(x.tolist() == y.tolist() for x, y in zip(a, b))
    g1, g2 = jitorch.Generator().manual_seed(7), jitorch.Generator().manual_seed(7)
    assert jitorch.rand(2, generator=g1).tolist() == jitorch.rand(2, generator=g2).tolist()


def test_in_place_samplers_keep_dtype_and_shape():
    for method, args in (("uniform_", (-1, 1)), ("normal_", ()), ("random_", (0, 5)), ("bernoulli_", (0.3,)),
                         ("exponential_", ()), ("fill_", (1,))):
        j, t = getattr(jitorch.zeros(3, 2), method)(*args), getattr(torch.zeros(3, 2), method)(*args)
        assert tuple(j.shape) == tuple(t.shape) and j.dtype.name == "float32"
    assert 0 <= jitorch.zeros(100).uniform_(0, 1).min().item()


def test_generator_state_and_seeds():
    state = jitorch.get_rng_state()
    a = jitorch.rand(4)
    jitorch.set_rng_state(state)
    assert jitorch.rand(4).tolist() == a.tolist()
    jitorch.manual_seed(5)
    assert jitorch.initial_seed() == 5 and jitorch.default_generator.initial_seed() == 5
    s = jitorch.seed()
    assert jitorch.initial_seed() == s
    p = jitorch.poisson(jitorch.full((1000,), 4.0))
    assert p.dtype is jitorch.float32 and abs(p.mean().item() - 4.0) < 0.3 and p.min().item() >= 0


@pytest.mark.filterwarnings("ignore:torch.range is deprecated:UserWarning")
def test_range_includes_the_end():
    for args in ((0, 5), (1, 4, 0.5), (5, 0, -1), (0.0, 1.0, 0.25)):
        _both(lambda T: T.range(*args))


def test_random_errors():
    for fn in (lambda T: T.randint(3, 3, (2,)), lambda T: T.normal(0.0, -1.0, (2,)),
               lambda T: T.multinomial(T.tensor([-1.0, 2.0]), 1), lambda T: T.multinomial(T.ones(2), 3),
               lambda T: T.bernoulli(T.tensor([1.5])), lambda T: T.bernoulli(T.ones(2), p=1.5),
               lambda T: T.randn(2, dtype=T.int64)):
        check_error(lambda: fn(jitorch), lambda: fn(torch))


@pytest.mark.parametrize("dtype", ["complex64", "complex128"])
def test_complex_rand_and_randn_draw_both_parts_like_torch(dtype):
    # torch: independent real and imaginary parts, each N(0, 1/2) for randn and U[0, 1) for rand.
    dt = getattr(jitorch, dtype)
    for gen in (None, jitorch.Generator().manual_seed(3)):  # a random row, or the generator's own draw
        z = jitorch.randn(20000, dtype=dt, generator=gen)
        assert z.dtype is dt and abs(float(z.real.var()) - 0.5) < 0.03 and abs(float(z.imag.var()) - 0.5) < 0.03
        assert abs(float((z.real * z.imag).mean())) < 0.02  # not the same numbers twice
        u = jitorch.rand(20000, dtype=dt, generator=gen)
        assert 0 <= float(u.real.min()) and float(u.imag.max()) < 1 and abs(float(u.imag.mean()) - 0.5) < 0.02


def test_rng_state_bytes_are_never_unpickled(tmp_path):
    import os
    import pickle

    marker = tmp_path / "ran"

    class Evil:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    payload = jitorch.tensor(np.frombuffer(pickle.dumps(Evil()), dtype=np.uint8).copy())
    with pytest.raises(RuntimeError, match="expected a CPU generator state of 5056 bytes"):
        jitorch.set_rng_state(payload)
    assert not marker.exists()


def test_rng_state_round_trips_in_torchs_layout():
    # (was: a 48-byte PCG64 state, and pickled PCG64 states loading: CPU streams are torch's mt19937 now, and the
    # state is torch's 5056-byte CPUGeneratorImplState, readable by either library)
    jitorch.manual_seed(11)
    torch.manual_seed(11)
    jitorch.randn(3), torch.randn(3)  # an odd count of scalar normals: the cached second sample is in the state
    state = jitorch.get_rng_state()
    assert state.dtype == jitorch.uint8 and state.shape == (5056,)
    np.testing.assert_array_equal(state.numpy(), torch.get_rng_state().numpy())
    first = jitorch.randn(5)
    jitorch.set_rng_state(state)
    assert jitorch.equal(jitorch.randn(5), first)
    torch.manual_seed(99)
    jitorch.set_rng_state(jitorch.tensor(torch.get_rng_state().numpy()))
    np.testing.assert_array_equal(jitorch.rand(7).numpy(), torch.rand(7).numpy())
    with pytest.raises(RuntimeError, match="5056 bytes"):
        jitorch.set_rng_state(jitorch.zeros(48, dtype=jitorch.uint8))


@pytest.mark.filterwarnings("ignore:The given NumPy array is not writable")
def test_default_collate_keeps_numpy_float64():
    """DataLoader batches of np.float64 targets stayed float32: the list of NumPy scalars took the default dtype."""
    batch = [np.float64(1.5), np.float64(2.5)]
    assert_same(jitorch.utils.data.default_collate(batch), torch.utils.data.default_collate(batch))


UNINITIALISED = [  # torch.Tensor() and the typed legacy constructors: no arguments is empty 1-D, a Size is a shape
    lambda T: T.Tensor(), lambda T: T.FloatTensor(), lambda T: T.LongTensor(), lambda T: T.Tensor(T.Size([2, 3])),
    lambda T: T.FloatTensor(T.ones(2, 3).size()), lambda T: T.DoubleTensor(T.Size([2])), lambda T: T.Tensor(T.Size([])),
    lambda T: T.Tensor(2, 3),
]


@pytest.mark.parametrize("make", UNINITIALISED)
def test_legacy_constructors_of_sizes(make):
    j, t = make(jitorch), make(torch)
    assert tuple(j.shape) == tuple(t.shape) and str(j.dtype).split(".")[-1] == str(t.dtype).split(".")[-1]


@pytest.mark.parametrize("make", [lambda T: T.Tensor((2, 3)), lambda T: T.cat([T.Tensor(), T.ones(2)]),
                                  lambda T: T.IntTensor([1, 2]), lambda T: T.Tensor([[1.5]])])
def test_legacy_constructors_of_data(make):
    _both(make)


@pytest.mark.parametrize("kind", ["IntTensor", "LongTensor", "DoubleTensor", "HalfTensor", "BoolTensor", "Tensor"])
def test_type_converts_to_a_legacy_type_class(kind):
    """``x.type(torch.IntTensor)`` was a NumPy TypeError about an object dtype."""
    _both(lambda T: T.tensor([1.5, -2.5, 0.0]).type(getattr(T, kind)))
    if kind != "Tensor":
        assert getattr(jitorch, kind).dtype is getattr(jitorch, kind)().dtype


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_linspace_is_bit_for_bit_torchs(dtype):
    # ATen rounds start, end and step to the dtype and takes each value as one fused multiply-add: computing in
    # float64 and rounding once at the end differs from it in the last bit.
    rng = np.random.default_rng(11)
    for _ in range(300):
        lo, hi = (float(v) for v in rng.standard_normal(2) * 10.0 ** rng.integers(-3, 4))
        steps = int(rng.integers(0, 40))
        got = jitorch.linspace(lo, hi, steps, dtype=getattr(jitorch, dtype)).numpy()
        want = torch.linspace(lo, hi, steps, dtype=getattr(torch, dtype)).numpy()
        np.testing.assert_array_equal(got, want, err_msg=f"linspace({lo}, {hi}, {steps})")
