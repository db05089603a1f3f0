"""The ``_data`` of tensors without one strided array (sparse_coo, nested): code that would read it as a dense
array gets an error naming what to do, not wrong data. Each kind subclasses `NoStridedMemory`, since the
dispatcher keys its answers for such tensors by the class (``_dispatch.NO_STRIDED_DATA``).

>>> class Demo(NoStridedMemory):
...     __slots__ = ()
...     kind, advice = "demo tensor", "convert it first"
>>> Demo().shape
Traceback (most recent call last):
RuntimeError: a demo tensor has no strided memory (its array's 'shape' was read); convert it first
"""
from __future__ import annotations

__all__ = ["NoStridedMemory"]


class NoStridedMemory:
    """Raises on every attribute read but Python's protocols; ``kind`` and ``advice`` word the error."""

    __slots__ = ()
    kind = "tensor"
    advice = ""

    def __getattr__(self, name):
        if name.startswith("__"):  # introspection (doctest, copy, inspect) asks for protocols: none here
            raise AttributeError(name)
        raise RuntimeError(f"a {self.kind} has no strided memory (its array's {name!r} was read); {self.advice}")

    def __repr__(self):
        return f"<no strided memory: {self.kind}>"
