"""GELU (exact and tanh) and SiLU rows, their backward rows, and the one-pass native eager kernels of pointwise rows.

The rows' eager CPU float32 kernels are their own fusion expressions compiled once (jitorch/ops/native_eager.py);
every other input takes the NumPy formula. Both must agree with torch, forward, backward and double backward.
"""
from __future__ import annotations

import numpy as np
import pytest
import scipy.special
import torch

import jitorch
import jitorch.nn.functional as JF
import torch.nn.functional as TF
from jitorch.ops import native_eager
from jitorch.ops.table import OPS, validate_row

from helpers import check_double_backward, check_error, check_op, gradcheck_op, gradgradcheck_op, make_array

ACTIVATIONS = {
    "gelu": (JF.gelu, TF.gelu),
    "gelu_tanh": (lambda x: JF.gelu(x, approximate="tanh"), lambda x: TF.gelu(x, approximate="tanh")),
    "silu": (JF.silu, TF.silu),
}
# Small sizes take the NumPy formula; 96x80 (7680 elements) the native kernel when contiguous float32.
SHAPES = [(), (0,), (7,), (3, 5), (96, 80)]


@pytest.mark.parametrize("name", sorted(ACTIVATIONS))
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("layout", ["contiguous", "transposed"])
def test_activation_matches_torch_forward_and_backward(name, shape, dtype, layout):
    jf, tf = ACTIVATIONS[name]
    x = make_array(shape, dtype, np.random.default_rng(len(shape)), -6.0, 6.0)
    tol = 2e-6 if dtype == "float32" else 1e-12
    check_op(jf, tf, [x], layout=layout, atol=tol, rtol=tol, grad_atol=4 * tol)


@pytest.mark.parametrize("name", sorted(ACTIVATIONS))
def test_activation_double_backward_matches_torch(name):
    jf, tf = ACTIVATIONS[name]
    rng = np.random.default_rng(1)
    x = (rng.standard_normal(9000) * 3).astype(np.float32)  # large enough for the native backward kernel
    check_double_backward(name, jf, tf, x, rng)


@pytest.mark.parametrize("name", sorted(ACTIVATIONS))
def test_activation_gradcheck_and_gradgradcheck_in_float64(name):
    jf, _ = ACTIVATIONS[name]
    x = make_array((4, 3), "float64", np.random.default_rng(2), -4.0, 4.0)
    gradcheck_op(jf, [x])
    gradgradcheck_op(jf, [x])


@pytest.mark.parametrize("name", sorted(ACTIVATIONS))
def test_activation_of_half_precision_matches_torch(name):
    jf, tf = ACTIVATIONS[name]
    x = make_array((64, 80), "float16", np.random.default_rng(3), -5.0, 5.0)
    check_op(jf, tf, [x], atol=4e-3, rtol=4e-3)


@pytest.mark.parametrize("name", sorted(ACTIVATIONS))
def test_activation_of_integer_tensor_is_refused_as_torch_refuses_it(name):
    jf, tf = ACTIVATIONS[name]
    err = check_error(jf, tf, [np.arange(6, dtype=np.int64)], match=("expected a floating-point tensor", "int64"))
    assert name.split("_")[0] in str(err)


REFERENCE = {  # float64 references, from SciPy's erf
    "gelu": lambda x: x * 0.5 * scipy.special.erfc(-x / np.sqrt(2)),
    "gelu_tanh": lambda x: 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3))),
    "silu": lambda x: x / (1 + np.exp(-x)),
}


@pytest.mark.parametrize("name", sorted(ACTIVATIONS))
def test_activation_special_values_match_torch_on_both_paths(name):
    jf, tf = ACTIVATIONS[name]
    special = np.float32([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-30, -1e-30, 50.0, -50.0, 1e30, -1e30])
    ordinary = np.float32([3.0, -3.0, -5.5, 0.25, -0.75])
    for size in (16, 8192):  # the NumPy formula, then the native kernel
        x = np.resize(np.concatenate([special, ordinary]), size)
        xj = jitorch.tensor(x, requires_grad=True)
        yj = jf(xj)
        yj.backward(jitorch.ones(size))
        got, grad = yj.detach().numpy()[:16], xj.grad.numpy()[:16]
        xt = torch.tensor(x[:16], requires_grad=True)
        yt = tf(xt)
        yt.backward(torch.ones(16))
        want, want_grad = yt.detach().numpy(), xt.grad.numpy()
        if name == "gelu":  # torch's vectorized kernel gives nan for +inf (its scalar one, and the limit: inf)
            assert got[2] == np.inf and np.isnan(want[2])
            want[2] = np.inf
        np.testing.assert_allclose(got[:11], want[:11], rtol=3e-7, atol=0, err_msg=f"{name} at {special}")
        signed = ~np.isnan(want[:11])
        np.testing.assert_array_equal(np.signbit(got[:11])[signed], np.signbit(want[:11])[signed])
        np.testing.assert_allclose(grad[:11], want_grad[:11], rtol=3e-7, atol=0, err_msg=f"{name}'s grad at {special}")
        # Ordinary values against float64: 1 + erf and 1 + tanh cancel for negative x, which costs about |x| * 2^-24
        # absolute in float32 (torch's exact GELU is 5e-7 off at -3, 1.3e-4 relative).
        np.testing.assert_allclose(got[11:], REFERENCE[name](ordinary.astype(np.float64)), rtol=3e-6, atol=2e-7)


def test_tanh_gelu_gradient_is_within_float32_rounding_of_float64_on_both_paths():
    # The gradient row computes 1 - tanh(u)^2 as 4 e r^2 (see activation_ops): no cancellation where tanh rounds to
    # 1. torch's kernel is about 1e-6 off at |x| near 1.5-3 on this grid; the row must stay within 3e-7.
    x = np.linspace(-12, 12, 20001).astype(np.float32)
    xd = x.astype(np.float64)
    t = np.tanh(np.sqrt(2 / np.pi) * (xd + 0.044715 * xd ** 3))
    want = 0.5 * (1 + t) + 0.5 * xd * (1 - t * t) * np.sqrt(2 / np.pi) * (1 + 3 * 0.044715 * xd * xd)
    for step in (1, 10):  # 20001 elements: the native kernel; 2001: the NumPy formula
        xj = jitorch.tensor(x[::step], requires_grad=True)
        JF.gelu(xj, approximate="tanh").backward(jitorch.ones(xj.shape[0]))
        np.testing.assert_allclose(xj.grad.numpy(), want[::step], rtol=0, atol=3e-7)


@pytest.mark.parametrize("row", ["gelu", "gelu_backward", "gelu_tanh", "gelu_tanh_backward", "silu", "silu_backward"])
def test_activation_rows_have_every_column_and_names_torch_uses(row):
    op = validate_row(OPS[row])
    assert op.pointwise and op.saves == "inputs"
    y = ACTIVATIONS[row.replace("_backward", "")][0](jitorch.ones(3, requires_grad=True))
    assert type(y.grad_fn).__name__ == ("SiluBackward0" if "silu" in row else "GeluBackward0")


def test_inplace_silu_writes_into_its_input_and_keeps_the_gradient():
    x = make_array((50, 100), "float32", np.random.default_rng(5))
    check_op(lambda a: JF.silu(a * 1, inplace=True), lambda a: TF.silu(a * 1, inplace=True), [x], atol=2e-6)
    t = jitorch.tensor(x)
    assert JF.silu(t, inplace=True) is t
    np.testing.assert_allclose(t.numpy(), TF.silu(torch.tensor(x)).numpy(), rtol=2e-6, atol=1e-7)


# -- the native eager path of pointwise rows ----------------------------------------------------------------------
NATIVE_ROWS = ["erf", "sigmoid", "tanh_backward", "sigmoid_backward", "threshold_backward", "gelu", "gelu_backward",
               "gelu_tanh", "gelu_tanh_backward", "silu", "silu_backward"]


def _operands(row, size, rng):
    nargs = 1 if not row.endswith("backward") else 2
    arrays = [(rng.standard_normal(size) * 4).astype(np.float32) for _ in range(nargs)]
    arrays[0][:8] = [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-30, 60.0, -60.0]
    return arrays


@pytest.mark.parametrize("row", NATIVE_ROWS)
def test_native_eager_kernel_equals_the_rows_numpy_formula(row):
    # The kernel runs exactly when the inputs are contiguous float32 of at least 4096 elements; a sliced copy of the
    # same values takes the NumPy formula, and the two answers agree to float32 rounding (nan and inf included).
    rng = np.random.default_rng(6)
    arrays = _operands(row, 10007, rng)
    op = OPS[row]
    native = native_eager.pointwise(op, *arrays)
    assert native is not None and (row, len(arrays)) in native_eager._kernels  # one kernel for every size
    slow = [np.repeat(a, 2)[::2] for a in arrays]
    assert native_eager.pointwise(op, *slow) is None
    formula = op.kernel(np, *slow)
    np.testing.assert_allclose(native, formula, rtol=1e-5, atol=1e-6, equal_nan=True, err_msg=row)
    assert native.dtype == np.float32 and native.shape == arrays[0].shape
    small = native_eager.pointwise(op, *(a[:100] for a in arrays))
    if native_eager._MIN_SIZES.get(row, native_eager.MIN_SIZE) <= 100:  # native at every size: the same kernel
        assert small is not None and np.array_equal(small.view(np.int32), native[:100].view(np.int32))
    else:
        assert small is None
    assert len(arrays) == 1 or native_eager.pointwise(op, arrays[0][:100], arrays[1]) is None  # shapes that differ


@pytest.mark.parametrize("row", ["sigmoid", "gelu_backward"])
def test_native_eager_kernel_gives_the_same_answer_on_one_and_two_threads(row):
    arrays = _operands(row, 300_001, np.random.default_rng(7))
    old = jitorch.get_num_threads()
    try:
        jitorch.set_num_threads(1)
        one = native_eager.pointwise(OPS[row], *arrays)
        jitorch.set_num_threads(2)
        two = native_eager.pointwise(OPS[row], *arrays)
    finally:
        jitorch.set_num_threads(old)
    np.testing.assert_array_equal(one, two)


def test_large_sigmoid_and_its_backward_match_torch_through_the_native_kernels():
    x = make_array((128, 100), "float32", np.random.default_rng(8), -20.0, 20.0)
    # Gradients near saturation are 1 - y of outputs near 1, so one ulp of y is a large relative change there.
    check_op(jitorch.sigmoid, torch.sigmoid, [x], atol=2e-7, rtol=4e-7, grad_atol=5e-7, grad_rtol=1e-4)
    check_op(jitorch.tanh, torch.tanh, [x], atol=2e-7, rtol=4e-7, grad_atol=5e-7, grad_rtol=1e-4)
    check_op(JF.relu, TF.relu, [x], atol=0, rtol=0)


# -- fusion and compiled training ---------------------------------------------------------------------------------
def test_activation_rows_fuse_with_their_neighbours_into_one_kernel_that_equals_eager():
    from jitorch._compile.backend import CompiledGraph
    from jitorch._compile.trace import trace

    def fn(x):
        return JF.gelu(x * 2 + 1) * JF.silu(x) + JF.gelu(x, approximate="tanh")

    for shape in [(0,), (1,), (7,), (33, 17), (96, 80)]:
        x = jitorch.randn(*shape)
        graph = CompiledGraph(trace(fn, (x,), {}).gm)
        got, want = graph((x,)), fn(x)
        assert graph.kernel_ops == [["mul", "add", "gelu", "silu", "mul", "gelu_tanh", "add"]]
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_compiled_gelu_and_silu_mlp_trains_like_torch_with_fused_backward_rows(approximate):
    rng = np.random.default_rng(9)
    w1, w2 = (rng.standard_normal(s).astype(np.float32) * 0.3 for s in ((16, 32), (32, 8)))
    x, g = rng.standard_normal((64, 16)).astype(np.float32), rng.standard_normal((64, 8)).astype(np.float32)

    def run(lib, compiled):
        a, b = lib.tensor(w1, requires_grad=True), lib.tensor(w2, requires_grad=True)

        def f(inp):
            return lib.nn.functional.silu(lib.nn.functional.gelu(inp @ a, approximate=approximate) @ b)
        fn = jitorch.compile(f) if compiled else f
        out = fn(lib.tensor(x))
        out.backward(lib.tensor(g))
        return out.detach().numpy(), a.grad.numpy(), b.grad.numpy()

    want = run(torch, False)
    for compiled in (False, True):
        for got, ref in zip(run(jitorch, compiled), want):
            np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-5)
    a = jitorch.randn(16, 32, requires_grad=True)
    report = jitorch.compiler.explain(lambda inp: JF.gelu(inp @ a, approximate=approximate))(jitorch.randn(4, 16))
    row = "gelu" if approximate == "none" else "gelu_tanh"
    assert report.kernels == [[row]] and [f"{row}_backward"] in report.backward_kernels


def test_tanh_gelu_second_derivative_is_zero_not_nan_for_huge_inputs():
    x = jitorch.tensor([1e8, 2e8, 1e9, -1e9, 1e30], requires_grad=True)
    (g,) = jitorch.autograd.grad(JF.gelu(x, approximate="tanh").sum(), x, create_graph=True)
    assert type(g.grad_fn).__name__ == "GeluBackwardBackward0"
    assert np.array_equal(jitorch.autograd.grad(g.sum(), x)[0].numpy(), np.zeros(5, np.float32))


@pytest.mark.parametrize("row", ["threshold_backward", "erf"])
def test_native_eager_kernel_is_one_kernel_for_every_size(row):
    # The machine code takes the size as an argument: sizes 1 to 10007 run one kernel, each equal to the formula.
    rng = np.random.default_rng(8)
    for size in (1, 3, 1000, 10007):
        arrays = _operands(row, size, rng) if size >= 8 else [
            (rng.standard_normal(size) * 4).astype(np.float32) for _ in range(1 + row.endswith("backward"))]
        native = native_eager.pointwise(OPS[row], *arrays, min_size=1)
        formula = OPS[row].kernel(np, *[np.repeat(a, 2)[::2] for a in arrays])  # strided: the NumPy formula
        np.testing.assert_allclose(native, formula, rtol=1e-5, atol=1e-6, equal_nan=True, err_msg=f"{row} {size}")
    assert [key for key in native_eager._kernels if key[0] == row] == [(row, len(arrays))]


@pytest.mark.parametrize("size", [1, 7, 1000])
def test_first_order_backward_of_small_chains_matches_torch_and_double_backward_still_records(size):
    # A first-order backward computes the rows' gradients on the arrays directly (nothing records them); the same
    # chain with create_graph must still give a differentiable gradient, as torch's.
    rng = np.random.default_rng(9)
    xs, ys = rng.uniform(-1, 1, size).astype(np.float32), rng.uniform(-1, 1, size).astype(np.float32)
    gs = rng.standard_normal(size).astype(np.float32)

    def chain(lib, x, y):
        h = (x * 1.5 + 1).tanh() * y
        return lib.relu(lib.sigmoid(h - 0.5).exp() / 2 - 0.9) * x

    for create_graph in (False, True):
        grads = []
        for lib in (torch, jitorch):
            x, y = lib.tensor(xs, requires_grad=True), lib.tensor(ys, requires_grad=True)
            gx, gy = lib.autograd.grad(chain(lib, x, y), (x, y), lib.tensor(gs), create_graph=create_graph)
            assert gx.requires_grad == create_graph
            grads.append([gx.detach().numpy(), gy.detach().numpy()])
            if create_graph:
                (ggx,) = lib.autograd.grad((gx * gy).sum(), x)
                grads[-1].append(ggx.numpy())
        for mine, theirs in zip(grads[1], grads[0]):
            np.testing.assert_allclose(mine, theirs, rtol=1e-5, atol=1e-6)
