"""The native calls of one `CompiledGraph` step, over abstract addresses, and the programs they compile to.

`lower_group` and `lower_row` turn a fused group or a row (with the values one Python run recorded) into calls
``("kernel", ir_kernel, refs)`` or ``("gemm", spec, ra, rb, rc)`` whose refs are ``(origin, byte offset)`` pairs of
the `native_runner.NativeRunner` plan, or raise `NotLowerable`; `to_calls` resolves the refs to table slots and
compiles each run of native calls into one `codegen.llvm_program.Program`. The rows go through the same lowering as
CPU graph replay (`jitorch.cpu._lower`): ``linear`` is a product then a fused bias add, ``linear_backward`` two
products and a column sum, a batched ``matmul`` one product per batch entry. For ``y = relu(x @ w)`` the program's
calls read::

    Gemm(f32, m=2, n=3, k=3, a=Ref(0), b=Ref(1), c=Ref(3, 64))      # table: x, w, out, arena, sgemm, dgemm
    KernelCall(relu, refs=(Ref(2), Ref(3, 64)))

>>> import jitorch
>>> from jitorch._compile.trace import trace
>>> from jitorch._compile.backend import CompiledGraph
>>> w = jitorch.ones(3, 3)
>>> cg = CompiledGraph(trace(lambda x: (x @ w).relu(), (jitorch.ones(2, 3),), {}).gm)
>>> _ = [cg((jitorch.ones(2, 3),)) for _ in range(3)]
>>> cg.native.report()["native_calls"]  # the product and the ReLU loop
2
"""
from __future__ import annotations

import numpy as np

from ..codegen.ir import Buffer, Kernel, Store, const, load, op as ir_op
from ..codegen.llvm_objcache import default_cache
from ..codegen.llvm_pool import split_threads
from ..codegen.llvm_program import Ref, call_for, compile_program
from ..cpu._lower import COPY_ROWS, NotLowerable, batched_operands, blas_address, column_sum, copy_kernel, \
    element_strides, elementwise, linear, linear_backward, matmul, product_call, reduction
from ..cpu._lower_kernels import KERNEL_ROWS
from ..cpu._recorder import Record
from ..cpu._steps import plan_operands
from ..fx.make_fx import Primitive
from ..fx.node import Node
from ..ops.random_ops import RANDOM_ROWS
from ..runtime.host_pointer import byte_span, data_address
from ..runtime.threads import get_num_threads
from .lower import IR_DTYPES

__all__ = ["NotLowerable", "lower_group", "lower_row", "to_calls", "plan_arena"]

_ALIGN = 64
_POINTWISE_SKIP = ("to_copy",)


_addr = data_address


def _ref(plan, arr, nodes, t):
    """``arr``'s abstract address: a root made in this graph, or a view of one of ``nodes``' values."""
    root = arr
    while isinstance(root.base, np.ndarray):
        root = root.base
    if id(root) in plan.by_root:
        return plan.use(plan.ref(arr), t)
    for n in nodes:
        loc = plan.locs.get(n)
        if not isinstance(n, Node) or loc is None or not isinstance(loc[0], int):
            continue
        a = plan.array(n)
        r = a
        while isinstance(r.base, np.ndarray):
            r = r.base
        if r is root and _within(arr, a):
            return plan.use(plan.ref(arr, n), t)
    raise NotLowerable("an operand of unknown origin")


def _within(arr, outer):
    lo, hi = byte_span(arr)
    olo, ohi = byte_span(outer)
    return olo <= lo and hi <= ohi


def lower_group(plan, kernel, unit, t):
    """The call of one fused group's kernel (the IR `GroupKernel.build` makes for the recorded strides)."""
    arrays = [plan.array(p) for p in unit.inputs]
    if (kernel.outer_numel if kernel.reduce_axes else kernel.numel) == 0:
        raise NotLowerable("an empty iteration space")
    if any(s % a.itemsize for a in arrays for s in a.strides):
        raise NotLowerable("strides between elements")
    views = kernel._slot_views(arrays)
    ir = kernel.build(tuple(st for _, st in views))
    refs = []
    for m in unit.outputs:
        arr = plan.array(m)
        plan.produce(arr, t)
        refs.append(plan.use(plan.ref(arr), t))
    for (pos, *_rest), _ in sorted(kernel.slots.items(), key=lambda kv: kv[1]):
        refs.append(_ref(plan, arrays[pos], [unit.inputs[pos]], t))
    return [("kernel", ir, refs)]


def _parts(plan, parts, nodes, t):
    calls = []
    for kind, payload in parts:
        if kind == "gemm":
            s = payload
            spec = {k: s[k] for k in ("dtype", "m", "n", "k", "a_strides", "b_strides", "c_strides")}
            spec["blas"] = s.get("blas", False)
            calls.append(("gemm", spec, _ref(plan, s["a"], nodes, t), _ref(plan, s["b"], nodes, t),
                          _ref(plan, s["c"], nodes, t)))
        elif kind == "red":
            k, a, out = payload
            calls.append(("kernel", k, [_ref(plan, a, nodes, t), _ref(plan, out, nodes, t)]))
        else:
            calls.append(_elementwise_call(plan, payload, nodes, t))
    return calls


def _elementwise_call(plan, item, nodes, t):
    """One pointwise item as a kernel: operands are buffers (numbers are constants), the output the last buffer;
    a 0-d value is a one-element space."""
    shape = item.shape or (1,)
    arrays, exprs = [], []
    for a in item.operands:
        if isinstance(a, np.ndarray):
            exprs.append(load(len(arrays), IR_DTYPES[a.dtype]))
            arrays.append(a)
        else:
            exprs.append(a)
    same = [i for i, a in enumerate(arrays) if a is item.out]
    expr = item.expr(exprs)
    if not same:
        arrays.append(item.out)
    buffers = tuple(Buffer(IR_DTYPES[a.dtype], element_strides(a, item.shape) if item.shape else (0,))
                    for a in arrays)
    store = Store(same[0] if same else len(arrays) - 1, expr)
    return ("kernel", Kernel(shape, buffers, (store,)), [_ref(plan, a, nodes, t) for a in arrays])


def _batched_matmul(plan, node, a, b, c, t):
    """One product per batch entry: the operands' references offset by each entry's bytes (checks shared with CPU
    graph replay, `cpu._lower.batched_operands`)."""
    ab, bb, batch = batched_operands(a, b, c)
    dt = IR_DTYPES[a.dtype]
    m, n, k = c.shape[-2], c.shape[-1], a.shape[-1]
    spec = dict(dtype=dt, m=int(m), n=int(n), k=int(k), a_strides=element_strides(a)[-2:],
                b_strides=element_strides(b)[-2:], c_strides=element_strides(c)[-2:])
    ra, rb, rc = _ref(plan, a, node.all_input_nodes, t), _ref(plan, b, node.all_input_nodes, t), \
        _ref(plan, c, [], t)
    calls = []
    for idx in np.ndindex(*batch):
        offs = [sum(i * s for i, s in zip(idx, x.strides[:-2])) for x in (ab, bb, c)]
        calls.append(("gemm", spec, (ra[0], ra[1] + offs[0]), (rb[0], rb[1] + offs[1]), (rc[0], rc[1] + offs[2])))
    return calls


def lower_row(plan, node, t):
    """The calls of one row node, from its recorded operands and results."""
    target = node.target
    if not isinstance(target, Primitive) or target.inplace:
        raise NotLowerable("not an op-table row")
    op, name = target.op, target.op.name
    if op in RANDOM_ROWS:
        raise NotLowerable("a random draw: it runs in Python, ahead of the program")
    if any(isinstance(v, Node) for v in node.kwargs.values()) or \
            not all(isinstance(a, (Node, int, float, type(None))) for a in node.args):
        raise NotLowerable("operands in keywords or containers")
    value = plan.env[node]
    outs = [v._data for v in value] if isinstance(value, tuple) else [value._data]
    datas = [plan.array(a) if isinstance(a, Node) else a for a in node.args]
    rec = Record("kernel", None, node.name, op, datas, (), None, dict(node.kwargs), outs)
    inputs = node.all_input_nodes
    if name == "linear" and len(datas) == 3:
        parts = linear(rec)
    elif name == "linear_backward":
        parts = [_column_sum(plan, p) if k == "red" else (k, p) for k, p in linear_backward(rec)]
    elif name == "matmul":
        a, b = datas
        if a.ndim > 2 or b.ndim > 2:
            for o in outs:
                plan.produce(o, t)
            return _batched_matmul(plan, node, a, b, outs[0], t)
        parts = [("gemm", matmul(rec))]
    elif name in COPY_ROWS:  # copy_slices (``out = base``, then ``src`` into the chain's region), cat, stack
        pairs = COPY_ROWS[name](rec)
        plan.produce(outs[0], t)
        return [_copy(plan, dst, value, inputs, t) for dst, value in pairs]
    elif name == "nll_check_targets":
        return _nll_check(plan, node, datas[0], outs[0], t)
    elif name in KERNEL_ROWS:
        lowered = KERNEL_ROWS[name](rec, constant=plan.static)
        for o in outs:
            plan.produce(o, t)
        return [("kernel", k, [_ref(plan, a, inputs, t) for a in arrays]) for k, arrays, _ in lowered]
    elif op.pointwise and op.nout == 1 and name not in _POINTWISE_SKIP:
        args = [plan.env[a] if isinstance(a, Node) else a for a in node.args]
        datas, casts, cnp = plan_operands(op, args)
        rec = Record("kernel", None, node.name, op, datas, casts, cnp, dict(node.kwargs), outs)
        parts = [("ew", elementwise(rec))]
    else:
        parts = [("red", reduction(rec))]
    for o in outs:
        plan.produce(o, t)
    for kind, payload in parts:
        if kind == "gemm":
            _no_overlap(payload["c"], [payload["a"], payload["b"]])
    return _parts(plan, parts, inputs, t)


def _nll_check(plan, node, target, out, t):
    """``nll_check_targets``: the int64 copy of the targets, and a count of out-of-range ones into a static scratch
    that the runner reads after the program (`NativeRunner.checks`), raising eager's IndexError when it is not 0.
    The fused loss reads the targets through masks, never as addresses, so a bad target reads no stray memory."""
    dt = IR_DTYPES.get(target.dtype)
    if dt not in ("i32", "i64") or out.dtype != np.int64 or target.ndim != 1 or target.size == 0:
        raise NotLowerable("nll_check_targets of other dtypes, shapes, or empty")
    plan.produce(out, t)
    classes, ignore = node.kwargs["classes"], node.kwargs["ignore_index"]
    scratch = plan.static(np.zeros(1, np.int64))
    # The native step these calls join (the last one, or a new one): checked right after it, before a later
    # Python row (a weighted loss's gather) could fail on the bad target with another error.
    steps = plan.steps
    plan.checks.append((scratch, node, len(steps) - 1 if steps and steps[-1][0] == "native" else len(steps)))
    v = load(1, dt)
    copy = Kernel(out.shape, (Buffer("i64", element_strides(out)), Buffer(dt, element_strides(target))),
                  (Store(0, v if dt == "i64" else ir_op("cast", v, dtype="i64")),))
    v = load(0, dt)
    bad = ir_op("and", ir_op("ne", v, const(ignore, dt)),
                ir_op("or", ir_op("lt", v, const(0, dt)), ir_op("ge", v, const(classes, dt))))
    count = Kernel((1,) + target.shape, (Buffer(dt, (0,) + element_strides(target)), Buffer("i64", (0, 0))),
                   (Store(1, ir_op("cast", bad, dtype="i64"), "sum"),), 1)
    inputs = node.all_input_nodes
    return [("kernel", copy, [_ref(plan, out, [], t), _ref(plan, target, inputs, t)]),
            ("kernel", count, [_ref(plan, target, inputs, t), _ref(plan, scratch, [], t)])]


def _copy(plan, dst, value, inputs, t):
    """A copy loop ``dst[...] = value`` (broadcast) over the pointer table."""
    return ("kernel", copy_kernel(dst, value), [_ref(plan, dst, [], t), _ref(plan, value, inputs, t)])


def _column_sum(plan, payload):
    """The bias gradient through BLAS (`cpu._lower.column_sum`), its ones vector a static of the plan."""
    g2 = payload[1]
    return column_sum(payload, plan.static(np.ones((1, g2.shape[0]), g2.dtype)))


def _no_overlap(out, ins):
    if any(np.may_share_memory(out, a) for a in ins):
        raise NotLowerable("a product writing into one of its operands")


def to_calls(plan, nslots):
    """``(table, segments, ncalls)``: the pointer table (inputs, outputs and Python roots rewritten per call; the
    arena and BLAS entry points fixed) and the steps with each run of native calls compiled into one program."""
    addresses = [0] * nslots
    addresses[plan.arena_slot] = _addr(plan.arena)
    for o in plan.origins:
        if o.kind == "static":
            o.slot = len(addresses)
            addresses.append(_addr(o.array))
    blas = {}
    for dt in ("f32", "f64"):
        address = blas_address(dt)
        if address is not None:
            blas[dt] = len(addresses)
            addresses.append(address)
    table = np.array(addresses, dtype=np.uint64)

    def ref(r):
        o = plan.origins[r[0]]
        if o.kind == "root":
            return Ref(plan.arena_slot, o.offset + r[1])
        if o.kind == "static":
            return Ref(o.slot, r[1])
        return Ref(o.slot, r[1])

    segments, ncalls, threads = [], 0, get_num_threads()
    for step in plan.steps:
        if step[0] == "py":
            segments.append(("py", step))
            continue
        calls = []
        for c in step[1]:
            if c[0] == "kernel":
                calls.append(call_for(c[1], [ref(r) for r in c[2]], split_threads(threads)))
            else:
                calls.append(product_call(c[1], ref(c[2]), ref(c[3]), ref(c[4]), blas.get(c[1]["dtype"])))
        ncalls += len(calls)
        segments.append(("native", compile_program(calls, default_cache())))
    return table, segments, ncalls


def plan_arena(origins):
    """Byte offsets in one arena: allocations whose lifetimes (first..last step) overlap get disjoint bytes."""
    placed = []
    for o in sorted(origins, key=lambda o: o.first):
        size = -(-o.array.nbytes // _ALIGN) * _ALIGN
        offset = 0
        for other_off, other_size, start, stop in sorted(placed):
            if stop < o.first or start > o.last or other_off + other_size <= offset:
                continue
            if other_off >= offset + size:
                break
            offset = other_off + other_size
        placed.append((offset, size, o.first, o.last))
        o.offset = offset
    total = max((off + size for off, size, _, _ in placed), default=0)
    return np.zeros(max(total, _ALIGN), dtype=np.uint8)
