"""Fusion: pointwise chains become one LLVM kernel and equal eager (dtypes, broadcasts, strides, odd sizes)."""
import numpy as np
import pytest

import jitorch
from jitorch._compile.trace import trace
from jitorch._compile.backend import CompiledGraph


def _compiled(fn, *args):
    """(compiled result, eager result, fused op lists) for one call."""
    graph = CompiledGraph(trace(fn, args, {}).gm)
    return graph(args), fn(*args), graph.kernel_ops


def chain(x, y):
    return jitorch.maximum((x * y + 1.5) / (y.abs() + 1) - x, x.neg()).relu() * 2


@pytest.mark.parametrize("dtype", [jitorch.float32, jitorch.float64])
@pytest.mark.parametrize("shape", [(0,), (1,), (7,), (33, 17), (3, 1, 5)])
def test_chain_is_one_kernel_and_equals_eager(dtype, shape):
    x, y = jitorch.randn(*shape, dtype=dtype), jitorch.randn(*shape, dtype=dtype)
    got, want, kernels = _compiled(chain, x, y)
    assert len(kernels) == 1 and len(kernels[0]) == 10
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got.numpy(), want.numpy())


def test_broadcast_and_non_contiguous_inputs():
    base = jitorch.randn(20, 30)
    x = base.t()[::2]  # transposed and strided
    y = jitorch.randn(15)[:, None].expand(15, 20)  # stride 0 along one axis
    z = jitorch.randn(1, 20)  # broadcast
    got, want, kernels = _compiled(lambda a, b, c: (a * b + c).tanh() - c, x, y, z)
    assert len(kernels) == 1
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6, atol=1e-6)


def gelu_tanh(x):
    return 0.5 * x * (1 + jitorch.tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)))


@pytest.mark.parametrize("dtype", [jitorch.float32, jitorch.float64])
def test_gelu_and_transcendental_mix_within_a_few_ulp(dtype):
    x = jitorch.randn(4097, dtype=dtype) * 4
    for fn in (gelu_tanh, lambda v: jitorch.sigmoid(v) * jitorch.exp(-v * v) + jitorch.tanh(v / 3)):
        got, want, kernels = _compiled(fn, x)
        assert len(kernels) == 1
        eps = np.finfo(want.numpy().dtype).eps
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=8 * eps, atol=8 * eps)


def test_matmul_runs_eagerly_with_a_fused_epilogue():
    a, b, bias = jitorch.randn(8, 16), jitorch.randn(16, 4), jitorch.randn(4)
    got, want, kernels = _compiled(lambda a, b, bias: gelu_tanh(a @ b + bias), a, b, bias)
    assert len(kernels) == 1 and kernels[0][0] == "add"
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6, atol=1e-6)


def test_reduction_with_prologue_and_broadcast_epilogue_is_one_kernel():
    x = jitorch.randn(6, 5)
    got, want, kernels = _compiled(lambda v: (v.exp() - v.exp().sum(1, keepdim=True)).relu() * 2, x)
    assert kernels == [["exp", "exp", "sum", "sub", "relu", "mul"]]
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6)


def test_squeezed_row_value_is_not_broadcast_as_a_row():
    x = jitorch.randn(5, 5)  # x - x.sum(1) broadcasts the row sums along dim 1, not dim 0
    got, want, kernels = _compiled(lambda v: (v * 2 - (v * 2).sum(1)).exp(), x)
    assert len(kernels) == 2
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5)


def test_unfusable_rows_run_eagerly_and_integers_fuse():
    x = jitorch.arange(12).reshape(3, 4)
    got, want, kernels = _compiled(lambda v: ((v * 3 - 1).abs() + v).log1p(), x)
    assert kernels == [["mul", "sub", "abs", "add"]]  # log1p has no IR primitive yet
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6)


def test_inplace_node_is_a_fusion_barrier():
    def fn(v):
        y = v * 2
        y.add_(1)
        return y * 3 + v
    x = jitorch.randn(5)
    got, want, _ = _compiled(fn, x.clone())
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6)
