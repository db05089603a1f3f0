"""Regressions found by an adversarial review of jitorch.compile: compiled calls (several, new inputs each) against
eager jitorch and PyTorch, for values, gradients and module buffers."""
import copy

import numpy as np
import pytest
import torch

import jitorch
import jitorch.nn.functional as F
from jitorch import nn


def _np(t):
    return t.detach().numpy()


def _torch(t, rg=False):
    return torch.tensor(_np(t)).requires_grad_(rg)


def _inputs(seed, *shape):
    return jitorch.tensor(np.random.default_rng(seed).standard_normal(shape).astype(np.float32))


@pytest.mark.parametrize("grad_dtype", [jitorch.float32, jitorch.float16])
def test_upstream_gradient_of_another_dtype_is_cast_to_the_output_dtype(grad_dtype):
    # ``out64.backward(grad32)``: the engine hands the root gradient over as given; the compiled backward read its
    # memory as float64.
    lin = nn.Linear(3, 2)
    wt, bt = _torch(lin.weight, True), _torch(lin.bias, True)
    step = jitorch.compile(lambda x: (lin(x).tanh() * 2).double())
    for seed in range(3):
        x, up = _inputs(seed, 4, 3), _inputs(10 + seed, 4, 2).to(grad_dtype)
        lin.zero_grad()
        wt.grad = bt.grad = None
        step(x).backward(up)
        out = (torch.tanh(torch.nn.functional.linear(_torch(x), wt, bt)) * 2).double()
        out.backward(torch.tensor(_np(up).astype(np.float64)))
        np.testing.assert_allclose(_np(lin.weight.grad), wt.grad.numpy(), rtol=1e-3, atol=1e-3)
        np.testing.assert_allclose(_np(lin.bias.grad), bt.grad.numpy(), rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("name", ["mul_", "div_", "pow_"])
def test_in_place_op_whose_backward_reads_the_old_value(name):
    # ``mask.mul_(x)``: x's gradient reads the mask as it was before the write. The joint trace took autograd's copy
    # of that old value for a constant, so later calls used the first call's mask.
    lin = nn.Linear(4, 4)
    wt, bt = _torch(lin.weight), _torch(lin.bias)

    def body(x, lin, tensor_ops):
        old = (tensor_ops.linear(x) > 0).float() + 1
        return getattr(old, name)(x.exp() if name != "mul_" else x)

    class J:
        linear = staticmethod(lambda x: lin(x))

    class T:
        linear = staticmethod(lambda x: torch.nn.functional.linear(x, wt, bt))

    step = jitorch.compile(lambda x: body(x, lin, J))
    for seed in range(3):
        x, up = _inputs(seed, 3, 4).requires_grad_(), _inputs(10 + seed, 3, 4)
        xt = _torch(x, True)
        out = step(x)
        out.backward(up)
        ot = body(xt, None, T)
        ot.backward(_torch(up))
        np.testing.assert_allclose(_np(out), ot.detach().numpy(), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(_np(x.grad), xt.grad.numpy(), rtol=1e-4, atol=1e-5)


def _bn_model():
    jitorch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4), nn.Dropout(0.3), nn.Linear(4, 2))


def _replace_running_mean(m):
    m[1].running_mean = jitorch.full((4,), 0.5)


def _set_momentum(m):
    m[1].momentum = 0.9


def _set_eps(m):
    m[1].eps = 2.0


def _set_p(m):
    m[2].p = 0.8


@pytest.mark.parametrize("change", [_replace_running_mean, _set_momentum, _set_eps, _set_p])
@pytest.mark.parametrize("grad", [True, False])
@pytest.mark.parametrize("how", ["module", "function"])
def test_replaced_buffer_or_changed_hyperparameter_retraces(change, grad, how):
    eager = _bn_model()
    model = copy.deepcopy(eager)
    compiled = jitorch.compile(model) if how == "module" else jitorch.compile(lambda x: model(x))
    for step in range(4):
        if step == 2:
            change(eager)
            change(model)
        x = _inputs(step, 5, 4)
        with jitorch.set_grad_enabled(grad):
            jitorch.manual_seed(step)
            oe = eager(x)
            jitorch.manual_seed(step)
            oc = compiled(x)
        np.testing.assert_allclose(_np(oc), _np(oe), rtol=1e-5, atol=1e-5)
        for be, bc in zip(eager.buffers(), model.buffers()):
            np.testing.assert_allclose(_np(bc), _np(be), rtol=1e-5, atol=1e-6)


def test_cross_entropy_with_captured_targets_compiles_for_training():
    # The targets' range check was moved after the constant it reads, which it already followed: a crash.
    lin = nn.Linear(6, 3)
    target = jitorch.tensor([0, 1, 2, 1])
    wt, bt = _torch(lin.weight, True), _torch(lin.bias, True)
    step = jitorch.compile(lambda x: F.cross_entropy(lin(x), target, ignore_index=1))
    for seed in range(3):
        x = _inputs(seed, 4, 6)
        lin.zero_grad()
        wt.grad = bt.grad = None
        loss = step(x)
        loss.backward()
        lt = torch.nn.functional.cross_entropy(torch.nn.functional.linear(_torch(x), wt, bt),
                                               torch.tensor([0, 1, 2, 1]), ignore_index=1)
        lt.backward()
        np.testing.assert_allclose(_np(loss), lt.detach().numpy(), rtol=1e-5)
        np.testing.assert_allclose(_np(lin.weight.grad), wt.grad.numpy(), rtol=1e-4, atol=1e-6)
    assert step.train_entries[0].break_reason is None


def test_nested_results_from_the_native_runner():
    # From the third call the native runner returns a flat tuple's values; nested results came back as graph nodes.
    step = jitorch.compile(lambda x: ((x * 2, (x + 1).exp()), x.sin()))
    for seed in range(4):
        x = _inputs(seed, 3, 4)
        (a, b), c = step(x)
        np.testing.assert_allclose(_np(a), _np(x) * 2)
        np.testing.assert_allclose(_np(b), np.exp(_np(x) + 1), rtol=1e-6)
        np.testing.assert_allclose(_np(c), np.sin(_np(x)), rtol=1e-6)


def test_batch_norm_result_with_its_running_mean_without_grad():
    # A call that updates buffers returns (result, *new buffer values): a tuple result makes the graph's result nested.
    eager = nn.BatchNorm1d(3)
    model = copy.deepcopy(eager)
    step = jitorch.compile(lambda x: (model(x), model.running_mean * 1))
    with jitorch.no_grad():
        for seed in range(4):
            x = _inputs(seed, 5, 3)
            out, mean = step(x)
            np.testing.assert_allclose(_np(out), _np(eager(x)), rtol=1e-5, atol=1e-6)
            np.testing.assert_allclose(_np(mean), _np(eager.running_mean), rtol=1e-6)


def test_a_changed_plain_module_attribute_retraces():
    # ``self.temperature`` was baked into the graph as a constant: changing it after compiling must not be ignored.
    class Scaled(jitorch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin, self.temperature = jitorch.nn.Linear(3, 3), 2.0

        def forward(self, x):
            return self.lin(x) / self.temperature

    model = Scaled()
    compiled = jitorch.compile(model)
    x = jitorch.randn(2, 3)
    with jitorch.no_grad():
        for t in (2.0, 4.0, 0.5):
            model.temperature = t
            for _ in range(3):  # through the native runner too
                np.testing.assert_allclose(compiled(x).numpy(), model(x).numpy(), rtol=1e-6)


@pytest.mark.parametrize("dtype", ["int32", "int16", "uint8", "int64"])
def test_integer_constants_wrap_to_the_tensor_width_as_in_torch(dtype):
    for c in (2 ** 40 + 5, -(2 ** 33) - 3, 300, -1):
        f = jitorch.compile(lambda x: x + c)
        got = f(jitorch.arange(4, dtype=getattr(jitorch, dtype)))
        want = torch.arange(4, dtype=getattr(torch, dtype)) + c
        assert got.tolist() == want.tolist() and str(got.dtype)[-5:] == str(want.dtype)[-5:]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("exponent", [0.5, -0.5, 2.0, 3, -1, -2.0, 1.5, 0.0])
def test_scalar_powers_are_torchs_formulas_eager_and_compiled(exponent, dtype):
    # torch computes x ** 0.5 as sqrt, ** -0.5 as rsqrt, ** 3 as x*x*x...: their signed zeros, infinities and
    # roundings are not C99 pow's ((-0) ** -0.5 is -inf).
    vals = [-0.0, float("-inf"), 4.0, 0.0, float("inf"), -2.5, float("nan"), 1e-30, 3.3, -1.7, 1e20, 0.1]
    x, tx = jitorch.tensor(vals, dtype=getattr(jitorch, dtype)), torch.tensor(vals, dtype=getattr(torch, dtype))
    want = (tx ** exponent).numpy()
    for got in ((x ** exponent).numpy(), jitorch.compile(lambda x: x ** exponent)(x).numpy()):
        np.testing.assert_array_equal(got, want)
        real = ~np.isnan(want)
        np.testing.assert_array_equal(np.signbit(got)[real], np.signbit(want)[real])
