"""``MaskedTensor``: a tensor's data with a bool mask of the elements that count, as ``torch.masked.MaskedTensor``
(strided layout only).

Elementwise ops keep the operand's mask; reductions keep a result where any reduced element was kept; the repr
shows masked-out elements as ``--``. Operations run on the data with jitorch's autograd: ``backward`` on a result
fills ``.grad`` of a MaskedTensor made with ``requires_grad=True`` (and of the tensor ``as_masked_tensor`` wrapped).

Differences from torch: a MaskedTensor is not a ``Tensor`` subclass (``isinstance(mt, Tensor)`` is False); public
jitorch functions handed one (``jitorch.sum(mt)``, ``jitorch.exp(mt)``) come to it through ``__jitorch_function__``;
a gradient's masked-out data are 0 (torch passes the upstream value through), and ``as_masked_tensor``'s source
tensor receives a plain-tensor gradient.

>>> import jitorch
>>> from jitorch.masked import masked_tensor
>>> mt = masked_tensor(jitorch.tensor([1., 2., 3.]), jitorch.tensor([True, False, True]))
>>> mt.sum()
MaskedTensor(  4.0000, True)
"""
from __future__ import annotations

import warnings

import jitorch as torch

from .. import _overrides
from . import _maskedtensor_ops as ops

__all__ = ["MaskedTensor", "is_masked_tensor", "masked_tensor", "as_masked_tensor"]

_SUPPORTED_DTYPES = ("float16", "float32", "float64", "bool", "int8", "int16", "int32", "int64")
_PROTOTYPE_WARNING = ("The PyTorch API of MaskedTensors is in prototype stage and will change in the near future. "
                      "Please open a Github issue for features requests and see our documentation on the "
                      "torch.masked module for further information about the project.")


def is_masked_tensor(obj, /):
    """True if ``obj`` is a MaskedTensor."""
    return isinstance(obj, MaskedTensor)


def masked_tensor(data, mask, requires_grad=False):
    """A MaskedTensor of a copy of ``data`` (a leaf: ``requires_grad`` makes it collect ``.grad``) and ``mask``."""
    return MaskedTensor(data, mask, requires_grad)


def as_masked_tensor(data, mask):
    """A MaskedTensor whose data stay in ``data``'s autograd graph (gradients flow back to ``data``)."""
    _check_members(data, mask)
    return MaskedTensor._wrap(data.clone(), mask.clone())


def _check_members(data, mask):
    if is_masked_tensor(data) or not isinstance(data, torch.Tensor):
        raise TypeError("data must be a Tensor")
    if is_masked_tensor(mask) or not isinstance(mask, torch.Tensor):
        raise TypeError("mask must be a Tensor")
    if mask.dtype != torch.bool:
        raise TypeError("mask must have dtype bool.")
    if str(data.dtype).rsplit(".", 1)[-1] not in _SUPPORTED_DTYPES:
        raise TypeError(f"{data.dtype} is not supported in MaskedTensor.")
    if data.dim() != mask.dim():
        raise ValueError("data.dim() must equal mask.dim()")
    if tuple(data.shape) != tuple(mask.shape):
        raise ValueError("data.size() must equal mask.size()")


def _format_rows(data, mask, formatter):
    """torch's nested-list text of ``data`` with masked-out elements as ``--``."""
    if data.dim() == 1:
        values = data.tolist()
        kept = mask.tolist()
        texts = [formatter.format(v) if isinstance(v, float) else str(v) for v in values]
        width = max((len(t) if k else 8 for t, k in zip(texts, kept)), default=0)
        return "[" + ", ".join(t if k else "--".rjust(width) for t, k in zip(texts, kept)) + "]"
    rows = [_format_rows(d, m, formatter) for d, m in zip(data, mask)]
    rows = ["\n".join("  " + line for line in row.split("\n")) for row in rows]
    return "[\n" + ",\n".join(rows) + "\n]"


class MaskedTensor:
    """``data`` with a bool ``mask`` of the same shape: True marks the elements that count."""

    def __init__(self, data, mask, requires_grad=False):
        _check_members(data, mask)
        warnings.warn(_PROTOTYPE_WARNING, UserWarning, stacklevel=2)
        if data.requires_grad:
            warnings.warn("It is not recommended to create a MaskedTensor with a tensor that requires_grad. "
                          "To avoid this, you can use data.detach().clone()", UserWarning, stacklevel=2)
        self._set(data.detach().clone().requires_grad_(bool(requires_grad)), mask.clone())

    def _set(self, data, mask):
        self._masked_data, self._masked_mask = data, mask
        if not getattr(self, "_counted", False):
            _overrides.acquire(methods=False)  # public functions handed one come to __jitorch_function__
            self._counted = True

    def __del__(self):
        if getattr(self, "_counted", False):
            self._counted = False
            _overrides.release(methods=False)

    @classmethod
    def _wrap(cls, data, mask):
        """A MaskedTensor over ``data`` as it is (graph included): the results of operations."""
        result = object.__new__(cls)
        result._set(data, mask)
        return result

    # -- members --------------------------------------------------------------------------------------------------
    def get_data(self):
        """The data, masked-out elements included (a view in the autograd graph: gradients reach this tensor)."""
        return self._masked_data.view(self._masked_data.shape)

    def get_mask(self):
        """The bool mask (True: kept)."""
        return self._masked_mask

    def to_tensor(self, value):
        """A plain tensor of the data with masked-out elements set to ``value``."""
        return self._masked_data.masked_fill(~self._masked_mask, value)

    shape = property(lambda self: self._masked_data.shape)
    dtype = property(lambda self: self._masked_data.dtype)
    device = property(lambda self: self._masked_data.device)
    layout = property(lambda self: self._masked_data.layout)
    ndim = property(lambda self: self._masked_data.ndim)
    is_sparse = property(lambda self: False)

    def size(self, dim=None):
        return self._masked_data.size() if dim is None else self._masked_data.size(dim)

    def dim(self):
        return self._masked_data.dim()

    def numel(self):
        return self._masked_data.numel()

    def is_sparse_coo(self):
        return False

    def is_sparse_csr(self):
        return False

    # -- autograd -------------------------------------------------------------------------------------------------
    @property
    def requires_grad(self):
        return self._masked_data.requires_grad

    def requires_grad_(self, requires_grad=True):
        self._masked_data.requires_grad_(requires_grad)
        return self

    @property
    def grad(self):
        """The accumulated gradient as a MaskedTensor under this mask (None before a backward reaches it)."""
        grad = self._masked_data.grad
        return None if grad is None else MaskedTensor._wrap(grad, self._masked_mask)

    def backward(self, gradient=None, retain_graph=None, create_graph=False):
        """Backpropagate from this result's data (``gradient``: a tensor or MaskedTensor of its shape)."""
        if is_masked_tensor(gradient):
            gradient = gradient._masked_data
        self._masked_data.backward(gradient, retain_graph=retain_graph, create_graph=create_graph)

    def detach(self):
        return MaskedTensor._wrap(self._masked_data.detach(), self._masked_mask)

    def clone(self):
        return MaskedTensor._wrap(self._masked_data.clone(), self._masked_mask.clone())

    def to(self, *args, **kwargs):
        return MaskedTensor._wrap(self._masked_data.to(*args, **kwargs), self._masked_mask)

    # -- text -----------------------------------------------------------------------------------------------------
    def __repr__(self):
        formatter = "{0:8.4f}"
        if self.dim() == 0:
            value = self._masked_data.item()
            text = formatter.format(value) if isinstance(value, float) else str(value)
            kept = bool(self._masked_mask.item())
            return f"MaskedTensor({text if kept else '--'}, {kept})"
        body = _format_rows(self._masked_data.detach(), self._masked_mask, formatter)
        return "MaskedTensor(\n" + "\n".join("  " + line for line in body.split("\n")) + "\n)"

    # -- operations -----------------------------------------------------------------------------------------------
    def softmax(self, dim, dtype=None):
        result = ops.softmax(self, dim)
        return result if dtype is None else result.to(dtype)

    def all(self, dim=None, keepdim=False):
        return ops.reduce("all", self, dim, keepdim)

    @classmethod
    def __jitorch_function__(cls, func, args, kwargs):
        """Public jitorch functions handed a MaskedTensor run its method of the same name."""
        name = _overrides.tensor_method_name(func) or getattr(func, "__name__", "")
        first = next((a for a in args if isinstance(a, MaskedTensor)), None)
        method = getattr(cls, name, None) if first is not None else None
        if method is None or name.startswith("_"):
            raise TypeError(f"{name}: not implemented for MaskedTensor (it takes elementwise ops, "
                            f"{', '.join(ops.REDUCTION_NAMES)} and softmax)")
        if first is args[0]:
            return method(*args, **kwargs)
        if name in ops.BINARY_NAMES and len(args) == 2:
            return ops.binary(name, args[0], args[1], (), kwargs)
        raise TypeError(f"{name}: a MaskedTensor must be its first argument")


def _unary_method(name):
    def method(self, *args, **kwargs):
        return ops.unary(name, self, args, kwargs)
    method.__name__ = name
    method.__doc__ = f"``jitorch.{name}`` of the data, under this mask."
    return method


def _binary_method(name, reflected=False):
    def method(self, other, *args, **kwargs):
        return ops.binary(name, other, self, args, kwargs) if reflected else ops.binary(name, self, other, args,
                                                                                       kwargs)
    method.__name__ = name
    method.__doc__ = f"``jitorch.{name}`` of the data, under the operands' shared mask."
    return method


def _reduction_method(name):
    def method(self, dim=None, keepdim=False, dtype=None):
        return ops.reduce(name, self, dim, keepdim, dtype)
    method.__name__ = name
    method.__doc__ = f"Masked ``{name}`` over ``dim`` (every dim when None); kept where any input element was."
    return method


for _name in ops.UNARY_NAMES:
    setattr(MaskedTensor, _name, _unary_method(_name))
for _name in ops.BINARY_NAMES:
    setattr(MaskedTensor, _name, _binary_method(_name))
for _name in ops.REDUCTION_NAMES:
    if _name != "all":
        setattr(MaskedTensor, _name, _reduction_method(_name))
_OPERATORS = {"add": "add", "sub": "sub", "mul": "mul", "truediv": "div", "floordiv": "floor_divide",
              "mod": "remainder", "eq": "eq", "ne": "ne", "lt": "lt", "le": "le", "gt": "gt", "ge": "ge",
              "and": "bitwise_and", "or": "bitwise_or", "xor": "bitwise_xor"}
for _dunder, _name in _OPERATORS.items():
    setattr(MaskedTensor, f"__{_dunder}__", _binary_method(_name))
    if _dunder not in ("eq", "ne", "lt", "le", "gt", "ge"):
        setattr(MaskedTensor, f"__r{_dunder}__", _binary_method(_name, reflected=True))
MaskedTensor.__neg__ = _unary_method("neg")
MaskedTensor.__abs__ = _unary_method("abs")
MaskedTensor.__invert__ = _unary_method("bitwise_not")
MaskedTensor.__pow__ = _unary_method("pow")
MaskedTensor.__hash__ = object.__hash__
