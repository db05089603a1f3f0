"""The size of a jagged tensor's ragged dim: torch's symbolic "nested int" (``j1``), and the Size that holds it.

A jagged nested tensor of three sequences of 2, 5 and 3 tokens has no single size along its ragged dim. torch
reports a symbol instead (``torch.Size([3, j1, 8])``), one per offsets tensor: two nested tensors sharing offsets
share the symbol, so ``a.shape == b.shape`` says they line up. `NestedInt` is that symbol: equal only to itself,
printed ``j<n>`` (numbered in creation order in this process, so the numbers need not match torch's), accepted back
by ``view``/``reshape``/``expand`` at the ragged position, and refusing ``int()`` (it has no single value).

>>> from jitorch.nested._nested_int import NestedInt, NestedSize
>>> j = NestedInt()
>>> s = NestedSize((2, j, 4))
>>> s[1] is j, s[1] == j, s[1] == NestedInt(), len(s)
(True, True, False, 3)
"""
from __future__ import annotations

import itertools

from .._tensor import Size

__all__ = ["NestedInt", "NestedSize"]

_numbers = itertools.count(1)


class NestedInt:
    """The ragged dim's size of one offsets tensor: equal only to itself (torch's ``SymInt`` ``j<n>``)."""

    __slots__ = ("number", "__weakref__")

    def __init__(self):
        self.number = next(_numbers)

    def __repr__(self):
        return f"j{self.number}"

    __str__ = __repr__

    def __eq__(self, other):
        return self is other

    def __ne__(self, other):
        return self is not other

    def __hash__(self):
        return object.__hash__(self)

    def _no_value(self, *args):
        raise TypeError(f"the ragged dim's size {self} has no single value: each sequence has its own length "
                        "(read them with nt.offsets().diff() or nt.lengths())")

    __int__ = __index__ = __float__ = __bool__ = _no_value
    __lt__ = __le__ = __gt__ = __ge__ = __add__ = __radd__ = __mul__ = __rmul__ = _no_value


class NestedSize(Size):
    """A ``jitorch.Size`` holding a `NestedInt`: printed as torch prints it (``jitorch.Size([2, j1, 4])``)."""

    def __repr__(self):
        return f"jitorch.Size([{', '.join(str(s) for s in self)}])"

    def __getitem__(self, item):
        if type(item) is slice:
            return NestedSize(tuple.__getitem__(self, item))
        return tuple.__getitem__(self, item)

    def __add__(self, other):
        if not isinstance(other, tuple):
            return NotImplemented
        return NestedSize(tuple.__add__(self, other))

    def __radd__(self, other):
        if not isinstance(other, tuple):
            return NotImplemented
        return NestedSize(tuple.__add__(other, self))

    def numel(self):
        raise TypeError(f"numel of {self!r}: the ragged dim has no single size; use nt.numel()")
