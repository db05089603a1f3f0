"""`CompiledFunction`: trace on first call, fuse pointwise chains into LLVM kernels, guard, and fall back to eager
(``jitorch.compile`` itself, the public entry point, is in entry.py).

>>> import jitorch
>>> cf = CompiledFunction(lambda x: jitorch.tanh(x) * 2 + 1)
>>> cf(jitorch.zeros(3)), cf(jitorch.zeros(2, 2)).shape
(tensor([1., 1., 1.]), jitorch.Size([2, 2]))
>>> [e.guards[0] for e in cf.entries]
[('arg0.shape', (3,)), ('arg0.shape', (2, 2))]
"""
from __future__ import annotations

import warnings
import weakref

from .. import _overrides, _subclass
from .._dispatch import MODES
from .._tensor import Tensor
from ..autograd import saved_hooks
from ..autograd.grad_mode import GradState
from ..nn.modules.container import ModuleList
from ..profiler import record_function
from .entry_builder import EntryBuilder
from .dynamic_shapes import EAGER
from .array_contents import pin_versions
from .call_site import MAX_SIZE_VARIANTS, run_site, size_variant
from .guards import call_hooks, first_failure, guard_values, module_tree
from .lower import clear_kernel_cache
from .named_values import NamedValues
from .number_inputs import has_numbers, widen_replay
from .optimized_module import OptimizedModule
from .reached import FreeTensors, NamedObjects, reached_by
from .specialization import Entry, config
from .stride_relayout import Relayout, compile_relaid, static_strides_note, \
    stride_only_miss

__all__ = ["CompiledFunction", "OptimizedModule", "config", "reset"]

_LIVE = weakref.WeakSet()  # every CompiledFunction, so reset() can clear their caches


class CompiledFunction(EntryBuilder):
    """The callable `compile` returns for a function (and the forward of an `OptimizedModule`)."""

    def __init__(self, fn, *, fullgraph=False, backend="jitorch", recompile_limit=None, module=None, dynamic=None):
        self._fn, self.fullgraph, self.backend, self.dynamic = fn, fullgraph, backend, dynamic
        self._dynamic_dims, self._dynamic_failed = set(), {}  # (argument name, dim) marked; failures per set
        self._module = module
        self._reached_key, self._reached = None, None  # a function's modules (see _owner)
        self._lifted: list = []  # weak references to tensors that require grad, found read by a trace (see _owner)
        self._named_objects = None  # what the code reaches by name, read per call (see _owner)
        self._named_values = None  # the plain values the code reads by name, guarded by value (named_values.py)
        self._limit = recompile_limit
        self.entries: list[Entry] = []  # inference specializations
        self.train_entries: list[Entry] = []  # forward + backward specializations (some input requires grad)
        self._branches = 0  # branches recorded after a specialization's first call (they count as recompiles)
        self._fell_back = False
        self._warned = False
        self.__wrapped__ = fn
        for attr in ("__name__", "__qualname__", "__doc__", "__module__"):
            if hasattr(fn, attr):
                try:
                    setattr(self, attr, getattr(fn, attr))
                except (AttributeError, TypeError):
                    pass
        _LIVE.add(self)

    def __getstate__(self):
        """Copies (``copy.deepcopy`` of a compiled model for an EMA or a best-so-far snapshot) and pickles start with
        no compiled entries: those hold machine code and ctypes pointers, and are rebuilt on the first call."""
        state = self.__dict__.copy()
        state.update(entries=[], train_entries=[], _branches=0, _fell_back=False, _warned=False, _lifted=[],
                     _named_values=None, _named_objects=None, _reached_key=None, _reached=None, _dynamic_dims=set(),
                     _dynamic_failed={})
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        _LIVE.add(self)

    @property
    def recompile_limit(self):
        return self._limit if self._limit is not None else config.recompile_limit

    def reset(self):
        self.entries.clear()
        self.train_entries.clear()
        self._branches = 0
        self._fell_back = self._warned = False

    def _compiles(self):
        return sum(not e.size_variant for e in (*self.entries, *self.train_entries)) + self._branches

    def _take_branch(self):
        """The budget a replay asks for before recording a new branch."""
        if self._compiles() >= self.recompile_limit:
            return False
        self._branches += 1
        return True

    def _warn_limit(self, failing):
        if not self._warned:
            self._warned = True
            warnings.warn(f"jitorch.compile: {getattr(self._fn, '__name__', self._fn)!s} reached recompile_limit "
                          f"({self.recompile_limit}); failing guard: {failing}; running eagerly from now on",
                          RuntimeWarning, stacklevel=3)

    def __call__(self, *args, **kwargs):
        if self.backend == "eager" or config.stance == "force_eager" or (
                MODES and not all(getattr(m, "transparent", False) for m in MODES)):
            # Inside another trace (a compiled function calling this one) the outer recorder must see every op.
            return self._fn(*args, **kwargs)
        if MODES:  # a profiler records the compiled call as one range
            with record_function(f"jitorch.compile: {getattr(self._fn, '__name__', type(self._fn).__name__)}"):
                return run_site(self._call, self._fn, args, kwargs)
        return run_site(self._call, self._fn, args, kwargs)

    def _call(self, site, args, kwargs):
        fn = site.fn
        tensors = [a for a in list(args) + list(kwargs.values()) if isinstance(a, Tensor)]
        if _subclass._enabled and _subclass.hears_calls(tensors):
            # A Tensor subclass's ``__torch_function__`` hears every op eagerly and decides its result's type (a
            # compiled graph would hand back plain Tensors and skip the handler): such calls run eagerly. (Checked
            # first: the reads below would reach the handler.)
            return fn(*args, **kwargs)
        if any(t.is_meta or t.is_sparse for t in tensors):
            # meta tensors carry shapes only: eager ops propagate them, kernels cannot; a sparse tensor has no strided
            # memory for a kernel to read (its products are a library call eagerly anyway)
            return fn(*args, **kwargs)
        # One traversal of the module per call: guards, grad flags and the training plan's inputs share it.
        owner = self._owner()
        tree = module_tree(owner) if owner is not None else None
        if tree is not None and call_hooks(tree[0]):
            return fn(*args, **kwargs)  # hooks run on every call: see guards.call_hooks
        if tree is not None and _overrides._live and any(b.is_sparse for b in tree[2]):
            # A sparse buffer (a GCN's adjacency) has no strided memory to guard, snapshot or trace; its products
            # run in a sparse library eagerly anyway. (``_live`` counts sparse tensors: dense models skip the scan.)
            return fn(*args, **kwargs)
        params = tuple(tree[1]) if owner is not None else ()
        if _subclass._enabled and _subclass.hears_calls(params):
            return fn(*args, **kwargs)  # (a subclass parameter: see below)
        training = GradState.enabled and (any(t._requires_grad for t in tensors)
                                          or any(p._requires_grad for p in params))
        if training and self.backend != "jitorch":
            return fn(*args, **kwargs)  # a callable backend is handed inference graphs only
        if training and not GradState.inference and any(t._inference for t in tensors):
            # An inference tensor (made under ``inference_mode``) in a call autograd records: eager raises only where
            # an op saves it for backward (``x * w``, not ``x + w``); a compiled Function saves all its tensor
            # inputs, so such calls run eagerly, raising exactly where eager does.
            return fn(*args, **kwargs)
        guards = guard_values(args, kwargs, owner, tree, by_value=training)
        if site.structure is not None:
            guards.append(site.structure)
        if self._named_values is None:
            self._named_values = NamedValues(self._fn, self._module)
        guards += self._named_values.values()
        # Training specializations live apart, so ``entries`` keeps meaning "inference graphs".
        entries = self.entries
        if training:
            # The ``requires_grad`` of every tensor argument and parameter: a training entry is specialized on them.
            flags = tuple(a._requires_grad if isinstance(a, Tensor) else None
                          for a in list(args) + list(kwargs.values()))
            guards.append(("requires_grad", flags + tuple(p._requires_grad for p in params)))
            entries = self.train_entries
        key = [v for _, v in guards]
        for entry in entries:
            if entry.key == key:
                if entry.run is None:
                    return fn(*args, **kwargs)
                if entry.plan is not None:
                    return entry.plan(params + tuple(args) + tuple(kwargs.values()))
                return entry.run(args, kwargs)
        pin_versions(key)  # large arrays' contents as of now, before a trace or a new entry reads them
        dynamic = [e for e in entries if e.dynamic is not None]
        flat = list(args) + list(kwargs.values()) if dynamic else None
        for entry in dynamic:
            hit = entry.dynamic.lookup(guards, flat, config.dynamic_eager_calls)
            if hit is EAGER:
                return fn(*args, **kwargs)
            if hit is not None:
                return hit.run(args, kwargs, params)
        if self.dynamic is not False and has_numbers(args, kwargs):
            # A replay reruns its Python every call and matches its segments' constants: a number argument that
            # changed needs no new entry (number_inputs.widen_replay); ``dynamic=False`` specializes every value.
            widened = widen_replay(entries, guards)
            if widened is not None:
                return fn(*args, **kwargs) if widened.run is None else widened.run(args, kwargs)
        if training and saved_hooks.active():
            # Compiling runs the call more than once (the trace records autograd nodes eagerly, then the compiled
            # Function runs): saved-tensor hooks would see both runs' saves, and non-reentrant checkpointing, which
            # recomputes the call and counts its saves, would find a different number. Such calls run eagerly
            # until a call outside the hooks compiles them (torch traces without running: its saves are the
            # compiled Function's alone).
            return fn(*args, **kwargs)
        if self._fell_back:
            return fn(*args, **kwargs)
        if config.stance != "default" and (self.entries or self.train_entries):
            if config.stance == "fail_on_recompile":
                last = (entries or self.entries or self.train_entries)[-1].guards
                raise RuntimeError(f"jitorch.compile: {getattr(self._fn, '__name__', self._fn)!s} would recompile "
                                   f"under set_stance('fail_on_recompile'); failing guard: "
                                   f"{first_failure(last, guards)}")
            return fn(*args, **kwargs)  # eager_on_recompile
        if size_variant(entries, guards):
            # Graph breaks keep sizes static (each segment's graph is exact), so a sequence length or last batch
            # that changes makes entries that differ in sizes only: kept, up to MAX_SIZE_VARIANTS, beside the
            # recompile limit (the kernels are size-generic: a new size traces again but compiles no machine code).
            variants = [e for e in entries if e.size_variant]
            if len(variants) >= MAX_SIZE_VARIANTS:
                entries.remove(variants[0])
            count = len(entries)
            out = self._compile_training(site, guards, args, kwargs) if training else \
                self._compile(site, guards, args, kwargs)
            for e in entries[count:]:
                e.size_variant = True
            return out
        if self._compiles() >= self.recompile_limit:
            self._fell_back = True
            last = (entries or self.entries or self.train_entries)[-1]
            self._warn_limit(first_failure(last.guards, guards) + static_strides_note(self, last, guards, args, kwargs))
            return fn(*args, **kwargs)
        if self.dynamic is not False:
            # Only strides changed (a growing buffer's slice): compile once for dense copies of those inputs in
            # their memory order, accepting any strides of that order from then on, as torch's automatic dynamic
            # strides (stride_relayout.py).
            miss = stride_only_miss(entries, guards, args, kwargs, self._buffers())
            if miss is not None:
                return compile_relaid(self, site, Relayout(*miss, guards, args, kwargs), training, len(params))
        if training:
            return self._compile_training(site, guards, args, kwargs)
        return self._compile(site, guards, args, kwargs)

    def _eager_entry(self, entry, reason, result):
        """Record why this specialization runs eagerly and return the eager ``result``."""
        if self.fullgraph:
            raise RuntimeError(f"jitorch.compile(fullgraph=True): cannot capture one graph: {reason}")
        entry.break_reason = reason
        return result

    def _owner(self):
        """The module whose parameters and buffers the compiled code reads: the compiled module, or for a function
        the modules it reaches by name (``self``, closure cells, globals it names) gathered in a `ModuleList`, so a
        ``@compile`` training step over a global ``model`` trains compiled (parameters as graph inputs, buffer
        updates functional) and is guarded on their parameters (identities; layouts in training) and ``training``
        flags."""
        if self._module is not None:
            return self._module
        if self._named_objects is None:
            self._named_objects = NamedObjects(self._fn)
        found, free = reached_by(self._fn, self._named_objects.read())
        named = len(free)
        if self._lifted:
            self._lifted = [r for r in self._lifted if r() is not None]
            free += [t for t in (r() for r in self._lifted) if t.requires_grad]
        by_name = 0
        if free:  # the modules' parameters are traversed only when there are tensors to check against them
            owned = {id(p) for m in found for p in m.parameters()}
            kept = []
            for i, t in enumerate(free):
                if id(t) not in owned:
                    owned.add(id(t))
                    kept.append(t)
                    by_name += i < named
            free = kept
        key = tuple(id(m) for m in found) + tuple(id(t) for t in free)
        if key != self._reached_key:
            self._reached_key = key
            held = found + ([FreeTensors(free, by_name)] if free else [])
            self._reached = ModuleList(held) if held else None
        return self._reached

    def _lift(self, traced):
        """Note the tensors that require grad a function's trace read as constants, so `_owner` holds them as graph
        inputs; False when there are none, or for a compiled module (its parameters are the module's)."""
        if self._module is not None or traced.gm is None:
            return False
        owner = self._owner()
        known = {id(p) for p in owner.parameters()} if owner is not None else set()
        # Tensor constants are the graph module's buffers (as torch.fx's), older traces' plain attributes.
        held = list(traced.gm.__dict__.values()) + list(traced.gm.__dict__.get("_buffers", {}).values())
        new = [v for v in held if isinstance(v, Tensor) and v._requires_grad and id(v) not in known]
        self._lifted += [weakref.ref(v) for v in new]
        return bool(new)

    def _buffers(self):
        """Buffers whose in-place updates the graph records functionally (see `_owner`)."""
        owner = self._owner()
        return tuple(owner.buffers()) if owner is not None else ()


def reset():
    """Forget every compiled graph and kernel (``torch.compiler.reset``), and vmap's remembered traces."""
    from .. import _vmap_cache

    for cf in list(_LIVE):
        cf.reset()
    clear_kernel_cache()
    _vmap_cache.clear()
