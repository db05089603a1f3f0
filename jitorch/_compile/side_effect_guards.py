"""The guards of an entry in replay mode for Python side effects (side_effects.py): the values the call itself
changes are wildcards (`ANY`), attribute by attribute, and lists it may append to are guarded by identity only.

>>> masked_guards([("n", ("calls", 1))], [("n", ("calls", 2))])
[('n', ('calls', <any: changed by the call itself>))]
>>> masked_guards([("a", (("scale", 2.0),))], [("a", (("scale", 2.0), ("n_seen", 4)))])
[('a', (('scale', 2.0), ('n_seen', <any: changed by the call itself>)))]
"""
from __future__ import annotations

from .guards import _Same

__all__ = ["ANY", "masked_guards", "replay_guards"]


class _Any:
    """A guard value the call itself changes (a counter, a list it appends to): equal to anything."""

    __slots__ = ()

    def __eq__(self, other):
        return True

    def __ne__(self, other):
        return False

    __hash__ = object.__hash__

    def __repr__(self):
        return "<any: changed by the call itself>"


ANY = _Any()


def _mask(before, after):
    try:
        if bool(before == after):
            return before
    except Exception:  # a stand-in with an odd __eq__: differs
        pass
    if _named_pairs(before) and _named_pairs(after):
        # A module's attributes: an attribute the call adds or drops changes the length, not what the others mean;
        # later calls look like ``after``, and an attribute the call left alone stays guarded (``m.scale = 3.0``).
        old = dict(before)
        return tuple((k, _mask(old[k], v) if k in old else ANY) for k, v in after)
    if type(before) is tuple and type(after) is tuple and len(before) == len(after):
        return tuple(_mask(b, a) for b, a in zip(before, after))
    return ANY


def _named_pairs(value):
    return type(value) is tuple and all(type(p) is tuple and len(p) == 2 and type(p[0]) is str for p in value) and \
        len({p[0] for p in value}) == len(value)


def masked_guards(before, after):
    """``before`` (a call's guards) with each value that differs in ``after`` (the same guards read after the call
    ran) replaced by `ANY`, as deep in its tuples as they agree (``("n", 1)`` -> ``("n", ANY)``)."""
    if [n for n, _ in before] != [n for n, _ in after]:
        return before
    return [(name, _records(_mask(v, w))) for (name, v), (_, w) in zip(before, after)]


def replay_guards(guards):
    """The guards of an entry whose Python reruns on every call (a replay): lists guarded as possible records by
    identity only (`_records`)."""
    return [(name, _records(v)) for name, v in guards]


def _records(value):
    """A list guarded as a possible record (`named_values._guarded`: identity, then entries) by identity only: the
    replay reruns the Python that appends to it or reads it."""
    if type(value) is tuple and len(value) == 3 and value[0] == "list" and type(value[1]) is _Same:
        return value[:2] + (ANY,)
    return value
