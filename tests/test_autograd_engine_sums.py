"""The engine's sums of gradients bound for one input, against PyTorch 2.13: the engine may sum into a buffer in place
only when nothing else can see it, so gradients a hook kept, a retained ``.grad``, a gradient shared by two edges
(``add``'s backward hands one tensor to both inputs) and the tensors the user passed in keep their values."""
import numpy as np
import pytest
import torch

import jitorch


def _data(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _both(fn, *arrays):
    """``fn(lib, *leaves)`` for jitorch and torch on the same data; returns (outputs, leaves) per library."""
    result = []
    for lib in (jitorch, torch):
        leaves = [lib.tensor(a, requires_grad=True) for a in arrays]
        result.append((fn(lib, *leaves), leaves))
    return result


def _close(a, b):
    np.testing.assert_allclose(np.asarray(a.detach().numpy()), b.detach().numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("shape", [(), (5,), (3, 4)])
def test_fan_out_sums_match_torch(shape):
    # h feeds four consumers: its node sums four gradients; x's gradient sums two paths.
    def fn(lib, x):
        h = x * 2
        out = (h.sin() + h.cos() + h * h + h.exp() * x).sum()
        out.backward()
        return out

    (_, (xj,)), (_, (xt,)) = _both(fn, _data(*shape))
    _close(xj.grad, xt.grad)


def test_gradients_kept_by_hooks_are_not_summed_into():
    def fn(lib, x):
        kept = []
        h = x * 3
        a, b = h.tanh(), h.sigmoid()  # h's gradient: the sum of a's and b's
        a.grad_fn.register_hook(lambda grad_inputs, grad_outputs: kept.append(grad_inputs[0]))
        h.register_hook(lambda g: kept.append(g))
        (a * 2 + b).sum().backward()
        return kept

    (kept_j, (xj,)), (kept_t, (xt,)) = _both(fn, _data(6))
    assert len(kept_j) == len(kept_t) == 2
    for kj, kt in zip(kept_j, kept_t):
        _close(kj, kt)
    _close(xj.grad, xt.grad)


def test_retained_and_shared_gradients_keep_their_values():
    def fn(lib, x, y):
        s = x + y  # add's backward: one gradient object for both inputs
        s.retain_grad()
        t = s * 1.5 + s.exp()
        t.retain_grad()
        (t + x).sum().backward()  # x's gradient: a sum in which s's gradient takes part
        return s, t

    ((sj, tj), (xj, yj)), ((st, tt), (xt, yt)) = _both(fn, _data(4, seed=1), _data(4, seed=2))
    for a, b in ((sj.grad, st.grad), (tj.grad, tt.grad), (xj.grad, xt.grad), (yj.grad, yt.grad)):
        _close(a, b)


def test_user_gradient_and_accumulated_grad_are_not_written():
    g = _data(3, seed=3)
    for lib in (jitorch, torch):
        x = lib.tensor(_data(3), requires_grad=True)
        upstream = lib.tensor(g)
        y = x * 2
        (y + y + x).backward(upstream)  # every path starts from the user's tensor
        first = x.grad
        held = first.clone()
        (x * 4).sum().backward()
        np.testing.assert_array_equal(upstream.numpy(), g)
        np.testing.assert_allclose(x.grad.numpy(), held.numpy() + 4, rtol=1e-6)
        assert x.grad is first  # accumulated in place, as torch's AccumulateGrad does


@pytest.mark.parametrize("shape", [(), (1,), (1, 1)])
def test_implicit_root_gradient_of_one_element(shape):
    (_, (xj,)), (_, (xt,)) = _both(lambda lib, x: (x * x * 3).backward(), _data(*shape))
    _close(xj.grad, xt.grad)
    assert tuple(xj.grad.shape) == tuple(xt.grad.shape)


def test_create_graph_sums_stay_differentiable():
    def fn(lib, x):
        h = x * x
        (gx,) = lib.autograd.grad((h.sin() + h.cos() + h * x).sum(), x, create_graph=True)
        gx.sum().backward()
        return gx

    (gj, (xj,)), (gt, (xt,)) = _both(fn, _data(5, seed=4))
    _close(gj, gt)
    _close(xj.grad, xt.grad)
