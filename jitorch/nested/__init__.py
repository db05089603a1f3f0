"""``jitorch.nested`` (``torch.nested``): nested (ragged) tensors for batches of variable-length sequences.

A jagged nested tensor packs ``B`` sequences into one dense values tensor and ``B + 1`` offsets (``_tensor.py``);
the ragged dim's size is a symbol (``j1``, `_nested_int.py`). Layers and pointwise ops run on the values, so a
transformer layer takes a jagged batch with no padding: project, ``unflatten`` to heads, ``transpose(1, 2)``,
``F.scaled_dot_product_attention`` (per sequence), transpose back, project. Autograd reaches the values and the
dense parameters. The strided layout keeps a list of components and runs the ops torch offers on it per component.

>>> import jitorch, jitorch.nested
>>> nt = jitorch.nested.nested_tensor([jitorch.ones(2, 4), jitorch.ones(3, 4)], layout=jitorch.jagged)
>>> lin = jitorch.nn.Linear(4, 8)
>>> lin(nt).shape, jitorch.nested.to_padded_tensor(lin(nt), 0.0).shape
(jitorch.Size([2, j..., 8]), jitorch.Size([2, 3, 8]))
"""
from __future__ import annotations

from . import _dispatch  # noqa: F401 - binds the nested methods and operators onto NestedTensor
from ._creation import (as_nested_tensor, masked_select, narrow, nested_tensor, nested_tensor_from_jagged,
                        to_padded_tensor)
from ._nested_int import NestedInt
from ._tensor import NestedTensor

__all__ = ["nested_tensor", "as_nested_tensor", "nested_tensor_from_jagged", "to_padded_tensor", "narrow",
           "masked_select", "NestedTensor", "NestedInt"]
