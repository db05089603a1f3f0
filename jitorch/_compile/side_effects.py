"""Python side effects of a compiled call: state it changes that outlives the call, found by comparing snapshots.

A whole-call graph replays tensor work only: ``self.feats.append(h)``, ``self.masks.pop(0)``, ``self.last_attn = a``,
``self.calls += 1``, ``cfg["k"] += 1`` or ``log.append(n)`` ran once, while tracing. torch.compile replays such
mutations on every call, so a function whose trace changed Python state reachable from outside the call runs through
the replay path instead (replay.py: its Python reruns on every call, in order, with the tensor work deferred and
compiled), as if it had a graph break with no break point.

`PythonState` snapshots, before the trace, what the code can reach by name: the ``__dict__`` of the modules it runs
(all of a user class's attributes; of jitorch's own modules the names the user's code uses, and their parameter,
buffer and submodule tables), the globals and closure cells of the compiled function and of the user's helpers it
names (`reached.functions_reached`), the call's arguments (a ``cache`` dict, a state object; for containers that hold
tensors, the caller's own: `call_site.FlatCall` writes changes back), and up to `_DEPTH` levels into what those hold:
the entries of lists, dicts, sets and deques, the ``__dict__`` of plain objects (``cfg.k``), the names the code uses
of the user's Python modules and classes (``type(self).calls += 1``).
Entries are compared by identity (plain numbers, strings... by value), so a call that stores a new tensor, bumps a
counter, appends, pops or writes a dict item is found, and `PythonState.restore` can put everything back (a call
that starts over after tracing).

The replay entry's guards stop checking the values the call itself changes (`masked_guards`): they differ on every
call by design, and the replay reruns the Python that reads them (a constant that a changed value feeds into no
longer matches the recorded op, and the rest of that call runs eagerly).

>>> import jitorch
>>> log = []
>>> state = PythonState(lambda x: log.append(x), None)
>>> log.append(1)
>>> state.changes()
['global log (list)']
>>> state.restore(); log
[]
"""
from __future__ import annotations

import sys
import types
from collections import deque
from dataclasses import dataclass

import numpy as np

from .._tensor import Tensor
from ..nn.modules.module import Module
from .call_site import _CALLER, Site
from .array_contents import pin_versions
from .guards import _SIMPLE, _SIMPLE_TYPES, guard_values, module_tree
from .named_values import NamedValues, _code_names, _library_module
from .reached import _LIBRARY, functions_reached
from .side_effect_guards import ANY, masked_guards, replay_guards

__all__ = ["PythonState", "masked_guards", "replay_guards", "ANY", "replay_for_side_effects", "SIDE_EFFECTS_NOTE",
           "any_cuda"]

_MISSING = object()
_MAX_WALK = 256  # entries of one container looked into (all of them are compared)
_DEPTH = 3  # containers and objects looked into below a name, a ``self`` or an argument (``self.stats["f"]``)
_MAX_RECORDS = 4096  # containers and namespaces watched in all: a snapshot stays cheap next to the trace it guards
_MAX_RETRACES = 8  # provisional replay entries traced again, per compiled function (`_provisional`)
# A module's bookkeeping: hook tables (hooks make calls eager: guards.call_hooks) and flags; its parameter, buffer
# and submodule tables are compared (``self.state = new`` on a buffer replaces an entry of ``_buffers``).
_MODULE_INTERNALS = frozenset(Module().__dict__) - {"_parameters", "_buffers", "_modules", "training"}
_TABLES = ("_parameters", "_buffers", "_modules")
_OPAQUE = (Tensor, Module, np.ndarray, np.generic, types.FunctionType, types.BuiltinFunctionType, types.MethodType,
           types.ModuleType, type)

SIDE_EFFECTS_NOTE = ("its Python reruns on every call (replay), the tensor work compiled, so these happen once per "
                     "call as in eager mode")


def any_cuda(args, kwargs, owner):
    """Whether a call's tensor arguments or ``owner``'s parameters live on CUDA (replay defers host arrays only)."""
    tensors = [a for a in (*args, *kwargs.values()) if isinstance(a, Tensor)]
    return any(t.is_cuda for t in tensors) or (owner is not None and any(p.is_cuda for p in owner.parameters()))


def _same(a, b):
    if a is b:
        return True
    kind = type(a)
    if kind is not type(b):
        return False
    if kind in _SIMPLE_TYPES:
        return a == b or (a != a and b != b)
    # An equal tuple or list of plain values stored again (``self.in_shape = tuple(x.shape)`` on every call) is no
    # change: the guards read such values by value, and a whole graph serves the next call as well.
    return isinstance(a, (tuple, list)) and len(a) == len(b) and _plain(a) and _plain(b) and all(map(_same, a, b))


def _plain(value):
    return all(type(v) in _SIMPLE_TYPES or (isinstance(v, (tuple, list)) and _plain(v)) for v in value)


def _user_class(obj):
    return not (type(obj).__module__ or "").startswith(_LIBRARY)


def _user_type(cls):
    """A class the user wrote (not Python's, an installed package's or jitorch's own)."""
    name = cls.__module__ or ""
    return name == "__main__" or not (name.startswith(_LIBRARY) or _library_module(sys.modules.get(name)))


class PythonState:
    """A snapshot of the Python state ``fn`` (or the compiled module ``module``) reaches (module notes), the containers
    and objects among the call's ``args`` and ``kwargs`` included (``cache["k"] = k``, ``st.hs.append(h)``)."""

    def __init__(self, fn, module, args=(), kwargs=None):
        self._records = []  # (label, kind, holder, keys or None, saved, name of a key)
        self._seen = set()
        mods = module_tree(module)[0] if module is not None else []
        reached = functions_reached(fn)
        for m in mods:
            forward = type(m).__dict__.get("forward")
            if isinstance(forward, types.FunctionType) and _user_class(m):
                reached += functions_reached(forward)
        names = set()
        for func, _, _ in reached:
            if func is not None:
                names.update(_code_names(func.__code__))
        self._names = names
        # Names the code may store as class attributes (``type(self).calls += 1``); dunders are Python's.
        self._class_names = tuple(n for n in names if not n.startswith("__"))
        for m in mods:
            self._module(type(m).__name__, m, _DEPTH)
        for i, value in enumerate(args):
            self._value(f"argument {i}", value, _DEPTH)
        for key, value in (kwargs or {}).items():
            self._value(f"argument {key}", value, _DEPTH)
        for func, selves, _ in reached:
            for obj in selves:
                if obj is not None:
                    self._value("self", obj, _DEPTH)
            if func is None:
                continue
            scope = func.__globals__
            used = tuple(n for n in _code_names(func.__code__) if n in scope)
            if used:
                self._watch("globals", "dict", scope, used, lambda k: f"global {k}", _DEPTH)
            for name, cell in zip(func.__code__.co_freevars, func.__closure__ or ()):
                self._cell(name, cell)

    # -- snapshot ---------------------------------------------------------------------------------------------------
    def _module(self, label, m, depth):
        if id(m) in self._seen:
            return
        self._seen.add(id(m))
        d = m.__dict__
        if _user_class(m):
            keys = None  # every attribute, those added by the call too
            self._class(type(m), depth)
        else:  # a library module's own caches are its business: only what the user's code names
            keys = tuple(k for k in self._names if k not in _MODULE_INTERNALS) + _TABLES
        self._watch(label, "attrs", d, keys, lambda k: f"{label}.{k}", depth)

    def _class(self, cls, depth):
        """Watch the names the code uses in the ``__dict__`` of ``cls`` and of its user base classes (counters and
        registries kept on a class)."""
        for c in cls.__mro__:
            if id(c) in self._seen or not _user_type(c):
                continue
            self._seen.add(id(c))
            name = c.__name__
            self._watch(f"class {name}", "class", c, self._class_names, lambda k: f"class {name}.{k}", depth)

    def _cell(self, name, cell):
        try:
            value = cell.cell_contents
        except ValueError:
            value = _MISSING
        self._records.append((f"closure {name}", "cell", cell, None, value, None))
        if value is not _MISSING:
            self._value(f"closure {name}", value, _DEPTH)

    def _watch(self, label, kind, holder, keys, name_of, depth):
        if len(self._records) >= _MAX_RECORDS:
            return
        saved = _contents(kind, holder, keys)
        self._records.append((label, kind, holder, keys, saved, name_of))
        if depth and kind in ("dict", "attrs", "class"):
            for k, v in list(saved.items())[:_MAX_WALK]:
                self._value(name_of(k) if type(k) is str else f"{label}[{k!r}]", v, depth - 1)
        elif depth and kind in ("list", "deque"):
            for i, v in enumerate(saved[:_MAX_WALK]):
                self._value(f"{label}[{i}]", v, depth - 1)

    def _value(self, label, value, depth):
        """Watch what ``value`` holds when it is a container or a plain object (once per object)."""
        if isinstance(value, _SIMPLE) or id(value) in self._seen:
            return
        if isinstance(value, Module):
            self._module(label, value, depth)
            return
        if isinstance(value, type):
            self._class(value, depth)
            return
        if isinstance(value, tuple):  # immutable itself (argument pytrees, named tuples): what it holds may change
            self._seen.add(id(value))
            for i, v in enumerate(value[:_MAX_WALK]):
                self._value(f"{label}[{i}]", v, depth)
            return
        if isinstance(value, types.ModuleType):
            if not _library_module(value):  # a user's config module: the names the code uses
                self._seen.add(id(value))
                keys = tuple(k for k in self._names if k in value.__dict__)
                self._watch(label, "dict", value.__dict__, keys, lambda k: f"{label}.{k}", 0)
            return
        if isinstance(value, _OPAQUE):
            return
        kind = "list" if isinstance(value, list) else "dict" if isinstance(value, dict) else "set" if isinstance(
            value, (set, bytearray)) else "deque" if isinstance(value, deque) else None
        if kind is None:
            d = getattr(value, "__dict__", None)
            if type(d) is not dict or not _user_class(value):
                return
            self._class(type(value), depth)
            kind, value = "attrs", d
        elif isinstance(getattr(value, "__dict__", None), dict) and id(value.__dict__) not in self._seen:
            # A list or dict subclass's own attributes (``hs.count = n``; `call_site.FlatCall` shares them).
            self._seen.add(id(value.__dict__))
            self._watch(label, "attrs", value.__dict__, None, lambda k: f"{label}.{k}", depth)
        self._seen.add(id(value))
        self._watch(label, kind, value, None, lambda k: f"{label}.{k}" if kind == "attrs" else f"{label}[{k!r}]",
                    depth)

    # -- comparison -------------------------------------------------------------------------------------------------
    def changes(self):
        """Labels of what changed since the snapshot (``['Q.feats (list)', 'Q.n']``), in snapshot order."""
        out = []
        for label, kind, holder, keys, saved, name_of in self._records:
            now = _contents(kind, holder, keys)
            if kind == "cell":
                if not _same(now, saved):
                    out.append(label)
            elif kind in ("dict", "attrs", "class"):
                changed = [k for k in (*saved, *(k for k in now if k not in saved))
                           if not _same(now.get(k, _MISSING), saved.get(k, _MISSING))]
                if kind == "dict" and keys is None:
                    out += [f"{label} (dict)"] if changed else []
                else:  # a namespace: each name
                    out += [name_of(k) for k in changed]
            elif kind == "set":
                if now != saved:
                    out.append(f"{label} (set)")
            elif len(now) != len(saved) or not all(map(_same, now, saved)):
                out.append(f"{label} ({kind})")
        return list(dict.fromkeys(out))

    def restore(self):
        """Put every watched container and namespace back as the snapshot saw it (a call that starts over)."""
        for _, kind, holder, keys, saved, _ in reversed(self._records):
            if kind == "cell":
                if saved is _MISSING:
                    continue
                holder.cell_contents = saved
            elif kind == "class":  # a mappingproxy: through setattr
                now = _contents(kind, holder, keys)
                for k in now.keys() - saved.keys():
                    delattr(holder, k)
                for k, v in saved.items():
                    if now.get(k, _MISSING) is not v:
                        setattr(holder, k, v)
            elif kind in ("dict", "attrs"):
                now = _contents(kind, holder, keys)
                for k in now.keys() - saved.keys():
                    del holder[k]
                for k, v in saved.items():
                    if holder.get(k, _MISSING) is not v:
                        holder[k] = v
            elif kind == "list" or isinstance(holder, bytearray):
                holder[:] = saved
            elif kind == "deque":
                holder.clear()
                holder.extend(saved)
            else:
                holder.clear()
                holder.update(saved)


def _contents(kind, holder, keys):
    if kind == "cell":
        try:
            return holder.cell_contents
        except ValueError:
            return _MISSING
    if kind == "class":
        d = holder.__dict__
        return {k: d[k] for k in keys if k in d}
    if kind in ("dict", "attrs"):
        if keys is not None:
            return {k: holder[k] for k in keys if k in holder}
        if kind == "attrs":
            return {k: v for k, v in holder.items() if k not in _MODULE_INTERNALS}
        return dict(holder)
    if kind == "set":
        return set(holder) if isinstance(holder, set) else bytes(holder)
    return list(holder)


@dataclass(frozen=True)
class _Retraced(Site):
    """The `Site` of a provisional entry's second call: its trace builds a final entry (no third trace)."""

    retraced_for_side_effects: bool = True


def _current_guards(cf, site, args, kwargs, training):
    """The guards of this call read again (as `CompiledFunction._call` reads them)."""
    owner = cf._owner()
    tree = module_tree(owner) if owner is not None else None
    guards = guard_values(args, kwargs, owner, tree, by_value=training)
    if site.structure is not None:
        guards.append(site.structure)
    guards += cf._named_values.values()
    if training:
        flags = tuple(a._requires_grad if isinstance(a, Tensor) else None for a in (*args, *kwargs.values()))
        guards.append(("requires_grad", flags + tuple(p._requires_grad for p in (tree[1] if tree else ()))))
    pin_versions([v for _, v in guards])  # an entry's guards: large arrays' contents as of now
    return guards


def replay_for_side_effects(cf, site, entry, traced, state, args, kwargs, training, after=None):
    """When the traced call changed Python state (``state``, a `PythonState` taken before the trace), make
    ``entry`` rerun the Python on every call (replay.py) and return ``(result,)``: the trace was this call. None when
    nothing changed: the whole-call graph serves. ``after``: the `CompileState` to put back once the training
    stages, compiled ahead on the recording's inputs, ran."""
    changed = state.changes()
    if traced.info.output_call is not None:  # output written while tracing: the Python must run on every call
        changed = [*changed, f"writes output ({traced.info.output_call})"]
    if not changed:
        return None
    shown = ", ".join(changed[:6]) + (f" and {len(changed) - 6} more" if len(changed) > 6 else "")
    entry.side_effects = f"Python side effects: the call changes {shown}"
    entry.guards = masked_guards(entry.guards, _current_guards(cf, site, args, kwargs, training))
    if callable(cf.backend) or any_cuda(args, kwargs, cf._owner()):
        # A callable backend is handed whole graphs, and replay defers ops on host arrays only: eager keeps them.
        where = "a callable backend" if callable(cf.backend) else "CUDA tensors"
        entry.break_reason = f"{entry.side_effects}; with {where} the call runs eagerly so that they happen"
        return (traced.result,)
    cf._segmented(site.fn, entry, traced.info, training=training)
    entry.side_effects += f"; {SIDE_EFFECTS_NOTE}"
    _provisional(cf, site, entry, training)
    if after is not None:
        after.restore()
    return (traced.result,)


def _provisional(cf, site, entry, training):
    """Make ``entry`` (in replay mode for what its first call changed) trace its next call again, once: a cache
    filled on the first call (``if self.mask is None: self.mask = ...``, rotary tables) leaves the next call with
    nothing to change, and that trace builds a whole graph under the usual guards (the cache's new value guarded),
    as torch recompiles once; a call that changes state every time (an append, a counter) gets its replay entry
    back. Later calls run the replay directly: no snapshot is taken in the steady state."""
    retraces = getattr(cf, "_side_effect_retraces", 0)
    if getattr(site, "retraced_for_side_effects", False) or retraces >= _MAX_RETRACES:
        return
    replay_run = entry.run

    def retrace(args, kwargs):
        entry.run = replay_run
        held, compile = cf._entries_and_compile(training)
        if entry not in held:
            return replay_run(args, kwargs)
        held.remove(entry)
        cf._side_effect_retraces = getattr(cf, "_side_effect_retraces", 0) + 1
        # What the first call filled (``self.mask``: None before, a tensor now) is probed only if it was no plain
        # value when the probes were chosen: choose again, so the whole graph's constant is guarded. Entries keyed
        # on the old probes stop matching (they are traced again if their state comes back).
        probes = NamedValues(cf._fn, cf._module)
        if [p[0] for p in probes._probes] != [p[0] for p in cf._named_values._probes]:
            cf._named_values = probes
        again = _Retraced(site.fn, site.structure, site.relifted, _CALLER.get())
        guards = _current_guards(cf, again, args, kwargs, training)
        count = len(held)
        out = compile(again, guards, args, kwargs)
        _drop_replaced(held, held[count:], entry.key)
        return out

    entry.run = retrace


def _drop_replaced(held, new, replay_key):
    """Drop the whole-graph entries that a cache refilled since made dead (``m.mask = None`` between calls, filled
    again by the next): the replay entry's key, where what the call itself changes is `ANY`, matches them and the
    entry ``new`` built now alike, so they differ from it only in the value the call overwrote, and otherwise they
    would count toward ``recompile_limit`` until the function falls back to eager. (Should that value come back,
    one trace builds its graph again.)"""
    if len(new) != 1 or new[0].replay is not None or replay_key != new[0].key:
        return
    for old in [e for e in held[:-1] if e.replay is None and e.run is not None and replay_key == e.key]:
        held.remove(old)
