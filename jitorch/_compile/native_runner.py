"""Run a `CompiledGraph` with (almost) no Python per node: its steps as native programs over one pointer table.

`attach` runs a graph's steps in Python once, keeping every value, and plans a `NativeRunner` from them:

- fused groups (their `GroupKernel` IR for the strides seen), ``linear``, ``linear_backward``, ``matmul`` (batched
  too: one product per batch entry), unfused pointwise rows and reductions become calls of one
  `codegen.llvm_program.Program` (a fused loop, a register-loop or BLAS product);
- view rows (``view``, ``permute``, ``slice``, ``expand``...), ``getitem`` and rows that return an alias cost
  nothing: a value is an origin plus a byte offset with fixed strides, as guards fix every input's layout;
- any other row runs in Python between two programs (``fallbacks`` lists them and why);
- memory: inputs and Python results enter the table by address at each call; every allocation a graph output can
  reach is a fresh array per call (callers keep outputs, and a training forward's outputs are the values its
  backward reads later); the other intermediates live in one arena where values with disjoint lifetimes share bytes.

A call whose inputs have other layouts than planned, or whose Python row returns another layout, returns `FALLBACK`
and the graph runs through the Python runner instead: never a different answer. ``JITORCH_COMPILE_NATIVE=0`` turns
the runner off.

>>> import jitorch
>>> from jitorch._compile.trace import trace
>>> from jitorch._compile.backend import CompiledGraph
>>> w = jitorch.ones(3, 3)
>>> cg = CompiledGraph(trace(lambda x: (x @ w).relu() * 2, (jitorch.ones(2, 3),), {}).gm)
>>> _ = [cg((jitorch.ones(2, 3),)) for _ in range(3)]
>>> cg.native.report()["programs"], cg.native.report()["python_steps"], cg((jitorch.ones(2, 3),))
(1, [], tensor([[6., 6., 6.],
        [6., 6., 6.]]))
"""
from __future__ import annotations

import ctypes

import operator
import os
import threading
import weakref
from sys import getrefcount

import numpy as np

from .._tensor import Tensor
from ..autograd.grad_mode import GradState
from ..fx.make_fx import Primitive
from ..fx.node import Node, map_aggregate
from ..codegen import llvm_pool
from ..runtime import host_cache
from ..runtime.threads import get_num_threads
from .fusion import FusedGroup
from .lower import PARALLEL_MIN
from ..runtime import memory_owner
from .native_lowering import NotLowerable, _addr, _bounds, lower_group, lower_row, plan_arena, to_calls

__all__ = ["FALLBACK", "ENABLED", "NativeRunner", "attach"]

# Without the native pool (`codegen.llvm_pool`: Linux only), a kernel leaves the one-call program to be split across
# Python's threads only when it is this large: a Python step between programs costs ~50-100 us (more right after BLAS
# has evicted the interpreter's caches), so a ReLU over 128x512 (~15 us on one thread) is cheaper run natively on one
# thread than split. With the pool, the program splits the kernels worth it itself (`llvm_pool.split_threads`).
PROGRAM_SPLIT_MIN = max(PARALLEL_MIN, 1 << 20)

FALLBACK = object()  # a call the native runner declines: run the Python runner
ENABLED = os.environ.get("JITORCH_COMPILE_NATIVE", "1") != "0"
_MISSING = object()


class _Refuse(Exception):
    """The whole graph stays on the Python runner (the message says why)."""


def _free_refs():
    """``getrefcount`` of an array held only by a list entry and a local, as `NativeRunner._run` holds its pool."""
    pool = [np.empty(1)]
    r = pool[0]
    return getrefcount(r)


_FREE = _free_refs()


def _arrays(value):
    """``[(position, array)]`` of a node's value (position None for a lone tensor), or None for other values."""
    if isinstance(value, Tensor):
        return [(None, value._data)] if type(value._data) is np.ndarray else None
    if isinstance(value, tuple) and all(v is None or isinstance(v, Tensor) for v in value):
        out = [(i, v._data) for i, v in enumerate(value) if v is not None]
        return out if all(type(a) is np.ndarray for _, a in out) else None
    return None


def record(cg, args):
    """Run ``cg``'s steps in Python as its runner does, keeping every value: ``(outputs, env)``."""
    return cg.run_steps(args, keep_values=True)


def attach(cg, args):
    """Run ``cg`` on ``args`` in Python, plan its native runner from the values seen (``cg.native``, or the reason
    in ``cg.native_reason``) and return the outputs."""
    arrays = [a._data for a in args if isinstance(a, Tensor)]
    if not all(type(a) is np.ndarray for a in arrays) or (GradState.enabled and any(
            a._requires_grad for a in args if isinstance(a, Tensor))):
        cg.native_reason = "inputs on a device, or a call that records autograd history"
        return FALLBACK
    outs, env = record(cg, args)
    try:
        cg.native = NativeRunner(cg, env)
    except (_Refuse, NotLowerable) as err:
        cg.native_reason = str(err)
    except Exception as err:  # a compile error of a generated program: keep the Python runner
        cg.native_reason = f"{type(err).__name__}: {err}"
    return outs


class _Origin:
    """One allocation a value lives in: ``in`` (an input's array), ``py`` (a Python row's result), ``root`` (made
    by native code: becomes ``out``, fresh per call, or ``arena``)."""

    __slots__ = ("kind", "array", "node", "first", "last", "slot", "offset")

    def __init__(self, kind, array, node, step):
        self.kind, self.array, self.node, self.first, self.last = kind, array, node, step, step
        self.slot = self.offset = None


class NativeRunner:
    """The native form of one `CompiledGraph` (see the module notes); ``runner(args)`` returns its outputs or
    `FALLBACK`."""

    def __init__(self, cg, env):
        if any(n.op == "call_function" and isinstance(n.target, Primitive) and n.target.inplace
               for n in cg.gm.graph.nodes):
            raise _Refuse("an in-place row (it orders reads and writes the plan does not model)")
        self.cg, self.env = cg, env
        self.origins: list[_Origin] = []
        self.by_root: dict[int, int] = {}  # id(root array) -> origin of natively made / Python roots
        self.input_roots: set[int] = set()
        self.locs: dict = {}  # node -> (origin, byte offset), or a tuple of those (None entries) for tuple values
        self.fallbacks: list[tuple[str, str]] = []
        self.steps: list = []  # ("native", abstract calls) or ("py", kernel or None, unit, fresh outputs)
        self.materialize: dict = {}  # node -> how a Python step gets its value: "rerun" or ("root", ...)
        # (scratch, node, step): a count the native step leaves in ``scratch``; not 0 means the row must raise as
        # eagerly (``nll_check_targets``: an out-of-range target), which the node's rerun does, right after that step.
        self.checks: list = []
        threads = get_num_threads()
        for node in cg.placeholders + list(cg.constants):
            pairs = _arrays(env.get(node))
            if pairs is not None and pairs[0][0] is None:
                self.locs[node] = (self._origin("in", pairs[0][1], node, 0), 0)
                self.input_roots.add(id(memory_owner(pairs[0][1])))
        self.t = 0  # the clock of lifetimes: one tick per step
        for kernel, unit in cg.steps:
            self.t += 1
            if kernel is not None:
                self._group(self.t, kernel, unit, threads)
            else:
                self._node(self.t, unit)
        self._finish()
        del self.env  # the recorded values: only their layouts were needed

    # -- planning -------------------------------------------------------------------------------------------------
    def _origin(self, kind, array, node, step):
        self.origins.append(_Origin(kind, array, node, step))
        return len(self.origins) - 1

    def array(self, node):
        value = self.env.get(node)
        if not isinstance(value, Tensor) or type(value._data) is not np.ndarray:
            raise NotLowerable(f"{node.name} is not a host tensor")
        return value._data

    def ref(self, arr, node=None):
        """The abstract address ``(origin, byte offset)`` of ``arr``, a view of ``node``'s value (or of a root
        made in this graph)."""
        o = self.by_root.get(id(memory_owner(arr)))
        if o is not None:
            return o, _addr(arr) - _addr(self.origins[o].array)
        loc = self.locs.get(node) if node is not None else None
        if loc is None or not isinstance(loc[0], int):
            raise NotLowerable("an operand of unknown origin")
        o, off = self.locs[node]
        return o, off + _addr(arr) - _addr(self.array(node))

    def use(self, ref, step):
        o = self.origins[ref[0]]
        o.first, o.last = min(o.first, step), max(o.last, step)
        return ref

    def produce(self, arr, step, kind="root"):
        """Register ``arr``'s root as an allocation made by this step."""
        root = memory_owner(arr)
        rid = id(root)
        if rid in self.by_root:
            return self.by_root[rid]
        if rid in self.input_roots:
            raise NotLowerable("a result in an input's memory")
        if kind == "root" and not root.flags.c_contiguous:
            raise NotLowerable(f"a result root with strides {root.strides}")
        self.by_root[rid] = self._origin(kind, root, None, step)
        return self.by_root[rid]

    def static(self, array):
        """A constant array the runner keeps (at a fixed address in the table)."""
        if array.base is not None:  # origins are roots: a view would be looked up by its base's id, never found
            array = array.copy()
        o = self._origin("static", array, None, self.t)
        self.by_root[id(array)] = o
        return array

    def _forget(self, mark):
        """Drop the origins a refused lowering registered (its results, constants): the Python step that runs
        instead makes its own results, which a kept native root would alias (a wrong value, a write past a buffer)."""
        del self.origins[mark:]
        for rid in [rid for rid, o in self.by_root.items() if o >= mark]:
            del self.by_root[rid]

    def _set_loc(self, node):
        """The locations of ``node``'s value, from the roots already known or the node it views."""
        pairs = _arrays(self.env[node])
        parent = self.locs.get(node.args[0]) if node.target is operator.getitem and node.args else None
        if parent is not None and not isinstance(parent[0], int):
            self.locs[node] = parent[node.args[1]]
            return
        locs = {}
        for pos, arr in pairs:
            if id(memory_owner(arr)) in self.by_root:
                locs[pos] = self.ref(arr)
                continue
            src = _source(self, node, arr)
            if src is None:
                raise _Refuse(f"{node.name}: a value in memory the plan did not see made")
            locs[pos] = self.ref(arr, src)
        value = self.env[node]
        self.locs[node] = locs[None] if None in locs else tuple(locs.get(i) for i in range(len(value)))

    def _reads(self, nodes, step):
        for p in nodes:
            loc = self.locs.get(p)
            if loc is None:
                continue
            for one in ([loc] if isinstance(loc[0], int) else loc):
                if one is not None:
                    self.use(one, step)

    def _native(self, step, calls):
        if self.steps and self.steps[-1][0] == "native":
            self.steps[-1][1].extend(calls)
        else:
            self.steps.append(("native", list(calls)))

    def _python(self, step, kernel, unit, reason):
        name = unit.names if isinstance(unit, FusedGroup) else unit.name
        self.fallbacks.append((str(name), reason))
        nodes = unit.outputs if isinstance(unit, FusedGroup) else [unit]
        fresh = []
        self._reads(unit.inputs if isinstance(unit, FusedGroup) else unit.all_input_nodes, self.t)
        for node in nodes:
            for pos, arr in _arrays(self.env[node]) or []:
                o = self.produce(arr, self.t, "py")
                fresh.append((node, pos, o, arr.shape, arr.strides, arr.dtype, _addr(arr) - _addr(memory_owner(arr))))
        self.steps.append(("py", kernel, unit, fresh))
        for node in nodes:
            if _arrays(self.env[node]) is not None:
                self._set_loc(node)

    def _group(self, step, kernel, unit, threads):
        if threads > 1 and kernel.numel >= PROGRAM_SPLIT_MIN and not llvm_pool.available():
            return self._python(step, kernel, unit, "a large kernel: the Python runner splits it across threads")
        mark = len(self.origins)
        try:
            calls = lower_group(self, kernel, unit, self.t)
        except NotLowerable as err:
            self._forget(mark)
            return self._python(step, kernel, unit, str(err))
        self._native(step, calls)
        for m in unit.outputs:
            self._set_loc(m)

    def _node(self, step, node):
        pairs = _arrays(self.env.get(node))
        if pairs is None:
            if self.env.get(node) is None or not any(u.op == "call_function" for u in node.users):
                return self._python(step, None, node, f"a {type(self.env.get(node)).__name__} value")
            raise _Refuse(f"{node.name} makes a {type(self.env[node]).__name__} that later rows read")
        known = self.input_roots | set(self.by_root)
        aliases = [id(memory_owner(a)) in known for _, a in pairs]
        if all(aliases) and (node.target is operator.getitem or isinstance(node.target, Primitive)):
            self._set_loc(node)  # a view: no code at all
            self.materialize[node] = "rerun"
            return None
        if any(aliases):
            raise _Refuse(f"{node.name} returns values both new and in existing memory")
        mark = len(self.origins)
        try:
            calls = lower_row(self, node, self.t)
        except NotLowerable as err:
            self._forget(mark)
            return self._python(step, None, node, str(err))
        self._native(step, calls)
        self._set_loc(node)
        return None

    def _finish(self):
        result = self.cg.output.args[0]
        out_nodes = [a for a in _flat(result) if isinstance(a, Node)]
        # The fast return path maps a flat tuple; nested results (``((a, b), c)``, a call's result followed by its
        # buffer writes) go through map_aggregate.
        flat = type(result) is tuple and not any(isinstance(a, (tuple, list, dict)) for a in result)
        self.out_flat = list(result) if flat else None
        self.out_single = result if isinstance(result, Node) else None
        end = self.t + 1
        for n in out_nodes:
            loc = self.locs.get(n)
            if loc is not None and isinstance(loc[0], int):
                if self.origins[loc[0]].kind == "root":
                    self.origins[loc[0]].kind = "out"
                self.use(loc, end)
        for node, loc in self.locs.items():
            if loc is None or not isinstance(loc[0], int) or node.op != "call_function":
                continue
            o = self.origins[loc[0]]
            if o.kind in ("out", "root"):
                arr = self.array(node)
                self.materialize[node] = ("root", loc[0], loc[1], arr.shape, arr.strides, arr.dtype,
                                          arr is o.array)
        # Table: inputs, fresh outputs, Python roots, the arena, BLAS entry points.
        self.inputs = [(o.node, i, o.array.shape, o.array.strides, o.array.dtype)
                       for i, o in enumerate(self.origins) if o.kind == "in"]
        slot = 0
        for kind in ("in", "out", "py"):
            for o in self.origins:
                if o.kind == kind:
                    o.slot, slot = slot, slot + 1
        self.outs = [(o.slot, oi, o.array.shape, o.array.dtype) for oi, o in enumerate(self.origins)
                     if o.kind == "out"]
        self.arena = plan_arena([o for o in self.origins if o.kind == "root"])
        self.arena_slot = slot
        self.table, self.segments, self.ncalls = to_calls(self, slot + 1)
        self.table_address = _addr(self.table)
        # Writing a Python list through ctypes costs half what a NumPy slice assignment does (~1 us a call).
        self.table_slots = (ctypes.c_uint64 * len(self.table)).from_buffer(self.table)
        for node, how in list(self.materialize.items()):
            if how != "rerun" and self.origins[how[1]].kind == "root":  # an arena value a Python step reads
                o = self.origins[how[1]]
                view = np.ndarray(how[3], how[5], buffer=self.arena, offset=o.offset + how[2], strides=how[4])
                self.materialize[node] = ("static", view)
        self.n_in = sum(1 for o in self.origins if o.kind == "in")
        self.nodes_in = [o.node for o in self.origins if o.kind == "in"]
        self._lock = threading.Lock()
        self.checks_after: dict = {}
        for scratch, node, step in self.checks:
            self.checks_after.setdefault(step, []).append((scratch, node))
        self.pool = [None] * len(self.outs)
        self.pool_addrs = [0] * len(self.outs)
        self._seen = [None] * len(self.inputs)  # (weak reference, address) of each input at the last call
        self.broken = None

    # -- use ------------------------------------------------------------------------------------------------------
    def report(self):
        """``{"programs", "native_calls", "python_steps": [(unit, reason)], "arena_bytes", "fresh_outputs"}``."""
        return {"programs": sum(1 for kind, _ in self.segments if kind == "native"), "native_calls": self.ncalls,
                "python_steps": list(self.fallbacks), "arena_bytes": int(self.arena.nbytes),
                "fresh_outputs": len(self.outs), "broken": self.broken}

    def __call__(self, args):
        if self.broken is not None or not self._lock.acquire(blocking=False):
            return FALLBACK
        try:
            return self._run(args)
        finally:
            self._lock.release()

    def _run(self, args):
        cg = self.cg
        env = dict(cg.constants)
        env.update(zip(cg.placeholders, args))
        addrs = []
        seen = self._seen
        for i, (node, _, shape, strides, dtype) in enumerate(self.inputs):
            t = env.get(node)
            a = t._data if isinstance(t, Tensor) else None
            if type(a) is not np.ndarray or a.shape != shape or a.strides != strides or a.dtype != dtype:
                return FALLBACK
            # The same array object as last call (parameters, a reused batch) has the same address: reading it
            # through __array_interface__ costs ~3 us per array. A weak reference: holding the array would keep a
            # backward's saved activations alive until the next call.
            last = seen[i]
            if last is None or last[0]() is not a:
                last = seen[i] = (weakref.ref(a), _addr(a))
            addrs.append(last[1])
        if GradState.enabled:
            for n in self.nodes_in:
                if env[n]._requires_grad:
                    return FALLBACK
        roots = [None] * len(self.origins)
        pool = self.pool
        for i, (slot, oi, shape, dtype) in enumerate(self.outs):
            # Last call's array when nobody else holds it any more (no tensor, view or export: the pool's reference
            # and getrefcount's own are the only two): its pages are mapped and likely cached, a new one's are not.
            r = pool[i]
            if r is None or getrefcount(r) > _FREE:
                r = pool[i] = host_cache.empty(shape, dtype)
                self.pool_addrs[i] = _addr(r)
            roots[oi] = r
            addrs.append(self.pool_addrs[i])
        table = self.table
        self.table_slots[:len(addrs)] = addrs
        checks = self.checks_after
        for i, (kind, seg) in enumerate(self.segments):
            if kind == "native":
                seg(self.table_address)
                if i in checks and not self._checked(checks[i], env, roots):
                    return FALLBACK
            elif not self._step(seg, env, roots, table):
                self.broken = f"{seg[2]}: a Python row returned another layout than planned"
                return FALLBACK
        if self.out_single is not None:
            return self._value(self.out_single, env, roots)
        out = self.out_flat
        if out is not None:
            return tuple(self._value(a, env, roots) if isinstance(a, Node) else a for a in out)
        return map_aggregate(cg.output.args[0], lambda a: self._value(a, env, roots) if isinstance(a, Node) else a)

    def _checked(self, checks, env, roots):
        """False (after raising the row's own error, normally) when a native check counted a bad value."""
        for scratch, node in checks:
            if scratch[0]:
                args = map_aggregate(node.args, lambda a: self._value(a, env, roots) if isinstance(a, Node) else a)
                node.target(*args, **node.kwargs)  # raises the row's own error
                self.broken = f"{node.name}: the native check and the row disagree"
                return False
        return True

    def _value(self, node, env, roots):
        v = env.get(node, _MISSING)
        if v is not _MISSING:
            return v
        how = self.materialize[node]
        if how == "rerun":
            args = map_aggregate(node.args, lambda a: self._value(a, env, roots) if isinstance(a, Node) else a)
            v = node.target(*args, **node.kwargs)
        elif how[0] == "static":
            v = Tensor._make(how[1])
        else:
            root = roots[how[1]]
            v = Tensor._make(root if how[6] else np.ndarray(how[3], how[5], buffer=root, offset=how[2],
                                                            strides=how[4]))
        env[node] = v
        return v

    def _step(self, seg, env, roots, table):
        _, kernel, unit, fresh = seg
        if kernel is not None:
            outs = kernel([self._value(p, env, roots)._data for p in unit.inputs])
            for m, o in zip(unit.outputs, outs):
                env[m] = Tensor._make(o)
        else:
            args = map_aggregate(unit.args, lambda a: self._value(a, env, roots) if isinstance(a, Node) else a)
            kwargs = map_aggregate(unit.kwargs, lambda a: self._value(a, env, roots) if isinstance(a, Node) else a)
            env[unit] = unit.target(*args, **kwargs)
        for node, pos, oi, shape, strides, dtype, offset in fresh:
            value = env[node]
            t = value if pos is None else value[pos]
            a = t._data if isinstance(t, Tensor) else None
            if type(a) is not np.ndarray or a.shape != shape or a.strides != strides or a.dtype != dtype:
                return False
            root = memory_owner(a)
            if _addr(a) - _addr(root) != offset:
                return False
            roots[oi] = root
            table[self.origins[oi].slot] = _addr(root)
        return True


def _source(plan, node, arr):
    """The input node of ``node`` whose value ``arr`` is a view of (the first whose memory holds it)."""
    root = memory_owner(arr)
    lo, hi = _bounds(arr)
    best = None
    for p in node.all_input_nodes:
        pairs = _arrays(plan.env.get(p))
        if pairs is None or pairs[0][0] is not None or p not in plan.locs or memory_owner(pairs[0][1]) is not root:
            continue
        plo, phi = _bounds(pairs[0][1])
        if plo <= lo and hi <= phi:
            return p
        best = best or p
    return best


def _flat(args):
    """The leaves of a (nested) graph result."""
    if isinstance(args, (tuple, list)):
        return [leaf for a in args for leaf in _flat(a)]
    if isinstance(args, dict):
        return [leaf for a in args.values() for leaf in _flat(a)]
    return [args]
