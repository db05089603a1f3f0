"""A CPU graph's records as the items `_native.NativeReplay` plans: what each step is, what it reads and writes.

`_classify` turns one record into items: ``ew`` (an elementwise step, fusible), ``red`` (a reduction), ``gemm`` (a
matrix product), ``kern`` (a kernel built whole: row ops, copies into slices, loss kernels), ``copy`` (the restore
prologue), ``draw`` (a random draw run before the native call) or ``py`` (the recorded closure, with the reason the
native backend refused it). `_joins` / `_note` decide which consecutive ``ew`` items share one loop.

>>> import numpy as np
>>> from jitorch.ops.table import OPS
>>> from jitorch.cpu._recorder import Record
>>> x, out = np.zeros((2, 3), np.float32), np.empty((2, 3), np.float32)
>>> [(it.kind, it.reads[0] is x, it.writes[0] is out)
...  for it in _classify(Record("kernel", None, "", OPS["softmax"], [x], (), None, {"dim": 1}, [out]))]
[('kern', True, True)]
"""
from __future__ import annotations

import numpy as np

from ..ops.random_ops import CONSTANT_DRAWS, RANDOM_ROWS
from ._lower import COPY_ROWS, NotLowerable, batched_matmul, column_sum, copy_kernel, element_strides, \
    elementwise, linear, linear_backward, matmul, reduction, view_of
from ._lower_nll import nll_loss, nll_loss_backward
from ._lower_kernels import KERNEL_ROWS
from ._lower_rows import ROW_OPS, layer_norm_backward, row_op


class _Item:
    __slots__ = ("kind", "rec", "payload", "reads", "writes", "reason", "check")

    def __init__(self, kind, rec, payload=None, reads=(), writes=(), reason=None, check=None):
        self.kind, self.rec, self.payload, self.reason = kind, rec, payload, reason
        self.reads, self.writes = list(reads), list(writes)
        self.check = check  # (callable, array it reads): run before the replay, the array unchanged during it


def _key(array, shape):
    root, offset = view_of(array)
    return id(root), offset, element_strides(array, shape), array.dtype


def _part(rec, kind, payload):
    if kind == "gemm":
        _no_overlap(rec, [payload["a"], payload["b"]], payload["c"])
        return _Item("gemm", rec, payload, [payload["a"], payload["b"]], [payload["c"]])
    if kind == "red":
        kernel, a, out = payload
        _no_overlap(rec, [a], out)
        return _Item("red", rec, kernel, [a], [out])
    return _Item("ew", rec, payload, [a for a in payload.operands if isinstance(a, np.ndarray)], [payload.out])


def _kernel_item(rec, kernel, arrays, writes, check=None):
    """A whole-kernel item: it reads every array it does not write."""
    return _Item("kern", rec, (kernel, arrays), [a for a in arrays if not any(a is w for w in writes)], writes,
                 check=check)


def _classify(rec):
    """The `_Item` s of one record (a ``linear`` is a product and a fusible bias add); refusals are Python items."""
    if rec.kind == "draw" or (rec.kind == "kernel" and rec.op in CONSTANT_DRAWS):
        # Its operand only carries a dtype: it draws before the native call (`_draws_in_order` keeps the order).
        return [_Item("draw", rec)]
    if rec.kind == "kernel" and rec.op in RANDOM_ROWS:
        return [_Item("py", rec, reason="a random draw from computed values (it reruns in its place)")]
    if rec.kind == "restore":
        return [_Item("copy", rec, None, [rec.datas[0]], [rec.outs[0]])]
    name = getattr(rec.op, "name", None)
    try:
        if name == "linear":
            return [_part(rec, kind, payload) for kind, payload in linear(rec)]
        if name == "linear_backward":
            parts = [column_sum(p, np.ones((1, p[1].shape[0]), p[1].dtype)) if k == "red" else (k, p)
                     for k, p in linear_backward(rec)]
            return [_part(rec, kind, payload) for kind, payload in parts]
        if name == "matmul" and rec.kind == "kernel" and min(getattr(d, "ndim", 0) for d in rec.datas) >= 2 and \
                max(d.ndim for d in rec.datas) > 2:
            return [_part(rec, "gemm", spec) for spec in batched_matmul(rec)]
        if name in COPY_ROWS and rec.kind == "kernel":
            return [_Item("kern", rec, (copy_kernel(dst, value), [dst, value]), [value], [dst])
                    for dst, value in COPY_ROWS[name](rec)]
        if name == "native_layer_norm_backward":
            return [_Item("kern", rec, (kernel, arrays), arrays[n:], arrays[:n])
                    for (kernel, arrays), n in zip(layer_norm_backward(rec), (1, 2))]
        if name in ("nll_loss", "nll_loss_backward") and rec.kind == "kernel":
            low = (nll_loss if name == "nll_loss" else nll_loss_backward)(rec)
            return [_kernel_item(rec, *lowered, check=(low.check, low.target) if i == 0 else None)
                    for i, lowered in enumerate(low.kernels)]
        if name in KERNEL_ROWS and rec.kind == "kernel":
            return [_kernel_item(rec, *lowered) for lowered in KERNEL_ROWS[name](rec)]
        if name in ROW_OPS:
            kernel, arrays = row_op(rec)
            n = len(rec.outs)
            return [_Item("kern", rec, (kernel, arrays), arrays[n:], arrays[:n])]
    except NotLowerable as e:
        return [_Item("py", rec, reason=str(e))]
    return [_classify_one(rec)]


def _classify_one(rec):
    try:
        if rec.op is not None and rec.op.pointwise:
            item = elementwise(rec)
            out_key = _key(item.out, item.shape)
            for a in item.operands:
                if isinstance(a, np.ndarray):
                    k = _key(a, item.shape)
                    if k[0] == out_key[0] and k != out_key:
                        raise NotLowerable(f"{item.name} reads its own output through another view")
            return _Item("ew", rec, item, [a for a in item.operands if isinstance(a, np.ndarray)], [item.out])
        if rec.op is not None and rec.op.name == "matmul":
            spec = matmul(rec)
            _no_overlap(rec, [spec["a"], spec["b"]], spec["c"])
            return _Item("gemm", rec, spec, [spec["a"], spec["b"]], [spec["c"]])
        kernel, a, out = reduction(rec)
        _no_overlap(rec, [a], out)
        return _Item("red", rec, kernel, [a], [out])
    except NotLowerable as e:
        return _Item("py", rec, reason=str(e))


def _draws_in_order(items):
    """Draws run before the native call; one recorded after a draw that must stay in place (a Python step) would
    then consume the generator first, so those rerun in their place too."""
    out, waiting = [], False
    for it in items:
        if it.kind == "py" and it.rec.kind == "kernel" and it.rec.op in RANDOM_ROWS:
            waiting = True
        elif it.kind == "draw" and waiting:
            it = _Item("py", it.rec, reason="a random draw after one that reruns in its place")
        out.append(it)
    return out


def _checked(items):
    """Items whose check reads an array some step writes (so it cannot run first) replay their record instead."""
    # Every array a record writes, Python steps and draws included (their items list no writes).
    written = {id(view_of(a)[0]) for it in items for a in list(it.writes) + list(it.rec.outs or ())
               if isinstance(a, np.ndarray)}
    bad = {id(it.rec) for it in items if it.check is not None and id(view_of(it.check[1])[0]) in written}
    out = []
    for it in items:
        if id(it.rec) not in bad:
            out.append(it)
        elif not out or out[-1].rec is not it.rec:
            out.append(_Item("py", it.rec, reason="its target check reads an array the replay writes"))
    return out


def _no_overlap(rec, inputs, out):
    if any(view_of(a)[0] is view_of(out)[0] for a in inputs):
        raise NotLowerable(f"{rec.op.name} writes into one of its inputs")


def _joins(group, item):
    """Whether ``item`` can run inside ``group``'s loop: same space, and every shared buffer seen at one element."""
    if item.shape != group["shape"]:
        return False
    shape = group["shape"]
    for a in item.operands:
        if isinstance(a, np.ndarray):
            k = _key(a, shape)
            w = group["written"].get(k[0])
            if w is not None and w != k:
                return False
    k = _key(item.out, shape)
    if any(r != k for r in group["read"].get(k[0], ())):
        return False
    w = group["written"].get(k[0])
    return w is None or w == k


def _note(group, item):
    shape = group["shape"]
    for a in item.operands:
        if isinstance(a, np.ndarray):
            k = _key(a, shape)
            group["read"].setdefault(k[0], set()).add(k)
    k = _key(item.out, shape)
    group["written"][k[0]] = k
