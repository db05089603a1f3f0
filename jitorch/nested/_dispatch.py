"""Which nested form answers each public function and Tensor method: `FUNCTIONS` for the public functions a nested
tensor is handed to (``jitorch.exp(nt)``, ``F.linear(nt, w)``: through ``NestedTensor.__jitorch_function__``), and
the methods and operators bound onto ``NestedTensor`` (``nt.exp()``, ``nt + 1``). Anything else is refused by
name (`_refusals.py`).

>>> import jitorch, jitorch.nested
>>> nt = jitorch.nested.nested_tensor([jitorch.ones(1, 2), jitorch.ones(2, 2)], layout=jitorch.jagged)
>>> (2 - jitorch.exp(nt * 0)).values().sum().item()
6.0
"""
from __future__ import annotations

from .._tensor import Tensor
from . import _creation, _ops_nn, _ops_shape
from ._ops_pointwise import INPLACE, POINTWISE, elementwise, inplace
from ._tensor import NestedTensor, components, jagged_like, make_strided

__all__ = ["FUNCTIONS"]


def _pointwise_function(name):
    def run(func, args, kwargs):
        return elementwise(name, func, args, kwargs)
    return run


def _pointwise_method(name):
    def method(self, *args, **kwargs):
        return elementwise(name, lambda *a, **k: getattr(Tensor, name)(*a, **k), (self, *args), kwargs)
    method.__name__ = method.__qualname__ = name
    return method


def _inplace_method(name):
    def method(self, *args, **kwargs):
        return inplace(name, self, args, kwargs)
    method.__name__ = method.__qualname__ = name
    return method


def _embedding(func, args, kwargs):
    """``F.embedding`` of a jagged tensor of indices: the rows of each index, one more dim after the ragged one."""
    indices = args[0]
    if not isinstance(indices, NestedTensor) or indices._nt_components is not None or any(
            isinstance(a, NestedTensor) for a in list(args[1:]) + list(kwargs.values())):
        raise RuntimeError("embedding(): a jagged nested tensor of indices and a dense weight are supported")
    return jagged_like(indices, func(indices._nt_values, *args[1:], **kwargs))


def _operator(name, fn, reflected=False):
    def operator(self, other):
        return elementwise(name, fn, (other, self) if reflected else (self, other), {})
    return operator


def _unwrapped(fn):
    """A handler ``fn(*args, **kwargs)`` as a public-function entry (the function itself is not needed)."""
    return lambda func, args, kwargs: fn(*args, **kwargs)


def _to(self, *args, **kwargs):
    """``to(dtype)``, ``to(device)``, ``to(other)``: applied to the values (components); ``self`` when nothing
    changes."""
    parts = self._nt_components if self._nt_components is not None else [self._nt_values]
    moved = [p.to(*args, **kwargs) for p in parts]
    if all(m is p for m, p in zip(moved, parts)):
        return self
    if self._nt_components is not None:
        return make_strided(moved)
    out = jagged_like(self, moved[0])
    if moved[0].device != self._nt_offsets.device:
        out._nt_offsets = self._nt_offsets.to(moved[0].device)
    return out


def _clone(self, *, memory_format=None):
    if self._nt_components is not None:
        return make_strided([c.clone() for c in self._nt_components])
    return jagged_like(self, self._nt_values.clone())


def _contiguous(self, memory_format=None):
    if self.is_contiguous():
        return self
    if self._nt_components is not None:
        return make_strided([c.contiguous() for c in self._nt_components])
    if self._nt_lengths is None:
        return jagged_like(self, self._nt_values.contiguous())
    return _creation.as_nested_tensor([c for c in components(self)], layout=self.layout)


def _getitem(self, key):
    if isinstance(key, int):
        parts = components(self)
        if not -len(parts) <= key < len(parts):
            raise IndexError(f"index {key} is out of bounds for a nested tensor of {len(parts)} sequences")
        return parts[key]
    raise RuntimeError(f"__getitem__: a nested tensor ({self._layout_name()} layout) takes an integer index (one "
                       f"sequence), got {key!r}; use nt.unbind() or nt.to_padded_tensor(padding)")


def _dtype_method(dtype_name):
    def convert(self, memory_format=None):
        import jitorch

        return _to(self, getattr(jitorch, dtype_name))
    convert.__name__ = dtype_name
    return convert


def _reduction(name):
    def run(self, dim=None, keepdim=False, *, dtype=None):
        return _ops_nn.reduce(name, self, dim, keepdim, dtype=dtype)
    run.__name__ = name
    return run


def _softmax_method(name):
    def run(self, dim=None, dtype=None):
        import jitorch

        return _ops_nn.softmax_like(name, getattr(jitorch, name), (self, dim), {"dtype": dtype} if dtype else {})
    run.__name__ = name
    return run


def _reshape(self, *shape):
    return _ops_shape.view(self, *shape, op="reshape")


_METHODS = {
    "to": _to, "type_as": lambda self, other: _to(self, other.dtype), "clone": _clone, "contiguous": _contiguous,
    "__getitem__": _getitem,
    "cpu": lambda self: _to(self, "cpu"), "cuda": lambda self, device=None, non_blocking=False: _to(
        self, "cuda" if device is None else device),
    "float": _dtype_method("float32"), "double": _dtype_method("float64"), "half": _dtype_method("float16"),
    "bfloat16": _dtype_method("bfloat16"), "long": _dtype_method("int64"), "int": _dtype_method("int32"),
    "bool": _dtype_method("bool"),
    "sum": _reduction("sum"), "mean": _reduction("mean"),
    "softmax": _softmax_method("softmax"), "log_softmax": _softmax_method("log_softmax"),
    "matmul": _ops_nn.matmul, "__matmul__": _ops_nn.matmul, "__rmatmul__": lambda self, other: _ops_nn.matmul(
        other, self),
    "transpose": _ops_shape.transpose, "permute": _ops_shape.permute, "view": _ops_shape.view,
    "reshape": _reshape, "view_as": lambda self, other: _ops_shape.view(self, *other.shape),
    "reshape_as": lambda self, other: _reshape(self, *other.shape), "unflatten": _ops_shape.unflatten,
    "flatten": _ops_shape.flatten,
    "unsqueeze": _ops_shape.unsqueeze, "squeeze": _ops_shape.squeeze, "split": _ops_shape.split,
    "chunk": _ops_shape.chunk, "to_padded_tensor": lambda self, padding, output_size=None:
        _creation.to_padded_tensor(self, padding, output_size),
    "__add__": _operator("add", lambda a, b: a + b), "__radd__": _operator("add", lambda a, b: a + b, True),
    "__sub__": _operator("sub", lambda a, b: a - b), "__rsub__": _operator("rsub", lambda a, b: a - b, True),
    "__mul__": _operator("mul", lambda a, b: a * b), "__rmul__": _operator("mul", lambda a, b: a * b, True),
    "__truediv__": _operator("div", lambda a, b: a / b),
    "__rtruediv__": _operator("div", lambda a, b: a / b, True),
    "__pow__": _operator("pow", lambda a, b: a ** b), "__rpow__": _operator("pow", lambda a, b: a ** b, True),
    "__eq__": _operator("eq", lambda a, b: a == b), "__ne__": _operator("ne", lambda a, b: a != b),
    "__lt__": _operator("lt", lambda a, b: a < b), "__le__": _operator("le", lambda a, b: a <= b),
    "__gt__": _operator("gt", lambda a, b: a > b), "__ge__": _operator("ge", lambda a, b: a >= b),
    "__and__": _operator("bitwise_and", lambda a, b: a & b), "__or__": _operator("bitwise_or", lambda a, b: a | b),
    "__iadd__": _inplace_method("add_"), "__isub__": _inplace_method("sub_"), "__imul__": _inplace_method("mul_"),
    "__itruediv__": _inplace_method("div_"),
    "__neg__": lambda self: elementwise("neg", lambda a: -a, (self,), {}),
    "__abs__": lambda self: elementwise("abs", abs, (self,), {}),
    "__invert__": lambda self: elementwise("bitwise_not", lambda a: ~a, (self,), {}),
}

FUNCTIONS = {name: _pointwise_function(name) for name in POINTWISE}
FUNCTIONS.update({
    "linear": _unwrapped(_ops_nn.linear), "matmul": _unwrapped(_ops_nn.matmul),
    "layer_norm": _unwrapped(_ops_nn.layer_norm), "scaled_dot_product_attention": _unwrapped(_ops_nn.sdpa),
    "softmax": lambda func, args, kwargs: _ops_nn.softmax_like("softmax", func, args, kwargs),
    "log_softmax": lambda func, args, kwargs: _ops_nn.softmax_like("log_softmax", func, args, kwargs),
    "sum": lambda func, args, kwargs: _ops_nn.reduce("sum", *args, **kwargs),
    "mean": lambda func, args, kwargs: _ops_nn.reduce("mean", *args, **kwargs),
    "cat": _unwrapped(_ops_shape.cat), "concat": _unwrapped(_ops_shape.cat),
    "concatenate": _unwrapped(_ops_shape.cat), "unbind": _unwrapped(_ops_shape.unbind),
    "transpose": _unwrapped(_ops_shape.transpose), "swapaxes": _unwrapped(_ops_shape.transpose),
    "permute": _unwrapped(_ops_shape.permute), "reshape": _unwrapped(_reshape),
    "unflatten": _unwrapped(_ops_shape.unflatten), "flatten": _unwrapped(_ops_shape.flatten),
    "unsqueeze": _unwrapped(_ops_shape.unsqueeze), "squeeze": _unwrapped(_ops_shape.squeeze),
    "split": _unwrapped(_ops_shape.split), "chunk": _unwrapped(_ops_shape.chunk), "clone": _unwrapped(_clone),
    "detach": _unwrapped(NestedTensor.detach), "numel": _unwrapped(NestedTensor.numel),
    "to_padded_tensor": _unwrapped(_creation.to_padded_tensor), "embedding": _embedding,
})


def _pass_through(func, args, kwargs):
    """The public function itself, on the nested tensor as a whole."""
    original = getattr(func, "__jitorch_original__", None) or getattr(func, "__wrapped__", func)
    return original(*args, **kwargs)


FUNCTIONS.update({name: _pass_through for name in ("typename", "is_same_size")})


def _bind():
    for name in POINTWISE:
        if name not in _METHODS and callable(getattr(Tensor, name, None)):
            setattr(NestedTensor, name, _pointwise_method(name))
    for name in INPLACE:
        setattr(NestedTensor, name, _inplace_method(name))
    for name, fn in _METHODS.items():
        setattr(NestedTensor, name, fn)


_bind()
