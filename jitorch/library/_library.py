"""``jitorch.library.Library`` and the registration functions that take an operator by name: ``define``, ``impl``,
``register_kernel``, ``register_fake``, ``register_autograd``.

A ``Library`` owns what it registers: when it is destroyed (``_destroy()``, or garbage-collected, as torch's), its
definitions and kernels go. The module-level functions register through libraries kept alive for the process.

Dispatch keys map onto kernel slots: ``CPU``/``CUDA``/``Meta`` (or ``"cpu"``, ``"cuda"``, ``"meta"``) one device,
``CompositeExplicitAutograd`` every device, ``CompositeImplicitAutograd`` (the default) a kernel made of jitorch ops
that autograd and tracers see through, ``Autograd`` a kernel that handles autograd itself.

>>> import jitorch
>>> lib = jitorch.library.Library("doc_lib", "FRAGMENT")
>>> lib.define("scale(Tensor x, float a=2.0) -> Tensor")
'scale'
>>> lib.impl("scale", lambda x, a=2.0: x * a, "CompositeExplicitAutograd")
>>> jitorch.ops.doc_lib.scale(jitorch.ones(2), 3.0)
tensor([3., 3.])
"""
from __future__ import annotations

import warnings
import weakref

from . import _registry
from ._schema import parse_schema

__all__ = ["Library", "define", "impl", "register_kernel", "register_fake", "register_autograd", "impl_abstract"]

_SLOTS = {"CPU": "cpu", "CUDA": "cuda", "Meta": "meta", "cpu": "cpu", "cuda": "cuda", "meta": "meta",
          "CompositeExplicitAutograd": None, "CompositeImplicitAutograd": "implicit", "Autograd": "autograd",
          "AutogradCPU": "autograd", "AutogradCUDA": "autograd"}
_DEF_NAMESPACES: set = set()  # namespaces with a live "DEF" library (torch allows one)
_LIBRARIES = weakref.WeakSet()  # every Library made, for the namespaces jitorch.ops knows
_keep_alive: list = []  # the libraries of the module-level functions


def _slot(key):
    if key not in _SLOTS:
        raise ValueError(f"Unknown dispatch key or device type {key!r}: jitorch.library knows "
                         f"{sorted(map(str, _SLOTS))}")
    return _SLOTS[key]


class Library:
    """``Library(ns, kind)``: ``"DEF"`` (the one library defining operators of ``ns``), ``"FRAGMENT"`` (more
    definitions) or ``"IMPL"`` (kernels only); ``dispatch_key`` is the default key of its ``impl`` calls."""

    def __init__(self, ns, kind, dispatch_key=""):
        if kind not in ("IMPL", "DEF", "FRAGMENT"):
            raise ValueError(f"Unsupported kind: {kind}")
        if kind == "DEF":
            if ns in _DEF_NAMESPACES:
                raise RuntimeError(
                    f"Only a single TORCH_LIBRARY can be used to register the namespace {ns}; please put all of your "
                    "definitions in a single TORCH_LIBRARY block.  If you were trying to specify implementations, "
                    "consider using TORCH_LIBRARY_IMPL (which can be duplicated).  If you really intended to define "
                    "operators for a single namespace in a distributed way, you can use TORCH_LIBRARY_FRAGMENT to "
                    "explicitly indicate this.")
            _DEF_NAMESPACES.add(ns)
        self.ns, self.kind, self.dispatch_key = ns, kind, dispatch_key
        self._defs: list = []  # registry keys this library defined
        self._impls: list = []  # (key, slot, fn) it registered
        self._finalizer = weakref.finalize(self, _cleanup, self._defs, self._impls, ns if kind == "DEF" else None)
        _LIBRARIES.add(self)

    def __repr__(self):
        return f"Library(kind={self.kind}, ns={self.ns}, dispatch_key={self.dispatch_key})>"

    def define(self, schema, alias_analysis="", *, tags=()):
        """Define an operator of this namespace from a schema string (``"foo(Tensor x) -> Tensor"``); returns its
        name."""
        head = schema.split("(", 1)[0].strip()
        name = head.split("::", 1)[1] if "::" in head else head
        if self.kind == "IMPL":
            raise RuntimeError(f'def("{name}"): Cannot define an operator inside of a TORCH_LIBRARY_IMPL block.  All '
                               "def()s should be placed in the (unique) TORCH_LIBRARY block for their namespace.")
        opname, _, overload = name.partition(".")
        parsed = parse_schema(schema).with_name(f"{self.ns}::{opname}", overload)
        key = f"{self.ns}::{name}"
        if key in _registry.REGISTRY:
            raise RuntimeError(f"Tried to register an operator ({parsed}) with the same name and overload name "
                               "multiple times. Each overload's schema should only be registered with a single call "
                               "to def().")
        _registry.define(key, parsed)
        self._defs.append(key)
        return opname

    def impl(self, op_name, fn, dispatch_key="", *, with_keyset=False, allow_override=False):
        """Register ``fn`` as the kernel of ``op_name`` (``"foo"``, ``"foo.overload"`` or an OpOverload) for
        ``dispatch_key``."""
        if with_keyset:
            raise NotImplementedError("Library.impl(with_keyset=True): jitorch has no dispatch key sets to pass; "
                                      "register a kernel that takes the operator's arguments")
        key = _key(op_name, self.ns)
        slot = _slot(dispatch_key or self.dispatch_key or "CompositeImplicitAutograd")
        _set_kernel(key, slot, fn)
        self._impls.append((key, slot, fn))

    def _register_fake(self, op_name, fn, _stacklevel=1, *, allow_override=False):
        key = _key(op_name, self.ns)
        _set_kernel(key, "fake", fn)
        self._impls.append((key, "fake", fn))

    def _destroy(self):
        self._finalizer()


def _cleanup(defs, impls, def_ns):
    for key, slot, fn in impls:
        entry = _registry.REGISTRY.get(key)
        if entry is not None and slot == "fake" and entry.fake is fn:
            entry.fake = None
        elif entry is not None and entry.kernels.get(slot) is fn:
            del entry.kernels[slot]
        pending = _registry.PENDING.get(key, {})
        if pending.get(slot) is fn:
            del pending[slot]
    from ._ops import forget

    for key in defs:
        _registry.REGISTRY.pop(key, None)
        forget(key)
    defs.clear()
    impls.clear()
    _DEF_NAMESPACES.discard(def_ns)


def live_namespaces():
    """The namespaces of the Libraries not destroyed (a FRAGMENT may not have defined anything yet)."""
    return {lib.ns for lib in list(_LIBRARIES) if lib._finalizer.alive}


def _key(op, ns=None):
    """The registry key of ``op``: a name (``"ns::foo"``, ``"foo.out"`` relative to ``ns``), an OpOverload, an
    OpOverloadPacket or a CustomOpDef."""
    from ._custom_op import CustomOpDef
    from ._ops import OpOverload, OpOverloadPacket

    if isinstance(op, CustomOpDef):
        return op._qualname
    if isinstance(op, OpOverload):
        return op._key
    if isinstance(op, OpOverloadPacket):
        return op._qualified_op_name
    if not isinstance(op, str):
        raise TypeError(f"expected an operator name such as 'mylib::foo', an OpOverload or a CustomOpDef, got "
                        f"{type(op).__name__}")
    if "::" not in op:
        if ns is None:
            raise ValueError(f"expected a qualified operator name 'namespace::name', got {op!r}")
        op = f"{ns}::{op}"
    return op[:-len(".default")] if op.endswith(".default") else op


def _set_kernel(key, slot, fn):
    entry = _registry.REGISTRY.get(key)
    table = _registry.PENDING.setdefault(key, {}) if entry is None else entry.kernels
    old = (entry.fake if entry is not None else table.get("fake")) if slot == "fake" else table.get(slot)
    if old is not None and old is not fn:
        warnings.warn(f"Overriding a previously registered kernel for the same operator and the same dispatch key\n"
                      f"  operator: {key}\n  dispatch key: {slot or 'CompositeExplicitAutograd'}", UserWarning,
                      stacklevel=3)
    if slot == "fake" and entry is not None:
        entry.fake = fn
    else:
        table[slot] = fn


def _library(ns):
    lib = Library(ns, "FRAGMENT")
    _keep_alive.append(lib)
    return lib


def define(qualname, schema, *, lib=None, tags=()):
    """Define the operator ``qualname`` (``"mylib::foo"``) with ``schema`` (``"(Tensor x) -> Tensor"``)."""
    ns, name = qualname.split("::")
    lib = lib if lib is not None else _library(ns)
    lib.define(name + schema, tags=tags)


def impl(qualname, types, func=None, *, lib=None):
    """Register ``func`` as the kernel of ``qualname`` for ``types`` (device types ``"cpu"``/``"cuda"`` or dispatch
    keys, one or a list); a decorator when ``func`` is omitted. ``impl(lib, name, dispatch_key)`` (torch's older
    form) returns a decorator registering on ``lib``."""
    if isinstance(qualname, Library):
        def register_on(fn):
            qualname.impl(types, fn, func or "")
            return fn
        return register_on
    kinds = [types] if isinstance(types, str) else list(types)

    def register(fn):
        key = _key(qualname)
        owner = lib if lib is not None else _library(key.split("::")[0])
        for kind in kinds:
            owner.impl(key, fn, kind)
        return fn

    return register if func is None else register(func)


def _custom(op):
    from ._custom_op import CustomOpDef

    if isinstance(op, CustomOpDef):
        return op
    entry = _registry.REGISTRY.get(_key(op))
    return entry.owner if entry is not None else None


def register_kernel(op, device_types, func=None, /, *, lib=None):
    """Register ``func`` for ``device_types`` (None: every device) of ``op``; a decorator when ``func`` is omitted."""
    custom = _custom(op)
    if custom is not None:
        return custom.register_kernel(device_types, func)
    kinds = [device_types] if device_types is None or isinstance(device_types, str) else list(device_types)
    return impl(_key(op), ["CompositeExplicitAutograd" if k is None else k for k in kinds], func, lib=lib)


def register_fake(op, func=None, /, *, lib=None, _stacklevel=1, allow_override=False):
    """Register the fake implementation of ``op`` (a name, an OpOverload or a CustomOpDef); a decorator when ``func``
    is omitted. See :meth:`CustomOpDef.register_fake`."""
    def register(fn):
        custom = _custom(op)
        if custom is not None:
            return custom.register_fake(fn)
        key = _key(op)
        owner = lib if lib is not None else _library(key.split("::")[0])
        owner._register_fake(key, fn)
        return fn

    return register if func is None else register(func)


impl_abstract = register_fake  # torch's older name


def register_autograd(op, backward, /, *, setup_context=None, lib=None):
    """Register the backward formula of ``op``; see :meth:`CustomOpDef.register_autograd`."""
    custom = _custom(op)
    if custom is not None:
        return custom.register_autograd(backward, setup_context=setup_context)
    key = _key(op)
    entry = _registry.REGISTRY.get(key)
    if entry is None:
        raise ValueError(f"register_autograd({op!r}): there is no operator {key}; define it first")
    if entry.schema.is_mutable:
        raise RuntimeError(f"Cannot register autograd formula for non-functional operator {entry} with schema "
                           f"{entry.schema}. Please create a functional operator and register an autograd formula "
                           "for that.")
    entry.backward, entry.setup_context = backward, setup_context
