"""A sweep of functional ops through symbolic_trace: each traced function matches eager jitorch and torch, its graph
matches torch.fx's node for node, and ShapeProp's shapes, dtypes and strides (views included) match torch's."""
from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.fx
from test_fx_helpers import assert_close, check_traced
from torch.fx.passes.shape_prop import ShapeProp as TorchShapeProp

import jitorch
from jitorch.fx.passes import ShapeProp


def cases(T):
    """``name -> fn(x, img)`` written once against ``T`` (jitorch or torch); x is (4, 6), img is (2, 3, 6, 6)."""
    F = T.nn.functional
    idx = T.tensor([[0, 2], [1, 1], [5, 0], [3, 4]])
    return {
        # pointwise and activations
        "activations": lambda x, img: F.gelu(x) + F.silu(x) - F.softplus(x) * F.elu(x) + F.leaky_relu(x, 0.2),
        "clamp_where": lambda x, img: T.where(x > 0, x.clamp(max=0.5), T.exp(x)) + F.hardtanh(x),
        "math_methods": lambda x, img: (x.abs() + 1).log().sqrt().rsqrt() * x.sin().cos() ** 2,
        "sigmoid_tanh_pow": lambda x, img: T.sigmoid(x) * T.tanh(x) + x.pow(3) / (1 + x * x),
        # reductions
        "reductions": lambda x, img: (x.sum(1, keepdim=True) + x.mean(0) + x.amax(dim=1, keepdim=True)
                                      - T.logsumexp(x, dim=1, keepdim=True) + x.var(dim=0)),
        "softmaxes": lambda x, img: (F.softmax(x, dim=-1), F.log_softmax(x, dim=0), x.cumsum(1)),
        "topk_sort": lambda x, img: (x.topk(2, dim=1).values, T.sort(x, dim=0).indices, x.argmax(1)),
        # views and shape ops (non-contiguous results: their strides are compared)
        "transpose_permute": lambda x, img: (x.t(), img.permute(0, 2, 3, 1), img.transpose(1, 3), x.T),
        "slices_and_narrow": lambda x, img: (x[:, 1::2], x[1:3], img[..., 0], x.narrow(1, 2, 3), x[None, :, -1]),
        "expand_unsqueeze": lambda x, img: (x[:, :1].expand(4, 6), x.unsqueeze(1), x.view(2, 12).flatten()),
        "reshape_cat_stack": lambda x, img: (T.cat([x, x * 2], dim=1).reshape(8, 6), T.stack([x, -x], dim=-1),
                                             img.flatten(1), x.split(2, dim=1)[1], x.chunk(3, dim=1)[2]),
        "contiguous_of_view": lambda x, img: x.t().contiguous() + img.permute(0, 2, 3, 1).reshape(-1, 3)[:6, :1],
        # linear algebra
        "matmul_family": lambda x, img: (x @ x.t(), T.bmm(img[0], img[1]), F.linear(x, x[:3], x[0, :3]),
                                         T.einsum("ij,kj->ik", x, x)),
        # nn.functional layers
        "layer_norm_normalize": lambda x, img: (F.layer_norm(x, (6,)), F.normalize(x, dim=1),
                                                F.dropout(x, 0.5, training=False)),
        "conv_pool_pad": lambda x, img: (F.conv2d(img, img[:2], padding=1), F.max_pool2d(img, 2),
                                         F.avg_pool2d(img, 3, stride=1), F.pad(img, (1, 0, 2, 1)),
                                         F.adaptive_avg_pool2d(img, 1)),
        "losses": lambda x, img: (F.mse_loss(x, x.flip(0)), F.cross_entropy(x, idx[:, 0]),
                                  F.binary_cross_entropy_with_logits(x, T.sigmoid(x.flip(1)))),
        "indexing": lambda x, img: (x.gather(1, idx), x.index_select(1, idx[:, 0]), x.masked_fill(x < 0, 0.0),
                                    F.embedding(idx % 4, x), F.one_hot(idx[:, 1], 6)),
        "dtypes": lambda x, img: ((x > 0).to(T.int64) + 1, x.double().sum(), (x * 10).long() // 3, x.half().float()),
    }


J_CASES, T_CASES = cases(jitorch), cases(torch)
# Cases whose generated code and ``str(graph)`` equal torch.fx's letter for letter (``torch.`` read as ``jitorch.``).
# Elsewhere torch's __torch_function__ binds default arguments into the call (``inplace = False``) or names a
# private target (``torch._C._nn.gelu``); jitorch records the call as written.
SAME_TEXT = {"math_methods", "sigmoid_tanh_pow", "reductions", "topk_sort", "transpose_permute", "expand_unsqueeze",
             "reshape_cat_stack", "contiguous_of_view", "dtypes"}


def _strides(meta):
    return tuple(meta.stride)


@pytest.mark.parametrize("name", list(J_CASES))
def test_functional_op_traces_like_torch_fx(name):
    rng = np.random.default_rng(abs(hash(name)) % 2**32)
    x = rng.standard_normal((4, 6)).astype(np.float32)
    img = rng.standard_normal((2, 3, 6, 6)).astype(np.float32)
    jx, jimg, tx, timg = jitorch.tensor(x), jitorch.tensor(img), torch.tensor(x), torch.tensor(img)

    gm = check_traced(J_CASES[name], jx, jimg)  # lint, Interpreter and GraphModule against eager jitorch
    assert_close(gm(jx, jimg), _np(T_CASES[name](tx, timg)), atol=1e-4)
    compile(gm.code, "<generated>", "exec")

    tgm = torch.fx.symbolic_trace(T_CASES[name])
    assert [(n.op, n.name) for n in gm.graph.nodes] == [(n.op, n.name) for n in tgm.graph.nodes]
    if name in SAME_TEXT:
        assert gm.code.strip() == tgm.code.strip().replace("torch.", "jitorch.")
        assert str(gm.graph) == str(tgm.graph).replace("torch.", "jitorch.")
    ShapeProp(gm).propagate(jx, jimg)
    TorchShapeProp(tgm).propagate(tx, timg)
    theirs = {n.name: n.meta.get("tensor_meta") for n in tgm.graph.nodes if n.op != "output"}
    for node in gm.graph.nodes:
        if node.op == "output" or not hasattr(theirs[node.name], "shape"):
            continue
        ours, expected = node.meta["tensor_meta"], theirs[node.name]
        assert tuple(ours.shape) == tuple(expected.shape), node.format_node()
        assert _strides(ours) == _strides(expected), (node.format_node(), ours.stride, expected.stride)
        assert str(ours.dtype).split(".")[-1] == str(expected.dtype).split(".")[-1], node.format_node()


def _np(value):
    if isinstance(value, (tuple, list)):
        return [_np(v) for v in value]
    return value.detach().numpy() if isinstance(value, torch.Tensor) else value
