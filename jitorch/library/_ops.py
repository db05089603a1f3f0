"""``jitorch.ops.<namespace>.<name>[.<overload>]``: torch's ``torch.ops`` objects for the registered operators.

`namespace` (what ``jitorch.ops.__getattr__`` returns for a namespace `known_namespace` finds) is an
`_OpNamespace`; its attributes are `OpOverloadPacket` s, whose attributes are `OpOverload` s (``.default``, ``.out``).
A packet is an attribute of its namespace from its first lookup until its operator's Library is destroyed
(`forget`); the operator's entry is looked up again on every call, so a redefinition (``custom_op`` of the same
name) or a destroyed ``Library`` is seen by code holding the objects.

>>> import jitorch
>>> lib = jitorch.library.Library("doc_ops", "DEF")
>>> lib.define("double(Tensor x) -> Tensor")
'double'
>>> lib.impl("double", lambda x: x * 2, "CPU")
>>> jitorch.ops.doc_ops.double(jitorch.ones(2)), jitorch.ops.doc_ops.double.default
(tensor([2., 2.]), <OpOverload(op='doc_ops.double', overload='default')>)
>>> jitorch.ops.doc_ops.triple
Traceback (most recent call last):
AttributeError: '_OpNamespace' 'doc_ops' object has no attribute 'triple'
"""
from __future__ import annotations

import types

from .. import _overrides
from . import _registry

__all__ = ["namespace", "known_namespace", "forget", "OpOverload", "OpOverloadPacket", "overload_for"]

_NAMESPACES: dict = {}
_PACKETS: dict = {}  # "ns::name" -> OpOverloadPacket
_OVERLOADS: dict = {}  # registry key -> OpOverload


def namespace(name):
    ns = _NAMESPACES.get(name)
    if ns is None:
        ns = _NAMESPACES[name] = _OpNamespace(name)
    return ns


def known_namespace(name):
    """Whether ``name`` is a namespace of ``jitorch.library``: an operator defined in it or a kernel waiting for its
    definition, or a Library of it not destroyed."""
    from ._library import live_namespaces

    prefix = name + "::"
    return any(k.startswith(prefix) for k in _registry.REGISTRY) or any(k.startswith(prefix) for k in
                                                                        _registry.PENDING) \
        or name in live_namespaces()


def forget(key):
    """Drop the packet cached on its namespace once no overload of ``key``'s operator is left (torch deletes the
    attribute when the op's Library goes too)."""
    qualname = key.split(".", 1)[0]
    if not _registry.has_qualname(qualname):
        ns, _, name = qualname.partition("::")
        space = _NAMESPACES.get(ns)
        if space is not None:
            space.__dict__.pop(name, None)


class _OpNamespace(types.ModuleType):
    """``jitorch.ops.<ns>``: its attributes are the operators of the namespace."""

    def __init__(self, name):
        super().__init__(f"jitorch.ops.{name}")
        self.name = name

    def __getattr__(self, op_name):
        if op_name.startswith("__") and op_name.endswith("__"):
            raise AttributeError(op_name)
        qualname = f"{self.name}::{op_name}"
        if not _registry.has_qualname(qualname):
            raise AttributeError(f"'_OpNamespace' '{self.name}' object has no attribute '{op_name}'")
        packet = _PACKETS.get(qualname)
        if packet is None:
            packet = _PACKETS[qualname] = OpOverloadPacket(qualname)
        setattr(self, op_name, packet)  # later lookups skip the registry scan, until `forget`
        return packet


def overload_for(key):
    """The `OpOverload` of a registry key (``"ns::name"`` or ``"ns::name.overload"``)."""
    overload = _OVERLOADS.get(key)
    if overload is None:
        qualname, _, name = key.partition(".")
        overload = _OVERLOADS[key] = OpOverload(qualname, name or "default")
    return overload


class OpOverloadPacket:
    """``jitorch.ops.ns.name``: calls the default overload; ``.default``, ``.<overload>`` name one."""

    def __init__(self, qualname):
        self._qualified_op_name = qualname
        self._ns, _, self._name = qualname.partition("::")
        self.__name__ = self._name
        self.__qualname__ = self._name
        self.__module__ = f"jitorch.ops.{self._ns}"

    def overloads(self):
        return [e.overload for e in _registry.REGISTRY.values() if e.qualname == self._qualified_op_name]

    def __getattr__(self, name):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        key = self._qualified_op_name if name == "default" else f"{self._qualified_op_name}.{name}"
        if key not in _registry.REGISTRY:
            raise AttributeError(f"The underlying op of '{self}' has no overload name '{name}'")
        return overload_for(key)

    def __call__(self, *args, **kwargs):
        name = "default"
        if self._qualified_op_name not in _registry.REGISTRY:  # no default overload: the only one, if one
            overloads = self.overloads()
            name = overloads[0] if len(overloads) == 1 else name
        return getattr(self, name)(*args, **kwargs)

    def __str__(self):
        return f"{self._ns}.{self._name}"

    def __repr__(self):
        return f"<OpOverloadPacket(op='{self}')>"


class OpOverload:
    """``jitorch.ops.ns.name.default``: one overload; calls run the operator (see `_registry.call`). Generated code
    spells it ``jitorch.ops.ns.name.default`` (``__module__`` + ``__qualname__``)."""

    def __init__(self, qualname, overload):
        self._namespace, _, self._opname = qualname.partition("::")
        self._overloadname = overload
        self._key = qualname if overload == "default" else f"{qualname}.{overload}"
        self.__name__ = f"{self._opname}.{overload}"
        self.__qualname__ = overload
        self.__module__ = f"jitorch.ops.{self._namespace}.{self._opname}"

    @property
    def _entry(self):
        entry = _registry.REGISTRY.get(self._key)
        if entry is None:
            raise RuntimeError(f"{self}: the operator no longer exists (its Library was destroyed)")
        return entry

    @property
    def _schema(self):
        entry = self._entry
        return entry.schema

    @property
    def namespace(self):
        return self._namespace

    @property
    def overloadpacket(self):
        return getattr(namespace(self._namespace), self._opname)

    def name(self):
        return self._key

    def __call__(self, *args, **kwargs):
        if _overrides._live:  # a Proxy among the arguments (symbolic_trace): the call is recorded, not run
            found = _overrides.find_override(args, kwargs)
            if found is not None:
                return type(found).__jitorch_function__(self, args, kwargs)
        return _registry.call(self._entry, args, kwargs)

    def __str__(self):
        return f"{self._namespace}.{self._opname}.{self._overloadname}"

    def __repr__(self):
        return f"<OpOverload(op='{self._namespace}.{self._opname}', overload='{self._overloadname}')>"

    def __reduce__(self):
        return _resolve, (self._namespace, self._opname, self._overloadname)


def _resolve(ns, name, overload):
    return getattr(getattr(namespace(ns), name), overload)
