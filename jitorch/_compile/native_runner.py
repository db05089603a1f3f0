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

import os
import weakref
from sys import getrefcount

import numpy as np

from .._tensor import Tensor
from ..autograd.grad_mode import GradState
from ..fx.node import Node, map_aggregate
from ..runtime import host_cache
from ..runtime import memory_owner
from .native_lowering import NotLowerable, _addr
from .native_plan import NativePlan, _Refuse
from .native_plan import PROGRAM_SPLIT_MIN  # noqa: F401 - re-exported

__all__ = ["FALLBACK", "ENABLED", "NativeRunner", "attach"]

FALLBACK = object()  # a call the native runner declines: run the Python runner
ENABLED = os.environ.get("JITORCH_COMPILE_NATIVE", "1") != "0"
_MISSING = object()


def _free_refs():
    """``getrefcount`` of an array held only by a list entry and a local, as `NativeRunner._run` holds its pool."""
    pool = [np.empty(1)]
    r = pool[0]
    return getrefcount(r)


_FREE = _free_refs()


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


class NativeRunner(NativePlan):
    """The native form of one `CompiledGraph` (see the module notes); ``runner(args)`` returns its outputs or
    `FALLBACK`."""

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


