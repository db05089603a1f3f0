"""Type promotion and broadcasting against PyTorch, with hypothesis-generated operands and shapes.

Operands are tensors with dims, 0-d tensors and Python scalars (bool, int, float, complex): PyTorch's three priority
classes. ``jitorch.result_type`` and the dtypes of ``a + b``, ``a * b``, ``a / b`` and ``a == b`` must equal torch's.
"""
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import mutually_broadcastable_shapes

import jitorch

TENSOR_DTYPES = ("bool", "uint8", "int8", "int16", "int32", "int64", "float16", "bfloat16", "float32", "float64",
                 "complex64", "complex128")
SCALARS = (True, False, 0, 3, -2, 2.5, -0.0, 1e10, 1 + 2j)
pytestmark = pytest.mark.filterwarnings("ignore:ComplexHalf support is experimental:UserWarning")
OPS = {"add": lambda a, b: a + b, "mul": lambda a, b: a * b, "div": lambda a, b: a / b, "eq": lambda a, b: a == b}


def _name(dtype):
    # jitorch has no complex32 (its ``chalf`` is complex64), so torch's half-complex results read as complex64.
    name = str(dtype).split(".")[-1]
    return "complex64" if name == "complex32" else name


@st.composite
def operand(draw, tensor_only=False):
    """("dim" | "zero", dtype) for a tensor, or ("scalar", value) for a Python number."""
    kind = draw(st.sampled_from(("dim", "zero") if tensor_only else ("dim", "zero", "scalar")))
    if kind == "scalar":
        return kind, draw(st.sampled_from(SCALARS))
    return kind, draw(st.sampled_from(TENSOR_DTYPES))


def _build(T, op):
    kind, spec = op
    if kind == "scalar":
        return spec
    shape = (2,) if kind == "dim" else ()
    return T.ones(shape, dtype=getattr(T, spec))


def _outcome(fn):
    """The result dtype's name, or the exception type when the call raises."""
    try:
        out = fn()
    except Exception as e:  # noqa: BLE001 - the type is what is compared
        return type(e)
    return _name(out if isinstance(out, (jitorch.dtype, torch.dtype)) else out.dtype)


@settings(max_examples=300, deadline=None, derandomize=True)  # deterministic in CI
@given(a=operand(tensor_only=True), b=operand())
def test_result_type_matches_torch(a, b):
    for x, y in ((a, b), (b, a)):
        jt = _outcome(lambda: jitorch.result_type(_build(jitorch, x), _build(jitorch, y)))
        th = _outcome(lambda: torch.result_type(_build(torch, x), _build(torch, y)))
        assert jt == th, f"result_type({x}, {y}): jitorch {jt}, torch {th}"


def _wraps(x, y):
    """A Python int outside an integer tensor's range: torch wraps it (see the xfail test below)."""
    for (kx, dx), (ky, vy) in ((x, y), (y, x)):
        if kx != "scalar" and ky == "scalar" and type(vy) is int and dx in ("uint8", "int8", "int16", "int32"):
            info = np.iinfo(dx)
            if not info.min <= vy <= info.max:
                return True
    return False


@settings(max_examples=300, deadline=None, derandomize=True)  # deterministic in CI
@given(a=operand(tensor_only=True), b=operand(), op=st.sampled_from(sorted(OPS)))
def test_binary_result_dtype_matches_torch(a, b, op):
    fn = OPS[op]
    for x, y in ((a, b), (b, a)):
        if _wraps(x, y):
            continue
        jt = _outcome(lambda: fn(_build(jitorch, x), _build(jitorch, y)))
        th = _outcome(lambda: fn(_build(torch, x), _build(torch, y)))
        if th is NotImplementedError and torch.result_type(_build(torch, x), _build(torch, y)) == torch.complex32:
            continue  # torch lacks complex32 kernels; jitorch computes those in complex64
        if isinstance(th, type) and isinstance(jt, type):
            assert issubclass(jt, th), f"{op}({x}, {y}): jitorch raised {jt.__name__}, torch {th.__name__}"
        else:
            assert jt == th, f"{op}({x}, {y}): jitorch {jt}, torch {th}"


@settings(max_examples=100, deadline=None, derandomize=True)  # deterministic in CI
@given(a=operand(tensor_only=True), b=operand(tensor_only=True), c=operand())
def test_three_operand_result_type(a, b, c):
    jt = _outcome(lambda: jitorch.result_type(_build(jitorch, a), _build(jitorch, b)))
    th = _outcome(lambda: torch.result_type(_build(torch, a), _build(torch, b)))
    assert jt == th
    jt = _outcome(lambda: jitorch.where(jitorch.ones((2,), dtype=jitorch.bool), _build(jitorch, a), _build(jitorch, c)))
    th = _outcome(lambda: torch.where(torch.ones((2,), dtype=torch.bool), _build(torch, a), _build(torch, c)))
    assert jt == th or (isinstance(jt, type) and isinstance(th, type)), f"where(cond, {a}, {c}): {jt} vs {th}"


@pytest.mark.parametrize("a", TENSOR_DTYPES)
def test_promote_types_and_can_cast_exhaustive(a):
    for b in TENSOR_DTYPES:
        assert _name(jitorch.promote_types(getattr(jitorch, a), getattr(jitorch, b))) == \
            _name(torch.promote_types(getattr(torch, a), getattr(torch, b))), (a, b)
        assert jitorch.can_cast(getattr(jitorch, a), getattr(jitorch, b)) == \
            torch.can_cast(getattr(torch, a), getattr(torch, b)), (a, b)


def test_python_float_follows_the_default_dtype():
    old = jitorch.get_default_dtype()
    try:
        for default in ("float64", "float16"):
            jitorch.set_default_dtype(getattr(jitorch, default))
            torch.set_default_dtype(getattr(torch, default))
            for x, y in ((jitorch.ones(2, dtype=jitorch.int32), 2.5), (jitorch.ones(2, dtype=jitorch.bool), 1.0)):
                tx = torch.ones(2, dtype=getattr(torch, _name(x.dtype)))
                assert _name((x * y).dtype) == _name((tx * y).dtype)
                assert _name(jitorch.result_type(x, 1j)) == _name(torch.result_type(tx, 1j))
                assert _name((x / 2).dtype) == _name((tx / 2).dtype)
    finally:
        jitorch.set_default_dtype(old)
        torch.set_default_dtype(torch.float32)


def test_numpy_scalars_are_weak_like_python_numbers():
    x, tx = jitorch.ones(2, dtype=jitorch.float16), torch.ones(2, dtype=torch.float16)
    for s in (np.float64(2.0), np.int64(3), np.bool_(True)):
        assert _name((x * s).dtype) == _name((tx * s).dtype)


# -- broadcasting ---------------------------------------------------------------------------------------------------
@settings(max_examples=200, deadline=None, derandomize=True)  # deterministic in CI
@given(shapes=mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=4, min_side=0, max_side=3),
       dtype=st.sampled_from(("int64", "float32", "bfloat16")))
def test_broadcast_result_shape_matches_torch(shapes, dtype):
    (sa, sb), expected = shapes.input_shapes, shapes.result_shape
    ja, jb = jitorch.zeros(sa, dtype=getattr(jitorch, dtype)), jitorch.zeros(sb, dtype=getattr(jitorch, dtype))
    ta, tb = torch.zeros(sa, dtype=getattr(torch, dtype)), torch.zeros(sb, dtype=getattr(torch, dtype))
    assert tuple((ja + jb).shape) == tuple((ta + tb).shape) == expected
    assert tuple((ja * jb).shape) == tuple((ta * tb).shape)
    assert tuple(jitorch.broadcast_shapes(sa, sb)) == tuple(torch.broadcast_shapes(sa, sb))
    assert [tuple(t.shape) for t in jitorch.broadcast_tensors(ja, jb)] == [expected, expected]


_shape = st.lists(st.integers(0, 4), min_size=0, max_size=4).map(tuple)


def _broadcastable(sa, sb):
    try:
        np.broadcast_shapes(sa, sb)
        return True
    except ValueError:
        return False


@settings(max_examples=200, deadline=None, derandomize=True)  # deterministic in CI
@given(sa=_shape, sb=_shape)
def test_non_broadcastable_shapes_raise_naming_both(sa, sb):
    if _broadcastable(sa, sb):
        return
    ja, jb = jitorch.zeros(sa, dtype=jitorch.int64), jitorch.zeros(sb, dtype=jitorch.int64)
    with pytest.raises(RuntimeError):
        torch.zeros(sa, dtype=torch.int64) + torch.zeros(sb, dtype=torch.int64)
    with pytest.raises(RuntimeError) as err:
        ja + jb
    assert str(sa) in str(err.value) and str(sb) in str(err.value), str(err.value)
    with pytest.raises(RuntimeError) as err:
        jitorch.broadcast_shapes(sa, sb)
    with pytest.raises(RuntimeError) as th_err:  # torch's message names the argument that clashes and the shape
        torch.broadcast_shapes(sa, sb)
    assert str(err.value) == str(th_err.value)


def test_non_broadcastable_float_operands_raise_runtime_error():
    with pytest.raises(RuntimeError):
        jitorch.zeros(2, 3) * jitorch.zeros(4)


@pytest.mark.parametrize("dtype,scalar", [("uint8", -2), ("int8", 200), ("int16", 70000)])
def test_out_of_range_int_scalar_wraps(dtype, scalar):
    j = jitorch.ones(2, dtype=getattr(jitorch, dtype)) + scalar
    t = torch.ones(2, dtype=getattr(torch, dtype)) + scalar
    assert j.tolist() == t.tolist() and _name(j.dtype) == _name(t.dtype)


# -- pow ------------------------------------------------------------------------------------------------------------
POW_DTYPES = ("bool", "uint8", "int32", "int64", "float16", "bfloat16", "float32", "float64", "complex64")
POW_SCALARS = (2, 3, 0, 2.0, 0.5, 0.0, True, False, 2j)


def _pow_outcome(fn):
    """(dtype name, values) or the exception type: pow's shortcuts (x * x for 2) must not change either."""
    try:
        out = fn()
    except Exception as e:  # noqa: BLE001 - the type is what is compared
        return type(e)
    return _name(out.dtype), np.asarray(out.tolist(), dtype=np.complex128)


def _half_complex(dtype, other):
    # torch's pow has no complex32 kernel (NotImplementedError); jitorch computes those in complex64.
    return dtype in ("float16", "bfloat16") and (isinstance(other, complex) or other == "complex64")


@pytest.mark.parametrize("dtype", POW_DTYPES)
def test_pow_result_dtype_and_values_match_torch(dtype):
    def make(T, name, dims=True):
        values = [True, False, True] if name == "bool" else [1, 2, 3]
        t = T.tensor(values, dtype=getattr(T, name))
        return t if dims else t[1]

    cases = [(s, lambda T, s=s: make(T, dtype) ** s) for s in POW_SCALARS]
    cases += [(s, lambda T, s=s: T.pow(make(T, dtype), s)) for s in POW_SCALARS]
    cases += [(s, lambda T, s=s: s ** make(T, dtype)) for s in POW_SCALARS]
    cases += [(e, lambda T, e=e: make(T, dtype) ** make(T, e)) for e in POW_DTYPES]
    cases += [(e, lambda T, e=e: make(T, dtype) ** make(T, e, dims=False)) for e in POW_DTYPES]
    cases += [(e, lambda T, e=e: make(T, dtype).float_power(make(T, e))) for e in POW_DTYPES]
    for other, fn in cases:
        if _half_complex(dtype, other):
            continue
        jt, th = _pow_outcome(lambda: fn(jitorch)), _pow_outcome(lambda: fn(torch))
        if isinstance(th, type):
            assert isinstance(jt, type) and issubclass(jt, th), f"pow({dtype}, {other!r}): {jt} vs torch {th}"
            continue
        assert not isinstance(jt, type) and jt[0] == th[0], f"pow({dtype}, {other!r}): dtype {jt} vs torch {th}"
        np.testing.assert_allclose(jt[1], th[1], rtol=1e-6, err_msg=f"pow({dtype}, {other!r})")


def test_int_pow_float_two_is_float_not_truncated():
    i, ti = jitorch.tensor([1, 2, 3]), torch.tensor([1, 2, 3])
    for fn in (lambda x: x ** 2.0, lambda x: x.pow(2.0), lambda x: (x ** 2.0) // 2, lambda x: x.square()):
        j, t = fn(i), fn(ti)
        assert _name(j.dtype) == _name(t.dtype) and j.tolist() == t.tolist()
