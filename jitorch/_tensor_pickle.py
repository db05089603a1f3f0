"""Pickling and ``copy.deepcopy`` of tensors (bound onto ``Tensor`` in ``_tensor.py``): the values with
``requires_grad``, the device and the attributes a user set; meta tensors as their geometry alone.

>>> import copy, pickle, jitorch
>>> t = jitorch.ones(2, requires_grad=True)
>>> pickle.loads(pickle.dumps(t)).requires_grad, copy.deepcopy(t).grad_fn is None
(True, True)
"""
from __future__ import annotations

import copy

from .runtime.meta import MetaArray

# The Tensor class, set by ``_tensor.py`` once it exists (this module defines part of it).
Tensor = None


def __reduce_ex__(self, protocol):
    from ._serialization_pickler import tensor_user_state
    from ._serialization_support import rebuild_meta_tensor, rebuild_tensor

    state = tensor_user_state(self)
    if type(self._data) is MetaArray:  # no data to pickle: the geometry alone, as torch's
        args = (self.dtype.name, tuple(self.shape), self.stride(), self._requires_grad, type(self))
        return (rebuild_meta_tensor, args + (state,) if state else args)
    args = (self._host(), self._requires_grad, str(self.device), type(self))
    # Attributes a user set on the tensor (or a subclass instance) travel with it, as with torch's pickling.
    return (rebuild_tensor, args + (state,) if state else args)


def __deepcopy__(self, memo):
    if id(self) in memo:
        return memo[id(self)]
    if not self.is_leaf:
        raise RuntimeError("Only Tensors created explicitly by the user (graph leaves) support the deepcopy "
                           "protocol at the moment.  If you were attempting to deepcopy a module, this may be "
                           "because of a torch.nn.utils.weight_norm usage, see "
                           "https://github.com/pytorch/pytorch/pull/103001")
    from ._serialization_pickler import tensor_user_state
    from ._storage import deepcopy_array

    new = Tensor._make(deepcopy_array(self._data, memo))
    memo[id(self)] = new
    new._requires_grad = self._requires_grad
    if self._grad is not None:
        new._grad = self._grad.__deepcopy__(memo)
    state = tensor_user_state(self)
    if state:  # attributes a user set on the tensor travel with it, as in torch
        new.__dict__.update(copy.deepcopy(state, memo))
    return new
