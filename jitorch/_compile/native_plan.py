"""The plan of a `native_runner.NativeRunner`: where each value of a compiled graph lives and which steps run natively.

`NativePlan` walks a graph's steps once over the values a Python run recorded (`native_runner.record`):

- each allocation is an `_Origin`: ``in`` (an input's array), ``py`` (a Python row's result), ``static`` (a constant
  the runner keeps) or ``root`` (made by native code; ``out`` when a graph output can reach it, fresh per call);
- each value is a location, an origin plus a byte offset (views cost nothing), and each origin a lifetime in steps;
- each step lowers to native calls (`native_lowering.lower_group` / `lower_row`) or stays a Python step, with the
  reason in ``fallbacks``;
- `_finish` lays out the pointer table (inputs, fresh outputs, Python roots, the arena of the other intermediates)
  and compiles the programs between Python steps.

`native_runner.NativeRunner` adds the per-call half. A graph with a construct the plan cannot model raises `_Refuse`.

>>> import jitorch
>>> from jitorch._compile.trace import trace
>>> from jitorch._compile.backend import CompiledGraph
>>> cg = CompiledGraph(trace(lambda x: (x + 1).exp() * 2, (jitorch.ones(4),), {}).gm)
>>> _ = [cg((jitorch.ones(4),)) for _ in range(3)]
>>> isinstance(cg.native, NativePlan), sorted(o.kind for o in cg.native.origins)
(True, ['in', 'out'])
"""
from __future__ import annotations

import ctypes
import operator
import threading

import numpy as np

from .._tensor import Tensor
from ..fx.make_fx import Primitive
from ..fx.node import Node
from ..codegen import llvm_pool
from ..runtime.threads import get_num_threads
from .fusion import FusedGroup
from .lower import PARALLEL_MIN
from ..runtime import memory_owner
from ..runtime.host_pointer import byte_span
from .native_lowering import NotLowerable, _addr, lower_group, lower_row, plan_arena, to_calls


# Without the native pool (`codegen.llvm_pool`: Linux only), a kernel leaves the one-call program to be split across
# Python's threads only when it is this large: a Python step between programs costs ~50-100 us (more right after BLAS
# has evicted the interpreter's caches), so a ReLU over 128x512 (~15 us on one thread) is cheaper run natively on one
# thread than split. With the pool, the program splits the kernels worth it itself (`llvm_pool.split_threads`).
PROGRAM_SPLIT_MIN = max(PARALLEL_MIN, 1 << 20)


class _Refuse(Exception):
    """The whole graph stays on the Python runner (the message says why)."""


def _arrays(value):
    """``[(position, array)]`` of a node's value (position None for a lone tensor), or None for other values."""
    if isinstance(value, Tensor):
        return [(None, value._data)] if type(value._data) is np.ndarray else None
    if isinstance(value, tuple) and all(v is None or isinstance(v, Tensor) for v in value):
        out = [(i, v._data) for i, v in enumerate(value) if v is not None]
        return out if all(type(a) is np.ndarray for _, a in out) else None
    return None


class _Origin:
    """One allocation a value lives in: ``in`` (an input's array), ``py`` (a Python row's result), ``root`` (made
    by native code: becomes ``out``, fresh per call, or ``arena``)."""

    __slots__ = ("kind", "array", "node", "first", "last", "slot", "offset")

    def __init__(self, kind, array, node, step):
        self.kind, self.array, self.node, self.first, self.last = kind, array, node, step, step
        self.slot = self.offset = None


class NativePlan:
    """The planning half of `native_runner.NativeRunner` (see the module notes): built from a recorded run."""

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


def _source(plan, node, arr):
    """The input node of ``node`` whose value ``arr`` is a view of (the first whose memory holds it)."""
    root = memory_owner(arr)
    lo, hi = byte_span(arr)
    best = None
    for p in node.all_input_nodes:
        pairs = _arrays(plan.env.get(p))
        if pairs is None or pairs[0][0] is not None or p not in plan.locs or memory_owner(pairs[0][1]) is not root:
            continue
        plo, phi = byte_span(pairs[0][1])
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
