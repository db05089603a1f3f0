"""``torch.utils.weak``: mappings keyed by object identity that do not keep their keys alive. Tensors compare
elementwise (``a == b`` is a tensor), so ``weakref.WeakKeyDictionary`` cannot hold them; these key on ``id``.

>>> import jitorch
>>> cache = WeakTensorKeyDictionary()
>>> t = jitorch.ones(2)
>>> cache[t] = "stats"
>>> len(cache), cache[t]
(1, 'stats')
>>> del t
>>> len(cache)
0
"""
from __future__ import annotations

import weakref
from collections.abc import MutableMapping

__all__ = ["TensorWeakRef", "WeakIdRef", "WeakIdKeyDictionary", "WeakTensorKeyDictionary"]


class WeakIdRef(weakref.ref):
    """A weak reference hashed and compared by the referent's identity (while it lives)."""

    __slots__ = ("_id",)

    def __new__(cls, key, callback=None):
        self = super().__new__(cls, key, callback)
        self._id = id(key)
        return self

    def __init__(self, key, callback=None):
        super().__init__(key, callback)

    def __hash__(self):
        return self._id

    def __eq__(self, other):
        if not isinstance(other, WeakIdRef):
            return NotImplemented
        a, b = self(), other()
        if a is not None and b is not None:
            return a is b
        return self is other

    def __ne__(self, other):
        equal = self.__eq__(other)
        return equal if equal is NotImplemented else not equal


class _ProbeRef:
    """A strong stand-in for looking a live key up (no weak reference made per lookup)."""

    __slots__ = ("_obj", "_id")

    def __init__(self, obj):
        self._obj, self._id = obj, id(obj)

    def __call__(self):
        return self._obj

    def __hash__(self):
        return self._id

    def __eq__(self, other):
        return other() is self._obj


class WeakIdKeyDictionary(MutableMapping):
    """A dict whose entries vanish when their key object is collected; keys match by identity.

    >>> import jitorch
    >>> a, b = jitorch.zeros(1), jitorch.zeros(1)
    >>> d = WeakIdKeyDictionary({a: 1})
    >>> a in d, b in d
    (True, False)
    """

    def __init__(self, dict=None, ref_type=WeakIdRef):
        self.data, self.ref_type = {}, ref_type
        owner = weakref.ref(self)

        def remove(ref):
            table = owner()
            if table is not None:
                table.data.pop(ref, None)
        self._remove = remove
        if dict is not None:
            self.update(dict)

    def __getitem__(self, key):
        return self.data[_ProbeRef(key)]

    def __setitem__(self, key, value):
        probe = _ProbeRef(key)
        if probe in self.data:
            self.data[probe] = value
        else:
            self.data[self.ref_type(key, self._remove)] = value

    def __delitem__(self, key):
        del self.data[_ProbeRef(key)]

    def __contains__(self, key):
        try:
            return _ProbeRef(key) in self.data
        except TypeError:
            return False

    def __iter__(self):
        for ref in list(self.data):
            obj = ref()
            if obj is not None:
                yield obj

    def __len__(self):
        return sum(1 for ref in list(self.data) if ref() is not None)

    def keyrefs(self):
        """The weak references to the keys."""
        return list(self.data)

    def copy(self):
        """A new dictionary with the same live entries."""
        return type(self)({k: v for k, v in self.items()}, ref_type=self.ref_type)

    def __repr__(self):
        return f"<{type(self).__name__} at {id(self):#x}>"


WeakTensorKeyDictionary = WeakIdKeyDictionary


class TensorWeakRef:
    """A weak reference to a tensor: call it for the tensor, or None once it is collected.

    >>> import jitorch
    >>> t = jitorch.zeros(1)
    >>> TensorWeakRef(t)() is t
    True
    """

    __slots__ = ("ref",)

    def __init__(self, tensor):
        from .._tensor import Tensor

        if not isinstance(tensor, Tensor):
            raise TypeError(f"TensorWeakRef: expected a Tensor, got {type(tensor).__name__}")
        self.ref = weakref.ref(tensor)

    def __call__(self):
        return self.ref()
