"""One recorded step -> what the native program needs: an elementwise expression, a reduction kernel or a product.

Each function takes a `_recorder.Record` and either returns a description over the step's arrays or raises
`NotLowerable` with the reason, which `CPUGraph.native_report` shows; such a step replays as its Python closure.
Nothing here decides about buffers: `_native` maps arrays to table slots and fuses the elementwise steps.

>>> import numpy as np
>>> from jitorch.ops.table import OPS
>>> from jitorch.cpu._recorder import Record
>>> a, out = np.ones(3, np.float32), np.empty(3, np.float32)
>>> item = elementwise(Record("kernel", None, "", OPS["exp"], [a], (), np.dtype(np.float32), {}, [out]))
>>> item.shape, item.name
((3,), 'exp')
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from .._compile.expr import Unfusable
from .._compile.lower import IR_DTYPES, node_expr_for
from ..codegen.ir import Buffer, Kernel, Store, load, op as ir_op
from ..codegen.llvm_gemm import blas_operands, vector_fits
from ..codegen.llvm_gemm_tiled import tiled_fits
from ..codegen.llvm_pool import split_threads
from ..codegen.llvm_program import Gemm, Ref
from ..runtime.threads import get_num_threads
from ..runtime.host_blas import gemm_function
from ._steps import root_of

__all__ = ["NotLowerable", "Elementwise", "elementwise", "reduction", "matmul", "batched_operands", "batched_matmul",
           "copy_slices", "concatenation", "COPY_ROWS", "copy_kernel", "linear", "linear_backward", "column_sum",
           "blas_address", "blas_int_bits", "element_strides", "BLAS_MIN_FLOPS", "MAX_BATCH"]

# Products with at least this many multiply-adds call BLAS; smaller ones run the generated loop, where a library
# call's fixed cost (argument checks, dispatch, packing) would dominate. NumPy's OpenBLAS 0.3.31 (SkylakeX kernels,
# Zen 4) called from a native program takes 0.22 us for 8x32 @ 32x32 (the loop 0.29), 2.4 us for 64x64 @ 64x32
# (the loop 5.2); only at 1x64 @ 64x64 the loop is ahead (0.27 against 0.31).
BLAS_MIN_FLOPS = 1 << 13
_REDUCTIONS = {"sum": "sum", "prod": "prod", "amax": "max", "amin": "min"}


class NotLowerable(Exception):
    """The step has no native form; the message says why (shown by ``CPUGraph.native_report``)."""


def element_strides(array, shape=None):
    """``array``'s strides in elements (broadcast to ``shape`` when given); raises for strides between elements."""
    view = array if shape is None or array.shape == tuple(shape) else np.broadcast_to(array, shape)
    if any(s % view.itemsize for s in view.strides):
        raise NotLowerable(f"strides {view.strides} are not whole elements of {view.dtype}")
    return tuple(s // view.itemsize for s in view.strides)


def _ir_dtype(array, what):
    dt = IR_DTYPES.get(array.dtype)
    if dt is None:
        raise NotLowerable(f"{what} has dtype {array.dtype}, which the native backend does not handle")
    return dt


@dataclass
class Elementwise:
    """A pointwise step: ``out = name(operands)`` over ``shape`` (operands are arrays or Python numbers)."""

    name: str
    shape: tuple
    operands: list
    out: np.ndarray
    out_dtype: str

    def expr(self, operand_exprs):
        """The IR expression of this step given IR expressions (or numbers) for its operands."""
        try:
            return node_expr_for(self.name, operand_exprs, self.out_dtype)
        except (Unfusable, TypeError, ValueError) as e:
            raise NotLowerable(f"{self.name}: {e}") from None


def elementwise(rec):
    """The `Elementwise` of a pointwise kernel or in-place record (checked against a trial expression)."""
    op = rec.op
    if op is None or not op.pointwise or op.nout != 1:
        raise NotLowerable(f"{getattr(op, 'name', rec.kind)} is not a pointwise row")
    attrs = dict(rec.attrs)
    if op.name == "to_copy":
        attrs.pop("dtype", None)
    if attrs:
        raise NotLowerable(f"{op.name} has attributes {sorted(attrs)}")
    out = rec.outs[0]
    if out is None:
        raise NotLowerable(f"{op.name} writes no buffer")
    out_dtype = _ir_dtype(out, f"{op.name}'s output")
    if op.promotion not in ("compare", "keep") and rec.cnp is not None and np.dtype(rec.cnp) != out.dtype:
        raise NotLowerable(f"{op.name} computes in {rec.cnp} and writes {out.dtype}")
    operands = []
    for d in rec.datas:
        if isinstance(d, np.ndarray):
            _ir_dtype(d, f"an operand of {op.name}")
            element_strides(d, out.shape)
            operands.append(d)
        elif isinstance(d, (int, float)) and not isinstance(d, bool):
            operands.append(d)
        else:
            raise NotLowerable(f"{op.name} has the operand {d!r}")
    element_strides(out)
    item = Elementwise(op.name, tuple(out.shape), operands, out, out_dtype)
    trial = [load(i, IR_DTYPES[d.dtype]) if isinstance(d, np.ndarray) else d for i, d in enumerate(operands)]
    item.expr(trial)
    return item


def reduction(rec):
    """``(kernel, input_array, output_array)``: a sum/prod/amax/amin record as an IR reduction kernel."""
    op = rec.op
    kind = _REDUCTIONS.get(getattr(op, "name", None))
    if kind is None:
        raise NotLowerable(f"{getattr(op, 'name', rec.kind)} has no native form (its NumPy row replays)")
    if rec.kind != "kernel" or set(rec.attrs) - {"dims", "keepdim", "dtype"}:
        raise NotLowerable(f"{op.name} with {rec.kind} operands or attributes {sorted(rec.attrs)}")
    (a,), out = rec.datas, rec.outs[0]
    if not isinstance(a, np.ndarray) or out is None:
        raise NotLowerable(f"{op.name}: unexpected operands")
    in_dt, out_dt = _ir_dtype(a, f"{op.name}'s input"), _ir_dtype(out, f"{op.name}'s output")
    if in_dt != out_dt and (kind in ("max", "min") or in_dt == "bool" and kind == "prod"):
        raise NotLowerable(f"{op.name} from {in_dt} to {out_dt}")
    dims = tuple(sorted(d % max(a.ndim, 1) for d in rec.attrs["dims"])) if a.ndim else ()
    kept = [d for d in range(a.ndim) if d not in dims]
    a_st = element_strides(a)
    out_st = element_strides(out)
    if rec.attrs.get("keepdim"):
        out_kept = [out_st[d] for d in kept]
    else:
        out_kept = list(out_st)
    if len(out_kept) != len(kept):
        raise NotLowerable(f"{op.name}: output rank does not match the kept dimensions")
    shape = tuple(a.shape[d] for d in kept) + tuple(a.shape[d] for d in dims)
    value = load(0, in_dt)
    if in_dt != out_dt:
        value = ir_op("cast", value, dtype=out_dt)
    buffers = (Buffer(in_dt, tuple(a_st[d] for d in kept) + tuple(a_st[d] for d in dims)),
               Buffer(out_dt, tuple(out_kept) + (0,) * len(dims)))
    # A full reduction of a 0-d tensor, or over no dims, is a copy: one reduced dimension of size 1 keeps the form.
    if not dims:
        shape, buffers = shape + (1,), tuple(Buffer(b.dtype, b.strides + (0,)) for b in buffers)
    return Kernel(shape, buffers, (Store(1, value, kind),), max(len(dims), 1)), a, out


def matmul(rec):
    """``dict(dtype, m, n, k, a, a_strides, b, b_strides, c, c_strides)`` for a 1-D/2-D float matmul record."""
    if getattr(rec.op, "name", None) != "matmul" or rec.kind != "kernel":
        raise NotLowerable("not a matmul")
    (a, b), c = rec.datas, rec.outs[0]
    if not all(isinstance(x, np.ndarray) for x in (a, b)) or c is None:
        raise NotLowerable("matmul: unexpected operands")
    if a.ndim not in (1, 2) or b.ndim not in (1, 2):
        raise NotLowerable(f"matmul of {a.ndim}-d and {b.ndim}-d arrays (batched products replay in Python)")
    dt = IR_DTYPES.get(a.dtype)
    if dt not in ("f32", "f64") or b.dtype != a.dtype or c.dtype != a.dtype:
        raise NotLowerable(f"matmul of {a.dtype} and {b.dtype} into {c.dtype}")
    sa, sb, sc = element_strides(a), element_strides(b), element_strides(c)
    a_st = sa if a.ndim == 2 else (0, sa[0])
    m, k = (a.shape if a.ndim == 2 else (1, a.shape[0]))
    b_st = sb if b.ndim == 2 else (sb[0], 0)
    n = b.shape[1] if b.ndim == 2 else 1
    if a.ndim == 2 and b.ndim == 2:
        c_st = sc
    elif a.ndim == 2:
        c_st = (sc[0], 1)
    elif b.ndim == 2:
        c_st = (0, sc[0])
    else:
        c_st = (0, 1)
    return dict(dtype=dt, m=int(m), n=int(n), k=int(k), a=a, a_strides=a_st, b=b, b_strides=b_st, c=c,
                c_strides=c_st)


# A batched matmul with more products than this replays its row (one call each would bloat the code).
MAX_BATCH = 1024


def batched_operands(a, b, c):
    """``(ab, bb, batch)``: a batched float product's operands broadcast over its batch dims, or `NotLowerable`.
    Shared by CPU graph replay (`batched_matmul`) and the compile path's native runner."""
    if not all(isinstance(x, np.ndarray) for x in (a, b)) or c is None or a.ndim < 2 or b.ndim < 2:
        raise NotLowerable("a batched matmul of a vector")
    dt = IR_DTYPES.get(a.dtype)
    if dt not in ("f32", "f64") or b.dtype != a.dtype or c.dtype != a.dtype:
        raise NotLowerable(f"matmul of {a.dtype} and {b.dtype} into {c.dtype}")
    batch = c.shape[:-2]
    if int(np.prod(batch)) > MAX_BATCH:
        raise NotLowerable(f"a batched matmul of {int(np.prod(batch))} products")
    return np.broadcast_to(a, batch + a.shape[-2:]), np.broadcast_to(b, batch + b.shape[-2:]), batch


def batched_matmul(rec):
    """One `matmul` spec per batch entry of a batched float product (each over 2-D views of the operands)."""
    if getattr(rec.op, "name", None) != "matmul" or rec.kind != "kernel":
        raise NotLowerable("not a matmul")
    (a, b), c = rec.datas, rec.outs[0]
    ab, bb, batch = batched_operands(a, b, c)
    return [_gemm(ab[idx], bb[idx], c[idx]) for idx in np.ndindex(*batch)]


def copy_slices(rec):
    """``[(dst, value)]``: ``copy_slices(base, src, chain)`` as ``out[...] = base`` then ``region[...] = src``, the
    region found by running the view chain on the recorded output."""
    (base, src), out = rec.datas, rec.outs[0]
    dt = IR_DTYPES.get(getattr(out, "dtype", None))
    if not (isinstance(base, np.ndarray) and isinstance(src, np.ndarray)) or dt in (None, "bool") or \
            base.dtype != out.dtype or src.dtype != out.dtype or out.size == 0 or out.ndim == 0:
        raise NotLowerable("copy_slices of other dtypes, or empty")
    region = out
    for view_op, attrs in rec.attrs["chain"]:
        region = view_op.kernel(np, region, **attrs)
    if region.size == 0 or region.ndim == 0 or not np.shares_memory(region, out):
        raise NotLowerable("copy_slices into an empty or 0-d region")
    if np.may_share_memory(out, base) or np.may_share_memory(out, src):
        raise NotLowerable("copy_slices writing into one of its operands")
    element_strides(base, out.shape)
    element_strides(src, region.shape)
    return [(out, base), (region, src)]


def concatenation(rec):
    """``[(region, src)]``: a ``cat``/``stack`` record as one copy of each input into its part of the output (the
    backward of ``split``/``unbind`` is one of these)."""
    out, datas = rec.outs[0], rec.datas
    dt = IR_DTYPES.get(getattr(out, "dtype", None))
    if dt in (None, "bool") or out.size == 0 or out.ndim == 0 or \
            not all(isinstance(a, np.ndarray) and a.dtype == out.dtype for a in datas):
        raise NotLowerable(f"{rec.op.name} of other dtypes, or empty")
    if any(np.may_share_memory(out, a) for a in datas):
        raise NotLowerable(f"{rec.op.name} writing into one of its inputs")
    d = rec.attrs["dim"] % out.ndim
    parts, start = [], 0
    for i, a in enumerate(datas):
        if rec.op.name == "stack":
            region = out[(slice(None),) * d + (i,)]
        elif a.size == 0:
            continue  # (an empty input, of any shape, adds nothing)
        else:
            region = out[(slice(None),) * d + (slice(start, start + a.shape[d]),)]
            start += a.shape[d]
        if region.shape != a.shape:
            raise NotLowerable(f"{rec.op.name}: an input of shape {a.shape} for a part of shape {region.shape}")
        if region.size:
            element_strides(a)
            parts.append((region, a))
    return parts


# The rows whose replay is copies: ``name -> rec -> [(destination view, source)]``.
COPY_ROWS = {"copy_slices": copy_slices, "cat": concatenation, "stack": concatenation}


def copy_kernel(dst, value):
    """The IR loop ``dst[...] = value`` (broadcast): buffers ``(dst, value)``."""
    dt = IR_DTYPES[dst.dtype]
    buffers = (Buffer(dt, element_strides(dst)), Buffer(dt, element_strides(value, dst.shape)))
    return Kernel(dst.shape, buffers, (Store(0, load(1, dt)),))


def _matrix(a, what):
    """``a`` as a 2-D ``(rows, last)`` view sharing its memory (as the linear rows' ``_rows``), or refuse."""
    if a.ndim == 2:
        return a
    m = a.reshape(-1, a.shape[-1]) if a.ndim else None
    if m is None or (m.size and not np.shares_memory(m, a)):
        raise NotLowerable(f"{what} of shape {a.shape} is not a 2-D view")
    return m


def _gemm(a, b, c):
    dt = IR_DTYPES.get(a.dtype)
    if dt not in ("f32", "f64") or b.dtype != a.dtype or c.dtype != a.dtype:
        raise NotLowerable(f"a product of {a.dtype} and {b.dtype} into {c.dtype}")
    return dict(dtype=dt, m=int(a.shape[0]), n=int(b.shape[1]), k=int(a.shape[1]), a=a, a_strides=element_strides(a),
                b=b, b_strides=element_strides(b), c=c, c_strides=element_strides(c))


def linear(rec):
    """``[("gemm", spec), ("ew", bias add)]``: the ``linear`` row as ``x @ w.T`` then ``out += b`` (fusible)."""
    if rec.kind != "kernel":
        raise NotLowerable("an in-place linear")
    (x, w, b), out = rec.datas, rec.outs[0]
    x2, out2 = _matrix(x, "linear's input"), _matrix(out, "linear's output")
    parts = [("gemm", _gemm(x2, w.T, out2))]
    if b is not None:
        if not isinstance(b, np.ndarray) or b.dtype != out.dtype:
            raise NotLowerable("linear's bias")
        element_strides(b, out2.shape)
        parts.append(("ew", Elementwise("add", tuple(out2.shape), [out2, b], out2, IR_DTYPES[out.dtype])))
    return parts


def linear_backward(rec):
    """The gradients ``g @ w``, ``g.T @ x`` and ``g.sum(0)`` that ``needs`` asks for, as products and a reduction."""
    g, x, w = rec.datas
    gx, gw, gb = rec.outs
    needs = rec.attrs.get("needs", (True, True, True))
    g2 = _matrix(g, "linear's gradient")
    parts = []
    if needs[0]:
        parts.append(("gemm", _gemm(g2, w, _matrix(gx, "the input gradient"))))
    if needs[1]:
        parts.append(("gemm", _gemm(g2.T, _matrix(x, "linear's input"), gw)))
    if needs[2]:
        dt = _ir_dtype(gb, "the bias gradient")
        gs, bs = element_strides(g2), element_strides(gb)
        kernel = Kernel((g2.shape[1], g2.shape[0]), (Buffer(dt, (gs[1], gs[0])), Buffer(dt, (bs[0], 0))),
                        (Store(1, load(0, dt), "sum"),), 1)
        parts.append(("red", (kernel, g2, gb)))
    return parts


def column_sum(payload, ones):
    """A bias-gradient reduction ``g.sum(0)`` (a ``linear_backward`` "red" part) as the product ``ones @ g``, or the
    part unchanged when BLAS cannot take it. ``ones`` is a ``(1, rows)`` array of ones the caller keeps alive.

    The reduction loop reads ``g`` column by column: 0.18 ms for a 128x512 float32 gradient, against 0.006 ms for
    the library's row-wise product (measured on a 2-core EPYC).
    """
    _kernel, g2, gb = payload
    dt = IR_DTYPES.get(g2.dtype)
    if dt not in ("f32", "f64") or gb.dtype != g2.dtype or blas_address(dt) is None:
        return "red", payload
    return "gemm", dict(dtype=dt, m=1, n=int(g2.shape[1]), k=int(g2.shape[0]), a=ones,
                        a_strides=(int(g2.shape[0]), 1), b=g2, b_strides=element_strides(g2), c=gb,
                        c_strides=(int(gb.shape[0]), element_strides(gb)[0]), blas=True)


def product_call(s, a, b, c, blas_slot):
    """The `Gemm` of product payload ``s`` over refs ``a``, ``b``, ``c``: BLAS (its address in table slot
    ``blas_slot``) for large products and for small ones the register loop cannot take, else the register loop;
    float32 register tiles (`codegen.llvm_gemm_tiled`) as an option where the layout fits them, taken by the
    program where they beat BLAS (`tiled_pays`: a choice in its integers, so the code is the same at every size).
    A column-major ``c`` computes ``c.T = b.T @ a.T``, which every path takes.
    The generic reduction loop those would get instead is several times slower than a library call: 64x64x32 with
    ``b`` strided along its columns (attention's ``q @ k^T``) takes 29 us there and 4.7 us through BLAS."""
    g = Gemm(s["dtype"], s["m"], s["n"], s["k"], a, s["a_strides"], b, s["b_strides"], c, s["c_strides"])
    if g.c_strides[1] != 1 and g.c_strides[0] == 1 and g.n > 1:
        g = replace(g, m=g.n, n=g.m, a=g.b, a_strides=g.b_strides[::-1], b=g.a, b_strides=g.a_strides[::-1],
                    c_strides=g.c_strides[::-1])
    big = g.m * g.n * g.k >= BLAS_MIN_FLOPS or s.get("blas") or not vector_fits(g)
    if big and blas_slot is not None and blas_operands(g) is not None:
        g = replace(g, blas=Ref(blas_slot), blas_int_bits=blas_int_bits(s["dtype"]))
    if tiled_fits(g):
        g = replace(g, tiled=max(split_threads(get_num_threads()), 1))
    return g


def blas_address(dtype):
    """The address of the Fortran-ABI ``sgemm``/``dgemm`` native programs call (see `runtime.host_blas`), or None."""
    fn = gemm_function(dtype)
    return None if fn is None else fn.address


def blas_int_bits(dtype):
    """The integer width of `blas_address`'s function (64 for NumPy's ILP64 OpenBLAS)."""
    fn = gemm_function(dtype)
    return 32 if fn is None else fn.int_bits


def view_of(array):
    """``(root, byte offset of array's first element in root)``."""
    root = root_of(array)
    return root, array.__array_interface__["data"][0] - root.__array_interface__["data"][0]
