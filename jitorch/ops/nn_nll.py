"""The ``nll_loss`` row with class indices, (N, C) log-probabilities and no class weights (PyTorch's ``nll_loss``,
a gather forward and a scatter into zeros backward), its backward row, and the range check of the targets alone for
compiled losses; re-exported by `nn_fused`.

>>> import jitorch
>>> from jitorch._dispatch import apply
>>> apply(NLL_LOSS, jitorch.tensor([[-1.0, -2.0], [-3.0, -0.5]]), jitorch.tensor([0, 1]), ignore_index=-100,
...       reduction="mean")
tensor(0.7500)
"""
from __future__ import annotations

import ml_dtypes
import numpy as np

from .. import _dispatch
from ..codegen.llvm_cascade import cascade_sum_function, level_power, picked_cascade_function
from ..runtime.host_pointer import data_address
from .._dispatch_fast import keep_result, nothing_records, plain_tensor
from .indexing import largest_unsigned
from .native_call import DATA_OFFSET, HELD, HELD_MAX, held_function, int64, over
from .table import NOT_DIFFERENTIABLE, Opaque, defop

__all__ = ["NLL_LOSS", "NLL_LOSS_BACKWARD", "NLL_CHECK_TARGETS", "CASCADE_DTYPES", "nll_of_rows"]


def _apply(op, *args, **attrs):
    return _dispatch.apply(op, *args, **attrs)


def _nll_targets(xp, target, classes, ignore_index):
    """(int64 targets with ignored entries set to 0, mask of the entries not ignored or None when none is, their
    count): the range check reads one maximum of the targets as unsigned numbers (negative classes are huge ones),
    not a pass per condition; when every target is a class and ``ignore_index`` is none, nothing is ignored (no
    mask to make)."""
    if target.dtype is not _INT64:  # (``astype(copy=False)`` of an int64 array still cost a tenth of a us)
        target = target.astype(np.int64, copy=False)
    if type(target) is np.ndarray and target.size:
        out_of_range = largest_unsigned(target) >= classes
    else:
        out_of_range = bool(xp.count_nonzero(target.view(np.uint64) >= classes))
    if out_of_range:
        bad = target.view(np.uint64) >= classes
        valid = target != ignore_index
        bad &= valid
        if bool(bad.any()):
            raise IndexError(f"Target {int(target[bad].reshape(-1)[0])} is out of bounds.")
    elif not 0 <= ignore_index < classes:
        return target, None, target.size
    else:
        valid = target != ignore_index
    count = int(xp.count_nonzero(valid))
    if count == valid.size:
        return target, None, count
    return xp.where(valid, target, 0), valid, count


_INT64 = np.dtype(np.int64)
_ROWS: dict = {}  # batch size -> a read-only ``arange`` of it, the gather's row indices (small NumPy batches)


def _rows(xp, n):
    """``xp.arange(n)``; for a small NumPy batch, one kept per batch size (its making was a tenth of a small loss)."""
    if xp is not np or n > 4096:
        return xp.arange(n)
    rows = _ROWS.get(n)
    if rows is None:
        if len(_ROWS) >= 64:
            _ROWS.clear()
        rows = _ROWS[n] = np.arange(n)
        rows.flags.writeable = False
    return rows


_ROW_STARTS: dict = {}  # (rows, columns) -> a read-only ``arange(0, rows * columns, columns)``


def _row_starts(n, columns):
    """The flat positions of a small C-contiguous (n, columns) array's rows, kept per shape: ``safe + starts``
    indexes the flat array, quicker than NumPy's indexing by row numbers and targets."""
    starts = _ROW_STARTS.get((n, columns))
    if starts is None:
        if len(_ROW_STARTS) >= 64:
            _ROW_STARTS.clear()
        starts = _ROW_STARTS[n, columns] = np.arange(0, n * columns, columns)
        starts.flags.writeable = False
    return starts


def _nll_kernel(xp, logp, target, ignore_index, reduction):
    safe, valid, count = _nll_targets(xp, target, logp.shape[1], ignore_index)
    if valid is None and reduction != "none" and type(logp) is np.ndarray and (
            total := _picked_total(logp, safe, count)) is not None:
        if reduction == "sum":
            return total.reshape(())
        # The quotient of two float32 numbers taken in double and rounded to float32 is float32's (a double holds
        # more than twice float32's digits, so its rounding never makes a second one differ); the count is exact
        # in the loss's dtype, as ATen's.
        total[0] = total.item() / count
        return total.reshape(())
    if reduction == "mean" and not logp.shape[0]:
        # torch's mean over an empty batch is the positive quiet NaN (its 0 / 0 below would be x86's negative one;
        # a batch whose targets are all ignored is that 0 / 0 in torch too)
        return xp.full((), np.nan, logp.dtype)
    loss = logp[_rows(xp, logp.shape[0]), safe]  # a new array: negated in place
    if valid is None:
        xp.negative(loss, out=loss)
    else:
        loss = xp.where(valid, -loss, 0).astype(logp.dtype, copy=False)
    if reduction == "none":
        return loss
    total = _cascade_sum(loss, valid) if type(loss) is np.ndarray else None
    if total is None:
        total = np.add.reduce(loss) if type(loss) is np.ndarray else loss.sum()  # (ndarray.sum: one frame more)
    if reduction == "sum":
        return total
    if total.dtype in _CASCADE:  # ATen divides by the count in the loss's dtype (a float16 count of 70000 is inf)
        return np.divide(total, np.asarray(count, total.dtype), dtype=total.dtype)
    mean = total / count if count else xp.asarray(np.nan)
    return mean if mean.dtype == logp.dtype else mean.astype(logp.dtype)  # (a float dtype's scalar keeps it)


_CASCADE = {np.dtype(np.float32): "f32", np.dtype(np.float64): "f64", np.dtype(np.float16): "f16",
            np.dtype(ml_dtypes.bfloat16): "bf16"}
CASCADE_DTYPES = frozenset(_CASCADE)  # the dtypes whose (N, C) losses run this row (torch's cascade sum)


_PICKED_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))  # the dtypes `picked_cascade_function` takes
_EXACT_COUNT = 1 << 24  # counts below it are exact float32 numbers


def _cascade_sum(loss, valid):
    """ATen's sum of a batch's losses (`codegen.llvm_cascade`: eight partial sums in the loss's dtype), so the
    reduced loss has torch's bits; None where it does not apply (the caller sums pairwise)."""
    name = _CASCADE.get(loss.dtype)
    fn = cascade_sum_function(name) if name is not None and loss.ndim == 1 else None
    if fn is None:
        return None
    out = np.empty(1, loss.dtype)  # (written, not added into)
    if valid is None:
        values = np.ascontiguousarray(loss)
        fn(data_address(values), None, values.size, _level_power(loss.size), data_address(out))
    else:  # (an ignored entry adds nothing and flushes no partial sum)
        values, positions = np.ascontiguousarray(loss[valid]), np.flatnonzero(valid)
        fn(data_address(values), data_address(positions), values.size, _level_power(loss.size),
           data_address(out))
    return out.reshape(())


def _picked_total(logp, safe, count):
    """The cascade sum of every row's ``-logp[row, safe[row]]`` (no target ignored, each in range) as a
    one-element array, in one native call (`picked_cascade_function`); None where it does not apply (a dtype other
    than float32/float64, a layout with strided columns, a count not exact in float32, an empty batch)."""
    if not 0 < count < _EXACT_COUNT or logp.dtype not in _PICKED_DTYPES or logp.ndim != 2:
        return None
    itemsize = logp.itemsize
    row_stride, column_stride = logp.strides
    if column_stride != itemsize or row_stride % itemsize or row_stride < 0 or type(safe) is not np.ndarray or \
            not safe.flags.c_contiguous:
        return None
    out = np.empty(1, logp.dtype)  # (written, not added into)
    n = logp.shape[0]
    held = _HELD_PICKS.get((logp.dtype, n, row_stride)) if HELD and n < HELD_MAX else None
    if held is None and HELD and n < HELD_MAX:
        if len(_HELD_PICKS) >= 64:
            _HELD_PICKS.clear()
        held = _HELD_PICKS[logp.dtype, n, row_stride] = (
            held_function(picked_cascade_function(_CASCADE[logp.dtype])), int64(n), int64(row_stride // itemsize),
            int64(_level_power(n)))
    if held is not None:  # (the declared call's argument conversion cost twice the kernel on 32 rows)
        fn, rows, stride, power = held
        fn(over(id(logp) + DATA_OFFSET), over(id(safe) + DATA_OFFSET), rows, stride, power,
           over(id(out) + DATA_OFFSET))
    else:
        picked_cascade_function(_CASCADE[logp.dtype])(data_address(logp), data_address(safe), n,
                                                      row_stride // itemsize, _level_power(n), data_address(out))
    return out


# (dtype, rows, row stride) -> the held call of `picked_cascade_function` and its size arguments (`native_call`)
_HELD_PICKS: dict = {}


def _level_power(batch):
    """`level_power`, kept per batch size (its bit arithmetic was a tenth of a small batch's sum)."""
    power = _LEVEL_POWERS.get(batch)
    if power is None:
        if len(_LEVEL_POWERS) >= 64:
            _LEVEL_POWERS.clear()
        power = _LEVEL_POWERS[batch] = level_power(batch)
    return power


_LEVEL_POWERS: dict = {}


def nll_of_rows(logp, target, ignore_index, reduction):
    """``apply(NLL_LOSS, logp, target, ...)`` for a host float (N, C) ``logp`` that a row just made (a view of
    nothing) and a host (N,) class ``target``, with no mode active (the caller checked): the row's kernel and node
    without the dispatcher's checks and frames (a tenth of a 32x32 cross entropy)."""
    if target._base is not None and target._view_ver != target._ver_owner._ver:
        _dispatch.sync_view(target)
    out = _nll_kernel(np, logp._data, target._data, ignore_index, reduction)
    return keep_result(NLL_LOSS, (logp, target), {"ignore_index": ignore_index, "reduction": reduction},
                       out if type(out) is np.ndarray else np.asarray(out), logp._requires_grad)


def _nll_backward(ctx, g):
    target = ctx.inputs[1]
    a = ctx.attrs
    shape = ctx.in_meta[0][0]
    if nothing_records() and type(g) in _dispatch.TENSOR_TYPES and type(target) in _dispatch.TENSOR_TYPES and \
            type(g._data) is np.ndarray and type(target._data) is np.ndarray:
        # Nothing to record: the backward row's kernel on the arrays (`fast_keep`'s call) without the dispatch.
        return plain_tensor(_nll_backward_kernel(np, g._data, target._data, shape, **a)), None
    return _apply(NLL_LOSS_BACKWARD, g, target, shape=shape, **a), None


def _nll_backward_kernel(xp, g, target, shape, ignore_index, reduction):
    safe, valid, count = _nll_targets(xp, target, shape[1], ignore_index)
    out = xp.zeros(shape, dtype=g.dtype)
    if valid is None and reduction != "none" and type(out) is np.ndarray and out.dtype in _PICKED_DTYPES and \
            g.ndim == 0 and 0 < count < _EXACT_COUNT and type(safe) is np.ndarray:
        # A mean's or sum's one gradient value, taken on Python floats: NumPy's 0-d arithmetic cost 0.7 us of a
        # small backward. The quotient of a float32 gradient by an exact count taken in double and rounded to
        # float32 as it is stored is float32's (see `_nll_kernel`); float64's is the double quotient itself.
        divisor = count if reduction == "mean" else 1
        out.reshape(-1)[safe + _row_starts(shape[0], shape[1])] = -float(g) / divisor
        return out
    rows = _rows(xp, shape[0])
    if reduction == "none":
        scale = -g
    else:
        divisor = count if reduction == "mean" else 1
        # An all-ignored batch has a NaN loss but zero gradients (PyTorch's total_weight == 0 case).
        scale = -g / max(divisor, 1)
    if valid is None:
        out[rows, safe] = scale  # (a mean's or sum's one value broadcast by the assignment)
    else:
        out[rows[valid], safe[valid]] = xp.broadcast_to(scale, (shape[0],))[valid]
    return out


def _nll_backward_backward(ctx, gg):
    # The backward is linear in g, and its transpose is the forward itself: gather gg at the targets.
    a = ctx.attrs
    gg_g = _apply(NLL_LOSS, gg, ctx.inputs[1], ignore_index=a["ignore_index"], reduction=a["reduction"]) \
        if ctx.needs_grad(0) else None
    return gg_g, None


NLL_LOSS = defop("nll_loss", _nll_kernel, _nll_backward, Opaque("gather"), saves="inputs", meta=True,
                 save_if=lambda needs: (False, True), grad_name="NllLossBackward0")


def _nll_check_kernel(xp, target, classes, ignore_index):
    """nll_loss's range check alone, for a compiled loss whose gather runs in fused kernels: the targets (a copy, as
    int64) or the eager error."""
    _nll_targets(xp, target, classes, ignore_index)
    return target.astype(np.int64, copy=True)


NLL_CHECK_TARGETS = defop("nll_check_targets", _nll_check_kernel, NOT_DIFFERENTIABLE,
                          Opaque("a range check read on the host"))
NLL_LOSS_BACKWARD = defop("nll_loss_backward", _nll_backward_kernel, _nll_backward_backward, Opaque("scatter"),
                          saves="inputs", save_if=lambda needs: (False, True))
