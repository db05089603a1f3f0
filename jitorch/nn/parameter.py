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

from .. import _dispatch, _overrides
from .._subclass import disabled_torch_function_impl
from .._tensor import Tensor

__all__ = ["Parameter", "UninitializedParameter", "is_lazy", "Buffer", "UninitializedBuffer",
           "UninitializedTensorMixin"]

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

    __torch_function__ = disabled_torch_function_impl  # ops on parameters return plain tensors, as torch's

    def __new__(cls, data=None, requires_grad=True):
        from .._creation import empty

        if data is None:
            data = empty(0)
        if not isinstance(data, Tensor):
            raise TypeError(f"Parameter(): data must be a Tensor, got {type(data).__name__}")
        if data.is_sparse:
            raise NotImplementedError("Parameter(): a sparse_coo tensor cannot be a Parameter in jitorch; register it "
                                      "as a buffer, or make its values a Parameter and build the sparse tensor from "
                                      "them in forward (jitorch.sparse_coo_tensor(indices, values, size))")
        p = object.__new__(cls)
        # A parameter owns its version counter: it outlives ``.data`` swaps (``module.to``), and a reference to
        # the source tensor would keep the old array alive after such a swap.
        p._data = data._data
        try:
            p.requires_grad_(requires_grad)
        except RuntimeError as e:  # torch's text here (``_make_subclass``) is capitalized, unlike requires_grad_'s
            if str(e).startswith("only Tensors of floating point"):
                raise RuntimeError("Only Tensors of floating point and complex dtype can require gradients") from None
            raise
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
        # A meta parameter has no data: its geometry travels as a meta tensor's does.
        data = Tensor._make(self._data) if self.is_meta else self._host()
        return (_rebuild_parameter, (type(self), data, self._requires_grad, str(self.device), state))


def _rebuild_parameter(cls, array, requires_grad, device, state):
    from .._creation import _finish

    p = cls(array if isinstance(array, Tensor) else _finish(array, False, device), requires_grad)
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
    """Whether ``param`` is an uninitialized (lazy) parameter or buffer."""
    return isinstance(param, UninitializedTensorMixin)


_USE_MSG = ("Attempted to use an uninitialized parameter in {}. This error happens when you are using a `LazyModule` "
            "or explicitly manipulating `jitorch.nn.parameter.UninitializedParameter` objects. When using LazyModules "
            "Call `forward` with a dummy batch to initialize the parameters before calling torch functions")


class UninitializedTensorMixin:
    """A parameter or buffer without a shape yet: ``materialize(shape)`` gives it one and turns it into
    ``cls_to_become``. Until then only its dtype, device, ``requires_grad`` and the conversions (``to``, ``float``...)
    work; any other op raises torch's ValueError (the override machinery hands every call with one to
    ``__jitorch_function__`` while one is alive)."""

    _ALLOWED = frozenset({"size", "copy_", "is_complex", "is_floating_point", "half", "float", "double", "char",
                          "short", "int", "long", "cuda", "cpu", "to", "get_device"})

    def _start_uninitialized(self):
        _overrides.acquire()
        self._counted = True

    def materialize(self, shape, device=None, dtype=None):
        """Replace the placeholder by an uninitialized tensor of ``shape`` (on the placeholder's device and dtype
        unless given), and become ``cls_to_become``."""
        from .. import _creation
        from ..autograd.grad_mode import no_grad

        device = self.data.device if device is None else device
        dtype = self.data.dtype if dtype is None else dtype
        shape = (shape,) if isinstance(shape, int) else tuple(shape)
        with no_grad():
            self.data = _creation.empty(shape, device=device, dtype=dtype)
        self._stop_uninitialized()
        self.__class__ = self.cls_to_become

    def _stop_uninitialized(self):
        if self.__dict__.pop("_counted", False):
            _overrides.release()

    def __del__(self):
        self._stop_uninitialized()

    @property
    def shape(self):
        raise RuntimeError("Can't access the shape of an uninitialized parameter or buffer. This error usually happens "
                           "in `load_state_dict` when trying to load an uninitialized parameter into an initialized "
                           "one. Call `forward` to initialize the parameters before accessing their attributes.")

    def share_memory_(self):
        raise RuntimeError("Can't share memory on an uninitialized parameter or buffer. Call `forward` to initialize "
                           "the parameters before calling `module.share_memory()`.")

    def __repr__(self):
        return f"<{self.__class__.__name__}>"

    __str__ = __repr__

    def __len__(self):
        raise ValueError(_USE_MSG.format("<function Tensor.__len__>"))

    def __reduce_ex__(self, protocol):
        return (self.__class__, (self.requires_grad,))

    def __deepcopy__(self, memo):
        return type(self)(self.requires_grad, self.data.device, self.data.dtype)

    @classmethod
    def __jitorch_function__(cls, func, args, kwargs):
        from .. import _overrides

        name = _overrides.tensor_method_name(func)
        original = getattr(func, "__jitorch_original__", None) or getattr(func, "__wrapped__", func)
        if name in cls._ALLOWED:
            return original(*args, **kwargs)
        where = f"<method '{name}' of 'jitorch.Tensor' objects>" if name else f"<function {func.__name__}>"
        raise ValueError(_USE_MSG.format(where))


def _refused_operator(name):
    def operator(self, other):
        raise ValueError(_USE_MSG.format(f"<method '{name}' of 'jitorch.Tensor' objects>"))
    operator.__name__ = name
    return operator


def _install_refused_operators():
    # Tensor's operators run on ``self`` without asking the override machinery (only the other operand is
    # checked): the placeholder refuses them itself, reflected ones included (``2 * p``, ``t @ p``).
    from .._overrides import _OPERATORS

    for name in _OPERATORS:
        setattr(UninitializedTensorMixin, name, _refused_operator(name))
    UninitializedTensorMixin.__hash__ = object.__hash__  # (defining __eq__ would drop it) torch allows hashing


_install_refused_operators()


def _placeholder(device, dtype):
    from .. import _creation

    return _creation.empty(0, device=device, dtype=dtype)


class UninitializedParameter(UninitializedTensorMixin, Parameter):
    """A ``Parameter`` whose shape comes later (lazy modules): ``materialize(shape)`` makes it a ``Parameter``."""

    cls_to_become = Parameter

    def __new__(cls, requires_grad=True, device=None, dtype=None):
        # Not through Parameter.__new__: its requires_grad_() call is refused while another placeholder is alive.
        p = object.__new__(cls)
        p._data = _placeholder(device, dtype)._data
        p._requires_grad = bool(requires_grad)
        p._start_uninitialized()
        return p


class UninitializedBuffer(UninitializedTensorMixin, Tensor):
    """A buffer whose shape comes later: ``materialize(shape)`` makes it a plain Tensor."""

    cls_to_become = Tensor

    def __new__(cls, requires_grad=False, device=None, dtype=None, persistent=True):
        b = object.__new__(cls)
        b._data = _placeholder(device, dtype)._data
        b._requires_grad = bool(requires_grad)
        b.persistent = persistent
        b._start_uninitialized()
        return b
