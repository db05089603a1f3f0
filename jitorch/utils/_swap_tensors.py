"""``torch.utils.swap_tensors``: two tensor objects trade everything they hold (class, values, autograd state,
attributes), so every reference to the first now sees the second's contents. Module conversions under
``jitorch.__future__.set_swap_module_params_on_conversion(True)`` go through it.

>>> import jitorch
>>> a, b = jitorch.ones(2), jitorch.zeros(3, dtype=jitorch.float64)
>>> swap_tensors(a, b)
>>> a.tolist(), b.tolist()
([0.0, 0.0, 0.0], [1.0, 1.0])
"""
from __future__ import annotations

import weakref

__all__ = ["swap_tensors"]


def _slot_names(cls):
    names = []
    for klass in cls.__mro__:
        slots = klass.__dict__.get("__slots__", ())
        names.extend([slots] if isinstance(slots, str) else slots)
    return [n for n in names if n not in ("__dict__", "__weakref__")]


def swap_tensors(t1, t2):
    """Swaps the contents of tensors ``t1`` and ``t2`` in place (see the module docstring).

    >>> import jitorch
    >>> p, q = jitorch.nn.Parameter(jitorch.ones(1)), jitorch.zeros(2)
    >>> swap_tensors(p, q)
    >>> type(p).__name__, type(q).__name__, q.tolist()
    ('Tensor', 'Parameter', [1.0])
    """
    from .._tensor import Tensor

    for name, t in (("t1", t1), ("t2", t2)):
        if not isinstance(t, Tensor):
            raise TypeError(f"swap_tensors: expected {name} to be a Tensor, got {type(t).__name__}")
        if weakref.getweakrefcount(t):
            raise RuntimeError(f"Cannot swap {name} because it has weakref associated with it")
    if t1 is t2:
        return
    slots1, slots2 = _slot_names(type(t1)), _slot_names(type(t2))
    if sorted(slots1) != sorted(slots2):
        raise RuntimeError(f"swap_tensors: {type(t1).__name__} and {type(t2).__name__} declare different __slots__, "
                           "so their contents cannot be exchanged")
    held = {name: (getattr(t1, name, _MISSING), getattr(t2, name, _MISSING)) for name in slots1}
    t1.__class__, t2.__class__ = type(t2), type(t1)
    t1.__dict__, t2.__dict__ = t2.__dict__, t1.__dict__
    for name, (v1, v2) in held.items():
        _set_slot(t1, name, v2)
        _set_slot(t2, name, v1)
    # A graph that saved either object would now read the other's values: the bumps make its backward refuse.
    t1._bump_version()
    t2._bump_version()


_MISSING = object()


def _set_slot(obj, name, value):
    if value is _MISSING:
        if hasattr(obj, name):
            delattr(obj, name)
    else:
        setattr(obj, name, value)
