"""A reduce-overhead capture replayed on the CPU, and the outputs each call hands out.

Split from ``reduce_overhead.py``: `CapturedReplay` holds `ReduceOverheadFunction`'s methods that run a capture (the
attributes they read, ``native``, ``slots``, ``static``, ``written_spans``, ``out_kinds``..., are set by its
``_capture``). A new input is taken by pointer substitution when the replay is one native call (its address goes
into the graph's pointer table), else copied into the static buffer; outputs of an earlier call whose buffers a
later call rewrites (CUDA graphs) raise `OverwrittenOutputError` on use.

>>> import jitorch
>>> from jitorch._compile.reduce_overhead import compile_reduce_overhead
>>> f = compile_reduce_overhead(lambda x: x + 1)
>>> outs = [f(jitorch.full((2,), float(i))) for i in range(3)]  # warm-up, capture, replay
>>> outs[-1], f.generation
(tensor([3., 3.]), 2)
"""
from __future__ import annotations

import numpy as np

from .._tensor import Tensor
from ..cpu._steps import root_of
from .._storage import deepcopy_array
from ..runtime.host_pointer import byte_span, data_address
from ..utils._pytree import unflatten_from

__all__ = ["CapturedReplay", "OverwrittenOutputError", "spans_overlap", "static_copy"]


class OverwrittenOutputError(RuntimeError):
    """An output of a reduce-overhead call was used after a later call rewrote its buffer."""


class _Overwritten(Tensor):
    """The class an output takes when a later call rewrites its buffer: any use raises."""

    def __getattribute__(self, name):
        if name in ("__class__", "__dict__", "_overwritten_message"):
            return object.__getattribute__(self, name)
        raise OverwrittenOutputError(object.__getattribute__(self, "_overwritten_message"))

    def __repr__(self):
        raise OverwrittenOutputError(object.__getattribute__(self, "_overwritten_message"))


def spans_overlap(spans):
    """Whether two of the ``[low, high)`` byte ranges overlap (`runtime.host_pointer.byte_span`)."""
    spans = sorted(spans)
    return any(spans[j][0] < spans[j - 1][1] for j in range(1, len(spans)))


def static_copy(a):
    """A private copy of an argument's array with its strides (a transposed or sliced input stays one: the capture
    runs ``view``, ``is_contiguous`` and the outputs' layouts as eager does on the argument), over a buffer of the
    argument's span; row-major where the strides are not plain (negative)."""
    if a.flags.c_contiguous or a.size == 0 or any(st < 0 for st in a.strides):
        return np.array(a, order="C", copy=True)
    span = 1 + sum((n - 1) * st for n, st in zip(a.shape, a.strides)) // a.itemsize
    if span > 4 * a.size + 4096:  # a column of a large matrix: not a copy of the whole matrix
        return np.array(a, order="C", copy=True)
    out = np.lib.stride_tricks.as_strided(np.empty(span, a.dtype), a.shape, a.strides)
    np.copyto(out, a)
    return out


class CapturedReplay:
    """The replay half of `ReduceOverheadFunction` (a base class of it): input substitution, output hand-out."""

    def _replay(self, leaves):
        native, table = self.native, None
        substituted, copied = [], []
        new_arrays = [t._data if isinstance(t, Tensor) else None for t in leaves]
        if native is not None and not self._overlaps(new_arrays):
            table = native.table_words  # (a memoryview: after a replay NumPy's indexing code is out of cache)
            for i, a in enumerate(new_arrays):
                # Only an input laid out as the static buffer: the graph's code reads it with the static strides
                # (a transposed input goes through the copy below).
                if a is not None and self.slots[i] is not None and a.strides == self.static[i]._data.strides:
                    table[self.slots[i]] = data_address(a)
                    substituted.append(i)
        for i, a in enumerate(new_arrays):
            if a is not None and i not in substituted and a is not self.static[i]._data:
                np.copyto(self.static[i]._data, a)
                copied.append(i)
        self._poison()
        try:
            self.graph.replay_checked()  # (`__call__` checked the graph's values: a changed one captures again)
        finally:
            if substituted:
                table[:] = native.static_words
        for i in copied:
            if self.mutated[i]:
                np.copyto(new_arrays[i], self.static[i]._data)  # in-place ops on an input reach the caller's tensor
        return self._hand_out(list(self.out_spec_leaves), leaves)

    def _overlaps(self, arrays):
        spans = [byte_span(a) for a in arrays if a is not None]
        for s, e in spans:
            if any(s < we and ws < e for ws, we in self.written_spans):
                return True
        return spans_overlap(spans)

    @staticmethod
    def _input_view(o, new, kind):
        _, _, off, strides = kind
        root = root_of(new._data)
        base_off = new._data.__array_interface__["data"][0] - root.__array_interface__["data"][0]
        if off == 0 and o._data.shape == new._data.shape and strides == new._data.strides:
            return new
        view = np.ndarray(o._data.shape, o._data.dtype, buffer=root, offset=base_off + off, strides=strides)
        return Tensor._make(view)

    def _poison(self):
        """Make the outputs of the previous call raise on use: the replay about to run rewrites their buffers."""
        if not self._live:
            return
        kind = "CUDA" if self.cuda else "CPU"
        message = (f"accessing tensor output of {kind} graphs (jitorch.compile mode='reduce-overhead' of "
                   f"{self.__name__}) that has been overwritten by a subsequent run: it came from run "
                   f"{self.generation} of the graph and run {self.generation + 1} has since reused its buffer. To "
                   "keep an output, clone it (out.clone()) before calling the compiled function again.")
        for t in self._live:
            if type(t) is Tensor:
                t.__dict__["_overwritten_message"] = message
                t.__class__ = _Overwritten
        self._live = []

    def _hand_out(self, outs, leaves):
        """This call's outputs: on the CPU copies of the graph's output buffers (torch.compile's CPU reduce-overhead
        reuses no buffers: scripts keep each step's loss), on CUDA fresh tensors over them, retired by the next
        call as CUDA graph trees retire theirs. CPU copies keep each output's layout, and outputs viewing one
        buffer (``y`` and ``y.t()``) view one copy of it, as eager's share theirs."""
        self.generation += 1
        inputs = {id(t) for t in leaves if isinstance(t, Tensor)}
        shared = None if self.cuda else self._shared_outputs(outs)
        memo = {}
        fresh = []
        for i, (o, kind) in enumerate(zip(outs, self.out_kinds)):
            if kind[0] == "input" and not self.cuda:
                # A view of an argument, as eager's: rebuilt on the caller's tensor (`__call__` captured again
                # if its strides changed), never the capture's private copy, which the next call rewrites.
                new = leaves[kind[1]]
                fresh.append(self._input_view(o, new, kind) if new._data.strides == self.static[kind[1]]._data.strides
                             else Tensor._make(o._data.copy(order="K")))
            elif kind[0] != "graph" or id(o) in inputs:
                fresh.append(o)
            elif shared is not None:
                a = o._data
                fresh.append(Tensor._make(deepcopy_array(a, memo) if shared[i] else a.copy(order="K")))
            else:
                t = Tensor._make(o._data)
                self._live.append(t)
                fresh.append(t)
        return unflatten_from(self.out_spec, fresh)

    def _shared_outputs(self, outs):
        """Per output, whether it shares its buffer with another output (its copy then views one copy of that
        buffer). The graph's output buffers are fixed at capture: worked out once per capture. A buffer much larger
        than the outputs in it (a slice of a big one) is not copied whole: those outputs get copies of their own."""
        cached = self.__dict__.get("_shared_cache")
        if cached is not None and cached[0] is self.out_spec_leaves:
            return cached[1]
        used = {}
        for o, kind in zip(outs, self.out_kinds):
            if kind[0] == "graph":
                entry = used.setdefault(id(root_of(o._data)), [root_of(o._data), 0, 0])
                entry[1] += 1
                entry[2] += o._data.nbytes
        big = {rid for rid, (root, n, nbytes) in used.items() if n < 2 or root.nbytes > 2 * nbytes + 4096}
        flags = tuple(kind[0] == "graph" and id(root_of(o._data)) not in big for o, kind in zip(outs, self.out_kinds))
        self._shared_cache = (self.out_spec_leaves, flags)
        return flags
