"""The sorted head of a small float32 top-k through one generated LLVM function (`codegen.llvm_topk`): per row, the
first ``m`` positions of the stable order (descending with NaN first, or ascending with NaN last) and whether two of
those ``m`` values are equal.

`ops.sorting`'s top-k sorted whole rows for this and gathered the head's values to look for ties: a dozen NumPy
calls, 20 us for a 32x32 ``topk(3)`` where torch takes 4. Here each row is one pass keeping its ``m`` best positions
by insertion (a later equal value goes after an earlier one: the stable order), then one look at neighbours.

>>> x = np.array([[1.0, np.nan, 3.0, 3.0, -1.0]], np.float32)
>>> order, tied = topk_head(x, 3, descending=True)
>>> order.tolist(), tied.tolist()
([[1, 2, 3]], [True])
>>> topk_head(x, 2, descending=False)[1] is None  # (-1.0, 1.0): no ties
True
"""
from __future__ import annotations

import numpy as np

from ..codegen.llvm_topk import topk_head_function
from ..runtime.host_pointer import data_address
from .native_call import DATA_OFFSET, HELD, HELD_MAX, held_function, int64, over
from .sorting_gather import take_checked

__all__ = ["topk_head", "topk_rows", "MAX_HEAD"]

# The insertion shifts up to ``m`` positions per element: beyond a few dozen a sort is cheaper.
MAX_HEAD = 16
_F32 = np.dtype(np.float32)


def topk_head(a, m, descending):
    """``(order, tied)`` for a C-contiguous float32 NumPy array ``a`` along its last dim: ``order`` the first ``m``
    positions of each row's stable order (int64, C-contiguous), ``tied`` (bool, ``a.shape[:-1]``) whether two of the
    values they pick are equal (NaNs equal), or None where no row has such a pair. None where this does not apply
    (other arrays, ``m`` outside ``[1, min(n, MAX_HEAD)]``): the caller sorts."""
    if type(a) is not np.ndarray or a.dtype != _F32 or not a.ndim or not a.flags.c_contiguous:
        return None
    held = _held_heads.get((a.shape, m, descending)) if HELD else None
    if held is not None:  # (a small head of a shape seen before: its checks passed, its call kept)
        fn, lead, rows, n, held_m = held
        order = np.empty(lead + (m,), np.int64)
        tied = np.empty(lead, np.bool_)
        any_tied = fn(over(id(a) + DATA_OFFSET), over(id(order) + DATA_OFFSET), over(id(tied) + DATA_OFFSET), rows, n,
                      held_m)
        return (order, tied) if any_tied else (order, None)
    n = a.shape[-1]
    if not 1 <= m <= min(n, MAX_HEAD):
        return None
    lead = a.shape[:-1]
    rows = a.size // n
    order = np.empty(lead + (m,), np.int64)
    tied = np.empty(lead, np.bool_)
    if HELD and a.size < HELD_MAX:  # (a declared call's argument conversion: 0.8 us of a 32x32 topk's 9)
        if len(_held_heads) >= 256:
            _held_heads.clear()
        held = _held_heads[a.shape, m, descending] = (
            held_function(topk_head_function(bool(descending))), lead, int64(rows), int64(n), int64(m))
        any_tied = held[0](over(id(a) + DATA_OFFSET), over(id(order) + DATA_OFFSET), over(id(tied) + DATA_OFFSET),
                           *held[2:])
    else:
        any_tied = topk_head_function(bool(descending))(data_address(a), data_address(order), data_address(tied),
                                                        rows, n, m)
    return (order, tied) if any_tied else (order, None)


_held_heads: dict = {}  # (shape, m, descending) -> (held call, lead shape, rows, n, m as `int64`s)


def topk_rows(a, k, largest):
    """``(values, indices)`` of a sorted top-k of ``a`` along its last dim as the top-k index row and the gather row
    give them, from `topk_head`, where its head holds no tie (no order of torch's selection to replay: the first
    ``k`` are the only answer); None otherwise (``a`` it does not take, a tie), for the caller's rows. One pass and
    one gather: the two rows' dispatch cost twice the kernels on a 32x32 ``topk(3)``."""
    head = topk_head(a, min(k + 1, a.shape[-1]), largest) if type(a) is np.ndarray and a.ndim else None
    if head is None or head[1] is not None:
        return None
    order = head[0][..., :k].copy()  # (C-contiguous, as the index row's output)
    return take_checked(a, order, a.ndim - 1), order
