"""Fused reductions: prologues, epilogues, softmax / log_softmax / layer_norm rows and the same patterns written
out of primitives run as ONE kernel with a hand-written kernel's passes, equal to eager and to the IR interpreter."""
import numpy as np
import pytest
import torch

import jitorch
import jitorch.nn.functional as F
from jitorch._compile.backend import CompiledGraph
from jitorch._compile.trace import trace
from jitorch.codegen import interp
from jitorch.runtime.threads import get_num_threads, set_num_threads


def _graph(fn, *args):
    return CompiledGraph(trace(fn, args, {}).gm)


def _run(fn, *args):
    """(compiled result, eager result, fused op lists, the kernels' pass counts)."""
    graph = _graph(fn, *args)
    got = graph(args)
    phases = [k.build(tuple(st for _, st in k._slot_views([a._data for a in args_for(u, args, graph)]))).phases
              for k, u in graph.steps if k is not None]
    return got, fn(*args), graph.kernel_ops, phases


def args_for(unit, args, graph):
    """The input arrays of a group whose inputs are all placeholders (the cases below)."""
    index = {n: i for i, n in enumerate(graph.placeholders)}
    consts = graph.constants
    return [args[index[p]] if p in index else consts[p] for p in unit.inputs]


def _tensor(rng, shape, dtype=np.float32):
    return jitorch.from_numpy((rng.standard_normal(shape) * 3).astype(dtype))


SHAPES = [(1, 1), (7, 33), (4, 1024), (2, 3, 5), (3, 1)]


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_softmax_rows_are_one_three_pass_kernel(shape, dtype):
    rng = np.random.default_rng(0)
    x = _tensor(rng, shape, dtype)
    for fn in (lambda v: v.softmax(-1), lambda v: F.log_softmax(v, -1)):
        got, want, kernels, phases = _run(fn, x)
        assert len(kernels) == 1 and phases == [3]
        eps = np.finfo(dtype).eps
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=16 * eps, atol=16 * eps)


@pytest.mark.parametrize("shape", SHAPES)
def test_softmax_matches_torch(shape):
    rng = np.random.default_rng(1)
    x = _tensor(rng, shape)
    got = jitorch.compile(lambda v: v.softmax(-1))(x)
    np.testing.assert_allclose(got.numpy(), torch.softmax(torch.from_numpy(x.numpy()), -1).numpy(),
                               rtol=2e-6, atol=1e-7)


@pytest.mark.parametrize("affine", [True, False])
@pytest.mark.parametrize("shape,k", [((7, 33), 1), ((4, 1024), 1), ((2, 3, 5), 2), ((5, 1), 1)])
def test_layer_norm_is_one_three_pass_kernel_with_mean_and_rstd(shape, k, affine):
    rng = np.random.default_rng(2)
    x = _tensor(rng, shape)
    w, b = (_tensor(rng, shape[-k:]), _tensor(rng, shape[-k:])) if affine else (None, None)
    got, want, kernels, phases = _run(lambda v: F.layer_norm(v, shape[-k:], w, b, 1e-5), x)
    assert kernels == [["native_layer_norm"]] and phases == [3]
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5, atol=1e-5)
    tw = None if w is None else torch.from_numpy(w.numpy())
    tb = None if b is None else torch.from_numpy(b.numpy())
    ref = torch.nn.functional.layer_norm(torch.from_numpy(x.numpy()), shape[-k:], tw, tb, 1e-5)
    np.testing.assert_allclose(got.numpy(), ref.numpy(), rtol=1e-4, atol=1e-4)


def test_native_layer_norm_mean_and_rstd_outputs():
    rng = np.random.default_rng(3)
    x, w, b = _tensor(rng, (6, 9)), _tensor(rng, (9,)), _tensor(rng, (9,))
    from jitorch.ops.nn_fused import LAYER_NORM
    from jitorch._dispatch import apply

    def fn(v):
        out, mean, rstd = apply(LAYER_NORM, v, w, b, k=1, eps=1e-5)
        return out * 2, mean, rstd
    graph = _graph(fn, x)
    got, want = graph((x,)), fn(x)
    assert len(graph.kernel_ops) == 1
    for g, e in zip(got, want):
        assert g.shape == e.shape
        np.testing.assert_allclose(g.numpy(), e.numpy(), rtol=1e-5, atol=1e-6)


def _prim_softmax(v):
    e = (v - v.amax(-1, keepdim=True)).exp()
    return e / e.sum(-1, keepdim=True)


def _prim_layer_norm(v):
    centered = v - v.mean(-1, keepdim=True)
    return centered / (v.var(-1, keepdim=True, unbiased=False) + 1e-5).sqrt()


@pytest.mark.parametrize("fn", [_prim_softmax, _prim_layer_norm], ids=["softmax", "layer_norm"])
@pytest.mark.parametrize("shape", [(7, 33), (64, 256), (3, 1)])
def test_patterns_written_from_primitives_are_one_kernel(fn, shape):
    x = _tensor(np.random.default_rng(4), shape)
    got, want, kernels, phases = _run(fn, x)
    assert len(kernels) == 1 and phases[0] <= 3
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5, atol=1e-6)


def test_prologue_reduction_epilogue_without_keepdim():
    rng = np.random.default_rng(5)
    x, y = _tensor(rng, (9, 17)), _tensor(rng, (17,))
    got, want, kernels, phases = _run(lambda a, b: ((a * b).sum(-1) / 17 + 1).abs().sqrt(), x, y)
    assert kernels == [["mul", "sum", "div", "add", "abs", "sqrt"]] and phases == [1]
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5)


@pytest.mark.parametrize("name", ["sum", "prod", "amax", "amin"])
def test_integer_reductions_are_exact(name):
    x = jitorch.from_numpy(np.random.default_rng(6).integers(-3, 4, (13, 11)).astype(np.int64))
    got, want, kernels, _ = _run(lambda v: getattr(v * 2 + 1, name)(-1), x)
    assert len(kernels) == 1
    np.testing.assert_array_equal(got.numpy(), want.numpy())


def test_full_float32_sum_of_ten_million_is_stable():
    x = jitorch.from_numpy(np.full(10 ** 7, 0.1, np.float32))
    got, _, kernels, _ = _run(lambda v: (v * 3).sum(), x)
    assert len(kernels) == 1
    exact = float(np.float32(0.1) * 3) * 1e7
    assert abs(float(got) - exact) / exact < 1e-6


def test_empty_rows_reduce_to_the_identity_and_zero_rows_run_nothing():
    for shape in [(3, 0), (0, 4)]:
        x = jitorch.zeros(shape)
        got, want, kernels, _ = _run(lambda v: (v + 1).sum(-1) * 2, x)
        assert len(kernels) == 1
        np.testing.assert_array_equal(got.numpy(), want.numpy())


def test_two_threads_give_the_same_bits_as_one():
    x = _tensor(np.random.default_rng(7), (512, 300))
    fn = _graph(lambda v: F.layer_norm(v, (300,)).softmax(-1), x)
    old = get_num_threads()
    try:
        set_num_threads(1)
        one = fn((x,)).numpy()
        set_num_threads(2)
        two = fn((x,)).numpy()
    finally:
        set_num_threads(old)
    np.testing.assert_array_equal(one, two)


@pytest.mark.parametrize("fn", [lambda v: v.softmax(-1), lambda v: F.layer_norm(v, (12,)), _prim_layer_norm,
                                lambda v: F.log_softmax(v * 2, -1)])
def test_compiled_kernel_equals_the_ir_interpreter(fn):
    x = _tensor(np.random.default_rng(8), (10, 12))
    graph = _graph(fn, x)
    (kernel, unit), = [(k, u) for k, u in graph.steps if k is not None]
    views = kernel._slot_views([x._data] * len(unit.inputs))
    ir = kernel.build(tuple(st for _, st in views))
    outs = kernel([x._data] * len(unit.inputs))
    flat_outs = [np.zeros(o.size, o.dtype) for o in outs]
    interp.run(ir, flat_outs + [np.ascontiguousarray(v).ravel() for v, _ in views])
    for o, f in zip(outs, flat_outs):
        np.testing.assert_allclose(o.ravel(), f, rtol=1e-5, atol=1e-6)


def test_reduction_over_leading_dims_runs_eagerly():
    x = _tensor(np.random.default_rng(9), (6, 4))
    fn = lambda v: (v * 2).sum(0) + 1  # noqa: E731
    graph = _graph(fn, x)
    got, want = graph((x,)), fn(x)
    assert graph.kernel_ops == [["mul"], ["add"]]
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6)
