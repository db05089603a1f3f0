"""``jitorch.library`` against ``torch.library``: the same registrations in both, then values, gradients (random
upstream gradients), mutations, errors and opcheck compared; traced graphs hold a custom op as one node, and
``jitorch.compile`` runs it with eager's values and gradients.

Each test uses its own namespace (both registries are process-wide); ops are defined inside the tests, so the op
table other test files collect holds none of them.
"""
import typing

import numpy as np
import pytest
import torch

import jitorch
from jitorch.fx import make_fx

from library_custom_op_helpers import LIBS, _close, _error, _mutating, _numpy_sin, _rand


# -- values and gradients ---------------------------------------------------------------------------------------------
def test_values_and_gradients_match_torch():
    x0, g0 = _rand(3, 4), _rand(3, 4, seed=1)
    got = {}
    for lib in LIBS:
        op = _numpy_sin(lib, "jt_test_values")
        x = lib.tensor(x0, requires_grad=True)
        y = op(x * 2)
        y.backward(lib.tensor(g0))
        got[lib] = y, x.grad, type(y.grad_fn).__name__
    _close(got[jitorch][0], got[torch][0])
    _close(got[jitorch][1], got[torch][1])
    assert got[jitorch][2] == got[torch][2] == "GeneratedBackwardFor_jt_test_values_numpy_sin_defaultBackward"


def _two_outputs(lib, ns):
    @lib.library.custom_op(f"{ns}::affine2", mutates_args=())
    def affine2(x: lib.Tensor, scale: float, n: int, flip: bool, mode: str) -> tuple[lib.Tensor, lib.Tensor]:
        y = x * scale + n
        y = -y if flip else y
        return y, (y * y).sum(0) if mode == "square" else y.sum(0)

    def setup_context(ctx, inputs, output):
        x, scale, n, flip, mode = inputs
        ctx.save_for_backward(output[0])
        ctx.k, ctx.square = (-scale if flip else scale), mode == "square"

    def backward(ctx, g0, g1):
        (y,) = ctx.saved_tensors
        gy = g0 + (2 * y * g1 if ctx.square else g1.expand_as(y))
        return gy * ctx.k, None, None, None, None

    affine2.register_autograd(backward, setup_context=setup_context)
    return affine2


@pytest.mark.parametrize("flip,mode", [(False, "square"), (True, "plain")])
def test_multiple_outputs_and_non_tensor_arguments(flip, mode):
    x0, g0, g1 = _rand(5, 3), _rand(5, 3, seed=1), _rand(3, seed=2)
    got = {}
    for lib in LIBS:
        op = _two_outputs(lib, "jt_test_multi")
        x = lib.tensor(x0, requires_grad=True)
        a, b = op(x, 1.5, 2, flip, mode)
        lib.autograd.backward([a, b], [lib.tensor(g0), lib.tensor(g1)])
        got[lib] = a, b, x.grad
    for j, t in zip(got[jitorch], got[torch]):
        _close(j, t, atol=1e-5)


def _optional_bias(lib, ns):
    @lib.library.custom_op(f"{ns}::add_bias", mutates_args=())
    def add_bias(x: lib.Tensor, bias: typing.Optional[lib.Tensor] = None) -> lib.Tensor:
        return x * 3 if bias is None else x * 3 + bias

    def setup_context(ctx, inputs, output):
        ctx.has_bias = inputs[1] is not None

    def backward(ctx, g):
        return g * 3, (g.sum(0) if ctx.has_bias and ctx.needs_input_grad[1] else None)

    add_bias.register_autograd(backward, setup_context=setup_context)
    return add_bias


@pytest.mark.parametrize("with_bias", [False, True])
def test_optional_tensor_argument(with_bias):
    x0, b0, g0 = _rand(4, 3), _rand(3, seed=1), _rand(4, 3, seed=2)
    got = {}
    for lib in LIBS:
        op = _optional_bias(lib, "jt_test_optional")
        x = lib.tensor(x0, requires_grad=True)
        b = lib.tensor(b0, requires_grad=True) if with_bias else None
        y = op(x, b) if with_bias else op(x)
        y.backward(lib.tensor(g0))
        got[lib] = y, x.grad, (b.grad if with_bias else x.grad)
    for j, t in zip(got[jitorch], got[torch]):
        _close(j, t, atol=1e-5)


def _weighted_sum(lib, ns, seen):
    @lib.library.custom_op(f"{ns}::weighted_sum", mutates_args=())
    def weighted_sum(tensors: list[lib.Tensor], weights: list[float]) -> lib.Tensor:
        return sum(t * w for t, w in zip(tensors, weights))

    def setup_context(ctx, inputs, output):
        ctx.weights = inputs[1]

    def backward(ctx, g):
        seen.append(ctx.needs_input_grad)
        return [g * w for w in ctx.weights], None

    weighted_sum.register_autograd(backward, setup_context=setup_context)
    return weighted_sum


def test_tensor_list_argument_gradients_and_needs_input_grad():
    arrays, g0 = [_rand(2, 3, seed=i) for i in range(3)], _rand(2, 3, seed=9)
    got, seen = {}, {jitorch: [], torch: []}
    for lib in LIBS:
        op = _weighted_sum(lib, "jt_test_list", seen[lib])
        xs = [lib.tensor(a, requires_grad=i != 1) for i, a in enumerate(arrays)]
        y = op(xs, [0.5, -2.0, 3.0])
        y.backward(lib.tensor(g0))
        got[lib] = y, xs[0].grad, xs[2].grad
        assert xs[1].grad is None
    for j, t in zip(got[jitorch], got[torch]):
        _close(j, t, atol=1e-5)
    assert seen[jitorch] == seen[torch] == [([True, False, True], False)]


def _keyword_only(lib, ns):
    @lib.library.custom_op(f"{ns}::scaled_cast", mutates_args=())
    def scaled_cast(x: lib.Tensor, dtype: lib.dtype, *, scale: float = 1.0) -> lib.Tensor:
        return (x * scale).to(dtype)

    scaled_cast.register_fake(lambda x, dtype, *, scale=1.0: lib.empty_like(x, dtype=dtype))

    def setup_context(ctx, inputs, keyword_only_inputs, output):
        ctx.scale, ctx.dtype = keyword_only_inputs["scale"], inputs[0].dtype

    scaled_cast.register_autograd(lambda ctx, g: ((g * ctx.scale).to(ctx.dtype), None), setup_context=setup_context)
    return scaled_cast


def test_keyword_only_and_dtype_arguments():
    x0, g0 = _rand(2, 3), _rand(2, 3, seed=1)
    got = {}
    for lib in LIBS:
        op = _keyword_only(lib, "jt_test_kwonly")
        x = lib.tensor(x0, requires_grad=True)
        y = op(x, lib.float64, scale=-2.5)
        y.backward(lib.tensor(g0, dtype=lib.float64))
        got[lib] = y, x.grad, str(y.dtype).split(".")[-1], str(op._opoverload._schema)
    _close(got[jitorch][0], got[torch][0])
    _close(got[jitorch][1], got[torch][1])
    assert got[jitorch][2] == got[torch][2] == "float64"
    assert got[jitorch][3] == got[torch][3]
    op = jitorch.ops.jt_test_kwonly.scaled_cast
    for mode in ("real", "fake"):
        gm = make_fx(lambda x: op(x, jitorch.float64, scale=3.0), tracing_mode=mode)(jitorch.tensor(x0))
        assert len(gm.graph.find_nodes(op="call_function")) == 1
        out = gm(jitorch.tensor(x0))
        assert out.dtype == jitorch.float64
        _close(out, x0.astype(np.float64) * 3)


def test_no_grad_plain_tensors_and_vmap():
    x0 = _rand(8, 3)
    op = _numpy_sin(jitorch, "jt_test_modes")
    x = jitorch.tensor(x0, requires_grad=True)
    with jitorch.no_grad():
        y = op(x)
    assert not y.requires_grad and y.grad_fn is None
    plain = op(jitorch.tensor(x0))
    assert not plain.requires_grad
    _close(plain, np.sin(x0))
    _close(jitorch.vmap(op)(jitorch.tensor(x0)), np.sin(x0))  # 8 samples: the batched path, the op once per sample
    _close(jitorch.vmap(op, in_dims=1)(jitorch.tensor(x0[:3].T.copy())), np.sin(x0[:3]))
    grad = jitorch.func.grad(lambda t: op(t).sum())(jitorch.tensor(x0))
    _close(grad, np.cos(x0))


def test_numpy_reads_of_tensors_requiring_grad_under_no_grad():
    # Kernels run below autograd and read their inputs with .numpy() (torch's own examples do): fine under no_grad.
    for lib in LIBS:
        x = lib.ones(2, requires_grad=True)
        with lib.no_grad():
            assert np.asarray(x).tolist() == x.numpy().tolist() == [1.0, 1.0]
        assert _error(x.numpy)[0] is RuntimeError and _error(lambda: np.asarray(x))[0] is RuntimeError


def test_mutating_ops_write_their_declared_inputs():
    a0, x0 = _rand(3, 2), _rand(3, 2, seed=1)
    got = {}
    for lib in LIBS:
        scale_, accumulate = _mutating(lib, "jt_test_mutate")
        a, x = lib.tensor(a0), lib.tensor(x0)
        v0 = a._version
        assert scale_(a, 3.0) is None
        out = accumulate(a, x)
        got[lib] = a.clone(), out, a._version > v0, x._version
    for j, t in zip(got[jitorch][:2], got[torch][:2]):
        _close(j, t)
    assert got[jitorch][2] and got[torch][2]
    assert got[jitorch][3] == got[torch][3] == 0
    assert "Tensor(a0!) x" in str(jitorch.ops.jt_test_mutate.scale_.default._schema)


def test_mutating_op_under_make_fx_and_compile():
    scale_, accumulate = _mutating(jitorch, "jt_test_mutate_traced")

    def step(acc, x):
        y = accumulate(acc, x)
        return y + acc

    a0, x0 = _rand(4), _rand(4, seed=1)
    acc = jitorch.tensor(a0)
    gm = make_fx(step)(acc, jitorch.tensor(x0))
    _close(acc, a0 + x0)  # tracing ran the op once
    acc2 = jitorch.tensor(a0)
    _close(gm(acc2, jitorch.tensor(x0)), 2 * x0 + a0 + x0)
    _close(acc2, a0 + x0)  # the graph writes the input too
    compiled, acc3 = jitorch.compile(step), jitorch.tensor(a0)
    for i in range(1, 4):
        _close(compiled(acc3, jitorch.tensor(x0)), 2 * x0 + a0 + i * x0)
        _close(acc3, a0 + i * x0)
