"""What a sparse_coo tensor refuses: its placeholder ``_data`` (no strided memory), the dispatcher's answer for a row
handed one (`_answer`: the sparse form, or torch's missing-kernel error), and a refusing method for every inherited
Tensor method ``SparseCooTensor`` does not define (`_refuse_inherited`). ``_coo`` re-exports these names.

>>> import jitorch
>>> s = jitorch.sparse_coo_tensor([[0, 1]], [1.0, 2.0], (3,))
>>> try:
...     s.exp_()
... except NotImplementedError as e:
...     print(str(e)[:60])
exp_: sparse_coo tensors are not supported by this op (Could
"""
from __future__ import annotations

import types

from .. import _overrides
from .._dispatch import NO_STRIDED_DATA, Rerouted
from .._no_strided_memory import NoStridedMemory
from .._tensor import Tensor

__all__ = ["sparse_refusal"]


def sparse_refusal(name):
    """The error for an op that does not take sparse_coo tensors (torch's words for a missing SparseCPU kernel)."""
    return NotImplementedError(
        f"{name}: sparse_coo tensors are not supported by this op (Could not run 'aten::{name}' with arguments from "
        "the 'SparseCPU' backend); convert with .to_dense() first, or use the jitorch.sparse functions")


class _NoStridedMemory(NoStridedMemory):
    __slots__ = ()
    kind, advice = "sparse_coo tensor", "convert it with .to_dense() first"


def _answer(op, args, attrs):
    """What a row handed a sparse tensor raises (``_dispatch.NO_STRIDED_DATA``): the sparse form's result for the
    rows a dense tensor's methods reach with a sparse operand (``dense.add(s)``, ``dense.mul_(s)``), else the
    refusal."""
    from ._coo_math import ROUTED

    route = ROUTED.get(op.name)
    if route is None or attrs:
        return sparse_refusal(op.name)
    return Rerouted(route(*args))


_NO_MEMORY = _NoStridedMemory()
NO_STRIDED_DATA[_NoStridedMemory] = _answer


_OWN: set = set()  # the methods SparseCooTensor answers itself (filled by _refuse_inherited)
# Inherited Tensor methods that only call what this class defines.
_INHERITED_OK = frozenset({"ndimension", "is_nonzero", "is_inference", "is_shared", "__hash__", "__init_subclass__"})
# Dunder methods of Tensor that would read the (missing) array.
_REFUSED_DUNDERS = frozenset({"__getitem__", "__setitem__", "__iter__", "__contains__", "__invert__", "__pos__",
                              "__abs__", "__dlpack__", "__dlpack_device__", "__array_wrap__", "__iadd__", "__isub__",
                              "__imul__", "__itruediv__", "__ifloordiv__", "__imod__", "__ipow__", "__imatmul__",
                              "__iand__", "__ior__", "__ixor__", "__ilshift__", "__irshift__"}) | _overrides._OPERATORS


def _refusing(name):
    def refuse(self, *args, **kwargs):
        raise sparse_refusal(name)
    refuse.__name__ = refuse.__qualname__ = name
    return refuse


def _refuse_inherited():
    """Give SparseCooTensor a refusing method for every Tensor method it does not define (once, at the first sparse
    tensor: by then every module has bound its Tensor methods)."""
    from ._coo import SparseCooTensor

    own = {name for name, value in vars(SparseCooTensor).items()}
    _OWN.update(name for name in own if not name.startswith("__"))
    for name, value in list(vars(Tensor).items()):
        if name in own or name in _INHERITED_OK:
            continue
        callable_ = isinstance(value, (types.FunctionType, types.BuiltinFunctionType, staticmethod))
        if callable_ and (not name.startswith("_") or name in _REFUSED_DUNDERS):
            setattr(SparseCooTensor, name, _refusing(name[2:-2] if name.startswith("__") else name))
    SparseCooTensor._refusals_installed = True
