"""grad_fn names of composites are torch's (``mean`` records a division but shows ``MeanBackward0``), compared
expression by expression with torch 2.13; the renamed nodes still differentiate as before."""
from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

import jitorch

EXPRESSIONS = [
    "a.mean()", "b.mean(0)", "b.mean((0, 1))", "b.sum(0).mean()", "a[0]", "a[-1]", "b[0]", "b[:, 1]", "b[0, 1]",
    "b[:]", "b[::2]", "b[0, 1:]", "b[1:, 0]", "b[None]", "b[..., None]", "b[0, None]", "b[None, 0]", "b[...]",
    "a @ a", "b.T @ a", "a.dot(a)", "jt.mv(b, a3)", "b @ b.T", "a.unsqueeze(0)", "c.squeeze()", "c.squeeze(0)",
    "c.squeeze((0, 2))", "b.t()", "a.t()", "b.transpose(0, 1)", "b.swapaxes(0, 1)", "b.mT", "b.T", "b.unbind(0)[0]",
    "b.select(1, 0)", "jt.stack([a, a])", "b.split(1)[0]", "b.split([1, 1])[1]", "b.chunk(2, 1)[0]",
    "b.narrow(1, 0, 2)", "b.view(6)", "a.exp()", "jt.cat([a, a])", "b.max()", "b.min()", "b.abs().max()",
    "b.median()", "b.nanmedian()", "b.logsumexp(1)", "b.logsumexp((0, 1), keepdim=True)", "b.std()", "b.std(0)",
    "b.var()", "jt.std_mean(b)[0]", "jt.var_mean(b, 1)[0]",
]


def _eval(lib, code):
    a = lib.tensor([1.0, 2.0], requires_grad=True)
    b = lib.tensor(np.arange(6.0, dtype=np.float32).reshape(2, 3), requires_grad=True)
    c = lib.ones(1, 3, 1, requires_grad=True)
    a3 = lib.tensor([1.0, -1.0, 2.0], requires_grad=True)
    out = eval(code, {"jt": lib, "a": a, "b": b, "c": c, "a3": a3})
    out.sum().backward()
    return type(out.grad_fn).__name__, [None if t.grad is None else t.grad.numpy() for t in (a, b, c, a3)]


@pytest.mark.parametrize("code", EXPRESSIONS)
def test_grad_fn_name_and_gradients_match_torch(code):
    (mine, mine_grads), (theirs, theirs_grads) = _eval(jitorch, code), _eval(torch, code)
    assert mine == theirs
    for g, h in zip(mine_grads, theirs_grads):
        assert (g is None) == (h is None)
        if h is not None:
            np.testing.assert_allclose(g, h, rtol=1e-6)


def test_renamed_node_keeps_its_behaviour_and_repr():
    x = jitorch.tensor([1.0, 3.0], requires_grad=True)
    y = x.mean()
    assert repr(y) == "tensor(2., grad_fn=<MeanBackward0>)" and y.grad_fn.name() == "MeanBackward0"
    assert isinstance(y.grad_fn, jitorch.autograd.graph.Node)
    (g,) = jitorch.autograd.grad(y * y, x, create_graph=True)  # double backward through the renamed node
    assert g.tolist() == [2.0, 2.0] and type(g.grad_fn).__name__ != "MeanBackward0"


@pytest.mark.parametrize("shape", [(3,), (4, 3), (2, 4, 3), (2, 2, 4, 3)], ids=str)
@pytest.mark.parametrize("contiguous", [True, False])
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_linear_shows_the_grad_fn_of_torchs_decomposition(shape, contiguous, bias, dtype):
    # at::linear is addmm / mm / matmul plus views and adds depending on the input: users print those names.
    rng = np.random.default_rng(0)
    x = rng.standard_normal(shape if contiguous else shape[::-1]).astype(dtype)
    w, b = rng.standard_normal((5, 3)).astype(dtype), rng.standard_normal(5).astype(dtype)
    seen = []
    for lib in (jitorch, torch):
        xt = lib.tensor(x, requires_grad=True)
        xv = xt if contiguous else xt.permute(*reversed(range(len(shape))))
        wt, bt = lib.tensor(w, requires_grad=True), lib.tensor(b, requires_grad=True) if bias else None
        out = lib.nn.functional.linear(xv, wt, bt)
        out.sum().backward()
        seen.append((type(out.grad_fn).__name__, out.grad_fn.name(), xt.grad.numpy(), wt.grad.numpy()))
    assert seen[0][:2] == seen[1][:2]
    for g, h in zip(seen[0][2:], seen[1][2:]):
        np.testing.assert_allclose(g, h, rtol=1e-5, atol=1e-5)


CLAMPS = ["x.clamp(0, 1)", "x.clamp(min=0)", "x.clamp(max=1)", "x.clip(0, 1)", "x.clamp(t, t + 1)", "x.clamp(min=t)",
          "x.clamp(max=t)", "lib.clamp_min(x, 0)", "lib.clamp_max(x, 1)", "lib.clamp_min(x, t)", "lib.clamp_max(x, t)",
          "x.clamp(lib.tensor(0.), lib.tensor(1.))"]


@pytest.mark.parametrize("code", CLAMPS)
def test_clamp_names_its_aten_overload(code):
    seen = []
    for lib in (jitorch, torch):
        x = lib.tensor([-1.0, 0.5, 2.0], requires_grad=True)
        out = eval(code, {"lib": lib, "x": x, "t": lib.zeros(3)})
        out.sum().backward()
        seen.append((type(out.grad_fn).__name__, out.detach().numpy().tolist(), x.grad.numpy().tolist()))
    assert seen[0] == seen[1]


@pytest.mark.parametrize("loss", ["mse_loss", "smooth_l1_loss", "huber_loss", "binary_cross_entropy",
                                  "binary_cross_entropy_with_logits"])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_loss_nodes_show_torch_s_names(loss, reduction):
    names = []
    for lib in (jitorch, torch):
        x = lib.tensor([0.2, 0.7, 0.4], requires_grad=True)
        out = getattr(lib.nn.functional, loss)(x, lib.tensor([0.0, 1.0, 0.5]), reduction=reduction)
        names.append(type(out.grad_fn).__name__)
    assert names[0] == names[1]


# gather/scatter family: each records an index or index_put row but shows torch's node
INDEXING_EXPRESSIONS = [
    "b.gather(1, jt.tensor([[0, 2], [1, 1]]))", "b.take_along_dim(jt.tensor([[0], [2]]), 1)",
    "b.index_select(0, jt.tensor([1, 1]))", "b.index_add(1, jt.tensor([0, 0]), b[:, :2])",
    "b.index_copy(1, jt.tensor([2, 0]), b[:, :2])", "(b * 1).index_add_(0, jt.tensor([1]), b[:1])",
    "b.scatter(1, jt.tensor([[0, 1], [2, 2]]), b[:, :2])", "b.scatter(1, jt.tensor([[0, 1]]), 2.0)",
    "b.scatter_add(1, jt.tensor([[0, 0], [1, 0]]), b[:, :2])", "(b * 1).scatter_add_(0, jt.tensor([[1, 1, 0]]), b[:1])",
    "b.scatter_reduce(1, jt.tensor([[0, 0], [1, 0]]), b[:, :2], 'sum')",
    "b.scatter_reduce(1, jt.tensor([[0, 0], [1, 0]]), b[:, :2], 'mean', include_self=False)",
    "b.scatter_reduce(1, jt.tensor([[0, 0]]), b[:, :2], 'amax')",
    "b.index_reduce(1, jt.tensor([0, 0]), b[:, :2], 'amax')", "b.topk(2)[0]",
]


@pytest.mark.parametrize("code", INDEXING_EXPRESSIONS)
def test_indexing_nodes_show_torch_s_names(code):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # index_reduce is "in beta"
        test_grad_fn_name_and_gradients_match_torch(code)
