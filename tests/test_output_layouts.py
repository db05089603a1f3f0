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


# -- attention: the query's layout where torch's CPU flash kernel runs, row-major elsewhere --------------------------
_RNG = np.random.default_rng(3)
_Q, _KV, _V6 = (_RNG.standard_normal(s).astype(np.float32) for s in ((2, 5, 3, 8), (2, 4, 3, 8), (2, 4, 3, 6)))
_MASK_B, _MASK_F = np.tril(np.ones((5, 4), bool)) | (_RNG.random((5, 4)) > 0.5), _RNG.standard_normal((5, 4))


def _heads(t):
    return t.transpose(1, 2)  # (B, L, H, E) -> (B, H, L, E): heads split from a (B, L, H * E) projection


def _sdpa(lib, q, k, v, *, mask=None, **kw):
    return lib.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask, **kw)


_SDPA_CASES = {
    "transposed_heads": lambda L, q, k, v: _sdpa(L, _heads(q), _heads(k), _heads(v)),
    "causal": lambda L, q, k, v: _sdpa(L, _heads(q), _heads(k), _heads(v), is_causal=True),
    "bool_mask": lambda L, q, k, v: _sdpa(L, _heads(q), _heads(k), _heads(v), mask=L.tensor(_MASK_B)),
    "float_mask": lambda L, q, k, v: _sdpa(L, _heads(q), _heads(k), _heads(v), mask=L.tensor(_MASK_F).to(q.dtype)),
    "heads_outermost": lambda L, q, k, v: _sdpa(L, q.permute(2, 0, 1, 3).contiguous().transpose(0, 1), _heads(k),
                                                _heads(v)),
    "expanded_batch": lambda L, q, k, v: _sdpa(L, _heads(q[:1]).expand(2, 3, 5, 8), _heads(k), _heads(v)),
    "one_head": lambda L, q, k, v: _sdpa(L, _heads(q[:, :, :1]), _heads(k[:, :, :1]), _heads(v[:, :, :1])),
    "gqa": lambda L, q, k, v: _sdpa(L, _heads(q), _heads(k[:, :, :1]), _heads(v[:, :, :1]), enable_gqa=True),
    # torch's math kernel (row-major): contiguous query, other head size, key not unit-strided, 3-D and 5-D
    "contiguous_query": lambda L, q, k, v: _sdpa(L, _heads(q).contiguous(), _heads(k), _heads(v)),
    "value_head_size": lambda L, q, k, v: _sdpa(L, _heads(q), _heads(k), _heads(L.tensor(_V6).to(q.dtype))),
    "key_transposed": lambda L, q, k, v: _sdpa(L, _heads(q), _heads(k).mT.contiguous().mT, _heads(v)),
    "three_dims": lambda L, q, k, v: _sdpa(L, q[:, :, 0].transpose(0, 1).contiguous().transpose(0, 1), k[:, :, 0],
                                           v[:, :, 0]),
    "five_dims_cl3d": lambda L, q, k, v: _sdpa(L, *(t.reshape(2, 5, 3, 2, 4).contiguous(
        memory_format=L.channels_last_3d) for t in (q, q, q))),
    # composite in jitorch, math in torch: a broadcast batch, a mask that needs a gradient
    "broadcast_batch": lambda L, q, k, v: _sdpa(L, _heads(q), _heads(k[:1]), _heads(v[:1])),
    "mask_needs_grad": lambda L, q, k, v: _sdpa(L, _heads(q), _heads(k), _heads(v),
                                                mask=L.tensor(_MASK_F).to(q.dtype).requires_grad_()),
}
_TOL = {"float32": 1e-5, "float16": 4e-3, "bfloat16": 3e-2}


def _attention_both(case, dtype, grad=True):
    res, up = [], None
    for lib in (torch, jitorch):
        q, k, v = (lib.tensor(a).to(getattr(lib, dtype)).requires_grad_(grad) for a in (_Q, _KV, _KV))
        y = _SDPA_CASES[case](lib, q, k, v)
        if grad:
            up = np.random.default_rng(4).standard_normal(tuple(y.shape)).astype(np.float32) if up is None else up
            y.backward(lib.tensor(up).to(y.dtype))
        res.append((y, (q, k, v)))
    return res


@pytest.mark.parametrize("case", _SDPA_CASES)
def test_attention_output_layout_and_gradients_match_torch(case):
    (th, th_in), (jt, jt_in) = _attention_both(case, "float32")
    assert jt.stride() == th.stride(), f"{case}: strides {jt.stride()}, torch {th.stride()}"
    assert_same(jt.detach(), th.detach(), atol=1e-5, rtol=1e-5)
    for a, b in zip(jt_in, th_in):
        assert_same(a.grad, b.grad, atol=1e-5, rtol=1e-4, what=f"{case} gradient")


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("grad", [False, True])
def test_attention_heads_merge_back_with_a_view_as_torch(dtype, grad):
    (th, _), (jt, jt_in) = _attention_both("transposed_heads", dtype, grad)
    assert jt.stride() == th.stride() == (120, 8, 24, 1)
    assert_same(jt.detach(), th.detach(), atol=_TOL[dtype], rtol=_TOL[dtype])
    assert_same(jt.transpose(1, 2).view(2, 5, 24).detach(), th.transpose(1, 2).view(2, 5, 24).detach(),
                atol=_TOL[dtype], rtol=_TOL[dtype])
    if grad:
        assert jt_in[0].grad is not None


def test_attention_with_dropout_is_row_major_as_torch():
    strides = [_sdpa(lib, *(_heads(lib.tensor(a)) for a in (_Q, _KV, _KV)), dropout_p=0.5).stride()
               for lib in (torch, jitorch)]
    assert strides[1] == strides[0] == (120, 40, 8, 1)


@pytest.mark.parametrize("kw", [{}, {"is_causal": True}, {"scale": float("inf")}])
def test_attention_without_features_averages_the_values_as_torch(kw):
    v_np, up = np.random.default_rng(5).standard_normal((2, 2, 3, 4)).astype(np.float32)
    res = []
    for lib in (torch, jitorch):
        q, v = lib.zeros(2, 3, 0, requires_grad=True), lib.tensor(v_np[0], requires_grad=True)
        y = _sdpa(lib, q, lib.zeros(2, 3, 0), v, **kw)
        y.backward(lib.tensor(up))
        res.append((y, v.grad, q.grad))
    (ty, tv, tq), (jy, jv, jq) = res
    assert_same(jy.detach(), ty.detach(), atol=1e-6, rtol=1e-6)
    assert_same(jv, tv, atol=1e-6, rtol=1e-6)
    assert tuple(jq.shape) == tuple(tq.shape) == (2, 3, 0)


# -- padding, rolls, shuffles, pools and norms of channels-last and transposed inputs ---------------------------------
_X4, _X5 = (np.random.default_rng(6).standard_normal(s).astype(np.float32) for s in ((2, 8, 6, 5), (2, 4, 3, 4, 6)))


def _cl(t):
    return t.contiguous(memory_format=jitorch.channels_last if isinstance(t, jitorch.Tensor) else torch.channels_last)


def _cl3d(t):
    return t.contiguous(memory_format=jitorch.channels_last_3d if isinstance(t, jitorch.Tensor) else
                        torch.channels_last_3d)


_LAID_OUT = {  # name: (the input, as a function of the 4-D leaf and the 5-D one; the op)
    "pad_cl": (lambda a, b: _cl(a), lambda F, x: F.pad(x, (1, 1, 2, 0))),
    "pad_cl_mixed": (lambda a, b: _cl(a), lambda F, x: F.pad(x, (-1, 2, 0, -1), value=0.5)),
    "pad_cl_crop": (lambda a, b: _cl(a), lambda F, x: F.pad(x, (-1, -1, 0, -2))),
    "pad_transposed_crop": (lambda a, b: a.transpose(2, 3), lambda F, x: F.pad(x, (-1, 0))),
    "pad_transposed_zero": (lambda a, b: a.transpose(2, 3), lambda F, x: F.pad(x, (0, 0))),
    "pad_matrix_transposed": (lambda a, b: a[0, 0].t(), lambda F, x: F.pad(x, (1, 1))),
    "pad_cl_channels": (lambda a, b: _cl(a), lambda F, x: F.pad(x, (0, 0, 0, 0, 1, 1))),
    "pad_cl3d": (lambda a, b: _cl3d(b), lambda F, x: F.pad(x, (1, 1))),
    "reflect_cl": (lambda a, b: _cl(a), lambda F, x: F.pad(x, (1, 1, 2, 0), mode="reflect")),
    "reflect_cl_zero": (lambda a, b: _cl(a), lambda F, x: F.pad(x, (0, 0, 0, 0), mode="reflect")),
    "reflect_cl_crop_last": (lambda a, b: _cl(a), lambda F, x: F.pad(x, (1, 0, -1, 0), mode="reflect")),
    "replicate_cl": (lambda a, b: _cl(a), lambda F, x: F.pad(x, (2, 0, -1, 1), mode="replicate")),
    "circular_cl": (lambda a, b: _cl(a), lambda F, x: F.pad(x, (-1, 2, 1, 0), mode="circular")),
    "reflect_cl3d": (lambda a, b: _cl3d(b), lambda F, x: F.pad(x, (1, 1, 1, 1, 1, 1), mode="reflect")),
    "reflect_transposed": (lambda a, b: a.transpose(2, 3), lambda F, x: F.pad(x, (1, 1, 1, 1), mode="reflect")),
    "roll_cl": (lambda a, b: _cl(a), lambda F, x: x.roll(1, -1)),
    "roll_cl_by_size": (lambda a, b: _cl(a[..., :2]), lambda F, x: x.roll(2, -1)),  # an empty piece: row-major
    "roll_cl_two_dims": (lambda a, b: _cl(a), lambda F, x: x.roll((1, 0), (2, 3))),
    "roll_transposed": (lambda a, b: a.transpose(1, 3), lambda F, x: x.roll(1, 1)),
    "roll_cl3d_sliced": (lambda a, b: _cl3d(b)[..., ::2], lambda F, x: x.roll(1, -1)),
    "roll_expanded": (lambda a, b: a[:, :1].expand(2, 8, 6, 5), lambda F, x: x.roll(1, 1)),
    "pixel_shuffle_cl": (lambda a, b: _cl(a), lambda F, x: F.pixel_shuffle(x, 2)),
    "pixel_shuffle_cl_one_channel": (lambda a, b: _cl(a[:, :4]), lambda F, x: F.pixel_shuffle(x, 2)),
    "pixel_shuffle_cl_one_sample": (lambda a, b: _cl(a[:1]), lambda F, x: F.pixel_shuffle(x, 2)),
    "pixel_shuffle_transposed": (lambda a, b: a.transpose(2, 3), lambda F, x: F.pixel_shuffle(x, 2)),
    "pixel_unshuffle_cl": (lambda a, b: _cl(a[..., :4, :4]), lambda F, x: F.pixel_unshuffle(x, 2)),
    "channel_shuffle_cl": (lambda a, b: _cl(a), lambda F, x: F.channel_shuffle(x, 2)),
    "channel_shuffle_cl3d": (lambda a, b: _cl3d(b), lambda F, x: F.channel_shuffle(x, 2)),
    "adaptive_avg_pool2d_cl": (lambda a, b: _cl(a), lambda F, x: F.adaptive_avg_pool2d(x, 2)),
    "adaptive_avg_pool3d_cl3d": (lambda a, b: _cl3d(b), lambda F, x: F.adaptive_avg_pool3d(x, 2)),
    "avg_pool3d_cl3d": (lambda a, b: _cl3d(b), lambda F, x: F.avg_pool3d(x, 2)),
    "avg_pool2d_cl": (lambda a, b: _cl(a), lambda F, x: F.avg_pool2d(x, 2)),
    "rms_norm_cl": (lambda a, b: _cl(a), lambda F, x: F.rms_norm(x, (5,))),
    "rms_norm_cl_two_dims": (lambda a, b: _cl(a), lambda F, x: F.rms_norm(x, (6, 5))),
    "group_norm_cl": (lambda a, b: _cl(a), lambda F, x: F.group_norm(x, 2, x.new_ones(8) * 1.5, x.new_ones(8) * 0.5)),
}


@pytest.mark.parametrize("case", _LAID_OUT)
def test_layout_values_and_gradients_match_torch(case):
    make, op = _LAID_OUT[case]
    res, up = [], None
    for lib in (torch, jitorch):
        a, b = lib.tensor(_X4, requires_grad=True), lib.tensor(_X5, requires_grad=True)
        x = make(a, b)
        y = op(lib.nn.functional, x)
        up = np.random.default_rng(8).standard_normal(tuple(y.shape)).astype(np.float32) if up is None else up
        y.backward(lib.tensor(up))
        res.append((y, x, a.grad if a.grad is not None else b.grad))
    (th, tx, tg), (jt, jx, jg) = res
    assert jt.stride() == th.stride(), f"{case}: strides {jt.stride()}, torch {th.stride()}"
    assert_same(jt.detach(), th.detach(), atol=1e-5, rtol=1e-5, what=case)
    assert_same(jg, tg, atol=1e-5, rtol=1e-5, what=f"{case} gradient")
    assert jt.data_ptr() != jx.data_ptr()  # new memory, as torch's, even where nothing was added


@pytest.mark.parametrize("op", ["pixel_shuffle", "pixel_unshuffle"])
@pytest.mark.parametrize("channels_last", [False, True])
def test_large_pixel_shuffles_match_torch(op, channels_last):
    # Large enough (>= 65536 elements) for the row-major copy that runs one index of the short factor dims at a time.
    x_np = np.random.default_rng(9).standard_normal((2, 16, 64, 32)).astype(np.float32)
    outs = []
    for lib in (torch, jitorch):
        x = lib.tensor(x_np)
        outs.append(getattr(lib.nn.functional, op)(_cl(x) if channels_last else x, 2))
    assert outs[1].stride() == outs[0].stride()
    assert_same(outs[1], outs[0])


def test_row_major_copy_by_slices_equals_numpy_copy():
    from jitorch.ops.movement import CONTIGUOUS

    base = np.arange(1 << 17, dtype=np.float64)
    # short strided trailing dims after a contiguous run of 32 (copied by slices), and two that are not
    cases = (base.reshape(-1, 2, 32).transpose(0, 2, 1), base.reshape(-1, 2, 2, 32).transpose(0, 3, 1, 2),
             base.reshape(-1, 2, 32, 2)[..., :1].transpose(0, 2, 1, 3), base.reshape(-1, 4, 8).transpose(0, 2, 1))
    for a in cases:
        got = CONTIGUOUS.kernel(np, a)
        assert got.flags.c_contiguous and not np.shares_memory(got, a)
        np.testing.assert_array_equal(got, a)


def test_pixel_shuffles_of_channels_last_3d_refuse_as_torch():
    for lib in (torch, jitorch):
        x = _cl3d(lib.tensor(_X5.reshape(2, 3, 4, 4, 6)))
        for fn in (lambda: lib.nn.functional.pixel_shuffle(x, 2), lambda: lib.nn.functional.pixel_unshuffle(x, 2)):
            with pytest.raises(RuntimeError, match="Unsupported memory format. Supports only ChannelsLast"):
                fn()


# -- the helpers behind these layouts ---------------------------------------------------------------------------
_FORMAT_CASES = {
    "row_major": lambda: jitorch.zeros(2, 3, 4, 5), "channels_last": lambda: _cl(jitorch.zeros(2, 3, 4, 5)),
    "cl_one_pixel": lambda: jitorch.empty(2, 3, 1, 1, memory_format=jitorch.channels_last),
    "one_channel": lambda: jitorch.zeros(2, 1, 4, 5), "one_column": lambda: jitorch.zeros(2, 3, 4, 1),
    "cl_one_column": lambda: _cl(jitorch.zeros(2, 3, 4, 1)), "cl3d": lambda: _cl3d(jitorch.zeros(2, 3, 4, 5, 6)),
    "transposed": lambda: jitorch.zeros(2, 5, 4, 3).transpose(1, 3), "empty_cl": lambda: _cl(jitorch.zeros(0, 3, 4, 5)),
    "matrix": lambda: jitorch.zeros(3, 4).t(), "expanded": lambda: jitorch.zeros(2, 1, 4, 5).expand(2, 3, 4, 5),
}


@pytest.mark.parametrize("case", _FORMAT_CASES)
def test_suggested_format_fast_path_agrees_with_the_stride_walk(case):
    from jitorch._memory_format import suggest_memory_format, suggested_format

    t = _FORMAT_CASES[case]()
    assert suggested_format(t) is suggest_memory_format(t)


_ARRAYS = {
    "row_major": lambda: np.arange(24.0).reshape(2, 3, 4), "transposed": lambda: np.arange(24.0).reshape(2, 3, 4).T,
    "reversed": lambda: np.arange(24.0).reshape(2, 3, 4)[::-1, :, ::-2], "fortran": lambda: np.asfortranarray(
        np.arange(12.0).reshape(3, 4)), "broadcast": lambda: np.broadcast_to(np.arange(4.0), (3, 2, 4)),
    "broadcast_middle": lambda: np.broadcast_to(np.arange(6.0).reshape(2, 1, 3), (2, 4, 3)),
    "one_element_broadcast": lambda: np.broadcast_to(np.ones(1), (1, 1)), "scalar": lambda: np.array(3.0),
    "empty": lambda: np.zeros((0, 3)).T, "float32_sliced": lambda: np.arange(20, dtype=np.float32)[::3],
}


@pytest.mark.parametrize("case", _ARRAYS)
def test_clone_and_cast_kernels_equal_preserve_copy(case):
    from jitorch._memory_format import preserve_copy
    from jitorch.ops.movement import CAST, CLONE

    a = _ARRAYS[case]()
    for got, want in ((CLONE.kernel(np, a), preserve_copy(np, a)),
                      (CAST.kernel(np, a, np.float16), preserve_copy(np, a, np.float16))):
        assert got.dtype == want.dtype and got.strides == want.strides and not np.shares_memory(got, a)
        np.testing.assert_array_equal(got, want)
