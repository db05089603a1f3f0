"""Pickle support for tensors: a tensor pickles as its host array, requires_grad flag and device.

>>> import pickle, jitorch
>>> pickle.loads(pickle.dumps(jitorch.ones(2, requires_grad=True)))
tensor([1., 1.], requires_grad=True)
"""
from __future__ import annotations


def rebuild_tensor(array, requires_grad, device, cls=None, state=None):
    """Inverse of ``Tensor.__reduce_ex__``; ``cls`` restores subclasses such as ``nn.Parameter``, ``state`` the
    attributes a user set."""
    from ._creation import _finish

    return _restore(_finish(array, False, device), requires_grad, cls, state)


def rebuild_meta_tensor(dtype_name, size, stride, requires_grad, cls=None, state=None):
    """Inverse of ``Tensor.__reduce_ex__`` for a meta tensor, pickled as its geometry (it has no data)."""
    from ._creation import empty_strided
    from ._dtype import to_dtype

    return _restore(empty_strided(size, stride, dtype=to_dtype(dtype_name), device="meta"), requires_grad, cls, state)


def _restore(t, requires_grad, cls, state):
    from ._tensor import Tensor

    if cls is not None and cls is not Tensor:
        sub = object.__new__(cls)
        sub.__dict__.update(t.__dict__)
        t = sub
    if requires_grad:
        t.requires_grad_(True)
    if state:
        t.__dict__.update(state)
    return t
