"""The autograd half of ``Tensor`` (bound onto the class in ``_tensor.py``): ``requires_grad``, ``.grad`` and its
checks, ``.data``, ``detach``, ``retain_grad``, tensor hooks, ``backward`` and the engine's in-place accumulation.

>>> import jitorch
>>> x = jitorch.ones(2, requires_grad=True)
>>> (x * 3).sum().backward()
>>> x.grad, x.is_leaf, x.detach().requires_grad
(tensor([3., 3.]), True, False)
"""
from __future__ import annotations

from . import _dtype
from ._grad_state import GradState

# The Tensor class, set by ``_tensor.py`` once it exists: this module defines part of it, so an import here would be
# circular (and one inside the methods costs half a microsecond per call).
Tensor = None



# ``jitorch.autograd.backward``, bound at the first ``Tensor.backward``: autograd imports this module, so it cannot be
# imported here, and an import statement in the method cost half a microsecond per call.
_AUTOGRAD_BACKWARD = None


def _bind_autograd_backward():
    global _AUTOGRAD_BACKWARD
    from .autograd import backward

    _AUTOGRAD_BACKWARD = backward
    return backward


@property
def requires_grad(self):
    return self._requires_grad


@requires_grad.setter
def requires_grad(self, flag):
    self.requires_grad_(flag)


# Bumped by every requires_grad_ that changes the flag (a layer frozen or unfrozen), not by one that keeps it
# (``zero_grad(set_to_none=False)`` calls ``requires_grad_(False)`` on every gradient): see
# nn.modules._registration.STATE_VERSION.
REQUIRES_GRAD_VERSION = [0]


def requires_grad_(self, requires_grad=True):
    if self.grad_fn is not None:
        if requires_grad:
            return self
        raise RuntimeError(
            "you can only change requires_grad flags of leaf variables. If you want to use a computed variable in "
            "a subgraph that doesn't require differentiation use var_no_grad = var.detach()."
        )
    if requires_grad and self._data.dtype.kind not in "fc" and self.dtype is not _dtype.bfloat16:
        raise RuntimeError("only Tensors of floating point and complex dtype can require gradients")
    if requires_grad and self._inference and not GradState.inference:
        raise RuntimeError("Setting requires_grad=True on inference tensor outside InferenceMode is not allowed.")
    flag = bool(requires_grad)
    if flag != self._requires_grad:
        REQUIRES_GRAD_VERSION[0] += 1
        self._requires_grad = flag
    return self


@property
def is_leaf(self):
    return self.grad_fn is None


@property
def grad(self):
    if self.grad_fn is not None and not self._retains_grad and self._grad is None:
        import warnings

        warnings.warn("The .grad attribute of a Tensor that is not a leaf Tensor is being accessed. Its .grad "
                      "attribute won't be populated during autograd.backward(). If you indeed want the .grad field "
                      "to be populated for a non-leaf Tensor, use .retain_grad() on the non-leaf Tensor.",
                      UserWarning, stacklevel=2)
    return self._grad


@property
def output_nr(self):
    return self._output_nr


@grad.setter
def grad(self, value):
    if value is not None:
        if not isinstance(value, Tensor):
            raise TypeError(f"assigned grad expected to be a Tensor or None but got grad of {type(value).__name__}")
        if (value.shape if value.is_sparse else value._data.shape) != self._data.shape:  # a sparse .grad: as torch
            raise RuntimeError(f"assigned grad has data of a different size: {tuple(value.shape)} vs "
                               f"{tuple(self.shape)}")
        if value.dtype is not self.dtype:
            raise RuntimeError(f"assigned grad has data of a different type: {value.dtype} vs {self.dtype}")
    self._grad = value


@grad.deleter
def grad(self):
    self._grad = None


@property
def data(self):
    """An alias of the values with no autograd history and its own version counter (PyTorch's ``.data``)."""
    return Tensor._make(self._data)


@data.setter
def data(self, value):
    if not isinstance(value, Tensor):
        raise TypeError(f"data must be a Tensor, got {type(value).__name__}")
    # The tensor now owns new memory: it is no longer a view, and its old base must not be kept alive.
    self._data = value._data
    self._base = self._ver_owner = self._view_chain = None


@staticmethod
def _make_subclass(cls, data, require_grad=False, dispatch_strides=False, dispatch_device=False,
                   device_for_backend_keys=None):
    """torch's constructor helper for ``Tensor`` subclasses (``Parameter`` subclasses call it from ``__new__``):
    a ``cls`` leaf over ``data``'s memory, requiring grad as asked."""
    if not (isinstance(cls, type) and issubclass(cls, Tensor)):
        raise TypeError(f"_make_subclass(): argument 'cls' must be a subclass of Tensor, not {cls!r}")
    sub = object.__new__(cls)
    sub._data = data._data
    sub.requires_grad_(bool(require_grad))
    return sub


def as_subclass(self, cls):
    """``self``'s data as a ``cls`` instance (a ``Tensor`` subclass), sharing memory and attached to the autograd
    graph, as torch's (``__init__`` is not called)."""
    if not (isinstance(cls, type) and issubclass(cls, Tensor)):
        raise TypeError(f"as_subclass(): argument 'cls' must be a subclass of Tensor, not {cls!r}")
    alias = self[...]  # torch's alias: AliasBackward0 in the graph
    if cls is Tensor:
        return alias
    sub = object.__new__(cls)
    sub.__dict__.update(alias.__dict__)
    return sub


def detach(self):
    t = Tensor._make(self._data)
    t._ver_owner = self._root()
    return t


def detach_(self):
    if self._base is not None:
        raise RuntimeError("Can't detach views in-place. Use detach() instead. If you are using "
                           "DistributedDataParallel (DDP) for training, and gradient_as_bucket_view is set as "
                           "True, gradients are views of DDP buckets, and hence detach_() cannot be called on "
                           "these gradients. To fix this error, please refer to the Optimizer.zero_grad() "
                           "function in torch/optim/optimizer.py as the solution.")
    self.grad_fn = None
    self._requires_grad = False
    return self


@property
def retains_grad(self):
    return bool(self._retains_grad)


def retain_grad(self):
    if not self._requires_grad:
        raise RuntimeError("can't retain_grad on Tensor that has requires_grad=False")
    if self.grad_fn is None or self._retains_grad:
        return
    import weakref

    ref = weakref.ref(self)

    def store(grad):
        t = ref()
        if t is not None:
            t._grad = grad.detach().clone() if t._grad is None else t._grad + grad.detach()

    self.grad_fn.add_retain_grad_hook(self._output_nr, store)
    self._retains_grad = store  # truthy; kept so an in-place op can move the hook to the new grad_fn


def register_hook(self, hook):
    """``hook(grad)`` runs when this tensor's gradient is computed; it may return a replacement."""
    if not self._requires_grad:
        raise RuntimeError("cannot register a hook on a tensor that doesn't require gradient")
    if self.grad_fn is not None:
        return self.grad_fn.add_output_hook(self._output_nr, hook)
    if self._hooks is None:
        self._hooks = []
    from .autograd.graph import _RemovableHandle

    self._hooks.append(hook)
    return _RemovableHandle(self._hooks, hook)


def register_post_accumulate_grad_hook(self, hook):
    if not self._requires_grad:
        raise RuntimeError("cannot register a hook on a tensor that doesn't require gradient")
    if self.grad_fn is not None:
        raise RuntimeError("post accumulate grad hooks cannot be registered on non-leaf tensors")
    if self._post_acc_hooks is None:
        self._post_acc_hooks = []
    from .autograd.graph import _RemovableHandle

    self._post_acc_hooks.append(hook)
    return _RemovableHandle(self._post_acc_hooks, hook)


def backward(self, gradient=None, retain_graph=None, create_graph=False, inputs=None):
    """Accumulate d(self)/d(leaf) into every leaf's ``.grad`` (``gradient`` is required for non-scalars)."""
    run = _AUTOGRAD_BACKWARD
    if run is None:
        run = _bind_autograd_backward()
    run(self, gradient, retain_graph, create_graph, inputs=inputs)


def _inplace_accumulate(self, other):
    # The engine's in-place ``grad += g``: counts as a version bump like any in-place op.
    self._data += other._data.astype(self._data.dtype, copy=False)
    self._bump_version()


def is_inference(self):
    return self._inference
