"""``ShapeProp``: run the graph on example inputs and record each value's shape, dtype, stride and requires_grad.

>>> import jitorch
>>> from jitorch.fx import symbolic_trace
>>> from jitorch.fx.passes.shape_prop import ShapeProp
>>> gm = symbolic_trace(lambda x: x.t() + 1)
>>> _ = ShapeProp(gm).propagate(jitorch.zeros(2, 3))
>>> [tuple(n.meta["tensor_meta"].shape) for n in gm.graph.nodes if n.op != "output"]
[(2, 3), (3, 2), (3, 2)]
"""
from __future__ import annotations

from typing import NamedTuple

from ..._tensor import Tensor
from ..interpreter import Interpreter
from ..node import map_aggregate

__all__ = ["ShapeProp", "TensorMetadata", "extract_tensor_metadata"]


class TensorMetadata(NamedTuple):
    shape: tuple
    dtype: object
    requires_grad: bool
    stride: tuple
    memory_format: object
    is_quantized: bool
    qparams: dict


def extract_tensor_metadata(t: Tensor) -> TensorMetadata:
    from ..._memory_format import channels_last, channels_last_3d, contiguous_format

    # As torch: the first layout the tensor is contiguous in, or None (a permuted or sliced view).
    memory_format = next((f for f in (contiguous_format, channels_last, channels_last_3d)
                          if t.is_contiguous(memory_format=f)), None)
    return TensorMetadata(t.shape, t.dtype, t.requires_grad, tuple(t.stride()), memory_format, False, {})


class ShapeProp(Interpreter):
    """Fill ``node.meta['tensor_meta']`` (a :class:`TensorMetadata`, or a structure of them for tuple results) and
    ``node.meta['type']`` for every node that produces a value."""

    def __init__(self, gm, fake_mode=None):
        super().__init__(gm)  # ``fake_mode`` is torch's; propagation here always runs on the real inputs

    def run_node(self, n):
        result = super().run_node(n)
        found = []

        def meta(x):
            if isinstance(x, Tensor):
                found.append(True)
                return extract_tensor_metadata(x)
            return x
        tensor_meta = map_aggregate(result, meta)
        if found:
            n.meta["tensor_meta"] = tensor_meta
        n.meta["type"] = type(result)
        return result

    def propagate(self, *args):
        """Run on ``args`` (real example tensors) and return the graph's result."""
        return self.run(*args)
