"""``jitorch.nn.attention.flex_attention`` against PyTorch's: values, log-sum-exp, gradients, BlockMask bookkeeping.

PyTorch on the CPU refuses flex_attention's backward, so gradients are compared with its eager math path
(``torch._higher_order_ops.flex_attention.math_attention``, what the public function runs uncompiled) under autograd;
values are compared with the public function itself (its eager debug path: the same math, without compiling).
"""
from __future__ import annotations

import math
import re
import warnings

import numpy as np
import pytest
import torch
import torch.nn.attention.flex_attention as tfa
from torch._higher_order_ops.flex_attention import math_attention

import jitorch
import jitorch.nn.attention.flex_attention as jfa

LIBS = {"torch": (torch, tfa), "jitorch": (jitorch, jfa)}


@pytest.fixture(autouse=True)
def _torch_eager_flex(monkeypatch):
    # PyTorch compiles flex_attention on every call otherwise (seconds each); the debug path is the same math.
    monkeypatch.setattr(tfa, "_FLEX_ATTENTION_DISABLE_COMPILE_DEBUG", True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        warnings.simplefilter("ignore", FutureWarning)
        yield


def _both(array, requires_grad=False):
    """The same values as a torch and a jitorch tensor."""
    return (torch.tensor(array, requires_grad=requires_grad),
            jitorch.tensor(array, requires_grad=requires_grad))


def _np(t):
    return t.detach().numpy()


# Each case builds (score_mod, mask_mod) for one library from captured tensors given as that library's tensors.
def _causal(lib, caps):
    return None, lambda b, h, q, kv: q >= kv


def _sliding_window(lib, caps):
    _, fa = LIBS[lib]
    return None, fa.and_masks(lambda b, h, q, kv: q >= kv, lambda b, h, q, kv: q - kv <= 3)


def _document(lib, caps):
    doc = caps["doc"]
    return None, lambda b, h, q, kv: doc[b, q] == doc[b, kv]


def _prefix_lm(lib, caps):
    _, fa = LIBS[lib]
    return None, fa.or_masks(lambda b, h, q, kv: kv < 4, lambda b, h, q, kv: q >= kv)


def _alibi(lib, caps):
    slopes = caps["slopes"]
    return (lambda s, b, h, q, kv: s + slopes[h] * (kv - q)), None


def _softcap(lib, caps):
    mod, _ = LIBS[lib]
    return (lambda s, b, h, q, kv: 5.0 * mod.tanh(s / 5.0)), (lambda b, h, q, kv: q >= kv)


def _relative_bias(lib, caps):
    table = caps["rel"]
    return (lambda s, b, h, q, kv: s + table[q - kv + 12]), None


def _head_bias_table(lib, caps):
    # A (H, Q, KV) table indexed element-wise: one broadcast gather.
    bias = caps["head_bias"]
    return (lambda s, b, h, q, kv: s + bias[h, q, kv]), None


def _chained_index(lib, caps):
    # table[q][kv] does not broadcast (it indexes the gathered rows' first dim): jitorch's vmapped path. PyTorch's
    # own backward fails on that spelling (its vmap rule for the index gradient), so its side reads table[q, kv].
    table = caps["pair"]
    if lib == "torch":
        return (lambda s, b, h, q, kv: s + table[q, kv]), None
    return (lambda s, b, h, q, kv: s + table[q][kv]), None


def _masked_rows(lib, caps):
    # Queries 1, 5, 9 may attend to nothing: zero output, lse -inf, zero gradient.
    return None, lambda b, h, q, kv: (q >= kv) & (q % 4 != 1)


CASES = {"causal": _causal, "sliding_window": _sliding_window, "document": _document, "prefix_lm": _prefix_lm,
         "alibi": _alibi, "softcap": _softcap, "relative_bias": _relative_bias, "head_bias_table": _head_bias_table,
         "chained_index": _chained_index, "masked_rows": _masked_rows}

B, H, Q, KV, E = 2, 3, 10, 13, 8


def _captures(rng):
    """Captured tensors of every case; floats need a gradient."""
    doc = np.array([[0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2], [0, 1, 1, 1, 1, 1, 2, 2, 2, 3, 3, 3, 3]])
    floats = {"slopes": rng.standard_normal(H).astype(np.float32),
              "rel": rng.standard_normal(Q + KV - 1).astype(np.float32),
              "head_bias": rng.standard_normal((H, Q, KV)).astype(np.float32),
              "pair": rng.standard_normal((Q, KV)).astype(np.float32)}
    pairs = {name: _both(a, requires_grad=True) for name, a in floats.items()}
    pairs["doc"] = _both(doc)
    return ({k: v[0] for k, v in pairs.items()}, {k: v[1] for k, v in pairs.items()}, floats)


def _inputs(rng, hq=H, hkv=H, q_len=Q, kv_len=KV, e=E, ev=E, dtype=np.float32):
    arrays = [rng.standard_normal(s).astype(dtype) for s in ((B, hq, q_len, e), (B, hkv, kv_len, e),
                                                             (B, hkv, kv_len, ev))]
    pairs = [_both(a, requires_grad=True) for a in arrays]
    return [p[0] for p in pairs], [p[1] for p in pairs]


def _block_masks(mask_mods, q_len, kv_len, block_size):
    if mask_mods["torch"] is None:
        return None, None
    return (tfa.create_block_mask(mask_mods["torch"], B, None, q_len, kv_len, device="cpu", BLOCK_SIZE=block_size),
            jfa.create_block_mask(mask_mods["jitorch"], B, None, q_len, kv_len, device="cpu", BLOCK_SIZE=block_size))


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("block_size", [4, (2, 8)])
def test_values_lse_and_gradients_match_torch(case, block_size):
    rng = np.random.default_rng(7)
    tcaps, jcaps, floats = _captures(rng)
    mods = {"torch": CASES[case]("torch", tcaps), "jitorch": CASES[case]("jitorch", jcaps)}
    (tq, tk, tv), (jq, jk, jv) = _inputs(rng)
    tbm, jbm = _block_masks({lib: m[1] for lib, m in mods.items()}, Q, KV, block_size)

    t_out, t_aux = tfa.flex_attention(tq.detach(), tk.detach(), tv.detach(), score_mod=mods["torch"][0],
                                      block_mask=tbm, return_aux=tfa.AuxRequest(lse=True))
    j_out, j_aux = jfa.flex_attention(jq, jk, jv, score_mod=mods["jitorch"][0], block_mask=jbm,
                                      return_aux=jfa.AuxRequest(lse=True))
    assert j_out.dtype is jitorch.float32 and tuple(j_out.shape) == tuple(t_out.shape)
    np.testing.assert_allclose(_np(j_out), t_out.numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(_np(j_aux.lse), t_aux.lse.numpy(), rtol=1e-5, atol=1e-5)
    assert j_aux.max_scores is None

    # Gradients of a random upstream gradient of the output and of the log-sum-exp.
    grad_out = rng.standard_normal(t_out.shape).astype(np.float32)
    grad_lse = rng.standard_normal(t_aux.lse.shape).astype(np.float32)
    finite = np.isfinite(t_aux.lse.numpy())
    grad_lse = np.where(finite, grad_lse, 0.0).astype(np.float32)  # no gradient through an lse of -inf
    tbm_tuple = (tbm or tfa._create_empty_block_mask(tq, tk)).as_tuple()
    t_o, t_lse2, _ = math_attention(tq, tk, tv, mods["torch"][0] or tfa._identity, tbm_tuple, 1 / math.sqrt(E), {})
    t_lse = t_lse2 * math.log(2)
    (t_o * torch.tensor(grad_out)).sum().add((torch.where(torch.tensor(finite), t_lse, 0) *
                                               torch.tensor(grad_lse)).sum()).backward()
    j_loss = (j_out * jitorch.tensor(grad_out)).sum() + (j_aux.lse.masked_fill(jitorch.tensor(~finite), 0)
                                                          * jitorch.tensor(grad_lse)).sum()
    j_loss.backward()
    for t, j in ((tq, jq), (tk, jk), (tv, jv)):
        np.testing.assert_allclose(_np(j.grad), t.grad.numpy(), rtol=1e-4, atol=1e-5)
    for name in floats:
        if tcaps[name].grad is None:
            assert jcaps[name].grad is None or not _np(jcaps[name].grad).any(), name
        else:
            np.testing.assert_allclose(_np(jcaps[name].grad), tcaps[name].grad.numpy(), rtol=1e-4, atol=1e-5)
    if case == "masked_rows":
        assert not _np(j_out)[:, :, 1::4].any() and np.isneginf(_np(j_aux.lse)[:, :, 1::4]).all()
        assert np.isfinite(_np(jq.grad)).all() and not _np(jq.grad)[:, :, 1::4].any()


def test_mask_in_block_mask_or_in_score_mod_gives_the_same_values():
    rng = np.random.default_rng(1)
    (tq, tk, tv), (jq, jk, jv) = _inputs(rng)
    window = jfa.create_block_mask(lambda b, h, q, kv: (q - kv).abs() <= 2, None, None, Q, KV, device="cpu",
                                   BLOCK_SIZE=4)
    by_mask = jfa.flex_attention(jq, jk, jv, block_mask=window, return_lse=True)
    by_score = jfa.flex_attention(jq, jk, jv, score_mod=lambda s, b, h, q, kv: jitorch.where(
        (q - kv).abs() <= 2, s, float("-inf")), return_lse=True)
    expected = tfa.flex_attention(tq.detach(), tk.detach(), tv.detach(), score_mod=lambda s, b, h, q, kv: torch.where(
        (q - kv).abs() <= 2, s, float("-inf")), return_lse=True)
    for a, b, t in zip(by_mask, by_score, expected):
        np.testing.assert_array_equal(_np(a), _np(b))
        np.testing.assert_allclose(_np(a), t.numpy(), rtol=1e-5, atol=1e-5)


def test_gqa_with_head_dependent_score_mod():
    rng = np.random.default_rng(2)
    (tq, tk, tv), (jq, jk, jv) = _inputs(rng, hq=6, hkv=2, ev=5)
    t_mod = lambda s, b, h, q, kv: s + 0.1 * h  # noqa: E731
    j_mod = lambda s, b, h, q, kv: s + 0.1 * h  # noqa: E731
    expected = tfa.flex_attention(tq.detach(), tk.detach(), tv.detach(), score_mod=t_mod, enable_gqa=True, scale=0.3)
    out = jfa.flex_attention(jq, jk, jv, score_mod=j_mod, enable_gqa=True, scale=0.3)
    np.testing.assert_allclose(_np(out), expected.numpy(), rtol=1e-5, atol=1e-5)
    grad = rng.standard_normal(expected.shape).astype(np.float32)
    t_out = math_attention(tq, tk, tv, t_mod, tfa._create_empty_block_mask(tq, tk).as_tuple(), 0.3, {})[0]
    (t_out * torch.tensor(grad)).sum().backward()
    (out * jitorch.tensor(grad)).sum().backward()
    for t, j in ((tq, jq), (tk, jk), (tv, jv)):
        np.testing.assert_allclose(_np(j.grad), t.grad.numpy(), rtol=1e-4, atol=1e-5)


def test_key_value_batch_of_one_serves_every_query_batch():
    rng = np.random.default_rng(3)
    tq, jq = _both(rng.standard_normal((B, H, 8, E)).astype(np.float32))
    tk, jk = _both(rng.standard_normal((1, H, 8, E)).astype(np.float32))
    tbm = tfa.create_block_mask(lambda b, h, q, kv: q >= kv, B, H, 8, 8, device="cpu", BLOCK_SIZE=4)
    jbm = jfa.create_block_mask(lambda b, h, q, kv: q >= kv, B, H, 8, 8, device="cpu", BLOCK_SIZE=4)
    np.testing.assert_allclose(_np(jfa.flex_attention(jq, jk, jk, block_mask=jbm)),
                               tfa.flex_attention(tq, tk, tk, block_mask=tbm).numpy(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", [np.float16, "bfloat16"])
def test_half_inputs_computed_in_float32(dtype):
    rng = np.random.default_rng(4)
    arrays = [rng.standard_normal((1, 2, 9, E)).astype(np.float32) for _ in range(3)]
    tdt, jdt = (torch.float16, jitorch.float16) if dtype is np.float16 else (torch.bfloat16, jitorch.bfloat16)
    t = [torch.tensor(a).to(tdt) for a in arrays]
    j = [jitorch.tensor(a).to(jdt) for a in arrays]
    expected, t_lse = tfa.flex_attention(*t, score_mod=lambda s, b, h, q, kv: s * 0.5, return_lse=True)
    out, lse = jfa.flex_attention(*j, score_mod=lambda s, b, h, q, kv: s * 0.5, return_lse=True)
    assert out.dtype is jdt and lse.dtype is jitorch.float32
    np.testing.assert_allclose(_np(out.float()), expected.float().numpy(), rtol=1e-2, atol=1e-2)
    np.testing.assert_allclose(_np(lse), t_lse.numpy(), rtol=1e-5, atol=1e-5)


def test_gradcheck_and_double_backward_in_float64():
    rng = np.random.default_rng(5)
    q, k, v = (jitorch.tensor(rng.standard_normal(s), requires_grad=True)
               for s in ((1, 2, 5, 3), (1, 2, 6, 3), (1, 2, 6, 2)))
    table = jitorch.tensor(rng.standard_normal(11), requires_grad=True)
    bm = jfa.create_block_mask(lambda b, h, qi, kv: (qi >= kv) & (qi != 2), 1, 2, 5, 6, device="cpu", BLOCK_SIZE=2)

    def attend(q, k, v, table):
        out, aux = jfa.flex_attention(q, k, v, score_mod=lambda s, b, h, qi, kv: 2.0 * jitorch.tanh(
            (s + table[qi - kv + 5]) / 2.0), block_mask=bm, return_aux=jfa.AuxRequest(lse=True))
        return out, aux.lse.masked_fill(aux.lse.isneginf(), 0.0)

    assert jitorch.autograd.gradcheck(attend, (q, k, v, table))
    assert jitorch.autograd.gradgradcheck(attend, (q, k, v, table))
    out = attend(q, k, v, table)[0]
    assert out.dtype is jitorch.float64 and not _np(out)[:, :, 2].any()


def test_compiled_matches_eager():
    rng = np.random.default_rng(6)
    _, (jq, jk, jv) = _inputs(rng)
    slopes = jitorch.tensor(rng.standard_normal(H).astype(np.float32))
    bm = jfa.create_block_mask(lambda b, h, q, kv: q >= kv, None, None, Q, KV, device="cpu", BLOCK_SIZE=4)

    def attend(q, k, v):
        return jfa.flex_attention(q, k, v, score_mod=lambda s, b, h, qi, kv: s + slopes[h] * (kv - qi),
                                  block_mask=bm)

    slopes.requires_grad_(True)
    grad = jitorch.tensor(rng.standard_normal((B, H, Q, E)).astype(np.float32))
    grads = []
    for fn in (attend, jitorch.compile(attend)):
        out = fn(jq, jk, jv)
        (out * grad).sum().backward()
        grads.append([_np(out)] + [_np(t.grad) for t in (jq, jk, jv, slopes)])
        for t in (jq, jk, jv, slopes):
            t.grad = None
    for eager, compiled in zip(*grads):
        np.testing.assert_allclose(compiled, eager, rtol=1e-4, atol=1e-5)


def test_create_mask_of_mask_mod_and_score_mod():
    for fn_t, fn_j in ((lambda b, h, q, kv: (q >= kv) & (h != 1), lambda b, h, q, kv: (q >= kv) & (h != 1)),
                       (lambda s, b, h, q, kv: torch.where(q + b > kv, s, float("-inf")),
                        lambda s, b, h, q, kv: jitorch.where(q + b > kv, s, float("-inf")))):
        expected = tfa.create_mask(fn_t, 2, 3, 5, 7, device="cpu")
        got = jfa.create_mask(fn_j, 2, 3, 5, 7, device="cpu")
        assert got.dtype is jitorch.bool and tuple(got.shape) == tuple(expected.shape)
        np.testing.assert_array_equal(_np(got), expected.numpy())
    got = jfa.create_mask(jfa.noop_mask, None, None, 3, 4, device="cpu")
    assert tuple(got.shape) == (1, 1, 3, 4) and _np(got).all()


def _same_block_mask(t_bm, j_bm):
    """Every tensor field equal (int32), the same shape, sparsity, printing and repr."""
    for name in tfa.BlockMask._TENSOR_ATTRS:
        t, j = getattr(t_bm, name), getattr(j_bm, name)
        assert (t is None) == (j is None), name
        if t is not None:
            assert j.dtype is jitorch.int32 and tuple(j.shape) == tuple(t.shape), name
            np.testing.assert_array_equal(_np(j), t.numpy(), err_msg=name)
    assert j_bm.shape == t_bm.shape and j_bm.seq_lengths == t_bm.seq_lengths and j_bm.BLOCK_SIZE == t_bm.BLOCK_SIZE
    assert j_bm.sparsity() == t_bm.sparsity()
    assert str(j_bm) == str(t_bm)
    assert repr(j_bm).replace("jitorch.Size", "S") == repr(t_bm).replace("torch.Size", "S")
    np.testing.assert_array_equal(_np(j_bm.to_dense()), t_bm.to_dense().numpy())


MASK_MODS = {"causal": lambda b, h, q, kv: q >= kv, "band": lambda b, h, q, kv: (q - kv).abs() <= 5,
             "per_head": lambda b, h, q, kv: (kv <= q + 3 * h) & (b + kv != 7), "none": lambda b, h, q, kv: q < 0}


@pytest.mark.parametrize("mask", sorted(MASK_MODS))
@pytest.mark.parametrize("dims, block_size, separate", [((2, 3, 37, 29), 8, True), ((None, 2, 16, 40), (4, 16), True),
                                                         ((2, None, 33, 33), 128, True), ((1, 2, 20, 24), 4, False)])
def test_block_mask_fields_printing_and_sparsity(mask, dims, block_size, separate):
    fn = MASK_MODS[mask]
    t_bm = tfa.create_block_mask(fn, *dims, device="cpu", BLOCK_SIZE=block_size, separate_full_blocks=separate)
    j_bm = jfa.create_block_mask(fn, *dims, device="cpu", BLOCK_SIZE=block_size, separate_full_blocks=separate)
    _same_block_mask(t_bm, j_bm)
    assert j_bm.mask_mod is fn
    for grid, limit in ((-1, 4), (3, 1), ((2, 5), 10)):
        assert j_bm.to_string(grid_size=grid, limit=limit) == t_bm.to_string(grid_size=grid, limit=limit)
    assert j_bm.as_tuple()[:2] == t_bm.as_tuple()[:2] and len(j_bm.as_tuple()) == len(t_bm.as_tuple())


@pytest.mark.parametrize("index", [0, -1, (1, 2), (slice(0, 2), slice(1, 3)), (-2, slice(None), [0, 3]),
                                   (slice(None), 0, slice(1, 4))])
def test_block_mask_indexing(index):
    fn = MASK_MODS["per_head"]
    t_bm = tfa.create_block_mask(fn, 2, 3, 37, 29, device="cpu", BLOCK_SIZE=8)
    j_bm = jfa.create_block_mask(fn, 2, 3, 37, 29, device="cpu", BLOCK_SIZE=8)

    def as_lib(i, lib):
        return lib.tensor(i) if isinstance(i, list) else i

    t_index = tuple(as_lib(i, torch) for i in index) if isinstance(index, tuple) else index
    j_index = tuple(as_lib(i, jitorch) for i in index) if isinstance(index, tuple) else index
    _same_block_mask(t_bm[t_index], j_bm[j_index])
    with pytest.raises(RuntimeError, match="Cannot use mask_mod from a sliced BlockMask"):
        jfa.flex_attention(*(jitorch.ones(1, 1, 37, 4) for _ in range(3)), block_mask=j_bm[j_index])


def test_block_mask_from_kv_blocks_and_adjust():
    kv_num = np.array([[[1, 2, 0], [3, 1, 2]]], dtype=np.int32)
    kv_idx = np.array([[[[2, 0, 1], [1, 0, 2], [0, 1, 2]], [[2, 1, 0], [0, 2, 1], [1, 2, 0]]]], dtype=np.int32)
    full_num = np.array([[[1, 0, 1], [0, 0, 1]]], dtype=np.int32)
    full_idx = np.array([[[[1, 0, 2], [0, 1, 2], [2, 0, 1]], [[0, 1, 2], [0, 1, 2], [0, 1, 2]]]], dtype=np.int32)
    t_args = [torch.tensor(a) for a in (kv_num, kv_idx, full_num, full_idx)]
    j_args = [jitorch.tensor(a) for a in (kv_num, kv_idx, full_num, full_idx)]
    for kwargs in ({}, {"BLOCK_SIZE": (4, 2), "seq_lengths": (11, 5)}):
        t_bm = tfa.BlockMask.from_kv_blocks(*t_args, **kwargs)
        j_bm = jfa.BlockMask.from_kv_blocks(*j_args, **kwargs)
        _same_block_mask(t_bm, j_bm)
        assert j_bm.mask_mod is jfa.noop_mask
    _same_block_mask(t_bm._adjust(7, 3), j_bm._adjust(7, 3))
    _same_block_mask(tfa.BlockMask.from_kv_blocks(*t_args[:2], compute_q_blocks=False),
                     jfa.BlockMask.from_kv_blocks(*j_args[:2], compute_q_blocks=False))
    moved = j_bm.to("cpu")
    assert moved.mask_mod is j_bm.mask_mod and moved.shape == j_bm.shape


def test_adjusted_block_mask_attends_like_torch():
    rng = np.random.default_rng(8)
    t_bm = tfa.create_block_mask(MASK_MODS["causal"], 1, 1, 16, 16, device="cpu", BLOCK_SIZE=4)._adjust(9, 12)
    j_bm = jfa.create_block_mask(MASK_MODS["causal"], 1, 1, 16, 16, device="cpu", BLOCK_SIZE=4)._adjust(9, 12)
    arrays = [rng.standard_normal((1, 2, n, 4)).astype(np.float32) for n in (9, 12, 12)]
    expected = tfa.flex_attention(*(torch.tensor(a) for a in arrays), block_mask=t_bm)
    got = jfa.flex_attention(*(jitorch.tensor(a) for a in arrays), block_mask=j_bm)
    np.testing.assert_allclose(_np(got), expected.numpy(), rtol=1e-5, atol=1e-5)


def _errors(lib):
    mod, fa = LIBS[lib]
    r = mod.randn
    bm = fa.create_block_mask(lambda b, h, q, kv: q >= kv, 1, 1, 8, 8, device="cpu", BLOCK_SIZE=4)
    return {
        "3d": lambda: fa.flex_attention(r(2, 3, 4), r(2, 3, 4), r(2, 3, 4)),
        "embed_dim": lambda: fa.flex_attention(r(1, 2, 3, 4), r(1, 2, 3, 5), r(1, 2, 3, 4)),
        "heads": lambda: fa.flex_attention(r(1, 4, 3, 4), r(1, 2, 3, 4), r(1, 2, 3, 4)),
        "gqa_groups": lambda: fa.flex_attention(r(1, 4, 3, 4), r(1, 3, 3, 4), r(1, 3, 3, 4), enable_gqa=True),
        "batch": lambda: fa.flex_attention(r(2, 2, 3, 4), r(1, 2, 3, 4), r(1, 2, 3, 4)),
        "mask_batch": lambda: fa.flex_attention(r(2, 2, 8, 4), r(1, 2, 8, 4), r(1, 2, 8, 4), block_mask=bm),
        "mask_too_small": lambda: fa.flex_attention(r(1, 2, 9, 4), r(1, 2, 9, 4), r(1, 2, 9, 4), block_mask=bm),
        "mask_too_large": lambda: fa.flex_attention(r(1, 2, 6, 4), r(1, 2, 8, 4), r(1, 2, 8, 4), block_mask=bm),
        "lse_and_aux": lambda: fa.flex_attention(r(1, 2, 8, 4), r(1, 2, 8, 4), r(1, 2, 8, 4), return_lse=True,
                                                 return_aux=fa.AuxRequest(lse=True)),
        "score_mod_as_mask": lambda: fa.create_block_mask(lambda s, b, h, q, kv: s, 1, 1, 8, 8, device="cpu"),
        "arity": lambda: fa.create_mask(lambda b, h: b, 1, 1, 8, 8, device="cpu"),
        "or_masks": lambda: fa.or_masks(lambda b, h, q, kv: q >= kv, 3),
    }


@pytest.mark.parametrize("name", sorted(_errors("jitorch")))
def test_errors_match_torch(name):
    with pytest.raises(Exception) as expected:
        _errors("torch")[name]()
    with pytest.raises(type(expected.value)) as got:
        _errors("jitorch")[name]()
    # PyTorch's message, ours may go on to name the shapes; function reprs differ only by address.
    def normalized(e):
        return re.sub(r" at 0x[0-9a-f]+", "", str(e))

    assert normalized(got.value).startswith(normalized(expected.value)), str(got.value)


def test_errors_name_the_shapes():
    r = jitorch.randn
    with pytest.raises(NotImplementedError, match=r"query \[2, 3, 4\]"):
        jfa.flex_attention(r(2, 3, 4), r(2, 3, 4), r(2, 3, 4))
    with pytest.raises(ValueError, match=r"key \[1, 2, 3, 4\] and value \[1, 2, 5, 4\]"):
        jfa.flex_attention(r(1, 2, 3, 4), r(1, 2, 3, 4), r(1, 2, 5, 4))


def test_return_lse_warns_once_and_aux_fields():
    q = jitorch.randn(1, 2, 4, 3)
    jfa._WARNINGS_SHOWN.discard("deprecated_return_lse")
    with pytest.warns(FutureWarning, match="return_lse is deprecated"):
        out, lse = jfa.flex_attention(q, q, q, return_lse=True)
    assert tuple(lse.shape) == (1, 2, 4) and lse.dtype is jitorch.float32
    out2, aux = jfa.flex_attention(q, q, q, return_aux=jfa.AuxRequest())
    assert aux == jfa.AuxOutput() and _np(out2).tolist() == _np(out).tolist()


def test_float64_values_and_gradients_match_torch():
    rng = np.random.default_rng(9)
    (tq, tk, tv), (jq, jk, jv) = _inputs(rng, dtype=np.float64)
    t_slopes, j_slopes = _both(rng.standard_normal(H), requires_grad=True)
    t_bm = tfa.create_block_mask(MASK_MODS["band"], B, H, Q, KV, device="cpu", BLOCK_SIZE=4)
    j_bm = jfa.create_block_mask(MASK_MODS["band"], B, H, Q, KV, device="cpu", BLOCK_SIZE=4)
    t_out = math_attention(tq, tk, tv, lambda s, b, h, q, kv: s + t_slopes[h] * (kv - q), t_bm.as_tuple(), 0.7, {})[0]
    j_out = jfa.flex_attention(jq, jk, jv, score_mod=lambda s, b, h, q, kv: s + j_slopes[h] * (kv - q),
                               block_mask=j_bm, scale=0.7)
    assert j_out.dtype is jitorch.float64
    np.testing.assert_allclose(_np(j_out), _np(t_out), rtol=1e-12, atol=1e-12)
    grad = rng.standard_normal(t_out.shape)
    (t_out * torch.tensor(grad)).sum().backward()
    (j_out * jitorch.tensor(grad)).sum().backward()
    for t, j in ((tq, jq), (tk, jk), (tv, jv), (t_slopes, j_slopes)):
        np.testing.assert_allclose(_np(j.grad), t.grad.numpy(), rtol=1e-10, atol=1e-12)


def test_mask_mod_that_does_not_broadcast_runs_per_element():
    allowed = np.random.default_rng(10).random((9, 11)) < 0.6
    t_table, j_table = _both(allowed)
    t_bm = tfa.create_block_mask(lambda b, h, q, kv: t_table[q][kv], 1, 2, 9, 11, device="cpu", BLOCK_SIZE=4)
    j_bm = jfa.create_block_mask(lambda b, h, q, kv: j_table[q][kv], 1, 2, 9, 11, device="cpu", BLOCK_SIZE=4)
    _same_block_mask(t_bm, j_bm)
