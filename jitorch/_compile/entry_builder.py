"""How `CompiledFunction` builds an entry for one call: trace, lift tensors that require grad, compile the whole
graph (inference or joint training), or fall back to replay mode (graph breaks, Python side effects), eager, or a
relayout of strided inputs. `EntryBuilder` is the half of `CompiledFunction` that makes entries; `api.py` keeps the
half that routes calls to them.

>>> import jitorch
>>> from jitorch._compile.api import CompiledFunction
>>> cf = CompiledFunction(lambda x: (x * 2).relu())
>>> _ = cf(jitorch.ones(3)); cf.entries[0].kernel_ops
[['mul', 'relu']]
"""
from __future__ import annotations

import time
from dataclasses import replace

from .._tensor import Size, Tensor
from ..fx.node import map_aggregate
from ..autograd.grad_mode import GradState
from .array_contents import mark_read_in_place
from .backend import CompiledGraph, whole_call_runner
from .dynamic_compile import dims_to_make_dynamic, dynamic_inference, dynamic_training
from .functionalize import CompileState, functionalize_intermediates, shares_memory
from .guards import argument_names
from .lower import kernel_cache_stats
from .output_layout import LaidOutPlan, eager_layouts, keeping_layouts
from .permute_sinking import sink_permutes
from .number_inputs import generalize, has_numbers, number_miss, signature, traced_numbers, widen
from .replay import Replay, _compile_outputs
from .segment_training import backward_kernels, compile_training_segment
from .side_effects import PythonState, any_cuda, replay_for_side_effects, replay_guards
from .specialization import Entry, config
from .stride_relayout import graph_signature, refused_relayout
from .trace import trace
from .training import Unsupported, joint_for, plan_from_joint


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


class EntryBuilder:
    """Entry construction for `api.CompiledFunction`, which provides ``_owner``, ``_lift``, ``_buffers`` and
    ``_eager_entry``."""

    def _entries_and_compile(self, training):
        """The entry list and the compile method of inference (``training`` False) or training specializations."""
        return (self.train_entries, self._compile_training) if training else (self.entries, self._compile)

    def _number_miss(self, entries, guards, args, kwargs, relayout):
        """`number_inputs.number_miss` for this call, or None: no number arguments, a relayout, ``dynamic=False``
        (every value specialized, as torch's)."""
        if self.dynamic is False or relayout is not None or not has_numbers(args, kwargs):
            return None
        return number_miss(entries, guards)

    def _compile_training(self, site, guards, args, kwargs, relayout=None):
        fn = site.fn
        start = time.perf_counter()
        buffers = self._buffers()
        # Compiling runs the function more than once: the call's own draws and buffer updates happen once.
        before = CompileState(buffers)
        attributes = _attribute_state(self._owner())
        python_state = PythonState(self._fn, self._owner(), *(site.caller or (args, kwargs)))
        numbers = self._number_miss(self.train_entries, guards, args, kwargs, relayout)
        targs, tkwargs, wrapped = traced_numbers(args, kwargs, numbers[1]) if numbers else (args, kwargs, {})
        try:
            traced = trace(fn, targs, tkwargs, fullgraph=self.fullgraph, buffers=buffers)
        except Exception:
            if not wrapped:
                raise
            before.restore()  # code that refuses a float subclass: the plain numbers (they stay specialized)
            python_state.restore()
            targs, tkwargs, wrapped, numbers = args, kwargs, {}, None
            traced = trace(fn, args, kwargs, fullgraph=self.fullgraph, buffers=buffers)
        _note_arrays_read_in_place(guards, traced)
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
            if not traced.info.graph_breaks or any_cuda(args, kwargs, self._owner()):
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
        layouts = eager_layouts(traced.result)
        found = dims and dynamic_training(self, fn, entry, dims, guards, args, kwargs, self._owner(), layouts)
        try:
            _restore_attributes(attributes)
            if found:
                plan = found[1].plan
            else:
                spec = joint_for(fn, targs, tkwargs, self._owner(), traced.result)
                if relayout is None and has_numbers(args, kwargs):
                    _number_inputs(entry, spec.joint, numbers, wrapped, args, kwargs, _parameter_count(self._owner()))
                plan = plan_from_joint(spec, spec.joint)
        except Unsupported as err:
            # The trace ran the function eagerly with autograd recording: its result is this call's answer.
            after.restore()
            _restore_attributes(traced_attributes)
            return self._eager_entry(entry, str(err), traced.result)
        _restore_attributes(traced_attributes)
        before.restore()  # the compiled run below is this call
        module = self._owner()

        if layouts is not None and not found:  # (a dynamic specialization's plans are laid out already)
            # eager's memory order for outputs of permuted values, through ops so gradients flow (output_layout.py)
            plan = LaidOutPlan(plan, layouts)

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
        python_state = PythonState(self._fn, self._owner(), *(site.caller or (args, kwargs)))
        numbers = self._number_miss(self.entries, guards, args, kwargs, relayout)
        targs, tkwargs, wrapped = traced_numbers(args, kwargs, numbers[1]) if numbers else (args, kwargs, {})
        try:
            traced = trace(fn, targs, tkwargs, fullgraph=self.fullgraph, buffers=buffers, write_inputs=True)
        except Exception:
            if not wrapped:
                raise
            # Code that refuses a float subclass: trace the plain numbers (they stay specialized).
            before.restore()
            python_state.restore()
            targs, tkwargs, wrapped, numbers = args, kwargs, {}, None
            traced = trace(fn, args, kwargs, fullgraph=self.fullgraph, buffers=buffers, write_inputs=True)
        before.add_snapshots(traced.info.input_snapshots.values())  # the trace wrote them: every rerun starts over
        why = _argument_writes_stay_eager(traced, python_state)
        if why:
            # Argument writes are graph values only in a whole graph that returns no view of them; the replay of a
            # call with breaks or Python side effects runs them eagerly, where they happen: trace the call again.
            before.restore()
            python_state.restore()
            traced = trace(fn, targs, tkwargs, fullgraph=self.fullgraph, buffers=buffers)
        _note_arrays_read_in_place(guards, traced)
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
            # (the probe traces of other sizes would write into the call's own arguments)
            dims = relayout is None and not traced.writes_inputs and dims_to_make_dynamic(
                self, self.entries[:-1], guards, args, kwargs, config.dynamic_after_changes)
            found = dims and dynamic_inference(self, fn, entry, dims, guards, args, kwargs, buffers,
                                                 traced.writes)
            if found:
                entry.dynamic, entry.guards, entry.kernel_ops = found[0], found[0].guards, found[1].kernel_ops
                entry.run = lambda args, kwargs: found[1].run(args, kwargs, ())
            else:
                if relayout is None and has_numbers(args, kwargs):
                    _number_inputs(entry, traced.gm, numbers, wrapped, args, kwargs)
                # eager's memory order for elementwise outputs of permuted operands (output_layout.py)
                sunk = not traced.writes and sink_permutes(traced.gm, (*args, *kwargs.values()))
                if functionalize_intermediates(traced.gm):  # ReLU(inplace=True) and friends fuse and go native
                    traced.gm.recompile()
                graph = CompiledGraph(traced.gm)
                entry.kernel_ops = graph.kernel_ops
                entry.run = _keeping_sizes(keeping_layouts(whole_call_runner(
                    graph, traced.writes, lambda a, k: fn(*a, **k), traced.write_counts), traced.result, sunk),
                    traced.result)
                entry.writes_inputs = traced.writes_inputs
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


def _parameter_count(module):
    """How many parameters lead a joint graph's placeholders (`training.joint_for`)."""
    return len(list(module.parameters())) if module is not None else 0


def _number_inputs(entry, gm, numbers, wrapped, args, kwargs, offset=0):
    """Keep ``gm``'s `signature` and number values on ``entry``; when this call missed an earlier entry only in
    number arguments (``numbers``: that entry and their names, traced ``wrapped``), make them graph inputs if the
    graphs allow it (`number_inputs.generalize`), the entry's guards then accepting any value there."""
    names = argument_names(args, kwargs)
    sig = signature(gm)
    if numbers and generalize(numbers[0].number_signature, numbers[0].number_values, gm, wrapped, names, offset):
        entry.guards = widen(entry.guards, numbers[1])
        entry.number_inputs = tuple(numbers[1])
    entry.number_signature = sig
    entry.number_values = {n: v for n, v in zip(names, (*args, *kwargs.values())) if type(v) in (float, int)}


def _argument_writes_stay_eager(traced, python_state):
    """Why a trace that wrote into its arguments functionally must be made again with those writes eager (a
    reason), or None: the call has graph breaks (its replay defers writes where no run-time check sees arguments
    sharing memory), changes Python state (it replays too), or returns a view of a written argument (the graph's
    copy of the new value would not alias the argument, as eager's view does)."""
    info = traced.info
    if not info.input_snapshots:
        return None
    if traced.gm is None:
        return "graph breaks"
    if info.output_call is not None or python_state.changes():
        return "Python side effects"
    written = [t for t, _, _ in info.input_snapshots.values()]
    views = []

    def note(a):
        if isinstance(a, Tensor) and all(a is not w for w in written) and shares_memory(a, written):
            views.append(a)
        return a

    map_aggregate(traced.result, note)
    return "a view of a written argument is returned" if views else None


def _note_arrays_read_in_place(guards, traced):
    """Large NumPy arrays whose memory the whole graph holds (``jitorch.from_numpy(a)`` made a constant of it) are
    read by the graph on every call: their guards stop checking contents (`array_contents.mark_read_in_place`)."""
    if traced.gm is not None:
        d = traced.gm.__dict__
        held = [v._data for v in (*d.values(), *d.get("_buffers", {}).values()) if isinstance(v, Tensor)]
        mark_read_in_place(guards, held)
