"""A reduce-overhead capture of CUDA tensors as a ``jitorch.cuda.CUDAGraph`` (private memory pool, side-stream
capture): each call copies the new inputs into the static ones on the device, replays, and copies back the inputs
the graph writes in place. The graph's outputs live in its pool, rewritten by the next call (see
`reduce_overhead_replay.CapturedReplay._poison`).

Split from ``reduce_overhead.py``: `CUDAGraphCapture` holds `ReduceOverheadFunction`'s CUDA methods (a base class
of it; ``_capture`` hands CUDA arguments to ``_capture_cuda``, ``__call__`` replays through ``_replay_cuda``).
"""
from __future__ import annotations

from .._tensor import Tensor
from ..utils._pytree import flatten_into, unflatten_from

__all__ = ["CUDAGraphCapture"]


def _cuda_span(array):
    """The byte range of the allocation under a CuPy array (views of one buffer overlap)."""
    mem = array.data.mem
    return mem.ptr, mem.ptr + mem.size


class CUDAGraphCapture:
    """The CUDA capture and replay of `ReduceOverheadFunction` (a base class of it)."""

    def _capture_cuda(self, spec, leaves):
        """Capture on private contiguous copies of the inputs as a CUDA graph, then replay once for this call."""
        from ..cuda import CUDAGraph, graph as cuda_graph

        self.cuda = True
        self.static = [t.detach().contiguous().clone() if isinstance(t, Tensor) else t for t in leaves]
        self.fast_layouts = [(None, None, None) if isinstance(t, Tensor) else None for t in leaves]
        self.layouts = [(tuple(t.shape), t.dtype, t.device, t.is_contiguous()) if isinstance(t, Tensor) else None
                        for t in leaves]
        versions = [t._version if isinstance(t, Tensor) else None for t in self.static]
        g = CUDAGraph()
        args, kwargs = unflatten_from(spec, self.static)
        with cuda_graph(g):
            out = self.fn(*args, **kwargs)
        self.graph = g
        self.out_spec_leaves = []
        self.out_spec = flatten_into(out, self.out_spec_leaves)
        self.mutated = [isinstance(t, Tensor) and t._version != v for t, v in zip(self.static, versions)]
        spans = [_cuda_span(t._data) for t in self.static if isinstance(t, Tensor)]
        self.out_kinds = []
        for o in self.out_spec_leaves:
            if not isinstance(o, Tensor):
                self.out_kinds.append(("value",))
            else:  # a view of a static input is handed out as is; anything else lives in the graph's pool
                s, e = _cuda_span(o._data)
                self.out_kinds.append(("static",) if any(s < we and ws < e for ws, we in spans) else ("graph",))
        g.replay()  # capture only recorded the work: run it for this call's results
        return out

    def _replay_cuda(self, leaves):
        for static, new in zip(self.static, leaves):
            if isinstance(new, Tensor) and new is not static:
                static._data[...] = new._data
        self._poison()
        self.graph.replay()
        for i, mutated in enumerate(self.mutated):
            if mutated:  # in-place ops on an input reach the caller's tensor
                leaves[i]._data[...] = self.static[i]._data
        return self._hand_out(list(self.out_spec_leaves), leaves)
