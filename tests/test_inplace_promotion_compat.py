"""In-place and view semantics, casting of Python numbers and printing, run against torch 2.13.

Each case runs the same code with both modules (``m`` is ``torch`` or ``jitorch``) and compares results or errors.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

import jitorch
from helpers import assert_same


def _error_of(fn):
    try:
        fn()
    except Exception as e:  # noqa: BLE001
        return e
    return None


def _same_error(fn, *, exact=True):
    """``fn(m)`` raises the same exception type in both modules (and the same message when ``exact``)."""
    th, jt = _error_of(lambda: fn(torch)), _error_of(lambda: fn(jitorch))
    assert th is not None, "torch did not raise: the test's premise is wrong"
    assert type(jt) is type(th), f"torch raised {th!r}; jitorch raised {jt!r}"
    if exact:
        assert str(jt) == str(th)
    return jt


# -- bool subtraction ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("code", [
    lambda m: m.tensor([True]) - m.tensor([False]), lambda m: m.tensor([True]) - True,
    lambda m: True - m.tensor([True]),
    lambda m: m.tensor([True]).sub_(m.tensor(True)), lambda m: m.sub(m.tensor([True]), m.tensor([True]), alpha=2),
    lambda m: m.tensor([True]) - 1, lambda m: m.tensor([1]) - m.tensor([True]),
])
def test_bool_subtraction_errors_word_as_torch(code):
    _same_error(code)


# -- out= under autograd ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("call", [
    lambda m, a, o: m.mul(a, 2, out=o), lambda m, a, o: m.exp(a, out=o), lambda m, a, o: m.cat([a, a], out=o),
    lambda m, a, o: m.sum(a, 0, out=o), lambda m, a, o: m.matmul(a, a, out=o),
])
@pytest.mark.parametrize("who", ["input", "out"])
def test_out_refused_when_it_would_cut_the_graph(call, who):
    def run(m):
        a = m.ones(3, 3, requires_grad=who == "input")
        o = m.empty(0, requires_grad=who == "out")
        call(m, a, o)

    err = _same_error(run, exact=False)
    assert "functions with out=... arguments don't support automatic differentiation" in str(err)
    with jitorch.no_grad():  # no graph to cut: allowed
        a = jitorch.ones(3, 3, requires_grad=True)
        assert_same(jitorch.mul(a, 2, out=jitorch.empty(0)), torch.full((3, 3), 2.0))


# -- writes into expanded tensors ------------------------------------------------------------------------------------
@pytest.mark.parametrize("write", [
    lambda m, x: x.fill_(7), lambda m, x: x.zero_(), lambda m, x: x.__setitem__(0, 1.5),
    lambda m, x: x.__setitem__(0, m.tensor([1.0, 2.0, 3.0])), lambda m, x: x[0].add_(1),
    lambda m, x: x[:, 1].fill_(4),
])
def test_writes_that_share_no_element_reach_an_expanded_tensors_base(write):
    outs = []
    for m in (torch, jitorch):
        base = m.zeros(1, 3)
        write(m, base.expand(2, 3))
        outs.append(base)
    assert_same(outs[1], outs[0])


@pytest.mark.parametrize("write", [
    lambda m, x: x.add_(1), lambda m, x: x.__setitem__((slice(None), 1), 5), lambda m, x: x[:, 0].add_(1),
    lambda m, x: x[:, 1].copy_(m.tensor([1.0, 2.0])), lambda m, x: x.copy_(m.ones(2, 3)),
])
def test_writes_into_overlapping_memory_refused(write):
    err = _same_error(lambda m: write(m, m.zeros(1, 3).expand(2, 3)), exact=False)
    assert "more than one element of the written-to tensor refers to a single memory location" in str(err)


# -- multi-output views ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("pieces", [
    lambda y: y.split(2), lambda y: y.chunk(3), lambda y: y.split([2, 4]), lambda y: y.view(2, 3).unbind(1),
    lambda y: list(y.view(2, 3)),
])
def test_inplace_into_a_multi_output_view_refused(pieces):
    def run(m):
        y = m.ones(6, requires_grad=True) * 1
        pieces(y)[1].add_(1)

    _same_error(run)


def test_tensor_split_views_take_inplace_writes():
    grads = []
    for m in (torch, jitorch):
        x = m.ones(6, requires_grad=True)
        y = x * 1
        y.tensor_split(2)[1].mul_(3)
        (y * m.arange(6.0)).sum().backward()
        grads.append(x.grad)
    assert_same(grads[1], grads[0])


@pytest.mark.parametrize("pieces", [lambda y: y.unsafe_split(2), lambda y: y.unsafe_chunk(3)])
def test_unsafe_split_pieces_take_inplace_writes(pieces):
    y = jitorch.ones(6, requires_grad=True) * 1
    pieces(y)[1].mul_(3)  # torch's unsafe_ variants exist for this
    assert y.tolist() == [1, 1, 3, 3, 1, 1]


def test_multi_output_views_allowed_without_grad():
    for m in (torch, jitorch):
        y = m.ones(6, requires_grad=True) * 1
        a, _ = y.split(3)
        with m.no_grad():
            a.add_(1)
    z = jitorch.ones(6)
    z.chunk(2)[0].add_(1)  # nothing requires grad
    assert z.tolist() == [2, 2, 2, 1, 1, 1]


# -- the version-counter error -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("code", [
    "x=m.ones(3,requires_grad=True); y=x.sigmoid(); y.add_(1); y.sum().backward()",
    "x=m.ones(3,requires_grad=True,dtype=m.float64); y=x*1; z=y*y; y.add_(1); z.sum().backward()",
    "x=m.ones(3,requires_grad=True); w=m.ones(3); z=x*w; w.add_(1); z.sum().backward()",
    "x=m.ones(3,3,requires_grad=True); y=x+0; z=y@y; y[0,0]=2; z.sum().backward()",
    "x=m.ones(2,3,requires_grad=True); v,i=x.max(1); z=v*v; v.add_(1); z.sum().backward()",
])
def test_saved_tensor_modified_message_as_torch(code):
    _same_error(lambda m: exec(code, {"m": m}))


# -- rounded division gradients ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["floor", "trunc"])
def test_rounded_division_gives_zero_gradients_to_both_inputs(mode):
    grads = []
    for m in (torch, jitorch):
        x = m.tensor([[1.5, -2.5]], requires_grad=True)
        o = m.tensor([[1.0], [0.7], [3.0]], requires_grad=True)
        m.div(x, o, rounding_mode=mode).sum().backward()
        grads.append((x.grad, o.grad))
    assert_same(grads[1][0], grads[0][0])
    assert_same(grads[1][1], grads[0][1])


# -- Python numbers into integer dtypes ------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", ["int8", "uint8", "int16", "int32", "int64"])
@pytest.mark.parametrize("value", [300, -1, -255, -256, 200, 2**40, 2**63, 127.9, -1.5, 255.9, float("nan"),
                                   float("inf"), 1e300, 2.0**31, -129])
def test_tensor_of_python_numbers_checks_the_range(dtype, value):
    def run(m):
        return m.tensor([value], dtype=getattr(m, dtype)), m.tensor(value, dtype=getattr(m, dtype))

    th = _error_of(lambda: run(torch))
    if th is not None:
        assert _same_error(run, exact=False) is not None
        return
    for a, b in zip(run(jitorch), run(torch)):
        assert_same(a, b)


def test_tensor_of_numpy_data_still_wraps():
    assert_same(jitorch.tensor(np.array([300]), dtype=jitorch.int8), torch.tensor(np.array([300]), dtype=torch.int8))
    assert_same(jitorch.tensor([2**63], dtype=jitorch.float32), torch.tensor([2**63], dtype=torch.float32))


# -- printing --------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("options", [{}, {"linewidth": 40}, {"precision": 2, "threshold": 5}])
@pytest.mark.parametrize("dtype", ["float64", "float16", "int32", "complex128"])
def test_dtype_suffix_wraps_where_torchs_does(options, dtype):
    try:
        for n in range(1, 16):
            for m in (torch, jitorch):
                m.set_printoptions(**options)
            values = (np.arange(n) - n // 2) * 1.37
            mine = repr(jitorch.tensor(values, dtype=getattr(jitorch, dtype)))
            theirs = repr(torch.tensor(values, dtype=getattr(torch, dtype)))
            assert mine == theirs.replace("torch.", "jitorch."), n
    finally:
        for m in (torch, jitorch):
            m.set_printoptions(profile="default")


# -- finfo / iinfo -----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("call", [lambda m: m.finfo(m.int32), lambda m: m.finfo(m.bool), lambda m: m.iinfo(m.float32),
                                  lambda m: m.iinfo(m.bool), lambda m: m.iinfo(m.complex64)])
def test_info_of_the_wrong_kind_refused_as_torch(call):
    _same_error(call)


def test_finfo_of_complex_describes_its_parts():
    for name in ("complex64", "complex128"):
        assert repr(jitorch.finfo(getattr(jitorch, name))) == repr(torch.finfo(getattr(torch, name)))


def test_copy_slices_node_reports_torchs_name():
    names = []
    for m in (torch, jitorch):
        y = m.ones(3, requires_grad=True) * 2
        y[0] = 1
        names.append((y.grad_fn.name(), type(y.grad_fn).__name__, repr(y)))
    assert names[1] == names[0]


# -- binary float ops over mixed dtypes ----------------------------------------------------------------------------
@pytest.mark.parametrize("fn", [lambda m, a, b: m.xlogy(a, b), lambda m, a, b: m.special.xlog1py(a, b),
                                lambda m, a, b: m.ldexp(a, b)])
@pytest.mark.parametrize("dtypes", [("float32", "float16"), ("float16", "int64"), ("int64", "float16"),
                                    ("float32", "float64"), ("float32", "bfloat16"), ("int64", "int32")])
def test_mixed_dtype_float_ops_promote_before_computing(fn, dtypes):
    def run(m):
        a = m.tensor([2.3, 1.1, 5.7, 0.0]).to(getattr(m, dtypes[0]))
        b = m.tensor([2.1, 1.3, 4.9, 3.0]).to(getattr(m, dtypes[1]))
        return fn(m, a, b)

    th = run(torch)
    atol = 1e-2 if th.dtype in (torch.float16, torch.bfloat16) else 1e-5
    assert_same(run(jitorch), th, atol=atol, rtol=1e-5)


# -- in-place writes and history -------------------------------------------------------------------------------------
@pytest.mark.parametrize("write", [
    lambda y: y.mul_(3), lambda y: y.mul_(3).add_(1), lambda y: y[:2].mul_(3), lambda y: y.t()[0].exp_(),
])
def test_retain_grad_follows_inplace_writes(write):
    grads = []
    for m in (torch, jitorch):
        x = m.ones(2, 2, requires_grad=True)
        y = x * 2
        y.retain_grad()
        kept = y * 5  # uses the value before the write
        write(y)
        (kept.sum() + (y * m.arange(4.0).view(2, 2)).sum()).backward()
        grads.append((y.grad, x.grad))
    assert_same(grads[1][0], grads[0][0], what="y.grad")
    assert_same(grads[1][1], grads[0][1], rtol=1e-6, what="x.grad")


def test_inplace_into_an_as_strided_view_backpropagates():
    grads = []
    for m in (torch, jitorch):
        x = m.arange(6.0, requires_grad=True)
        y = x * 1
        y.as_strided((2, 2), (3, 1), 1).mul_(3)
        y.sum().backward()  # an expanded gradient reaches the CopySlices node
        grads.append(x.grad)
    assert_same(grads[1], grads[0])


def test_writes_into_views_of_a_dtype_view():
    outs = []
    for m in (torch, jitorch):
        v = m.zeros(4).view(m.int32)
        v[1:3][0] = 7
        v.view(2, 2)[1, 1] = 3
        outs.append(v)
    assert_same(outs[1], outs[0])


# -- alpha and value scalars -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("call", [
    lambda m: m.add(m.tensor([1]), m.tensor([2]), alpha=0.5), lambda m: m.sub(m.tensor([1]), m.tensor([2]), alpha=0.5),
    lambda m: m.tensor([1]).add_(m.tensor([2]), alpha=0.5), lambda m: m.tensor([1]).sub_(1, alpha=2.0),
    lambda m: m.add(m.tensor([1.0]), m.tensor([2.0]), alpha=1j),
    lambda m: m.add(m.tensor([1]), m.tensor([True]), alpha=True),
])
def test_alpha_of_the_wrong_kind_refused(call):
    _same_error(call)


@pytest.mark.parametrize("call", [
    lambda m: m.add(m.tensor([1]), m.tensor([2.0]), alpha=0.5),
    lambda m: m.sub(m.tensor([1.0]), m.tensor([2]), alpha=0.5),
    lambda m: m.add(m.tensor([True]), m.tensor([True]), alpha=True), lambda m: m.add(m.tensor([1]), 2.5, alpha=2),
    lambda m: m.addcmul(m.tensor([1]), m.tensor([2]), m.tensor([3]), value=-1.5),
    lambda m: m.addcmul(m.tensor([1]), m.tensor([2]), m.tensor([3]), value=0.5),
])
def test_alpha_and_value_scalars_as_torch(call):
    assert_same(call(jitorch), call(torch))


# The narrower operand is promoted before alpha scales it: rounding alpha * other to bfloat16 (or float32 in a
# float64 sum) first was off by up to its ulp (Muon adds a bfloat16 update to float32 weights this way).
@pytest.mark.parametrize("call", [
    lambda m, a, b: m.add(a, b, alpha=-0.0123), lambda m, a, b: m.sub(a, b, alpha=0.0123),
    lambda m, a, b: a.clone().add_(b, alpha=0.37), lambda m, a, b: a.clone().sub_(b, alpha=-0.37),
])
@pytest.mark.parametrize("dtypes", [("float32", "bfloat16"), ("float32", "float16"), ("float64", "float32")])
def test_alpha_scales_the_narrower_operand_in_the_sums_dtype(call, dtypes):
    vals = np.array([1.0, 0.25, -3.0, 7.5]), np.array([0.7, 0.3, 0.1111, -0.9])
    outs = [call(m, m.tensor(vals[0]).to(getattr(m, dtypes[0])), m.tensor(vals[1]).to(getattr(m, dtypes[1])))
            for m in (jitorch, torch)]
    # within one ulp of the sum (torch fuses the multiply-add); the bug was off by the scaled operand's ulp
    assert_same(*outs, rtol=1.2e-7 if dtypes[0] == "float32" else 2.3e-16)


@pytest.mark.parametrize("call", [
    lambda m: m.clamp(m.tensor([1, 5], dtype=m.int8), max=200),
    lambda m: m.clamp(m.tensor([1, 5], dtype=m.int8), -1000),
    lambda m: m.tensor([1, 5], dtype=m.int8).clamp_(0, 300), lambda m: m.tensor([1, 5], dtype=m.int8).clamp_min(-200),
    lambda m: m.clamp(m.tensor([1.0], dtype=m.float16), -1e6, 1e6),
])
def test_clamp_bounds_that_overflow_the_dtype_refused(call):
    _same_error(call)


@pytest.mark.parametrize("call", [
    lambda m: m.clamp(m.tensor([1, 5], dtype=m.uint8), -1, 200), lambda m: m.clamp(m.tensor([1, 5], dtype=m.int8), 0.5),
    lambda m: m.clamp(m.tensor([1.0, 5.0], dtype=m.bfloat16), -1e6, 1e6), lambda m: m.clamp(m.tensor([True]), 0, 1),
])
def test_clamp_bounds_that_fit_or_promote(call):
    assert_same(call(jitorch), call(torch))


@pytest.mark.parametrize("name", ["var_mean", "std_mean"])
def test_var_mean_returns_a_plain_tuple(name):
    x = np.array([[3.0, 1.0, 2.0], [0.5, 4.0, -1.0]], np.float32)
    mine, theirs = getattr(jitorch, name)(jitorch.tensor(x), 1), getattr(torch, name)(torch.tensor(x), 1)
    assert type(mine) is tuple and repr(mine) == repr(theirs)


@pytest.mark.parametrize("call", [lambda x: x.t_(), lambda x: x.unsqueeze_(0), lambda x: x.transpose_(0, 1),
                                  lambda x: x.swapdims_(0, 1)])
def test_inplace_geometry_changes_of_a_leaf_that_requires_grad_refused(call):
    _same_error(lambda m: call(m.ones(2, 3, requires_grad=True)))
    x = jitorch.ones(2, 3, requires_grad=True)
    with jitorch.no_grad():
        call(x)
    assert x.is_leaf and x.grad_fn is None


@pytest.mark.parametrize("call", [
    lambda m: m.where(m.tensor([True]), m.tensor([1], dtype=m.int8), 1000),
    lambda m: m.where(m.tensor([True]), 1000, m.tensor([1], dtype=m.uint8)),
    lambda m: m.tensor([2], dtype=m.uint8).pow(1000), lambda m: m.tensor([2.0], dtype=m.float16).pow(1e6),
])
def test_python_operands_that_overflow_the_tensors_dtype_refused(call):
    _same_error(call)


@pytest.mark.parametrize("call", [
    lambda m: m.where(m.tensor([True, False]), m.tensor([1, 2], dtype=m.int8), 2.5),
    lambda m: m.where(m.tensor([True, False]), m.tensor([1.0, 2.0], dtype=m.float16), 1e6),
    lambda m: m.tensor([2], dtype=m.int8) ** 127, lambda m: m.tensor([2], dtype=m.int8).pow(2.5),
])
def test_python_operands_that_fit_or_promote(call):
    assert_same(call(jitorch), call(torch))


def test_is_view_as_torch():
    for m in (torch, jitorch):
        x = m.arange(6.0)
        assert [x._is_view(), x[1:]._is_view(), x.view(2, 3)._is_view(), x.detach()._is_view()] == [
            False, True, True, False]


# -- operands no operator takes -------------------------------------------------------------------------------------
@pytest.mark.parametrize("code", [
    lambda m: m.ones(2) + None, lambda m: None + m.ones(2), lambda m: m.ones(2) - None, lambda m: None - m.ones(2),
    lambda m: m.ones(2) * None, lambda m: None / m.ones(2), lambda m: m.ones(2) / None, lambda m: m.ones(2) // None,
    lambda m: m.ones(2) % None, lambda m: m.ones(2) ** None, lambda m: None ** m.ones(2), lambda m: m.ones(2) + [1, 2],
    lambda m: m.ones(2, dtype=m.bool) - None,
])
def test_operands_no_operator_takes_raise_pythons_type_error(code):
    """The operator gives NotImplemented (as torch's), so Python's TypeError names both operand types."""
    _same_error(code)
