"""``nn.Parameter`` and ``nn.Buffer``: the tensors a ``Module`` registers when they are assigned as attributes.

A ``Parameter`` is a leaf tensor that shares its array with the tensor it was made from; ops on it return plain
tensors. A ``Buffer`` is a plain tensor marked for registration (``persistent`` says whether it is saved).

>>> import jitorch
>>> from jitorch.nn import Parameter
>>> p = Parameter(jitorch.ones(2))
>>> p
Parameter containing:
tensor([1., 1.], requires_grad=True)
>>> type(p * 2).__name__, p.is_leaf
('Tensor', True)
"""
from __future__ import annotations

from .. import _dispatch
from .._tensor import Tensor

__all__ = ["Parameter", "Buffer", "is_lazy"]

# Per-instance fields of Tensor itself; anything else in a parameter's __dict__ is user state that pickling keeps.
_TENSOR_FIELDS = frozenset({
    "_data", "grad_fn", "_output_nr", "_requires_grad", "_grad", "_base", "_ver_owner", "_ver", "_view_chain",
    "_hooks", "_post_acc_hooks", "_retains_grad", "_acc_ref", "_acc_node", "_vc", "_view_ver", "_own_offset",
    "_nograd_view",
})


class Parameter(Tensor):
    """A tensor that is a module parameter: assigning it to a ``Module`` attribute registers it.

    ``Parameter(data=None, requires_grad=True)`` shares ``data``'s memory and is always a leaf; ``requires_grad``
    stays True even under ``no_grad`` (as in PyTorch).
    """

    def __new__(cls, data=None, requires_grad=True):
        from .._creation import empty

        if data is None:
            data = empty(0)
        if not isinstance(data, Tensor):
            raise TypeError(f"Parameter(): data must be a Tensor, got {type(data).__name__}")
        p = object.__new__(cls)
        # A parameter owns its version counter: it outlives ``.data`` swaps (``module.to``), and a reference to
        # the source tensor would keep the old array alive after such a swap.
        p._data = data._data
        p.requires_grad_(requires_grad)
        return p

    def __repr__(self):
        return "Parameter containing:\n" + super().__repr__()

    __str__ = __repr__  # Tensor's __str__ is its own __repr__, not this one

    def __deepcopy__(self, memo):
        if id(self) in memo:
            return memo[id(self)]
        result = type(self)(Tensor._make(self._data.copy()), self._requires_grad)
        memo[id(self)] = result
        return result

    def __reduce_ex__(self, protocol):
        state = {k: v for k, v in self.__dict__.items() if k not in _TENSOR_FIELDS}
        return (_rebuild_parameter, (type(self), self._host(), self._requires_grad, str(self.device), state))


def _rebuild_parameter(cls, array, requires_grad, device, state):
    from .._creation import _finish

    p = cls(_finish(array, False, device), requires_grad)
    p.__dict__.update(state)
    return p


# The dispatcher's fast paths test ``type(t) in TENSOR_TYPES``: parameters take them like plain tensors.
_dispatch.TENSOR_TYPES.add(Parameter)


class _BufferMeta(type):
    # ``Buffer(...)`` returns a plain Tensor flagged ``_is_buffer``; ``isinstance`` recognizes the flag.
    def __instancecheck__(cls, instance):
        if cls is Buffer:
            return isinstance(instance, Tensor) and getattr(instance, "_is_buffer", False)
        return super().__instancecheck__(instance)


class Buffer(metaclass=_BufferMeta):
    """A tensor that a ``Module`` registers as a buffer when assigned: ``Buffer(data=None, *, persistent=True)``.

    Returns a detached alias of ``data`` (a plain Tensor) carrying the ``persistent`` flag.
    """

    def __new__(cls, data=None, *, persistent=True):
        from .._creation import empty

        if data is None:
            data = empty(0)
        t = data.detach().requires_grad_(data.requires_grad)
        t.persistent = persistent
        t._is_buffer = True
        return t


def is_lazy(param):
    """Whether ``param`` is an uninitialized (lazy) parameter or buffer; jitorch has none."""
    return False
