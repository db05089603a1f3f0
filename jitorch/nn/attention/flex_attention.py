"""``torch.nn.attention.flex_attention``: attention whose scores a user function modifies or masks.

``flex_attention(q, k, v, score_mod, block_mask)`` computes ``softmax(score_mod(q @ k^T * scale)) @ v`` where
``score_mod(score, b, h, q_idx, kv_idx)`` is written for one score (a relative bias, ALiBi, a soft cap) and the
block mask's ``mask_mod(b, h, q_idx, kv_idx)`` says which positions may attend (causal, sliding window, documents).
It is PyTorch's eager math path built from jitorch ops, so gradients reach the query, key, value and any tensor the
functions capture (a learnable bias table), double backward works and ``jitorch.compile`` traces it: scores are
computed in float32 (float64 for float64 queries), a query row that may attend to nothing gives zeros and a
log-sum-exp of ``-inf``. Unlike PyTorch on the CPU, which refuses, backward is supported. The functions run over the
whole grid at once where they broadcast (`_flex_mods`); the tile structure of a BlockMask is bookkeeping that GPU
kernels skip by, and PyTorch's CPU kernels (and this one) read only its ``mask_mod``.

>>> import jitorch
>>> from jitorch.nn.attention.flex_attention import create_block_mask, flex_attention
>>> q = k = v = jitorch.ones(1, 2, 8, 4)
>>> causal = create_block_mask(lambda b, h, q_idx, kv_idx: q_idx >= kv_idx, 1, 1, 8, 8, device="cpu")
>>> flex_attention(q, k, v, score_mod=lambda s, b, h, qi, ki: s * 0.5, block_mask=causal).shape
jitorch.Size([1, 2, 8, 4])
"""
from __future__ import annotations

import math
import typing
import warnings

from ... import _dtype
from ..._pointwise import where
from ..._tensor import Tensor
# NOTE: the private names are imported by user code from PyTorch's module, so they are re-exported here.
from ._flex_block_mask import (_DEFAULT_SPARSE_BLOCK_SIZE, _LARGE_SPARSE_BLOCK_SIZE, BlockMask,  # noqa: F401
                               _convert_mask_to_block_mask, _create_sparse_block_from_block_mask, _dense_to_ordered,
                               _ordered_to_dense, _round_up_to_multiple, _sliced_mask_mod_error, _transpose_ordered)
from ._flex_mods import (_get_mod_type, _identity, _mask_mod_signature, _ModificationType,  # noqa: F401
                         _score_mod_signature, _vmap_for_bhqkv, apply_over_grid, grid_indices, noop_mask)

__all__ = ["BlockMask", "flex_attention", "AuxOutput", "AuxRequest", "FlexKernelOptions", "create_block_mask",
           "create_mask", "or_masks", "and_masks", "noop_mask"]

# PyTorch's switch to run score/mask mods uncompiled for debugging; jitorch always runs them eagerly.
_FLEX_ATTENTION_DISABLE_COMPILE_DEBUG = False
_WARNINGS_SHOWN: set = set()


class FlexKernelOptions(typing.TypedDict, total=False):
    """Options of PyTorch's generated kernels (block sizes, warps, backends); accepted and not needed here."""

    BACKEND: str
    PRESCALE_QK: bool
    ROWS_GUARANTEED_SAFE: bool
    BLOCKS_ARE_CONTIGUOUS: bool
    WRITE_DQ: bool
    FORCE_USE_FLEX_ATTENTION: bool


class AuxRequest(typing.NamedTuple):
    """Which auxiliary outputs `flex_attention` returns: the log-sum-exp and/or the row maxima of the scores."""

    lse: bool = False
    max_scores: bool = False


class AuxOutput(typing.NamedTuple):
    """`flex_attention`'s auxiliary outputs; a field not requested is None."""

    lse: Tensor | None = None
    max_scores: Tensor | None = None


def _warn_once(key, message, category=UserWarning):
    if key not in _WARNINGS_SHOWN:
        warnings.warn(message, category, stacklevel=3)
        _WARNINGS_SHOWN.add(key)


def or_masks(*mask_mods):
    """The mask_mod allowing a position where any of ``mask_mods`` does.

    >>> import jitorch
    >>> either = or_masks(lambda b, h, q, kv: q == kv, lambda b, h, q, kv: kv == 0)
    >>> create_mask(either, 1, 1, 2, 2)[0, 0].tolist()
    [[True, False], [True, True]]
    """
    if not all(callable(m) for m in mask_mods):
        raise RuntimeError(f"All inputs should be callable mask_mods: {mask_mods}")

    def or_mask(b, h, q_idx, kv_idx):
        result = b.new_zeros((), dtype=_dtype.bool)
        for mask in mask_mods:
            result = result | mask(b, h, q_idx, kv_idx)
        return result

    return or_mask


def and_masks(*mask_mods):
    """The mask_mod allowing a position where all of ``mask_mods`` do.

    >>> import jitorch
    >>> both = and_masks(lambda b, h, q, kv: q >= kv, lambda b, h, q, kv: kv > 0)
    >>> create_mask(both, 1, 1, 2, 2)[0, 0].tolist()
    [[False, False], [False, True]]
    """
    if not all(callable(m) for m in mask_mods):
        raise RuntimeError(f"All inputs should be callable mask_mods: {mask_mods}")

    def and_mask(b, h, q_idx, kv_idx):
        result = b.new_ones((), dtype=_dtype.bool)
        for mask in mask_mods:
            result = result & mask(b, h, q_idx, kv_idx)
        return result

    return and_mask


def _default_device(device):
    if device is not None:
        return device
    from ...accelerator import current_accelerator

    return current_accelerator() or "cpu"


def create_mask(mod_fn, B, H, Q_LEN, KV_LEN, device=None):  # noqa: N803 - PyTorch's argument names
    """The dense ``(B, H, Q_LEN, KV_LEN)`` bool mask of a mask_mod, or of a score_mod (True where it is not -inf).

    ``B``/``H`` of None mean 1 (a mask shared by every batch/head).

    >>> create_mask(lambda b, h, q, kv: q >= kv, None, None, 2, 3)[0, 0].tolist()
    [[True, False, False], [True, True, False]]
    """
    device = _default_device(device)
    shape = (B if B is not None else 1, H if H is not None else 1, Q_LEN, KV_LEN)
    indices = grid_indices(shape, device)
    if _get_mod_type(mod_fn) is _ModificationType.SCORE_MOD:
        from ..._creation_filled import zeros

        out = apply_over_grid(mod_fn, (zeros(*shape, device=device),), indices, shape)
        return ~out.isneginf()
    return apply_over_grid(mod_fn, (), indices, shape).contiguous()


def create_block_mask(mask_mod, B, H, Q_LEN, KV_LEN, device=None,  # noqa: N803 - PyTorch's argument names
                      BLOCK_SIZE=_DEFAULT_SPARSE_BLOCK_SIZE, _compile=False, separate_full_blocks=True,
                      compute_dq_write_order=False, dq_kv_order=True):
    """The `BlockMask` of ``mask_mod(b, h, q_idx, kv_idx)`` over ``(B, H, Q_LEN, KV_LEN)`` in tiles of ``BLOCK_SIZE``.

    ``BLOCK_SIZE`` is one int or ``(Q_BLOCK, KV_BLOCK)``; ``B``/``H`` of None give a mask shared by all batches/heads.
    With ``separate_full_blocks`` (the default) wholly allowed tiles are listed apart from partial ones.

    >>> mask = create_block_mask(lambda b, h, q, kv: q >= kv, None, None, 4, 4, BLOCK_SIZE=2)
    >>> mask.kv_num_blocks.tolist(), round(mask.sparsity(), 1)
    ([[[1, 1]]], 25.0)
    """
    device = _default_device(device)
    if _get_mod_type(mask_mod) is not _ModificationType.MASK_MOD:
        raise AssertionError(f"create-block_mask requires a mask_mod function! Got {mask_mod}")
    q_block, kv_block = (BLOCK_SIZE, BLOCK_SIZE) if isinstance(BLOCK_SIZE, int) else BLOCK_SIZE
    if _compile:
        warnings.warn("_compile flag on create_block_mask was originally added to work around a torch.compile "
                      "limitation. That limitation has since been addressed. So, to compile create_block_mask, we "
                      "suggest doing torch.compile(create_block_mask). This still works for now, but will be removed "
                      "in the future.", DeprecationWarning, stacklevel=2)
    if not isinstance(dq_kv_order, bool):
        raise ValueError("dq_kv_order must be a bool when using create_block_mask")
    if compute_dq_write_order:
        raise NotImplementedError("create_block_mask: compute_dq_write_order=True prepares the deterministic "
                                  "block-sparse FLASH backward of CUDA kernels, which jitorch does not have; leave it "
                                  "False")
    mask = create_mask(mask_mod, B, H, Q_LEN, KV_LEN, device)
    tiles = _convert_mask_to_block_mask(mask, Q_BLOCK_SIZE=q_block, KV_BLOCK_SIZE=kv_block,
                                        separate_full_blocks=separate_full_blocks)
    return _create_sparse_block_from_block_mask(tiles, mask_mod, (Q_LEN, KV_LEN), q_block, kv_block)


def _create_empty_block_mask(query, key):
    """The BlockMask of no mask: one tile covering everything (PyTorch's stand-in for ``block_mask=None``)."""
    from ..._creation_filled import ones, zeros

    return BlockMask.from_kv_blocks(ones(1, 1, 1, dtype=_dtype.int32, device=query.device),
                                    zeros(1, 1, 1, 1, dtype=_dtype.int32, device=query.device),
                                    BLOCK_SIZE=_LARGE_SPARSE_BLOCK_SIZE, seq_lengths=(1, 1))


def flex_attention(query, key, value, score_mod=None, block_mask=None, scale=None, enable_gqa=False,
                   return_lse=False, kernel_options=None, *, return_aux=None):
    """``softmax(score_mod(query @ key^T * scale) masked by block_mask.mask_mod) @ value`` (see the module notes).

    ``query (B, Hq, L, E)``, ``key (B, Hkv, S, E)``, ``value (B, Hkv, S, Ev)``; with ``enable_gqa`` each key/value
    head serves ``Hq // Hkv`` query heads. ``scale`` defaults to ``1 / sqrt(E)``. Returns the output ``(B, Hq, L, Ev)``
    in the query's dtype; with ``return_aux=AuxRequest(lse=True, max_scores=...)`` also an `AuxOutput`, with the
    deprecated ``return_lse=True`` the log-sum-exp ``(B, Hq, L)`` itself.

    >>> import jitorch
    >>> q = jitorch.randn(1, 2, 4, 8)
    >>> causal = create_block_mask(lambda b, h, qi, kv: qi >= kv, None, None, 4, 4, BLOCK_SIZE=2)
    >>> flex_attention(q, q, q, score_mod=lambda s, b, h, qi, kv: s - (qi - kv).abs(), block_mask=causal).shape
    jitorch.Size([1, 2, 4, 8])
    """
    _check_inputs(query, key, value, block_mask, enable_gqa)
    score_mod = _identity if score_mod is None else score_mod
    block_mask = _create_empty_block_mask(query, key) if block_mask is None else block_mask
    if block_mask.mask_mod is _sliced_mask_mod_error:
        raise RuntimeError("Cannot use mask_mod from a sliced BlockMask")
    _check_mask_lengths(query, key, block_mask)
    if scale is None:
        scale = 1.0 / math.sqrt(query.size(-1))
    if query.device != block_mask.kv_num_blocks.device:
        raise RuntimeError(f"Expect q/k/v and block_mask to be on the same device but got {query.device} and "
                           f"{block_mask.kv_num_blocks.device}.")
    if return_lse and return_aux is not None:
        raise ValueError("Cannot specify both return_lse and return_aux. return_lse is deprecated, please use "
                         "return_aux=AuxRequest(lse=True) instead.")
    if return_lse:
        _warn_once("deprecated_return_lse", "return_lse is deprecated and will be removed in v2.10. Please use "
                   "return_aux=AuxRequest(lse=True) instead.", FutureWarning)
    _check_kernel_options(kernel_options)
    out, lse, max_scores = _math_attention(query, key, value, score_mod, block_mask.mask_mod, scale)
    if return_aux is not None:
        return out, AuxOutput(lse=lse if return_aux.lse or return_lse else None,
                              max_scores=max_scores if return_aux.max_scores else None)
    return (out, lse) if return_lse else out


def _math_attention(query, key, value, score_mod, mask_mod, scale):
    """Output, log-sum-exp and row maxima of the scores, in PyTorch's working precision, from differentiable ops."""
    working = _dtype.float64 if query.dtype is _dtype.float64 else _dtype.float32
    group = query.size(1) // key.size(1)
    if group > 1:
        key, value = key.repeat_interleave(group, dim=1), value.repeat_interleave(group, dim=1)
    if key.size(0) != query.size(0):  # a key/value batch of one serving every query batch
        key = key.expand(query.size(0), *key.shape[1:])
        value = value.expand(query.size(0), *value.shape[1:])
    scores = (query.to(working) @ key.to(working).transpose(-2, -1)) * scale
    shape = tuple(scores.shape)
    indices = grid_indices(shape, scores.device)
    post = apply_over_grid(score_mod, (scores,), indices, shape)
    if mask_mod is not noop_mask:
        allowed = apply_over_grid(mask_mod, (), indices, shape)
        post = where(allowed, post, scores.new_full((), float("-inf"), dtype=post.dtype))
    if shape[-1] == 0:
        raise IndexError(f"flex_attention: key has no positions (kv_len=0, scores {list(shape)}): max(): Expected "
                         "reduction dim 3 to have non-zero size.")
    # Softmax is shift-invariant, so the shift by the row maximum needs no gradient of its own.
    row_max = post.detach().amax(dim=-1, keepdim=True)
    no_key = row_max.isneginf()  # rows where every position is masked: PyTorch's safe softmax gives zeros
    shift = row_max.masked_fill(no_key, 0.0)
    exps = (post - shift).exp()
    sums = exps.sum(dim=-1, keepdim=True).masked_fill(no_key, 1.0)
    weights = exps / sums
    lse = (shift + sums.log()).masked_fill(no_key, float("-inf")).squeeze(-1)
    out = weights.to(query.dtype) @ value.to(query.dtype)
    return out, lse, post.amax(dim=-1)


def _check_inputs(query, key, value, block_mask, enable_gqa):
    for name, t in (("query", query), ("key", key), ("value", value)):
        if not isinstance(t, Tensor):
            raise TypeError(f"flex_attention: {name} must be a Tensor, got {type(t).__name__}")
    if query.device != key.device or query.device != value.device:
        raise ValueError(f"Expected query, key, and value to have the same device type, but got query.device: "
                         f"{query.device}, key.device: {key.device}, and value.device: {value.device} instead.")
    if query.dim() < 2 or key.dim() < 2 or value.dim() < 2:
        raise ValueError(f"Expected query, key, and value to all be  at least 2 dimensional, but got query.dim: "
                         f"{query.dim()}, key.dim: {key.dim()} and value.dim: {value.dim()} instead.")
    if query.size(-1) != key.size(-1):
        raise ValueError(f"Expect query and key/value to have the same embedding dimension but got "
                         f"E={query.size(-1)} and E={key.size(-1)}.")
    if query.dim() != 4 or key.dim() != 4 or value.dim() != 4:
        raise NotImplementedError(f"NYI: query, key, and value must be 4D tensors (B, H, L, E); got query "
                                  f"{list(query.shape)}, key {list(key.shape)}, value {list(value.shape)}")
    if key.size(-2) != value.size(-2):
        raise ValueError(f"flex_attention: key and value must have the same sequence length, but got key "
                         f"{list(key.shape)} and value {list(value.shape)}")
    hq, hkv = query.size(1), key.size(1)
    if not enable_gqa and hq != hkv:
        raise ValueError(f"Expect query and key/value to have the same number of heads but got Hq={hq} and "
                         f"Hkv={hkv}. Try setting enable_gqa=True for GQA.")
    if enable_gqa and hq % hkv != 0:
        raise ValueError(f"Expect number of query heads to be a multiple of kv heads for GQA but got Hq={hq} and "
                         f"Hkv={hkv}.")
    if query.size(0) != key.size(0):
        if block_mask is None:
            raise ValueError(f"Expect query and key/value to have the same batch size, or non-none block_mask, but "
                             f"got block_mask=None, Bq={query.size(0)}, and Bkv={key.size(0)}.")
        if block_mask.kv_num_blocks.size(0) != query.size(0):
            raise ValueError(f"Expect query and key/value to have the same batch size, or block_mask and query to "
                             f"have the same batch size, but got Bq={query.size(0)}, Bkv={key.size(0)}, "
                             f"B_block_mask={block_mask.kv_num_blocks.size(0)}.")
        if key.size(0) != 1:
            raise RuntimeError(f"Bq and Bkv must broadcast. Got Bq={query.size(0)} and Bkv={key.size(0)}")


def _check_mask_lengths(query, key, block_mask):
    if block_mask.BLOCK_SIZE == (_LARGE_SPARSE_BLOCK_SIZE, _LARGE_SPARSE_BLOCK_SIZE):
        return  # the stand-in for no mask fits every length
    q_len, kv_len = block_mask.shape[-2], block_mask.shape[-1]
    if query.size(-2) > q_len or key.size(-2) > kv_len:
        raise ValueError(f"block_mask was created for block_mask.shape={block_mask.shape} but got "
                         f"q_len={query.size(-2)} and kv_len={key.size(-2)}. As the block mask was created for a "
                         "smaller length than you're using it for, you likely need to create a new block mask.")
    if query.size(-2) < q_len or key.size(-2) < kv_len:
        raise ValueError(f"block_mask was created for block_mask.shape={block_mask.shape} but got "
                         f"q_len={query.size(-2)} and kv_len={key.size(-2)}. As the block mask was created for a "
                         "larger length than you're using it for, you can either 1. create a new block mask with the "
                         "correct length, or 2. 'adjust' the existing block mask to the correct length by calling "
                         "block_mask._adjust(q_len, kv_len). This essentially 'crops' the block mask to the upper "
                         "left corner, which does not work for all mask_mods!")


_BACKENDS = ("AUTO", "TRITON", "FLASH", "TRITON_DECODE")


def _check_kernel_options(kernel_options):
    options = dict(kernel_options or {})
    if "BACKEND" in options and options.get("FORCE_USE_FLEX_ATTENTION", False):
        raise RuntimeError("BACKEND cannot be combined with legacy FORCE_USE_FLEX_ATTENTION. BACKEND supersedes the "
                           "legacy knob; please drop FORCE_USE_FLEX_ATTENTION and only specify the desired BACKEND.")
    if "BACKEND" in options and options["BACKEND"] not in _BACKENDS:
        raise ValueError(f"Invalid BACKEND value '{options['BACKEND']}'. Must be one of {_BACKENDS}")
