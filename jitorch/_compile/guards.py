"""Guards: what a compiled graph assumed about its call, as named values; a call whose values differ retraces.

Each tensor argument contributes its shape, dtype, device and strides (the kernels are specialized on all four; a
miss on strides alone is handled in stride_relayout.py); other arguments were baked into the graph as constants, so
their values are guarded too. Grad mode, the default dtype and, for modules, the ``training`` flags, parameter
identities (layouts in training, where the graph takes them as inputs), buffer identities and every public
plain-data attribute (``momentum``, ``eps``, ``p``, a user's ``self.temperature``) complete the key.

>>> import jitorch
>>> names = [n for n, _ in guard_values((jitorch.ones(2, 3), 4), {})]
>>> names[:4], names[-3:]
(['arg0.shape', 'arg0.dtype', 'arg0.device', 'arg0.stride'], ['aliases', 'grad_mode', 'default_dtype'])
"""
from __future__ import annotations

import numpy as np

from .. import _dtype
from .._tensor import Tensor
from ..autograd.grad_mode import GradState
from ..nn.modules.module import Module
from ..utils._pytree import is_dict_kind
from .array_contents import ArrayGuard

_MODULE_METHODS = (Module.modules, Module.parameters, Module.buffers, Module.named_modules)

__all__ = ["guard_values", "first_failure", "argument_names", "module_tree", "call_hooks"]

_SIMPLE = (int, float, bool, str, bytes, type(None), complex)
_SIMPLE_TYPES = frozenset(_SIMPLE)


class _Same:
    """Equal to another `_Same` of the very same object. It holds the object, so that an entry's guard keeps it
    alive: an ``id`` alone can be reused by a new object once the old one is freed, and would then match it."""

    __slots__ = ("obj",)

    def __init__(self, obj):
        self.obj = obj

    def __eq__(self, other):
        return type(other) is _Same and other.obj is self.obj

    __hash__ = None

    def __repr__(self):
        return f"the {type(self.obj).__name__} object at {id(self.obj):#x}"


# elements: NumPy arrays up to this size are guarded by value, larger ones by identity and a version of their contents
# (array_contents.py: one comparison with a snapshot per call, no copy)
_SMALL_ARRAY = 4096


def _constant(value):
    """A stand-in for a non-tensor argument, compared with ``==``: plain data (NumPy scalars and small arrays too)
    by value, larger arrays by identity and contents (`array_contents.contents_version`), anything else by identity
    (`_Same`)."""
    if isinstance(value, _SIMPLE):
        return (type(value).__name__, value)
    if isinstance(value, (tuple, list)) and all(isinstance(v, _SIMPLE) for v in value):
        return (type(value).__name__, tuple(value))
    if isinstance(value, np.generic):  # a timestep from np.arange, an index from randint
        return (f"numpy.{value.dtype}", value.item())
    if type(value) is np.ndarray:
        if value.size <= _SMALL_ARRAY:
            return ("ndarray", value.shape, value.dtype.str, value.tobytes())
        # changed in place (``a *= 2``), a trace's copy of it is stale: its version changes, and the call retraces
        # (unless the graph reads the array in place: `array_contents.ArrayGuard`)
        return ArrayGuard(value)
    return _Same(value)


def structure_key(spec):
    """A comparable key of a `jitorch.utils._pytree.flatten_into` spec that keeps dict key order (dicts compare equal
    in any order, but their leaves are numbered in insertion order).

    >>> from jitorch.utils._pytree import flatten_into
    >>> structure_key(flatten_into({"b": 1, "a": 2}, [])) == structure_key(flatten_into({"a": 2, "b": 1}, []))
    False
    """
    kind, inner = spec
    if kind is None:
        return None
    if is_dict_kind(kind):
        return (kind, tuple((k, structure_key(v)) for k, v in inner.items()))
    return (kind, tuple(structure_key(v) for v in inner))


_DTYPE_NAMES: dict = {}  # str(np.dtype) costs ~7 us on NumPy 2.4; a guard reads it for every tensor of every call


def _dtype_name(dtype):
    name = _DTYPE_NAMES.get(dtype)
    if name is None:
        name = _DTYPE_NAMES[dtype] = str(dtype)
    return name


def _device_name(t):
    return "cpu" if type(t._data) is np.ndarray else str(t.device)


def _layout(t):
    d = t._data
    return ("tensor", d.shape, _dtype_name(d.dtype), _device_name(t), d.strides)


def guard_values(args, kwargs, module=None, tree=None, by_value=False):
    """``[(name, value), ...]`` for one call; equal lists mean the same compiled entry applies.

    ``tree``: ``module_tree(module)`` when the caller already has it (one walk of the modules per call).
    ``by_value``: a training call, whose graph takes the parameters as inputs: they are guarded by layout instead
    of identity.
    """
    out = []
    for name, a in zip(argument_names(args, kwargs), (*args, *kwargs.values())):
        if isinstance(a, Tensor):
            d = a._data
            shape, dtype, device, stride = _tensor_labels(name)
            out += [(shape, d.shape), (dtype, _dtype_name(d.dtype)), (device, _device_name(a)), (stride, d.strides)]
        else:
            out.append((name, _constant(a)))
    # The graph reads an argument passed twice (``f(x, x)``, self-attention's ``q = k = v``) from one input:
    # another call with distinct tensors must not reuse it.
    first = {}
    out.append(("aliases", tuple(first.setdefault(id(a), i) for i, a in enumerate((*args, *kwargs.values()))
                                 if isinstance(a, Tensor))))
    out.append(("grad_mode", GradState.enabled))
    # Python floats and float creation functions (``arange(2.)``) were traced at the default dtype of that call.
    out.append(("default_dtype", _dtype._default_float))
    if module is not None:
        mods, params, buffers = module_tree(module) if tree is None else tree
        out.append(("training", tuple([m.training for m in mods])))
        # A training graph takes the parameters as inputs (read from the module on every call), so only their
        # layouts matter: ``functional_call`` swapping in new tensors each step (MAML's adapted weights,
        # ``torch.func`` transforms) reuses the entry, as torch.compile's inlined nn modules do. The count
        # tells a tying change (``parameters()`` lists a shared tensor once). Inference graphs read them as
        # constants: by identity.
        out.append(("parameters", tuple(map(_layout, params)) if by_value else tuple(map(id, params))))
        # The graph reads buffers as constants and writes BatchNorm's statistics back into them: a buffer
        # replaced by another tensor (``bn.running_mean = t``) must retrace, or the old one is read and written.
        out.append(("buffers", tuple([id(b) for m in mods for b in m._buffers.values()])))
        # Plain-data attributes (``momentum``, ``eps``, dropout's ``p``, a user's ``self.temperature``) were baked
        # into the graph as constants: changing one must retrace.
        out.append(("attributes", tuple([_plain_attributes(m) for m in mods])))
    return out


def module_tree(module):
    """``(modules, parameters, buffers)`` of a module tree, in the orders of ``modules()``, ``parameters()`` and
    ``buffers()`` (each shared module, parameter and buffer once), from one walk without generators: a compiled
    module reads all three on every call, and the generators cost several microseconds per module.

    >>> from jitorch import nn
    >>> m = nn.Sequential(nn.Linear(2, 2), nn.ReLU())
    >>> mods, params, buffers = module_tree(m)
    >>> mods == list(m.modules()) and params == list(m.parameters()) and buffers == list(m.buffers())
    True
    """
    if not _plain_tree_walk(module):
        return list(module.modules()), list(module.parameters()), list(module.buffers())
    mods, seen, stack = [], set(), [module]
    while stack:  # pre-order, each module once, as named_modules
        m = stack.pop()
        if id(m) in seen:
            continue
        seen.add(id(m))
        mods.append(m)
        children = [c for c in m._modules.values() if c is not None]
        if children:
            stack += reversed(children)
    return mods, _members(mods, "_parameters"), _members(mods, "_buffers")


_CALL_HOOKS = ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks")


def call_hooks(mods):
    """Whether any module of the tree, or the global registry, has forward or backward hooks. A trace runs them once
    and bakes in what they returned, so a graph would skip their side effects on later calls and ignore hooks
    registered after it: such calls run eagerly instead."""
    from ..nn.modules._hooks import has_global_hooks

    if has_global_hooks():
        return True
    for m in mods:
        d = m.__dict__
        for name in _CALL_HOOKS:
            if d.get(name):
                return True
    return False


def _plain_tree_walk(module):
    cls = type(module)
    return cls.modules is _MODULE_METHODS[0] and cls.parameters is _MODULE_METHODS[1] and \
        cls.buffers is _MODULE_METHODS[2] and cls.named_modules is _MODULE_METHODS[3]


def _members(mods, table):
    out, seen = [], set()
    for m in mods:
        for v in m.__dict__[table].values():
            if v is not None and id(v) not in seen:
                seen.add(id(v))
                out.append(v)
    return out


_ARG_NAMES = tuple(f"arg{i}" for i in range(64))
_TENSOR_LABELS: dict = {}


def argument_names(args, kwargs):
    """The guards' names of the flat arguments: ``arg0, arg1, ...``, then the keywords."""
    n = len(args)
    names = list(_ARG_NAMES[:n]) if n <= len(_ARG_NAMES) else [f"arg{i}" for i in range(n)]
    return names + list(kwargs) if kwargs else names


def _tensor_labels(name):
    """The four guard names of a tensor argument, built once per argument name (a call pays no string formatting)."""
    labels = _TENSOR_LABELS.get(name)
    if labels is None:
        labels = _TENSOR_LABELS[name] = (f"{name}.shape", f"{name}.dtype", f"{name}.device", f"{name}.stride")
    return labels


_PUBLIC_KEYS: dict = {}  # a module __dict__'s keys -> those that may hold user plain-data attributes
# Module's own bookkeeping; a user's private attributes (``self._scale`` behind a property) are baked in as others.
_MODULE_INTERNALS = frozenset(Module().__dict__) | {"training"}


def _plain_attributes(module):
    """``(name, value)`` of a module's user plain-data attributes (numbers, strings, None and tuples of them)."""
    d = module.__dict__
    keys = tuple(d)
    public = _PUBLIC_KEYS.get(keys)
    if public is None:  # a new set of attribute names: most modules of a model share a handful
        if len(_PUBLIC_KEYS) > 4096:
            _PUBLIC_KEYS.clear()
        public = _PUBLIC_KEYS[keys] = tuple(k for k in keys if k not in _MODULE_INTERNALS)
    return tuple([(k, v) for k in public if (type(v := d[k]) in _SIMPLE_TYPES or isinstance(v, _SIMPLE) or (
        type(v) is tuple and all(isinstance(e, _SIMPLE) for e in v)))])


def first_failure(expected, got):
    """A readable description of the first guard that differs between two `guard_values` lists."""
    for (name, want), (name2, have) in zip(expected, got):
        if name != name2:
            return f"argument structure: expected {name}, got {name2}"
        if want != have:
            if name.endswith(".stride") and type(want) is tuple and type(have) is tuple:
                return _stride_failure(name, want, have, got)
            return f"{name}: expected {want!r}, got {have!r}" + _ARRAY_HINT * _contents_changed(want, have)
    return f"number of guarded values: expected {len(expected)}, got {len(got)}"


_ARRAY_HINT = (" (a NumPy array changed in place: the graph may have baked its values in, so each change traces "
               "again; pass it as a tensor, jitorch.from_numpy(a), for the graph to read it on every call)")


def _contents_changed(want, have):
    return type(want) is ArrayGuard and type(have) is ArrayGuard and want.array is have.array and \
        want.shape == have.shape and want.dtype == have.dtype


def _stride_failure(name, want, have, got):
    """A stride guard's failure in elements, as torch reports it (the guards hold NumPy's byte strides)."""
    dtype = dict(got).get(name[:-len(".stride")] + ".dtype")
    try:
        size = np.dtype(dtype).itemsize
    except TypeError:
        return f"{name}: expected byte strides {want!r}, got {have!r} (only the strides changed)"
    return f"{name}: expected strides {tuple(s // size for s in want)!r}, got {tuple(s // size for s in have)!r} " \
           f"(only the strides changed: same shape, dtype and device)"
