"""The gradient side of sparse_coo tensors: ``.grad``, ``register_hook``, ``retain_grad``,
``register_post_accumulate_grad_hook`` and ``autograd.grad`` with respect to one.

Autograd runs on a sparse tensor's values (``_coo.py``): each of these is the values' own, with the values' gradient
laid out as torch's sparse gradient, one entry per position of the tensor's coalesced pattern (a gradient handed back
by a hook or assigned to ``.grad`` is read at the tensor's entries again). What is assigned to ``.grad`` is kept as
assigned, as in torch, and ``s.grad`` is the same object until the next backward accumulates into it.

>>> import jitorch
>>> s = jitorch.sparse_coo_tensor([[0, 1, 0]], [1.0, 2.0, 3.0], (3,), requires_grad=True)
>>> seen = []
>>> _ = s.register_hook(lambda g: seen.append(g.to_dense()))
>>> (jitorch.sparse.sum(s) * 2).backward()
>>> seen, s.grad.to_dense(), s.grad is s.grad
([tensor([2., 2., 0.])], tensor([2., 2., 0.]), True)
>>> jitorch.autograd.grad(jitorch.sparse.sum(s), s)[0].to_dense()
tensor([1., 1., 0.])
"""
from __future__ import annotations

import weakref

from .._tensor import Tensor
from ._coo import SparseCooTensor, make_sparse
from ._coo_index import coalesced_pattern, first_of_each, gather_dense

__all__ = ["pattern_grad", "values_grad", "sparse_input_grads"]


def pattern_grad(indices, size, coalesced, g, coalesced_flag):
    """The sparse gradient over the coalesced pattern of ``indices`` from the values' gradient ``g`` (duplicates of a
    position carry the same gradient: the first stands for it)."""
    if not coalesced:
        indices, inverse, count = coalesced_pattern(indices, size)
        g = g.index_select(0, first_of_each(inverse, count))
    return make_sparse(indices, g, size, coalesced_flag)


def values_grad(grad, indices, size, what):
    """The values' gradient for a sparse gradient ``grad`` of a tensor with entries at ``indices``."""
    if not isinstance(grad, SparseCooTensor) or tuple(grad.shape) != tuple(size):
        got = f"a sparse_coo tensor of size {list(grad.shape)}" if isinstance(grad, SparseCooTensor) else \
            f"{type(grad).__name__} {list(grad.shape) if isinstance(grad, Tensor) else ''}"
        raise RuntimeError(f"{what}: expected a sparse_coo gradient of size {list(size)}, got {got}")
    return gather_dense(grad.to_dense(), indices)


def _grad(self):
    vg = self._sp_values.grad
    assigned = self.__dict__.get("_sp_grad_assigned")
    if vg is None:
        return assigned
    cached = self.__dict__.get("_sp_grad_cache")
    if cached is not None and cached[0] is vg and cached[1] == vg._version:
        return cached[2]
    # torch marks a leaf's accumulated sparse gradient uncoalesced, a retained one coalesced.
    g = pattern_grad(self._sp_indices, self._sp_size, self._sp_coalesced, vg.detach(), not self.is_leaf)
    if assigned is not None:  # a backward since the assignment adds into what was assigned
        g = assigned + g
    if cached is not None:  # the same object, now holding the sum (torch accumulates into it)
        g = cached[2]._rebind(g._sp_indices, g._sp_values, g._sp_coalesced)
    self._sp_grad_cache = (vg, vg._version, g)
    return g


def _set_grad(self, value):
    self._sp_values.grad = None
    self._sp_grad_cache = self._sp_grad_assigned = None
    if value is None:
        return
    if not isinstance(value, SparseCooTensor):
        raise RuntimeError("attempting to assign a gradient to a tensor that has data of a different type (a "
                           f"sparse_coo tensor's gradient is a sparse_coo tensor, got layout {value.layout})")
    if value.shape != self.shape:
        raise RuntimeError(f"attempting to assign a gradient of size '{list(value.shape)}' to a tensor of size "
                           f"'{list(self.shape)}'. Please ensure that the gradient and the tensor are the same size")
    if value.dtype is not self.dtype:
        raise RuntimeError(f"attempting to assign a gradient with dtype '{value.dtype}' to a tensor with dtype "
                           f"'{self.dtype}'; convert it with .to({self.dtype}) first")
    if value.device != self.device:
        raise RuntimeError(f"attempting to assign a gradient on {value.device} to a tensor on {self.device}; move it "
                           "with .to(device) first")
    self._sp_grad_assigned = value


def _del_grad(self):
    _set_grad(self, None)


def register_hook(self, hook):
    """``hook(grad)`` with the sparse gradient (coalesced, as torch's) when it is computed; a sparse tensor it returns
    replaces it."""
    indices, size, coalesced = self._sp_indices, self._sp_size, self._sp_coalesced

    def on_values(g):
        out = hook(pattern_grad(indices, size, coalesced, g, True))
        return None if out is None else values_grad(out, indices, size, "register_hook")
    return self._sp_values.register_hook(on_values)


def retain_grad(self):
    self._sp_values.retain_grad()


def register_post_accumulate_grad_hook(self, hook):
    """``hook(self)`` after a backward accumulated into ``self.grad`` (a leaf)."""
    ref = weakref.ref(self)  # the values hold the hook: no cycle back to the sparse tensor

    def on_values(_):
        s = ref()
        if s is not None:
            hook(s)
    return self._sp_values.register_post_accumulate_grad_hook(on_values)


def sparse_input_grads(grad, outputs, inputs, **kwargs):
    """``autograd.grad(outputs, inputs)`` where some inputs are sparse_coo tensors: the values' gradients, each as
    the sparse gradient of its tensor (coalesced, as torch's)."""
    stand_ins = [t._sp_values if isinstance(t, SparseCooTensor) else t for t in inputs]
    result = grad(outputs, stand_ins, **kwargs)
    return tuple(pattern_grad(t._sp_indices, t._sp_size, t._sp_coalesced, g, True)
                 if isinstance(t, SparseCooTensor) and g is not None else g for t, g in zip(inputs, result))


def _install():
    SparseCooTensor.grad = property(_grad, _set_grad, _del_grad)
    for fn in (register_hook, retain_grad, register_post_accumulate_grad_hook):
        setattr(SparseCooTensor, fn.__name__, fn)


_install()
