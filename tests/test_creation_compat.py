"""Creation, random-sampling and dtype edge cases against PyTorch: memory formats of ``empty``, integer and complex
ranges, ragged ``tensor()`` errors, ``asarray`` aliasing, ``complex``/``polar`` argument checks, ``randint`` and
``randperm`` bounds, ``*_like`` samplers' keywords, ``Tensor.type`` names and ``dtype.to_complex``."""
import numpy as np
import pytest
import torch
from helpers import assert_same, check_error

import jitorch


def _both(fn, **tol):
    jt, th = fn(jitorch), fn(torch)
    assert_same(jt, th, **tol)
    return jt, th


def test_empty_honours_memory_format():
    for fmt, shape in (("channels_last", (2, 3, 4, 5)), ("channels_last_3d", (2, 3, 4, 5, 6)),
                       ("channels_last", (2, 3, 1, 1)), ("contiguous_format", (2, 3, 4, 5))):
        j = jitorch.empty(*shape, memory_format=getattr(jitorch, fmt))
        t = torch.empty(*shape, memory_format=getattr(torch, fmt))
        assert j.stride() == t.stride() and j.is_contiguous(memory_format=getattr(jitorch, fmt))
    for fmt in ("channels_last", "preserve_format"):
        check_error(lambda: jitorch.empty(2, 3, memory_format=getattr(jitorch, fmt)),
                    lambda: torch.empty(2, 3, memory_format=getattr(torch, fmt)))


@pytest.mark.parametrize("args", [(0.5, 5, 1.5), (0, -2.5, -1.5), (0, 2.5, 1.5), (0.9, 7.9, 2.9)])
def test_int64_arange_counts_from_truncated_bounds(args):
    # ATen truncates an int64 range's bounds and step before counting: arange(0.5, 5, 1.5) has 5 elements.
    for dtype in ("int64", "int32", "int16"):
        _both(lambda T: T.arange(*args, dtype=getattr(T, dtype)))


def test_arange_errors():
    check_error(lambda: jitorch.arange(0, 2.5, 0.5, dtype=jitorch.int64),
                lambda: torch.arange(0, 2.5, 0.5, dtype=torch.int64), match="step must be nonzero")
    for end in (float("nan"), float("inf")):
        check_error(lambda: jitorch.arange(0, end), lambda: torch.arange(0, end), match="unsupported range")
    check_error(lambda: jitorch.arange(0, 5, -1), lambda: torch.arange(0, 5, -1),
                match="upper bound and lower bound inconsistent with step sign")


def test_complex_linspace_and_logspace():
    for fn in (lambda T: T.linspace(0, 1 + 1j, 3), lambda T: T.linspace(1j, 2, 4, dtype=T.complex128),
               lambda T: T.linspace(0, 1, 3, dtype=T.complex64),
               lambda T: T.linspace(T.tensor(1j), T.tensor(2 + 0j), 5),
               lambda T: T.linspace(1j, 2, 1), lambda T: T.logspace(0, 1j, 3),
               lambda T: T.logspace(0, 1, 3, dtype=T.complex64)):
        _both(fn, atol=1e-6, rtol=1e-6)
    for name in ("linspace", "logspace"):
        check_error(lambda: getattr(jitorch, name)(0, 1j, 3, dtype=jitorch.float32),
                    lambda: getattr(torch, name)(0, 1j, 3, dtype=torch.float32), match="can't be safely cast")


def test_integer_linspace_and_logspace_match_atens_arithmetic():
    # linspace's integer kernel rounds start + step * i once (a fused multiply-add), logspace's does not.
    for args in ((-3.65, 1.63, 7), (-3, 1, 7), (-3, 1, 17), (-2.6, 4.97, 10), (3.01, 3.84, 7), (0.5, 3, 4)):
        for dtype in ("int64", "int16"):
            _both(lambda T: T.linspace(*args, dtype=getattr(T, dtype)))
            _both(lambda T: T.logspace(*args, base=2, dtype=getattr(T, dtype)))
    for args in ((-1, 2, 4), (1.44, -4.34, 1), (1.44, -4.34, 0), (1, 300, 1)):
        _both(lambda T: T.linspace(*args, dtype=T.uint8))
        _both(lambda T: T.logspace(*args, dtype=T.uint8))
    _both(lambda T: T.logspace(-4.34, 1.44, 1, dtype=T.uint8))  # one step: base ** start, checked as a double
    _both(lambda T: T.logspace(0.5, 1, 1, base=2, dtype=T.int32))
    _both(lambda T: T.linspace(0, 1, 1, dtype=T.bool))


def test_linspace_and_logspace_bounds_must_fit_the_dtype():
    for name in ("linspace", "logspace"):
        for args, dtype in (((-1.0, 2, 4), "uint8"), ((0, 300, 4), "uint8"), ((-129, 0, 3), "int8"),
                            ((0, 70000.0, 3), "float16"), ((300, 1, 1), "uint8"), ((0, 1, 3), "bool")):
            check_error(lambda: getattr(jitorch, name)(*args, dtype=getattr(jitorch, dtype)),
                        lambda: getattr(torch, name)(*args, dtype=getattr(torch, dtype)))
    check_error(lambda: jitorch.linspace(-4.34, 1.44, 1, dtype=jitorch.uint8),  # one step: start alone is checked
                lambda: torch.linspace(-4.34, 1.44, 1, dtype=torch.uint8))


def test_tensor_refuses_python_complex_numbers_for_real_dtypes():
    for data, dtype in (([1 + 0j], "float32"), (1j, "float64"), ([[1j]], "int32"), ([1.5, 2j], "int64")):
        check_error(lambda: jitorch.tensor(data, dtype=getattr(jitorch, dtype)),
                    lambda: torch.tensor(data, dtype=getattr(torch, dtype)))
    _both(lambda T: T.tensor([1j], dtype=T.bool))
    with pytest.warns(np.exceptions.ComplexWarning):  # NumPy's complex values are cast, as torch casts them
        jt = jitorch.tensor([np.complex64(1 + 2j)], dtype=jitorch.float32)
    assert jt.tolist() == [1.0]


@pytest.mark.filterwarnings("ignore:Creating a tensor from a list of numpy.ndarrays:UserWarning")
@pytest.mark.parametrize("data", [[[1, 2], [3]], [[1, 2], 3], [1, [2, 3]], [[[1], [2]], [[3], [4, 5]]],
                                  [np.array([1, 2]), np.array([1])], [[1, 2], (3,)]], ids=repr)
def test_ragged_lists_raise_torchs_errors(data):
    err = check_error(lambda: jitorch.tensor(data), lambda: torch.tensor(data))
    if isinstance(err, ValueError):  # the length mismatches: torch's words
        with pytest.raises(ValueError) as info:
            torch.tensor(data)
        assert str(info.value) in str(err)


def test_asarray_copy_and_requires_grad():
    x = jitorch.ones(2, requires_grad=True)
    y = jitorch.asarray(x, copy=True)  # no copy-construct warning: a differentiable clone, as torch 2.x
    assert y.grad_fn is not None and y.requires_grad and y._data is not x._data
    assert jitorch.asarray(x, dtype=jitorch.float64).grad_fn is not None
    assert jitorch.asarray(x) is x
    z = jitorch.asarray(x, copy=True, requires_grad=True)
    assert z.is_leaf and z.requires_grad
    assert not jitorch.asarray(x, requires_grad=False).requires_grad
    a = np.zeros(3, dtype=np.float32)
    jitorch.asarray(a, copy=False)[0] = 1
    assert a[0] == 1
    for obj, kw in ((np.zeros(3, dtype=np.float32), {"dtype": "float64"}), ([1, 2], {}), (3.0, {}),
                    (np.float64(3), {}), ("tensor", {"dtype": "float64"})):
        def call(T):
            src = T.zeros(3) if isinstance(obj, str) else obj
            return T.asarray(src, copy=False, **{k: getattr(T, v) for k, v in kw.items()})
        check_error(lambda: call(jitorch), lambda: call(torch))


def test_complex_and_polar_check_their_inputs():
    for a, b in (("int64", "int64"), ("float64", "float32"), ("complex64", "complex64"), ("bfloat16", "bfloat16")):
        for name in ("complex", "polar"):
            check_error(lambda: getattr(jitorch, name)(jitorch.ones(2, dtype=getattr(jitorch, a)),
                                                       jitorch.ones(2, dtype=getattr(jitorch, b))),
                        lambda: getattr(torch, name)(torch.ones(2, dtype=getattr(torch, a)),
                                                     torch.ones(2, dtype=getattr(torch, b))))
    check_error(lambda: jitorch.complex(jitorch.ones(2), 1.0), lambda: torch.complex(torch.ones(2), 1.0))
    for name in ("complex", "polar"):
        _both(lambda T: getattr(T, name)(T.ones(2), T.tensor([0.5, 1.0]), out=T.empty(2, dtype=T.complex64)),
              atol=1e-6, rtol=1e-6)
    _both(lambda T: T.complex(T.ones(2, 1, dtype=T.float64), T.zeros(3, dtype=T.float64)))


def test_randint_and_randperm_bounds_follow_the_dtype():
    for low, high, dtype in ((0, 257, "uint8"), (-1, 3, "uint8"), (0, 3, "bool"), (0, 2 ** 30, "float16"),
                             (0, 3, "complex64")):
        check_error(lambda: jitorch.randint(low, high, (3,), dtype=getattr(jitorch, dtype)),
                    lambda: torch.randint(low, high, (3,), dtype=getattr(torch, dtype)), match="random_")
    assert jitorch.randint(0, 256, (500,), dtype=jitorch.uint8).max().item() > 200
    assert set(jitorch.randint(0, 2, (50,), dtype=jitorch.bool).tolist()) <= {False, True}
    for n, dtype in ((257, "uint8"), (129, "int8"), (2050, "float16"), (-1, "int64"), (3, "bool"),
                     (3, "complex64")):
        check_error(lambda: jitorch.randperm(n, dtype=getattr(jitorch, dtype)),
                    lambda: torch.randperm(n, dtype=getattr(torch, dtype)))
    for n, dtype in ((256, "uint8"), (128, "int8"), (2049, "float16"), (256, "bfloat16")):
        p = jitorch.randperm(n, dtype=getattr(jitorch, dtype))
        assert p.dtype.name == dtype and sorted(p.double().tolist()) == list(range(n))
    for name in ("rand", "randn"):
        check_error(lambda: getattr(jitorch, name)(-2), lambda: getattr(torch, name)(-2), match="negative dimension")


def test_like_samplers_take_generator_layout_and_requires_grad():
    x = jitorch.zeros(3, 4).t()
    for name, args in (("rand_like", ()), ("randn_like", ()), ("randint_like", (2, 9))):
        fn = getattr(jitorch, name)
        a = fn(x, *args, generator=jitorch.Generator().manual_seed(4), layout=jitorch.strided)
        b = fn(x, *args, generator=jitorch.Generator().manual_seed(4))
        assert a.tolist() == b.tolist() and a.stride() == getattr(torch, name)(torch.zeros(3, 4).t(), *args).stride()
    r = jitorch.randint_like(jitorch.zeros(3), 5, requires_grad=True)
    assert r.requires_grad and r.is_leaf and r.dtype is jitorch.float32


def test_rng_state_must_be_a_byte_tensor():
    for state in (lambda T: T.zeros(48), lambda T: [1, 2]):
        check_error(lambda: jitorch.Generator().set_state(state(jitorch)),
                    lambda: torch.Generator().set_state(state(torch)))
    check_error(lambda: jitorch.set_rng_state(jitorch.zeros(48)), lambda: torch.set_rng_state(torch.zeros(48)))


def test_type_names_and_legacy_types():
    x = jitorch.tensor([1.5, -2.7])
    assert x.type("torch.IntTensor").dtype is jitorch.int32 and x.type("torch.Tensor").dtype is jitorch.float32
    assert x.type("torch.FloatTensor") is x and x.type(jitorch.LongTensor).dtype is jitorch.int64
    for name in ("torch.FooTensor", "FloatTensor", "float", "torch.float32", int, float):
        check_error(lambda: x.type(name), lambda: torch.tensor([1.5]).type(name), match="invalid type")
    assert not isinstance(jitorch.zeros(2), jitorch.cuda.FloatTensor) and isinstance(jitorch.zeros(2),
                                                                                      jitorch.FloatTensor)
    assert jitorch.cuda.LongTensor.dtype is jitorch.int64 and jitorch.cuda.FloatTensor.is_cuda
    if not jitorch.cuda.is_available():  # a CUDA legacy type asks for the GPU, it never quietly stays on the CPU
        with pytest.raises(Exception):
            x.type("torch.cuda.FloatTensor")
        with pytest.raises(Exception):
            x.type(jitorch.cuda.FloatTensor)


def test_dtype_to_complex():
    for name in ("float32", "float64", "complex64", "complex128", "bfloat16"):
        if name != "bfloat16":
            assert getattr(jitorch, name).to_complex().name == str(getattr(torch, name).to_complex()).split(".")[1]
    assert jitorch.float16.to_complex() is jitorch.complex64  # no complex32 in jitorch
    for name in ("int64", "bool", "uint8"):
        check_error(lambda: getattr(jitorch, name).to_complex(), lambda: getattr(torch, name).to_complex(),
                    match="Unknown Complex ScalarType")


def test_frombuffer_refuses_empty_buffers_and_counts():
    for buf, count in ((b"", -1), (b"1234", 0)):
        check_error(lambda: jitorch.frombuffer(bytearray(buf), dtype=jitorch.uint8, count=count),
                    lambda: torch.frombuffer(bytearray(buf), dtype=torch.uint8, count=count),
                    match="must not be 0")


def test_generator_argument_must_be_a_generator():
    for fn in (lambda T: T.rand(2, generator=1), lambda T: T.randint(3, (2,), generator="g"),
               lambda T: T.zeros(2).normal_(generator=3), lambda T: T.randperm(3, generator=1)):
        check_error(lambda: fn(jitorch), lambda: fn(torch), match="Generator")


def test_bernoulli_fills_an_out_of_any_dtype():
    for dtype in ("int64", "bool", "float64", "uint8", "float16"):
        _both(lambda T: (lambda o: (T.bernoulli(T.tensor([0.0, 1.0, 1.0]), out=o), o)[1])(
            T.empty(3, dtype=getattr(T, dtype))))


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_uniform_samples_never_reach_the_upper_bound(dtype):
    # float32 draws round up to 1.0 in a half type; ATen maps those to the lower bound, as here.
    dt, n = getattr(jitorch, dtype), 200_000
    jitorch.manual_seed(0)
    for x in (jitorch.rand(n, dtype=dt), jitorch.rand(n, dtype=dt, generator=jitorch.Generator().manual_seed(1)),
              jitorch.rand_like(jitorch.zeros(n, dtype=dt)), jitorch.empty(n, dtype=dt).uniform_()):
        assert x.dtype is dt and float(x.max()) < 1 and float(x.min()) >= 0
        assert abs(float(x.float().mean()) - 0.5) < 0.01
    y = jitorch.empty(n, dtype=dt).uniform_(-1, 1)
    assert float(y.max()) < 1 and float(y.min()) >= -1
    assert jitorch.empty(4, dtype=dt).uniform_(2, 2).tolist() == [2.0] * 4


def test_python_ints_past_64_bits():
    # torch reads them as doubles for a floating or complex result and refuses them for an integer one.
    for fn in (lambda T: T.tensor([2 ** 70], dtype=T.float32), lambda T: T.tensor(3 ** 50, dtype=T.float64),
               lambda T: T.tensor([1.5, 2 ** 70]), lambda T: T.tensor([2 ** 70, 1], dtype=T.complex64),
               lambda T: T.tensor([[2 ** 70], [1j]]), lambda T: T.as_tensor([-2 ** 70], dtype=T.float64)):
        _both(fn, rtol=1e-6)
    for fn in (lambda T: T.tensor(2 ** 70), lambda T: T.tensor([2 ** 64]),
               lambda T: T.tensor([2 ** 70], dtype=T.int64)):
        check_error(lambda: fn(jitorch), lambda: fn(torch), match="Overflow when unpacking long long")
