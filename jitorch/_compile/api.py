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

import time
import warnings
import weakref
from dataclasses import replace

from .. import _overrides
from .._dispatch import MODES
from .._tensor import Size, Tensor
from ..autograd.grad_mode import GradState
from ..nn.modules.container import ModuleList
from ..profiler import record_function
from .backend import CompiledGraph, whole_call_runner
from .dynamic_compile import dims_to_make_dynamic, dynamic_inference, dynamic_training
from .dynamic_shapes import EAGER
from .functionalize import CompileState, functionalize_intermediates
from .call_site import MAX_SIZE_VARIANTS, site_for, size_variant
from .guards import call_hooks, first_failure, guard_values, module_tree
from .lower import clear_kernel_cache, kernel_cache_stats
from .named_values import NamedValues
from .optimized_module import OptimizedModule
from .replay import Replay, _compile_outputs
from .reached import FreeTensors, NamedObjects, reached_by
from .segment_training import backward_kernels, compile_training_segment
from .side_effects import PythonState, replay_for_side_effects, replay_guards
from .specialization import Entry, config
from .stride_relayout import Relayout, compile_relaid, graph_signature, refused_relayout, static_strides_note, \
    stride_only_miss
from .trace import trace
from .training import Unsupported, compile_training

__all__ = ["CompiledFunction", "OptimizedModule", "config", "reset"]

_LIVE = weakref.WeakSet()  # every CompiledFunction, so reset() can clear their caches


_MADE_REQUIRING_GRAD = ("the call makes tensors that require grad itself (``torch.ones(3, requires_grad=True)`` inside "
                        "it): a compiled graph cannot hand their gradients back; make them outside and pass them in")


def _attribute_state(module):
    """The plain attributes (numbers, strings, None) of ``module`` and its submodules, to put back later."""
    if module is None:
        return []
    return [(m, {k: v for k, v in m.__dict__.items() if type(v) in (int, float, bool, str, type(None))})
            for m in module.modules()]


def _restore_attributes(state):
    for m, values in state:
        m.__dict__.update(values)


def _has_size(tree):
    if isinstance(tree, Size):
        return True
    if isinstance(tree, (tuple, list)):
        return any(_has_size(x) for x in tree)
    if isinstance(tree, dict):
        return any(_has_size(x) for x in tree.values())
    return False


def _as_sizes(like, value):
    """``value`` with the tuples that stand where ``like`` (the traced result) held a ``Size`` made Sizes again: a
    graph's outputs come back as plain tuples, and ``x.shape`` returned by a compiled function must stay a Size."""
    if isinstance(like, Size) and type(value) is tuple:
        return Size(value)
    if isinstance(like, (tuple, list)) and isinstance(value, (tuple, list)) and len(like) == len(value):
        items = [_as_sizes(a, b) for a, b in zip(like, value)]
        return type(value)(*items) if hasattr(value, "_fields") else type(value)(items)
    if isinstance(like, dict) and isinstance(value, dict):
        return {k: _as_sizes(like.get(k), v) for k, v in value.items()}
    return value


def _keeping_sizes(run, traced_result):
    """``run`` restoring the Sizes of ``traced_result``'s structure (only when it has any: no cost otherwise)."""
    if not _has_size(traced_result):
        return run
    return lambda args, kwargs: _as_sizes(traced_result, run(args, kwargs))


class CompiledFunction:
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
                return self._call(*site_for(self._fn, args, kwargs))
        return self._call(*site_for(self._fn, args, kwargs))

    def _call(self, site, args, kwargs):
        fn = site.fn
        tensors = [a for a in list(args) + list(kwargs.values()) if isinstance(a, Tensor)]
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
        training = GradState.enabled and (any(t._requires_grad for t in tensors)
                                          or any(p._requires_grad for p in params))
        if training and self.backend != "jitorch":
            return fn(*args, **kwargs)  # a callable backend is handed inference graphs only
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
        dynamic = [e for e in entries if e.dynamic is not None]
        flat = list(args) + list(kwargs.values()) if dynamic else None
        for entry in dynamic:
            hit = entry.dynamic.lookup(guards, flat, config.dynamic_eager_calls)
            if hit is EAGER:
                return fn(*args, **kwargs)
            if hit is not None:
                return hit.run(args, kwargs, params)
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
            self._warn_limit(first_failure(last.guards, guards) + static_strides_note(self, last, guards))
            return fn(*args, **kwargs)
        if self.dynamic is not False:
            # Only strides changed (a growing buffer's slice): compile once for row-major copies of those inputs,
            # accepting any strides from then on, as torch's automatic dynamic strides (stride_relayout.py).
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
        updates functional) and is guarded on their identities and ``training`` flags."""
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

    def _compile_training(self, site, guards, args, kwargs, relayout=None):
        fn = site.fn
        start = time.perf_counter()
        buffers = self._buffers()
        # Compiling runs the function more than once: the call's own draws and buffer updates happen once.
        before = CompileState(buffers)
        attributes = _attribute_state(self._owner())
        python_state = PythonState(self._fn, self._owner())
        traced = trace(fn, args, kwargs, fullgraph=self.fullgraph, buffers=buffers)
        refused = relayout and refused_relayout(self, site, relayout, traced, before, training=True)
        if refused:
            return refused[0]
        lifted = self._lift(traced)
        if lifted and not site.relifted:
            # The trace read tensors that require grad which the function reaches through other code (a helper's
            # global): they become graph inputs, and this call starts over with them in the guards.
            before.restore()
            python_state.restore()
            return self._call(replace(site, relifted=True), args, kwargs)
        after = CompileState(buffers)
        entry = Entry(guards, trace_s=time.perf_counter() - start, breaks=traced.info.graph_breaks)
        entry.graph_signature = graph_signature(traced.gm) if traced.gm is not None else None
        self.train_entries.append(entry)
        if lifted:  # new ones again: made by the call itself (``torch.ones(3, requires_grad=True)`` inside it)
            return self._eager_entry(entry, _MADE_REQUIRING_GRAD, traced.result)
        if self._named_values.random_source is not None:
            return self._eager_entry(entry, self._named_values.random_reason(), traced.result)
        if traced.info.hidden_write is not None:
            return self._eager_entry(entry, traced.info.hidden_write, traced.result)
        replayed = traced.break_reason is None and replay_for_side_effects(self, site, entry, traced, python_state,
                                                                           args, kwargs, True, after)
        if replayed:
            return replayed[0]
        if traced.break_reason is not None:
            tensors = [a for a in list(args) + list(kwargs.values()) if isinstance(a, Tensor)]
            tensors += list(self._owner().parameters()) if self._owner() is not None else []
            if not traced.info.graph_breaks or any(a.is_cuda for a in tensors):
                # Random draws outside ops without a break keep eager numbers; segment replay runs on the host only.
                return self._eager_entry(entry, traced.break_reason, traced.result)
            # Each segment between breaks gets its own compiled forward and backward (segment_training.py).
            llvm_before = kernel_cache_stats()["compile_s"]
            self._segmented(fn, entry, traced.info, training=True)
            after.restore()  # the stages compiled ahead ran on the recording's inputs
            entry.compile_s = kernel_cache_stats()["compile_s"] - llvm_before
            return traced.result
        llvm_before = kernel_cache_stats()["compile_s"]
        dims = relayout is None and dims_to_make_dynamic(self, self.train_entries[:-1], guards, args, kwargs,
                                                         config.dynamic_after_changes)
        # Compiling runs the module's Python again (the joint trace, dynamic-shape probes), each time from the state
        # the trace started from, so a counter it bumps (``self.calls += 1``) is read as the trace read it; after,
        # the state is the trace's: this call counted once.
        traced_attributes = _attribute_state(self._owner())
        _restore_attributes(attributes)
        found = dims and dynamic_training(self, fn, entry, dims, guards, args, kwargs, self._owner())
        try:
            _restore_attributes(attributes)
            plan = found[1].plan if found else compile_training(fn, args, kwargs, self._owner(), traced.result)
        except Unsupported as err:
            # The trace ran the function eagerly with autograd recording: its result is this call's answer.
            after.restore()
            _restore_attributes(traced_attributes)
            return self._eager_entry(entry, str(err), traced.result)
        _restore_attributes(traced_attributes)
        before.restore()  # the compiled run below is this call
        module = self._owner()

        def run(args, kwargs):
            params = tuple(module.parameters()) if module is not None else ()
            return plan(params + tuple(args) + tuple(kwargs.values()))

        entry.run, entry.kernel_ops, entry.backward_kernel_ops = run, plan.forward_kernels, plan.backward_kernels
        entry.plan = plan
        if found:  # the plan was instantiated from the template at these sizes; other sizes get their own
            entry.dynamic, entry.guards = found[0], found[0].guards
        out = run(args, kwargs)  # the first run compiles the forward kernels
        entry.compile_s = kernel_cache_stats()["compile_s"] - llvm_before
        return out

    def _compile(self, site, guards, args, kwargs, relayout=None):
        fn = site.fn
        start = time.perf_counter()
        buffers = self._buffers()
        before = CompileState(buffers)
        python_state = PythonState(self._fn, self._owner())
        traced = trace(fn, args, kwargs, fullgraph=self.fullgraph, buffers=buffers)
        refused = relayout and refused_relayout(self, site, relayout, traced, before, training=False)
        if refused:
            return refused[0]
        lifted = GradState.enabled and self._lift(traced)
        if lifted and not site.relifted:
            before.restore()  # a tensor it reads requires grad: this is a training call after all
            python_state.restore()
            return self._call(replace(site, relifted=True), args, kwargs)
        info = traced.info
        entry = Entry(guards, trace_s=time.perf_counter() - start, breaks=info.graph_breaks)
        entry.graph_signature = graph_signature(traced.gm) if traced.gm is not None else None
        self.entries.append(entry)
        if lifted:
            return self._eager_entry(entry, _MADE_REQUIRING_GRAD, traced.result)
        if self._named_values.random_source is not None:
            return self._eager_entry(entry, self._named_values.random_reason(), traced.result)
        if info.hidden_write is not None or info.unsound is not None:
            return self._eager_entry(entry, info.hidden_write or info.unsound, traced.result)
        replayed = traced.gm is not None and replay_for_side_effects(self, site, entry, traced, python_state, args,
                                                                     kwargs, False)
        if replayed:
            return replayed[0]
        if traced.writes and callable(self.backend):
            return self._eager_entry(entry, "the call updates module buffers in place (a callable backend is handed "
                                            "graphs without side effects)", traced.result)
        llvm_before = kernel_cache_stats()["compile_s"]
        if traced.gm is None:
            if callable(self.backend):  # a callable backend is handed whole graphs only
                return self._eager_entry(entry, traced.break_reason, traced.result)
            if any(a.is_cuda for a in list(args) + list(kwargs.values()) if isinstance(a, Tensor)):
                # Segment replay defers ops on host-side lazy arrays; CUDA calls with graph breaks stay eager.
                return self._eager_entry(entry, f"{traced.break_reason} (graph breaks on CUDA run eagerly)",
                                         traced.result)
            self._segmented(fn, entry, info)
        elif callable(self.backend):
            compiled = self.backend(traced.gm, list(args) + list(kwargs.values()))
            entry.run = lambda args, kwargs: compiled(*args, *kwargs.values())
        else:
            dims = relayout is None and dims_to_make_dynamic(self, self.entries[:-1], guards, args, kwargs,
                                                             config.dynamic_after_changes)
            found = dims and dynamic_inference(self, fn, entry, dims, guards, args, kwargs, buffers,
                                                 traced.writes)
            if found:
                entry.dynamic, entry.guards, entry.kernel_ops = found[0], found[0].guards, found[1].kernel_ops
                entry.run = lambda args, kwargs: found[1].run(args, kwargs, ())
            else:
                if functionalize_intermediates(traced.gm):  # ReLU(inplace=True) and friends fuse and go native
                    traced.gm.recompile()
                graph = CompiledGraph(traced.gm)
                entry.kernel_ops = graph.kernel_ops
                entry.run = _keeping_sizes(whole_call_runner(graph, traced.writes), traced.result)
        if entry.replay is None:
            # The first run compiles the kernels for these strides. It is this call: the trace's draws and buffer
            # updates are undone first (a graph without breaks writes no other outside tensor: such writes break).
            before.restore()
            result = entry.run(args, kwargs)
        else:
            result = traced.result
        entry.compile_s = kernel_cache_stats()["compile_s"] - llvm_before
        return result

    def _segmented(self, fn, entry, info, training=False):
        """Graph breaks: compile each recorded segment; later calls replay the Python with the segments compiled.

        ``training``: the segments' values that require grad are compiled with their backward (`SegmentRun`),
        ahead on the recording's own inputs.
        """
        replay = Replay(info.root, self._take_branch, training=training, buffers=self._buffers())
        for seg in info.root.walk():
            nodes, upto = seg.record_outputs, len(seg.steps)
            if training and any(n.meta.get("rg") for n in nodes):
                # Autograd kept values alive that the replay drops: the ones read later are what it flushes.
                nodes = [n for n in nodes if n.meta.get("used")]
                if nodes and seg.untrainable is None:
                    compile_training_segment(seg, nodes, upto, info.examples.get(seg))
            elif nodes:
                seg.compiled[(tuple(n.name for n in nodes), upto)] = _compile_outputs(seg, nodes, upto)
        info.examples.clear()

        def run(args, kwargs):
            before, logged = kernel_cache_stats()["compile_s"], len(replay.kernel_log)
            out = replay.call(fn, args, kwargs)
            if replay.info is not None:
                entry.breaks += replay.info.graph_breaks
                replay.info.examples.clear()
            if replay.limit_hit:
                self._warn_limit(replay.bailed)
            if training and len(replay.kernel_log) != logged:
                entry.backward_kernel_ops = backward_kernels(replay.root)
            entry.compile_s += kernel_cache_stats()["compile_s"] - before
            return out

        entry.run, entry.replay = run, replay
        entry.guards = replay_guards(entry.guards)  # a list the Python appends to is read live, not baked in
        entry.break_reason = "; ".join(b.describe() for b in entry.breaks) or None
        if training:
            entry.backward_kernel_ops = backward_kernels(info.root)

    @staticmethod
    def segment_kernels(entry):
        """The fused kernels of every compiled segment graph of ``entry``."""
        if entry.replay is None:
            return entry.kernel_ops
        ops = []
        for seg in entry.replay.root.walk():
            for graph in seg.compiled.values():
                ops += graph.kernel_ops
        return ops


def reset():
    """Forget every compiled graph and kernel (``torch.compiler.reset``), and vmap's remembered traces."""
    from .. import _vmap_cache

    for cf in list(_LIVE):
        cf.reset()
    clear_kernel_cache()
    _vmap_cache.clear()
