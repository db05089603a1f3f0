"""Output layouts (strides) of ops on transposed, permuted, expanded, sliced and channels-last inputs, against torch.

Where torch's result is row-major (softmax, masked_fill, tril, cummax, roll, batched matmul, norms...) jitorch's must
be too, or a ``.view`` that torch accepts fails; where torch writes the input's suggested format (channels-last for
a channels-last input: group/batch/rms norm, padding, pixel and channel shuffles) jitorch does the same; copies of
expanded tensors (``clone``, ``to``, ``*_like``, ``repeat``) are dense in torch's order, never overlapping.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers import assert_same

import jitorch

_BASE = np.random.default_rng(0).standard_normal((2, 6, 4, 10)).astype(np.float32)
LAYOUTS = {
    "transposed": lambda lib: lib.tensor(_BASE[..., :5]).transpose(2, 3),
    "transposed_batch": lambda lib: lib.tensor(np.ascontiguousarray(_BASE[..., :5].transpose(1, 0, 2, 3)))
    .transpose(0, 1),
    "permuted": lambda lib: lib.tensor(np.ascontiguousarray(_BASE[..., :5].transpose(2, 3, 0, 1))).permute(2, 3, 0, 1),
    "expanded": lambda lib: lib.tensor(_BASE[:, :1, :, :5]).expand(2, 6, 4, 5),
    "sliced": lambda lib: lib.tensor(_BASE)[..., ::2],
    "channels_last": lambda lib: lib.tensor(_BASE[..., :5]).to(memory_format=lib.channels_last),
}


def _ops(lib):
    F = lib.nn.functional
    return {
        "softmax_last": lambda y: F.softmax(y, -1), "softmax_1": lambda y: F.softmax(y, 1),
        "log_softmax": lambda y: F.log_softmax(y, 2), "softmin": lambda y: F.softmin(y, -1),
        "masked_fill": lambda y: y.masked_fill(y > 0, 0.0),
        "index_fill": lambda y: y.index_fill(1, lib.tensor([0]), 0.0),
        "cummax": lambda y: y.cummax(-1).values, "cummin_indices": lambda y: y.cummin(1).indices,
        "logcumsumexp": lambda y: y.logcumsumexp(1), "tril": lambda y: y.tril(), "triu": lambda y: y.triu(1),
        "roll": lambda y: y.roll(1, -1), "rot90": lambda y: y.rot90(1, (2, 3)), "flip": lambda y: y.flip(-1),
        "logsigmoid": F.logsigmoid, "rrelu_eval": lambda y: F.rrelu(y), "rpow": lambda y: 2 ** y,
        "bce_with_logits": lambda y: F.binary_cross_entropy_with_logits(y, y.sigmoid(), reduction="none"),
        "batch_norm_train": lambda y: F.batch_norm(y, None, None, training=True),
        "batch_norm_eval": lambda y: F.batch_norm(y, lib.zeros(6), lib.ones(6)),
        "instance_norm": F.instance_norm, "group_norm": lambda y: F.group_norm(y, 2),
        "rms_norm": lambda y: F.rms_norm(y, (y.shape[-1],)), "norm_keepdim": lambda y: y.norm(dim=-1, keepdim=True),
        "vector_norm_keepdim": lambda y: lib.linalg.vector_norm(y, 3, dim=1, keepdim=True),
        "cdist": lambda y: lib.cdist(y, y), "matmul": lambda y: y @ y.transpose(-1, -2),
        "pad_constant": lambda y: F.pad(y, (1, 1, 2, 0)),
        "pad_reflect": lambda y: F.pad(y, (1, 1, 2, 0), mode="reflect"),
        "pad_replicate": lambda y: F.pad(y, (1, 1, 2, 0), mode="replicate"),
        "pad_circular": lambda y: F.pad(y, (1, 1, 2, 0), mode="circular"),
        "adaptive_avg_pool2d": lambda y: F.adaptive_avg_pool2d(y, 2),
        "pixel_shuffle": lambda y: F.pixel_shuffle(y[:, :4], 2),
        "pixel_unshuffle": lambda y: F.pixel_unshuffle(y[..., :4, :4], 2),
        "channel_shuffle": lambda y: F.channel_shuffle(y, 2), "repeat": lambda y: y.repeat(1, 2, 1, 1),
        "tile": lambda y: y.tile(2, 1), "clone": lambda y: y.clone(), "to_double": lambda y: y.double(),
        "to_long": lambda y: y.long(), "nan_to_num": lambda y: y.nan_to_num(), "zeros_like": lib.zeros_like,
    }


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("op", _ops(torch))
def test_output_strides_match_torch(op, layout):
    outs = []
    for lib in (torch, jitorch):
        y = LAYOUTS[layout](lib)
        outs.append(_ops(lib)[op](y))
    th, jt = outs
    assert jt.stride() == th.stride(), f"{op} of a {layout} input: strides {jt.stride()}, torch {th.stride()}"
    if op != "zeros_like" or layout != "expanded":
        assert_same(jt, th, atol=1e-5, rtol=1e-5, what=op)
    if th.is_contiguous():
        jt.view(-1)  # what the layout is for: torch's row-major results take a view


@pytest.mark.parametrize("op", ["repeat", "tile", "channel_shuffle", "pixel_shuffle", "clone"])
def test_copies_of_an_expanded_tensor_are_new_writable_memory(op):
    for lib in (torch, jitorch):
        base = lib.zeros(2, 1, 4, 6)
        out = _ops(lib)[op](base.expand(2, 6, 4, 6))
        out.add_(1.0)  # an overlapping (zero-stride) result would refuse this
        assert base.abs().sum().item() == 0 and out.min().item() == 1.0


def test_attention_scores_of_transposed_heads_take_a_view_as_torch():
    rng = np.random.default_rng(1)
    x_np, w_np = rng.standard_normal((2, 5, 8)).astype(np.float32), rng.standard_normal((24, 8)).astype(np.float32)
    g_np = rng.standard_normal((2, 5, 8)).astype(np.float32)
    res = []
    for lib in (torch, jitorch):
        x, w = lib.tensor(x_np, requires_grad=True), lib.tensor(w_np, requires_grad=True)
        q, k, v = (x @ w.t()).view(2, 5, 3, 2, 4).permute(2, 0, 3, 1, 4).unbind(0)  # (B, H, L, D) each
        scores = q @ k.transpose(-2, -1) / 2.0
        flat = scores.view(4, 5, 5)  # torch's batched product is row-major: this is a view in both
        att = flat.softmax(-1).masked_fill(lib.tensor(np.triu(np.ones((5, 5), bool), 1)), 0.0)
        y = (att.view(2, 2, 5, 5) @ v).transpose(1, 2).reshape(2, 5, 8)
        y.backward(lib.tensor(g_np))
        res.append([y, x.grad, w.grad, scores.stride(), att.stride()])
    for a, b in zip(*res):
        if isinstance(a, tuple):
            assert a == b
        else:
            assert_same(b, a, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("layout", ["expanded", "sliced"])
def test_gradient_of_an_overlapping_or_gapped_leaf_is_row_major_as_torch(layout):
    strides = []
    for lib in (torch, jitorch):
        leaf = LAYOUTS[layout](lib).detach().requires_grad_()
        lib.nn.functional.scaled_dot_product_attention(leaf, leaf, leaf).sum().backward()
        strides.append(leaf.grad.stride())
        leaf.grad.view(-1)
    assert strides[1] == strides[0]
