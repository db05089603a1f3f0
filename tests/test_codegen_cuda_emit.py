"""CUDA emitter: every kind of IR kernel compiles with NVRTC (sm_80 and sm_90, no warnings), golden sources stay
put, and the index arithmetic the kernels run is checked against NumPy's strides (there is no GPU to run them)."""
from __future__ import annotations

import doctest
import itertools
import os
import pathlib
import re

import numpy as np
import pytest
from codegen_helpers import random_view, strided

from jitorch.codegen import cuda_emit, cuda_index, cuda_ops, nvrtc
from jitorch.codegen.cuda_emit import UnsupportedPrimitive, emit_cuda, index_plans, strategy
from jitorch.codegen.cuda_index import IndexPlan, index64_needed
from jitorch.codegen.ir import (BINARY, COMPARE, DTYPES, TERNARY, UNARY, Buffer, Expr, Kernel, Store, collapse, const,
                                load, op)

GOLDEN = pathlib.Path(__file__).parent / "golden"


def _out(dtype, shape, reduce_axes=0):
    kept = shape[:len(shape) - reduce_axes]
    return Buffer(dtype, tuple(int(np.prod(kept[d + 1:])) for d in range(len(kept))) + (0,) * reduce_axes)


def _contig(dtype, shape):
    return Buffer(dtype, tuple(int(np.prod(shape[d + 1:])) for d in range(len(shape))))


def _all_primitives(dt):
    """One store per float primitive family, all on a broadcast + sliced input pair."""
    a, b = load(0, dt), load(1, dt)
    unary = [op(u, a) for u in UNARY if u != "not"]
    binary = [op(n, a, b) for n in BINARY if n not in ("and", "or")]
    ternary = [op(n, a, b, op("neg", a)) for n in TERNARY]
    total = unary[0]
    for e in unary[1:] + binary + ternary:
        total = op("add", total, e)
    flags = [op(c, a, b) for c in COMPARE]
    flag = op("or", op("and", flags[0], op("not", flags[1])), flags[2])
    for f in flags[3:]:
        flag = op("or", flag, f)
    chosen = op("where", flag, total, op("cast", op("cast", a, dtype="i32"), dtype=dt))
    return chosen, op("max", flag, op("eq", a, const(float("nan"), dt)))


def _primitive_kernel(dt):
    shape = (6, 5)
    value, flag = _all_primitives(dt)
    bufs = (Buffer(dt, (0, 1)), Buffer(dt, (-2, 12), 11), _contig(dt, shape), _contig("bool", shape))
    return Kernel(shape, bufs, (Store(2, value), Store(3, flag)))


def _casts_kernel():
    """Every dtype cast to every other, each summed into an f64 output through a cast back."""
    shape, names = (17,), list(DTYPES)
    bufs = tuple(Buffer(dt, (1,)) for dt in names) + (Buffer("f64", (1,)),)
    total = const(0, "f64")
    for (i, src), dst in itertools.product(enumerate(names), names):
        total = op("add", total, op("cast", op("cast", load(i, src), dtype=dst), dtype="f64"))
    return Kernel(shape, bufs, (Store(len(names), total),))


def _int_bool_kernel():
    a64 = op("cast", load(0, "i32"), dtype="i64")
    e = op("where", op("ge", a64, load(1, "i64")), op("mul", op("abs", a64), const(-2**63, "i64")),
           op("max", op("neg", load(1, "i64")), op("sub", a64, const(7, "i64"))))
    i32 = op("min", op("abs", load(0, "i32")), op("add", load(0, "i32"), const(-2**31, "i32")))
    flag = op("or", op("eq", a64, load(1, "i64")), op("not", op("lt", a64, const(0, "i64"))))
    bufs = (Buffer("i32", (1,)), Buffer("i64", (1,)), Buffer("i64", (1,)), Buffer("bool", (1,)), Buffer("i32", (1,)))
    return Kernel((37,), bufs, (Store(2, e), Store(3, flag), Store(4, i32)))


def _reduction(reduce, dt, reduced, shape=None, strides=None):
    shape = shape or (5, 9, reduced)
    strides = strides or (reduced, 5 * reduced, 1)
    x = load(0, dt)
    value = op("exp", x) if dt in ("f32", "f64") and reduce == "sum" else x
    return Kernel(shape, (Buffer(dt, strides), _out(dt, shape, 2)), (Store(1, value, reduce),), 2)


def _elementwise_views(dtype, case):
    """The LLVM backend's elementwise table: four expressions over contiguous/transposed/sliced/broadcast views."""
    shapes = [((7,), "contiguous"), ((3, 5), "transposed"), ((4, 3, 2), "sliced"), ((5, 6), "broadcast"),
              ((0, 3), "sliced"), ((1,), "broadcast"), ((33, 17), "sliced"), ((2, 3, 1, 5), "transposed")]
    rng = np.random.default_rng(case)
    shape, kind = shapes[case]
    dt = "f32" if dtype == np.float32 else "f64"
    a, b, c = (load(i, dt) for i in range(3))
    exprs = [op("add", op("mul", a, b), c),
             op("div", op("max", a, const(0, dt)), op("add", op("abs", b), const(1, dt))),
             op("where", op("lt", a, b), op("neg", c), op("sub", a, b)),
             op("min", op("sqrt", op("abs", a)), op("rsqrt", op("add", op("mul", b, b), const(1, dt))))]
    views = [random_view(rng, shape, dtype, kind if i == case % 3 else "contiguous") for i in range(3)]
    bufs = tuple(strided(base, v, shape) for base, v in views) + (_out(dt, shape),)
    return Kernel(shape, bufs, (Store(3, exprs[case % 4]),))


BIG = 2**31 + 5
KERNELS = {
    **{f"elementwise_{np.dtype(t).name}_{c}": _elementwise_views(t, c) for t in (np.float32, np.float64)
       for c in range(8)},
    "all_primitives_f32": _primitive_kernel("f32"),
    "all_primitives_f64": _primitive_kernel("f64"),
    "casts": _casts_kernel(),
    "int_and_bool": _int_bool_kernel(),
    **{f"reduce_{r}_{dt}_{n}": _reduction(r, dt, n) for r in ("sum", "prod", "max", "min")
       for dt in ("f32", "f64", "i32", "i64", "bool") for n in (7, 300)},
    "reduce_empty_axis": Kernel((1, 0), (Buffer("f32", (0, 1)),) + (Buffer("f32", (0, 0)),) * 4,
                                tuple(Store(i + 1, load(0, "f32"), r) for i, r in enumerate(["sum", "prod", "max",
                                                                                             "min"])), 1),
    "reduce_two_stores_negative_strides": Kernel(
        (8, 100), (Buffer("f64", (-1, 8), 7), Buffer("f64", (1, 0)), Buffer("bool", (1, 0))),
        (Store(1, op("tanh", load(0, "f64")), "max"), Store(2, op("gt", load(0, "f64"), const(0, "f64")), "sum")), 1),
    "reduce_full_broadcast_input": Kernel((4, 500), (Buffer("f32", (1, 0)), Buffer("f32", (1, 0))),
                                          (Store(1, op("mul", load(0, "f32"), const(2, "f32")), "sum"),), 1),
    "empty_elementwise": Kernel((0, 3), (Buffer("f32", (3, 1)), Buffer("f32", (3, 1))), (Store(1, load(0, "f32")),)),
    "index64_elementwise": Kernel((BIG,), (Buffer("f32", (1,)), Buffer("f32", (1,))),
                                  (Store(1, op("erf", load(0, "f32"))),)),
    "index64_transposed": Kernel((2**16, 2**15 + 1), (Buffer("f64", (1, 2**16)), _contig("f64", (2**16, 2**15 + 1))),
                                 (Store(1, op("sigmoid", load(0, "f64"))),)),
    "index64_by_offset_only": Kernel((10,), (Buffer("f32", (1,), 2**31), Buffer("f32", (1,))),
                                     (Store(1, load(0, "f32")),)),
    "index64_block_reduce": Kernel((2**16, 2**16), (Buffer("f32", (2**16, 1)), Buffer("f32", (1, 0))),
                                   (Store(1, load(0, "f32"), "min"),), 1),
    "index64_full_reduce": Kernel((BIG,), (Buffer("i64", (1,)), Buffer("i64", (0,))),
                                  (Store(1, load(0, "i64"), "sum"),), 1),
}
INDEX64 = {name for name in KERNELS if name.startswith("index64")}


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("name", list(KERNELS))
def test_every_kernel_compiles_without_warnings(name, arch):
    kernel = KERNELS[name]
    source = emit_cuda(kernel, name)
    result = nvrtc.compile(source, name, arch=arch)
    assert result.log == "", f"NVRTC warnings:\n{result.log}\n{nvrtc.number_lines(source)}"
    assert name in nvrtc.cubin_function_symbols(result.cubin)
    width = 64 if name in INDEX64 else 32
    assert f"{width}-bit indices" in source and ("for (long long " in source) == (width == 64)
    assert source.count("__restrict__") == len(kernel.buffers)
    assert f"{strategy(kernel).replace('_', ' ')} kernel" in source


def test_reductions_pick_their_strategy_and_use_shuffles():
    assert strategy(KERNELS["reduce_sum_f32_7"]) == "thread_reduce"
    block = emit_cuda(KERNELS["reduce_max_f32_300"], "k")
    assert strategy(KERNELS["reduce_max_f32_300"]) == "block_reduce"
    assert "__shfl_down_sync" in block and "(v != v || v > other)" in block  # NaN-propagating max
    assert "__shfl_down_sync" not in emit_cuda(KERNELS["reduce_max_f32_7"], "k")
    assert "jt_block_sum_bool" in emit_cuda(KERNELS["reduce_two_stores_negative_strides"], "k")


def test_accurate_math_functions_are_used():
    f32, f64 = emit_cuda(KERNELS["all_primitives_f32"], "k"), emit_cuda(KERNELS["all_primitives_f64"], "k")
    for fn in ("expf", "logf", "tanhf", "erff", "sqrtf", "rsqrtf", "sinf", "cosf", "powf", "fabsf", "fmodf", "fmaf"):
        assert fn + "(" in f32 and fn[:-1] + "(" in f64 and fn + "(" not in f64
    assert "__expf" not in f32 and "const bool" in f32


def test_also_compiles_with_minimal_headers():
    for name in ("all_primitives_f32", "casts", "reduce_two_stores_negative_strides", "index64_block_reduce"):
        nvrtc.compile_cubin(emit_cuda(KERNELS[name], name), name, arch=90, options=("--minimal",))


def test_unsupported_primitive_is_named():
    with pytest.raises(UnsupportedPrimitive, match="'frobnicate'"):
        emit_cuda(Kernel((4,), (Buffer("f32", (1,)),) * 2, (Store(1, Expr("frobnicate", (load(0, "f32"),), "f32")),)))
    with pytest.raises(UnsupportedPrimitive, match="'neg' is not supported on bool"):
        emit_cuda(Kernel((4,), (Buffer("bool", (1,)),) * 2, (Store(1, op("neg", load(0, "bool"))),)))
    with pytest.raises(ValueError, match="C identifier"):
        emit_cuda(KERNELS["casts"], "not a name")


def test_constants_are_exact():
    for dt, v in [("f32", 0.1), ("f32", 3e38), ("f32", 1e-45), ("f64", 0.1), ("f64", -1e-310), ("f64", 1e300)]:
        text = cuda_ops.c_const(float(DTYPES[dt](v)), dt).strip("()").rstrip("f")
        assert DTYPES[dt](text) == DTYPES[dt](v)
    assert cuda_ops.c_const(-0.0, "f32") == "(-0.0f)" and cuda_ops.c_const(-2**63, "i64").endswith("LL - 1)")


# Golden sources: regenerate with JITORCH_UPDATE_GOLDEN=1 after a deliberate change, then review the diff.
GOLDEN_KERNELS = {
    "cuda_sliced_where": _elementwise_views(np.float32, 2),
    "cuda_row_sum": Kernel((64, 1000), (Buffer("f32", (1000, 1)), Buffer("f32", (1, 0))),
                           (Store(1, op("exp", load(0, "f32")), "sum"),), 1),
    "cuda_small_max_f64": KERNELS["reduce_max_f64_7"],
}


@pytest.mark.parametrize("name", list(GOLDEN_KERNELS))
def test_golden_sources(name):
    source, path = emit_cuda(GOLDEN_KERNELS[name], name), GOLDEN / f"{name}.cu"
    if os.environ.get("JITORCH_UPDATE_GOLDEN"):
        GOLDEN.mkdir(exist_ok=True)
        path.write_text(source)
    assert source == path.read_text()


# ---- index arithmetic: the plans the emitter renders, against NumPy's strides ----

def _random_strided(rng, ndim):
    """A flat arange base (so each element *is* its offset) and a random view: steps of any sign, transposes,
    broadcast dimensions and an offset."""
    big = tuple(int(rng.integers(1, 7)) for _ in range(ndim))
    base = np.arange(int(np.prod(big)) + 3, dtype=np.int64)
    arr = base[int(rng.integers(0, 3)):][:int(np.prod(big))].reshape(big)
    index = tuple(slice(None, None, int(rng.choice([-2, -1, 1, 2]))) for _ in range(ndim))
    view = arr[index].transpose(rng.permutation(ndim))
    shape = tuple(1 if rng.random() < 0.2 else s for s in view.shape)
    view = view[tuple(slice(0, s) for s in shape)]
    target = tuple(int(rng.integers(2, 4)) if s == 1 and rng.random() < 0.5 else s for s in shape)
    return base, view, target


def _c_to_python(lines, env):
    """Execute the emitted C declarations as Python: the exact text in the kernel, not a re-derivation."""
    for line in lines:
        m = re.fullmatch(r"const (?:unsigned int|long long) (\w+) = (.*);", line)
        assert m, line
        expr = re.sub(r"(\d+)(u|LL)\b", r"\1", m.group(2)).replace("/", "//")
        env[m.group(1)] = eval(expr, {}, env)
    return env


@pytest.mark.parametrize("seed", range(40))
def test_elementwise_offsets_match_numpy_strides(seed):
    rng = np.random.default_rng(seed)
    base, view, shape = _random_strided(rng, int(rng.integers(1, 5)))
    out = _contig("i64", shape)
    kernel = Kernel(shape, (strided(base, view, shape), out), (Store(1, load(0, "i64")),))
    plan, = index_plans(kernel)
    assert not plan.index64
    expect = np.broadcast_to(view, shape).ravel()
    source = emit_cuda(kernel, "k")
    assert all(line in source for line in plan.c_lines("i"))
    for flat in range(expect.size):
        got = plan.evaluate(flat)  # raises OverflowError if an unsigned intermediate would wrap
        assert got[0] == expect[flat] and got[1] == flat
        env = _c_to_python(plan.c_lines("i"), {"i": flat})
        assert env["o0"] == expect[flat] and env["o1"] == flat


@pytest.mark.parametrize("seed", range(30))
def test_reduction_offsets_match_numpy_strides(seed):
    rng = np.random.default_rng(100 + seed)
    base, view, shape = _random_strided(rng, int(rng.integers(2, 5)))
    red = int(rng.integers(1, len(shape)))
    kernel = Kernel(shape, (strided(base, view, shape), _out("i64", shape, red)), (Store(1, load(0, "i64"), "sum"),),
                    red)
    outer, inner = index_plans(kernel)
    n_out, n_red = int(np.prod(outer.shape)), int(np.prod(inner.shape))
    assert collapse(kernel).shape == outer.shape + inner.shape
    # the view as (output point, reduced point) in C order: what the flat p and r of the kernel mean
    expect = np.broadcast_to(view, shape).reshape(n_out, n_red)
    for p in range(n_out):
        po = outer.evaluate(p)
        assert po[1] == p
        env = _c_to_python(outer.c_lines("p"), {"p": p})
        for r in range(n_red):
            got = inner.evaluate(r, {f"po{b}": po[b] for b in po})[0]
            assert got == expect[p, r] == _c_to_python(inner.c_lines("r"), dict(env, r=r))["ro0"]


def test_index_width_threshold_and_64_bit_offsets():
    assert not index64_needed((2**31 - 1,), [(1,)], [0]) and index64_needed((2**31,), [(1,)], [0])
    assert index64_needed((4,), [(1,)], [2**31 - 3]) and not index64_needed((4,), [(1,)], [2**31 - 4])
    shape, strides = (2**16, 2**15 + 1), (1, 2**16)
    plan = IndexPlan(shape, (strides,), (5,), (0,), True)
    rng = np.random.default_rng(0)
    for flat in list(rng.integers(0, 2**31 + 2**16, 50)) + [0, 2**31 + 2**16 - 1]:
        coords = np.unravel_index(int(flat), shape)
        assert plan.evaluate(int(flat))[0] == 5 + sum(int(c) * s for c, s in zip(coords, strides))
    with pytest.raises(OverflowError):
        IndexPlan(shape, (strides,), (5,), (0,), False).evaluate(2**31 + 7)


def test_doctests():
    for module in (cuda_emit, cuda_index, cuda_ops):
        assert doctest.testmod(module).failed == 0
