"""FlexAttention's user functions over the ``(batch, head, q_idx, kv_idx)`` grid.

A ``score_mod(score, b, h, q_idx, kv_idx)`` or ``mask_mod(b, h, q_idx, kv_idx)`` is written for one element; PyTorch
maps it over the grid with four nested ``vmap``s. Most such functions are tensor expressions (comparisons, arithmetic,
a captured table indexed by the index arguments), and for those one call with index tensors shaped to broadcast
against each other (``b: (B,1,1,1)``, ``h: (1,H,1,1)``, ``q_idx: (1,1,Q,1)``, ``kv_idx: (1,1,1,KV)``) gives every
element at once. A function that cannot run that way (``table[q_idx][kv_idx]`` indexes the wrong dim of a broadcast
index, a value used as a Python bool) raises or returns more than four dims; it then runs through ``jitorch.vmap``,
one element's semantics exactly as PyTorch's.
"""
from __future__ import annotations

import enum
import inspect
from collections.abc import Callable

from ... import _dtype
from ..._ranges import arange
from ..._tensor import Tensor
from ..._vmap import vmap

__all__ = ["noop_mask", "_identity", "_score_mod_signature", "_mask_mod_signature", "_ModificationType",
           "_get_mod_type", "_vmap_for_bhqkv", "apply_over_grid"]

_score_mod_signature = Callable[[Tensor, Tensor, Tensor, Tensor, Tensor], Tensor]
_mask_mod_signature = Callable[[Tensor, Tensor, Tensor, Tensor], Tensor]


def _identity(score, batch, head, token_q, token_kv):
    """The score_mod that leaves scores as they are."""
    return score


def noop_mask(batch, head, token_q, token_kv):
    """The mask_mod that allows every position (a 0-d ``True``)."""
    return batch.new_ones(size=(), dtype=_dtype.bool, device=batch.device)


class _ModificationType(enum.Enum):
    """A score_mod takes the score and four indices (5 positional args); a mask_mod only the indices (4)."""

    SCORE_MOD = 1
    MASK_MOD = 2
    UNKNOWN = 3


def _get_mod_type(fn):
    """SCORE_MOD or MASK_MOD by the number of positional arguments without defaults, as PyTorch counts them."""
    code = getattr(fn, "__code__", None)
    if code is not None:
        positional = code.co_argcount - len(getattr(fn, "__defaults__", None) or ())
    else:
        positional = sum(1 for p in inspect.signature(fn).parameters.values() if p.default is inspect.Parameter.empty)
    if positional not in (4, 5):
        raise AssertionError(f"Expected 4 or 5 positional args, got {positional}")
    return _ModificationType.SCORE_MOD if positional == 5 else _ModificationType.MASK_MOD


def _vmap_for_bhqkv(fn, prefix, suffix=(), out_dims=0, group_dim=False):
    """``fn`` mapped over the kv, q, head (and group) and batch dims, innermost first, as PyTorch's helper."""
    dims = [(None, None, None, 0), (None, None, 0, None), (None, 0, None, None)]
    if group_dim:
        dims.append((None, 0, None, None))
    dims.append((0, None, None, None))
    for d in dims:
        fn = vmap(fn, in_dims=tuple(prefix) + d + tuple(suffix), out_dims=out_dims)
    return fn


def grid_indices(shape, device):
    """The four index vectors ``arange(B), arange(H), arange(Q), arange(KV)`` (int64, as PyTorch's eager path)."""
    return tuple(arange(n, device=device) for n in shape)


def _broadcasts_to(out_shape, shape):
    if len(out_shape) > len(shape):
        return False
    return all(o in (1, s) for o, s in zip(reversed(tuple(out_shape)), reversed(tuple(shape))))


def apply_over_grid(fn, leading, indices, shape):
    """``fn(*leading, b, h, q_idx, kv_idx)`` for every element of the ``shape`` grid, as a ``shape`` tensor.

    ``leading`` is ``(scores,)`` for a score_mod (mapped with the grid) and ``()`` for a mask_mod. One broadcast call
    first; where that raises or gives a result that is not one value per element, the vmapped call (PyTorch's
    semantics, one element at a time).
    """
    b, h, q, kv = indices
    grid = (b.view(-1, 1, 1, 1), h.view(1, -1, 1, 1), q.view(1, 1, -1, 1), kv.view(1, 1, 1, -1))
    try:
        out = fn(*leading, *grid)
    except (RuntimeError, IndexError, TypeError, ValueError):
        out = None  # NOTE: a genuine bug in fn raises again from the vmapped call below, with vmap's context
    if isinstance(out, Tensor) and _broadcasts_to(out.shape, shape):
        return out.expand(shape)
    mapped = _vmap_for_bhqkv(fn, prefix=(0,) * len(leading))
    return mapped(*leading, b, h, q, kv)
