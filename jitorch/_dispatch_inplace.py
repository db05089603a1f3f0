"""In-place ops at dispatch (`apply_inplace`): torch's refusals (leaves, views made without history, inference
tensors, casts), the write into ``self``, and the history it records: the op's node, or for a write into a view of a
graph tensor the base's rebased history (PyTorch's ``CopySlices``).

>>> import jitorch
>>> x = jitorch.ones(2, requires_grad=True) * 1
>>> type(x.mul_(3).grad_fn).__name__
'MulBackward0'
"""
from __future__ import annotations

import numpy as np

from . import _dispatch as _d  # ``_d.CPU_XP`` through the module: tests swap in a CuPy-surface NumPy there
from ._dispatch import _FROM_NP, _NO_ATTRS, MODES, TENSOR_TYPES, TORCH_TYPE_NAMES, Rerouted, _run_kernel, eager
from ._dispatch_record import record, sync_view
from ._dtype import fills_exactly
from ._memory_format import _non_overlapping_dense
from ._tensor import Tensor
from .runtime.host_pointer import byte_span
from .autograd.grad_mode import GradState
from .autograd.saved_hooks import _stack as _SAVED_HOOKS

__all__ = ["apply_inplace", "writable_plain", "refuse_partial_overlap", "refuse_operand_overlap",
           "refuse_internal_overlap"]


# A row's ufunc (``op.ufunc``) is its kernel on float operands of one dtype or Python numbers (the table's contract,
# which `_dispatch_fast` relies on too); half types have their own rounding rules, so float32/float64 only.
_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))
# NumPy's bounds-only overlap test past its ``__array_function__`` dispatcher (a third of the call's cost): every
# in-place op with a tensor operand asks it.
_may_share_memory = getattr(np.may_share_memory, "_implementation", np.may_share_memory)


def _shown(op):
    # the method the user called: add_/sub_ with alpha run the add_alpha/sub_alpha rows
    return op.name.removesuffix("_alpha")


def writable_plain(self):
    """``self``'s NumPy array when an in-place write into it has nothing to refuse or record, whatever the op: no
    mode active, writable memory, no inference-tensor refusal, and with grad mode on, no gradient through ``self``
    or its base (a view that was taken without history is then written as any other). None otherwise: the general
    path of `apply_inplace` checks. The caller still refuses operands that require grad while grad mode is on."""
    data = self._data
    if type(data) is not np.ndarray or MODES or (self._inference and not GradState.inference):
        return None
    if GradState.enabled and (self._requires_grad or (self._base is not None and self._base._requires_grad)):
        return None
    return data if data.flags.writeable else None


def _ufunc_into(op, self, args, attrs):
    """Write ``op(self, *args)`` straight into ``self`` with the row's ufunc (``out=``): one pass and no temporary
    where the kernel would return a new array to be copied in (``x.add_(1)`` on 2 MB took 3x NumPy's own time).
    Only where that is exactly the kernel: a host float32/float64 ``self``, operands of its dtype or Python
    numbers. False otherwise, for an operand that requires grad in grad mode (its history is the general path's),
    and when the operands do not broadcast into ``self`` (NumPy checks before it writes: the general path then
    raises torch's error). An operand that overlaps ``self`` partially is refused as torch does."""
    x = self._data
    if op.ufunc is None or attrs or type(x) is not np.ndarray or x.dtype not in _FLOATS or _d.CPU_XP is not np:
        return False
    ufunc = getattr(np, op.ufunc)
    operands = [x]
    for a in args:
        if type(a) in TENSOR_TYPES:
            y = a._data
            if type(y) is not np.ndarray or y.dtype != x.dtype or (a._requires_grad and GradState.enabled):
                return False
            if a._base is not None and a._view_ver != a._ver_owner._ver:
                sync_view(a)
            if y is not x and _may_share_memory(x, y):  # (`refuse_operand_overlap`, inline on this hot path)
                refuse_partial_overlap(x, y)
            operands.append(y)
        elif type(a) in (int, float):
            operands.append(a)
        else:
            return False
    if len(operands) != ufunc.nin:
        return False
    try:
        ufunc(*operands, out=x)
    except ValueError:
        return False
    return True


_UFUNCS: dict = {}  # a row's ufunc name -> the NumPy ufunc


def _binary_into(op, self, other):
    """`_ufunc_into` for the hottest in-place call, one operand (``p.add_(u)``, ``x.mul_(0.9)``): the same
    conditions as `writable_plain` and `_ufunc_into` checked inline and the version bumped, one frame where those
    took four (a 32x32 ``add_`` spent twice NumPy's time around it). False where it declines: the general path
    decides then."""
    x = self._data
    if type(x) is not np.ndarray or x.dtype not in _FLOATS or _d.CPU_XP is not np or (
            self._inference and not GradState.inference):
        return False
    grad = GradState.enabled
    if grad and (self._requires_grad or (self._base is not None and self._base._requires_grad)):
        return False
    kind = type(other)
    if kind in TENSOR_TYPES:
        y = other._data
        if type(y) is not np.ndarray or y.dtype != x.dtype or (grad and other._requires_grad):
            return False
        if other._base is not None and other._view_ver != other._ver_owner._ver:
            sync_view(other)
        if y is not x and _may_share_memory(x, y):
            refuse_partial_overlap(x, y)
    elif kind is float or kind is int:
        y = other
    else:
        return False
    ufunc = _UFUNCS.get(op.ufunc)
    if ufunc is None:
        ufunc = _UFUNCS[op.ufunc] = getattr(np, op.ufunc)
    if ufunc.nin != 2 or not x.flags.writeable:
        return False
    try:
        ufunc(x, y, out=x)
    except ValueError:  # (not broadcastable into self: the general path raises torch's error)
        return False
    root = self._ver_owner if self._ver_owner is not None else self  # (`Tensor._bump_version`, inline)
    root._ver += 1
    if root._vc is not None:
        root._vc[0] = root._ver
    return True


def _check_inplace_allowed(op, self):
    if self.grad_fn is None and self._requires_grad:
        raise RuntimeError(f"{_shown(op)}_: a leaf Variable that requires grad is being used in an in-place operation.")
    base = self._base
    if base is not None and base.grad_fn is None and base._requires_grad:
        raise RuntimeError(f"{_shown(op)}_: a view of a leaf Variable that requires grad is being used in an in-place "
                           "operation.")


def _check_cast(op, result, self):
    rd, sd = _FROM_NP[result.dtype], _FROM_NP[self._data.dtype]
    if rd.category > sd.category:
        raise RuntimeError(f"{_shown(op)}_: result type {TORCH_TYPE_NAMES[rd.name]} can't be cast to the desired "
                           f"output type {TORCH_TYPE_NAMES[sd.name]}")
    if result.shape != self._data.shape:
        raise RuntimeError(f"{_shown(op)}_: output with shape {list(self._data.shape)} doesn't match the broadcast "
                           f"shape {list(result.shape)}")


def _detach_history_inplace(self):
    """After a non-differentiable in-place op (``eq_``...), gradients through ``self`` are zero, as in PyTorch."""
    from .ops.inplace_views import ZERO_GRAD, rebase_view

    if self._base is None:
        record(ZERO_GRAD, (self,), _NO_ATTRS, (self,))
    else:
        stand_in = Tensor._make(self._data)
        record(ZERO_GRAD, (self,), _NO_ATTRS, (stand_in,))
        rebase_view(self, stand_in)


def refuse_partial_overlap(dst, src, full_too=False):
    """torch's ``assert_no_partial_overlap`` of a copy's destination and source arrays: refused when both are
    non-overlapping and dense and their memory overlaps, unless exactly (same first byte, extent and strides). A
    strided or broadcast operand is torch's "too hard" case: let through. ``full_too``: ``assert_no_overlap``, which
    refuses the exact overlap as well (``cat``'s out being one of its inputs)."""
    if type(dst) is not np.ndarray or type(src) is not np.ndarray or not (dst.size and src.size):
        return
    if dst is src and not full_too:
        return
    low, high = byte_span(dst)
    src_low, src_high = byte_span(src)
    if src_high <= low or high <= src_low or not (_non_overlapping_dense(dst) and _non_overlapping_dense(src)):
        return
    if low == src_low and high == src_high and dst.strides == src.strides and not full_too:
        return
    raise RuntimeError("unsupported operation: some elements of the input tensor and the written-to tensor refer to a "
                       "single memory location. Please clone() the tensor before performing the operation.")


# Rows whose callers check their operands themselves: an index write refuses any overlap (`_indexing`), a 0-d fill
# value or a mask write's value is read as a number first (``x[x > 2] = x[3]`` runs in torch).
_OWN_OVERLAP_CHECK = frozenset(("index_put", "fill"))


def refuse_operand_overlap(self, operands, op=None, full_too=False):
    """`refuse_partial_overlap` of an in-place op's ``self`` and each tensor among ``operands``, as torch checks
    every input of an in-place kernel: ``x[1:].add_(x[:-1])`` is refused, ``x.add_(x)`` runs (``full_too``: refused
    too, as ``cat`` refuses an out that is one of its inputs)."""
    data = self._data
    if type(data) is not np.ndarray or (op is not None and op.name in _OWN_OVERLAP_CHECK):
        return
    for a in operands:
        if type(a) in TENSOR_TYPES:
            y = a._data
            if (y is not data or full_too) and type(y) is np.ndarray and _may_share_memory(data, y):
                refuse_partial_overlap(data, y, full_too)


def refuse_internal_overlap(name, data):
    """torch's ``assert_no_internal_overlap`` of a written array: a dim of stride 0 and size > 1 (an expanded
    tensor) is refused where torch checks, e.g. ``fill_`` by a tensor (its fill by a number writes through)."""
    if type(data) is np.ndarray and data.size and not data.flags.writeable and any(
            st == 0 and n > 1 for n, st in zip(data.shape, data.strides)):
        raise RuntimeError(f"{name}: unsupported operation: more than one element of the written-to tensor refers "
                           "to a single memory location (an expanded tensor). Please clone() the tensor before "
                           "performing the operation.")


def _write_answer(op, self, answer, cast_check):
    """Write a rerouted result into ``self`` as ``copy_`` does (history included), after torch's checks."""
    answer = answer.to_dense()
    if cast_check:
        _check_cast(op, answer._data, self)
    return self.copy_(answer)


def apply_inplace(op, self, *args, cast_check=True, **attrs):
    """Run ``op(self, *args)`` and write the result into ``self``; records autograd as PyTorch does for in-place ops.

    Writing into a view of a tensor in a graph rebases the base's history (PyTorch's ``CopySlices``).
    """
    if MODES:
        return MODES[-1].dispatch_inplace(op, self, args, attrs)
    if cast_check and len(args) == 1 and not attrs and op.ufunc is not None and _binary_into(op, self, args[0]):
        return self
    tried = False
    if cast_check and op.ufunc is not None and writable_plain(self) is not None:
        # (an optimizer's ``p.add_(u)`` under no_grad, a buffer's update): the ufunc into self's memory, nothing
        # else to do unless an operand requires grad (it declines then, and refuses an operand that overlaps
        # ``self`` partially).
        if _ufunc_into(op, self, args, attrs):
            self._bump_version()
            return self
        tried = True  # (it declined: the general path below need not ask again)
    if not getattr(self._data.flags, "writeable", True):
        from .ops.inplace_views import writable_expanded

        read_only = self._data
        writable_expanded(op, self)
        if op.name == "fill" and self._data is not read_only:
            # torch fills an expanded tensor (one value for every element) but keeps refusing other in-place ops
            # on it: the write goes through a writable view, the tensor keeps its read-only array.
            try:
                return apply_inplace(op, self, *args, cast_check=cast_check, **attrs)
            finally:
                if self._data.base is read_only.base or self._data.base is read_only:
                    self._data = read_only
    if self._inference and not GradState.inference:
        raise RuntimeError("Inplace update to inference tensor outside InferenceMode is not allowed.You can make a "
                           "clone to get a normal tensor before doing inplace update.See "
                           "https://github.com/pytorch/rfcs/pull/17 for more details.")
    grad_needed = GradState.enabled and op.differentiable and (
        self._requires_grad or any(isinstance(a, Tensor) and a._requires_grad for a in args))
    if (self._nograd_view is not None and self._base is not None and GradState.enabled
            and (grad_needed or self._base._requires_grad or any(isinstance(a, Tensor) and a._requires_grad
                                                                  for a in args))):
        # torch cannot rebase a write into a view made without history (or by a custom Function): refused,
        # before the leaf checks, as torch's check_inplace does.
        raise self._nograd_view.error()
    if self._base is not None and self._view_ver != self._ver_owner._ver:
        sync_view(self)
    if GradState.enabled and self._requires_grad:
        _check_inplace_allowed(op, self)
    if not grad_needed:
        if GradState.enabled and self._base is not None and self._base._requires_grad:
            _check_inplace_allowed(op, self)
        refuse_operand_overlap(self, args, op)
        if cast_check and not tried and _ufunc_into(op, self, args, attrs):
            self._bump_version()
            return self
        try:
            result = _run_kernel(op, (self,) + args, attrs)[0]
        except Rerouted as answer:  # a sparse operand (``grad.add_(sparse_grad)``): its answer is copied in
            return _write_answer(op, self, answer.result, cast_check)
        if cast_check:
            _check_cast(op, result, self)
        if self._data.size:  # (an empty expanded tensor's array is read-only: nothing to write)
            self._data[...] = result
        self._bump_version()
        if GradState.enabled and not op.differentiable and self.grad_fn is not None:
            _detach_history_inplace(self)
        return self
    if self._base is not None:
        _check_inplace_allowed(op, self)
    refuse_operand_overlap(self, args, op)
    first = self
    if _SAVED_HOOKS and (op.saves == "inputs" or op.saves == "both"):
        # The hooks pack what the row saves before the write below: they must get the old value, not ``self``.
        first = Tensor._make(self._data.copy())
        first.grad_fn, first._output_nr, first._requires_grad = self.grad_fn, self._output_nr, self._requires_grad
    result = eager(op, (first,) + args, attrs)
    if type(result) is not Tensor:  # a sparse operand's sparse answer (``dense.mul_(sparse)``): written densely
        result = result.to_dense()
    if cast_check:
        _check_cast(op, result._data, self)
    node = result.grad_fn
    if node is not None and node._saved_in is not None and node._saved_in[0] is self:
        # The row saved ``self``, which is about to be overwritten: keep its old value instead.
        old = Tensor._make(self._data.copy())
        old.grad_fn, old._output_nr, old._requires_grad = self.grad_fn, self._output_nr, self._requires_grad
        node.save_inputs((old,) + node._saved_in[1:])
    if self._data.size:
        self._data[...] = result._data
    self._bump_version()
    if node is not None and node._saved_out is not None:
        node.save_output((self,))
    if self._base is None:
        old_fn, self.grad_fn, self._output_nr, self._requires_grad = self.grad_fn, node, 0, True
        if self._retains_grad:
            from .ops.inplace_views import move_retain_grad

            move_retain_grad(self, old_fn)
    else:
        from .ops.inplace_views import rebase_view

        rebase_view(self, result)
    return self


def fill_plain(self, value, key=None):
    """Fill ``self`` (``self[key]`` for a basic subscript tuple) with the checked number ``value`` in place, where
    nothing refuses or records the write (`writable_plain`) and ``ndarray.fill`` stores what the fill row would;
    False otherwise (the caller's general path). ``fill_``, ``zero_`` and ``x[1:3] = 0.0`` of small tensors."""
    data = self._data  # (`writable_plain` and `Tensor._bump_version` inline: a zero_ took twice torch's time)
    if type(data) is not np.ndarray or MODES or (self._inference and not GradState.inference):
        return False
    if GradState.enabled and (self._requires_grad or (self._base is not None and self._base._requires_grad)):
        return False
    if not data.flags.writeable or not fills_exactly(value, data.dtype):
        return False
    (data if key is None else data[key + (Ellipsis,)]).fill(value)
    root = self._ver_owner if self._ver_owner is not None else self
    root._ver += 1
    if root._vc is not None:
        root._vc[0] = root._ver
    return True
