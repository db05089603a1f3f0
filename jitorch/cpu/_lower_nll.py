"""``nll_loss`` and its backward in a CPU graph as masked IR kernels, with the target range check run before replay.

The gather ``logp[i, target[i]]`` has no affine index, so it is a sum over the class dim of
``where(valid_i & (j == target_i), logp[i, j], 0)``, ``j`` read from a constant ``arange`` (stride 0 along rows): a
target never becomes an address, so a bad one reads no stray memory. Eager raises ``IndexError`` for a target out of
range; the native replay runs that check first (`Lowered.check`), before any step, so a bad batch stops the replay
before an optimizer step could use it. That needs the targets to be unchanged during the replay: a graph that writes
them keeps the Python step.

>>> import numpy as np
>>> from jitorch.ops.table import OPS
>>> from jitorch.cpu._recorder import Record
>>> logp, t, out = np.zeros((4, 3), np.float32), np.array([0, 2, 1, 0]), np.zeros((), np.float32)
>>> low = nll_loss(Record("kernel", None, "", OPS["nll_loss"], [logp, t], (), None,
...                       {"ignore_index": -100, "reduction": "mean"}, [out]))
>>> [k.reduce_axes for k, _, _ in low.kernels], low.check is not None
([2], True)
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .._compile.lower import IR_DTYPES
from ..codegen.ir import Buffer, Kernel, Store, const, load, op, reduced
from ._lower import NotLowerable, element_strides

__all__ = ["Lowered", "nll_loss", "nll_loss_backward"]


@dataclass
class Lowered:
    """``kernels``: ``(kernel, arrays per IR buffer, written arrays)`` in order; ``check``: run before the replay
    (raises as eager would); ``target``: the array the check reads, which no step of the replay may write."""

    kernels: list
    check: object
    target: np.ndarray


def _parts(rec, first):
    """(target, its IR dtype, the mask ``valid & (j == target)`` over loads ``first`` (target), ``first + 1`` (j))."""
    target = rec.datas[1]
    if not isinstance(target, np.ndarray) or target.ndim != 1 or IR_DTYPES.get(target.dtype) not in ("i32", "i64"):
        raise NotLowerable("nll_loss of targets that are not a 1-D integer array")
    if rec.attrs.get("reduction") not in ("mean", "sum", "none"):
        raise NotLowerable(f"nll_loss with reduction {rec.attrs.get('reduction')!r}")
    td = IR_DTYPES[target.dtype]
    t, j = load(first, td), load(first + 1, td)
    valid = op("ne", t, const(rec.attrs["ignore_index"], td))
    return target, td, op("and", valid, op("eq", j, t))


class TargetCheck:
    """nll_loss's target range check on the replay's target array, before any step runs. Equal checks (the forward
    and the backward read the same targets) compare equal, so a replay runs one. The common batch (every target a
    class) costs one reduction; any other runs eager's own check, which raises eager's error."""

    __slots__ = ("target", "classes", "ignore_index", "_small")

    def __init__(self, target, classes, ignore_index):
        self.target, self.classes, self.ignore_index = target, classes, ignore_index
        # A small batch's targets as unsigned 64-bit words, read by the builtin max: after a replay has pushed NumPy's
        # reduction code out of cache, one ``ndarray.max`` costs ~30 us; this costs a few (the array is the
        # replay's static buffer, so the view stays valid).
        small = target.dtype == np.int64 and 0 < target.size <= 4096 and target.flags.c_contiguous
        self._small = memoryview(target).cast("B").cast("Q") if small else None

    def _key(self):
        return id(self.target), self.classes, self.ignore_index

    def __eq__(self, other):
        return type(other) is TargetCheck and self._key() == other._key()

    def __hash__(self):
        return hash(self._key())

    def __call__(self):
        t = self.target
        # (as unsigned, a negative target is huge: one maximum bounds both ends)
        if self._small is not None:
            if max(self._small) < self.classes:
                return
        elif t.size and t.dtype == np.int64 and int(t.view(np.uint64).max()) < self.classes:
            return
        from ..ops.nn_fused import _nll_targets

        _nll_targets(np, t, self.classes, self.ignore_index)


def nll_loss(rec):
    """``-sum(masked logp) / count`` (mean), ``-sum`` (sum) or per row (none), as one reduction kernel."""
    logp, out = rec.datas[0], rec.outs[0]
    if not isinstance(logp, np.ndarray) or logp.ndim != 2 or IR_DTYPES.get(logp.dtype) not in ("f32", "f64") or \
            out is None or out.dtype != logp.dtype or logp.shape[0] == 0:
        raise NotLowerable("nll_loss of a non-float, non-2-D or empty input")
    target, td, mask = _parts(rec, 1)
    n, c = logp.shape
    dt = IR_DTYPES[logp.dtype]
    classes = np.arange(c, dtype=target.dtype)
    picked = op("where", mask, load(0, dt), const(0, dt))
    inputs = [logp, target, classes]
    strides = [element_strides(logp), (element_strides(target)[0], 0), (0, 1)]
    reduction = rec.attrs["reduction"]
    if reduction == "none":
        stores = (Store(3, op("neg", picked), "sum"),)
        kernel = Kernel((n, c), tuple(Buffer(d, s) for d, s in zip((dt, td, td), strides)) +
                        (Buffer(dt, element_strides(out) + (0,)),), stores, 1)
        return Lowered([(kernel, inputs + [out], [out])], TargetCheck(target, c, rec.attrs["ignore_index"]), target)
    total = Store(None, picked, "sum")
    stores = [total]
    value = op("neg", reduced(0, dt))
    if reduction == "mean":
        stores.append(Store(None, op("where", mask, const(1, dt), const(0, dt)), "sum"))
        value = op("div", value, reduced(1, dt))
    stores.append(Store(3, value, row=True))
    kernel = Kernel((1, n, c), tuple(Buffer(d, (0,) + s) for d, s in zip((dt, td, td), strides)) +
                    (Buffer(dt, (0, 0, 0)),), tuple(stores), 2)
    return Lowered([(kernel, inputs + [out], [out])], TargetCheck(target, c, rec.attrs["ignore_index"]), target)


def nll_loss_backward(rec):
    """``where(mask, -g / max(count, 1), 0)`` over ``shape`` (mean; ``-g`` for sum, ``-g[i]`` for none): a count
    kernel into a one-element scratch, then one pointwise kernel."""
    g, out = rec.datas[0], rec.outs[0]
    shape = tuple(rec.attrs.get("shape", ()))
    if not isinstance(g, np.ndarray) or IR_DTYPES.get(g.dtype) not in ("f32", "f64") or out is None or \
            out.shape != shape or len(shape) != 2 or out.dtype != g.dtype or shape[0] == 0:
        raise NotLowerable("nll_loss_backward of a non-float, non-2-D or empty gradient")
    target, td, _ = _parts(rec, 1)
    n, c = shape
    dt = IR_DTYPES[g.dtype]
    classes = np.arange(c, dtype=target.dtype)
    reduction = rec.attrs["reduction"]
    g_strides = (element_strides(g)[0], 0) if reduction == "none" else (0, 0)
    kernels, reads = [], [g, target, classes]
    scale = op("neg", load(1, dt))
    if reduction == "mean":
        count = np.zeros((), g.dtype)
        t = load(0, td)
        valid = op("where", op("ne", t, const(rec.attrs["ignore_index"], td)), const(1, dt), const(0, dt))
        kernels.append((Kernel((1, n), (Buffer(td, (0, element_strides(target)[0])), Buffer(dt, (0, 0))),
                               (Store(1, valid, "sum"),), 1), [target, count], [count]))
        scale = op("div", scale, op("max", load(4, dt), const(1, dt)))
        reads = reads + [count]
    _, _, mask = _parts(rec, 2)
    buffers = [Buffer(dt, element_strides(out)), Buffer(dt, g_strides), Buffer(td, (element_strides(target)[0], 0)),
               Buffer(td, (0, 1))] + ([Buffer(dt, (0, 0))] if reduction == "mean" else [])
    kernel = Kernel((n, c), tuple(buffers), (Store(0, op("where", mask, scale, const(0, dt))),))
    kernels.append((kernel, [out] + reads, [out]))
    return Lowered(kernels, TargetCheck(target, c, rec.attrs["ignore_index"]), target)
