"""What a nested tensor refuses: its placeholder ``_data`` (it has no strided memory of its own), the dispatcher's
error for a row handed one, and a refusing method for every inherited Tensor method ``NestedTensor`` does not define.

>>> import jitorch, jitorch.nested
>>> nt = jitorch.nested.nested_tensor([jitorch.ones(2), jitorch.ones(3)], layout=jitorch.jagged)
>>> try:
...     nt.cumsum(-1)
... except NotImplementedError as e:
...     print(str(e)[:47])
cumsum: nested tensors (jagged layout) are not
"""
from __future__ import annotations

import types

from .. import _overrides
from .._dispatch import NO_STRIDED_DATA, Rerouted
from .._no_strided_memory import NoStridedMemory
from .._tensor import Tensor

__all__ = ["nested_refusal"]


def nested_refusal(name, layout="jagged", why=None):
    """The error for an op that does not take nested tensors, or not this way (``why``)."""
    if why is not None:
        return RuntimeError(f"{name}(): {why} ({layout} layout nested tensor)")
    return NotImplementedError(
        f"{name}: nested tensors ({layout} layout) are not supported by this op (torch: aten.{name}.default has no "
        "NestedTensor kernel); run it per sequence on nt.unbind(), or on nt.to_padded_tensor(padding)")


class _NoStridedMemory(NoStridedMemory):
    __slots__ = ()
    kind, advice = "nested tensor", "use nt.values(), nt.unbind() or nt.to_padded_tensor(padding)"


def _answer(op, args, attrs):
    """What a row handed a nested tensor raises: the nested form's result for an elementwise row a dense tensor's
    method reaches with a nested operand (``dense.add(nt)``), else the refusal."""
    from ._ops_pointwise import POINTWISE, elementwise

    if op.name in POINTWISE and not attrs:
        import jitorch

        public = getattr(jitorch, op.name, None)
        if public is not None:
            return Rerouted(elementwise(op.name, public, args, {}))
    layouts = [a.layout for a in args if isinstance(a, Tensor) and getattr(a, "is_nested", False)]
    return nested_refusal(op.name, str(layouts[0]).rsplit(".", 1)[-1] if layouts else "jagged")


NO_MEMORY = _NoStridedMemory()
NO_STRIDED_DATA[_NoStridedMemory] = _answer

OWN: set = set()  # the methods NestedTensor answers itself (filled by refuse_inherited)
# Inherited Tensor methods that only call what this class defines.
_INHERITED_OK = frozenset({"ndimension", "is_inference", "is_shared", "__hash__", "__init_subclass__"})
_REFUSED_DUNDERS = frozenset({"__setitem__", "__iter__", "__contains__", "__invert__", "__dlpack__",
                              "__dlpack_device__", "__array_wrap__", "__iadd__", "__isub__", "__imul__",
                              "__itruediv__", "__ifloordiv__", "__imod__", "__ipow__", "__imatmul__", "__iand__",
                              "__ior__", "__ixor__", "__ilshift__", "__irshift__"}) | _overrides._OPERATORS


def _refusing(name):
    def refuse(self, *args, **kwargs):
        raise nested_refusal(name, self._layout_name())
    refuse.__name__ = refuse.__qualname__ = name
    return refuse


def refuse_inherited(cls):
    """Give ``cls`` a refusing method for every Tensor method it does not define (once, at the first nested tensor:
    by then every module has bound its Tensor methods)."""
    own = set()
    for klass in cls.__mro__:
        if klass is Tensor:
            break
        own.update(vars(klass))
    OWN.update(name for name in own if not name.startswith("__"))
    for name, value in list(vars(Tensor).items()):
        if name in own or name in _INHERITED_OK:
            continue
        callable_ = isinstance(value, (types.FunctionType, types.BuiltinFunctionType, staticmethod))
        if callable_ and (not name.startswith("_") or name in _REFUSED_DUNDERS):
            setattr(cls, name, _refusing(name[2:-2] if name.startswith("__") else name))
    cls._refusals_installed = True
