"""Fusion round 2: softmax / log_softmax backward rows and epilogues after row ops fused, GELU's ``1 + tanh``
rewrite, the scheduler's kernel-size and input-count limits, contiguous-dimension collapsing and the LLVM loop hints.
Every case proves fused == unfused (eager) and counts the kernels it expects."""
import numpy as np
import pytest
import torch

import jitorch
import jitorch.nn.functional as F
from jitorch._compile import fusion
from jitorch._compile.backend import CompiledGraph
from jitorch._compile.trace import trace
from jitorch._dispatch import apply
from jitorch.codegen.ir import Buffer, Kernel, Store, const, load, op, simplify
from jitorch.codegen.llvm_emit import emit_kernel
from jitorch.ops.nn_fused import LOG_SOFTMAX_BACKWARD, SOFTMAX_BACKWARD

C = 0.7978845608028654


def _graph(fn, *args):
    return CompiledGraph(trace(fn, args, {}).gm)


def _tensor(rng, shape, dtype=np.float32):
    return jitorch.from_numpy((rng.standard_normal(shape) * 2).astype(dtype))


def _kernels(graph):
    return [k for k, _ in graph.steps if k is not None]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(7, 33), (4, 1024), (2, 3, 5), (3, 1)])
@pytest.mark.parametrize("row", [SOFTMAX_BACKWARD, LOG_SOFTMAX_BACKWARD], ids=["softmax", "log_softmax"])
def test_softmax_backward_rows_are_one_two_pass_kernel_with_epilogue(row, shape, dtype):
    rng = np.random.default_rng(0)
    g, x = _tensor(rng, shape, dtype), _tensor(rng, shape, dtype)
    y = x.softmax(-1) if row is SOFTMAX_BACKWARD else F.log_softmax(x, -1)

    def fn(g, y):
        return apply(row, g * 0.5, y, dim=-1) * 3
    graph = _graph(fn, g, y)
    assert graph.kernel_ops == [["mul", row.name, "mul"]]
    (kernel,) = _kernels(graph)
    assert kernel.build(tuple(st for _, st in kernel._slot_views([g._data, y._data]))).phases == 2
    eps = np.finfo(dtype).eps
    np.testing.assert_allclose(graph((g, y)).numpy(), fn(g, y).numpy(), rtol=64 * eps, atol=64 * eps)


@pytest.mark.parametrize("which", ["softmax", "log_softmax"])
def test_compiled_training_softmax_gradients_match_torch(which):
    rng = np.random.default_rng(1)
    xn, gn = rng.standard_normal((6, 40)).astype(np.float32), rng.standard_normal((6, 40)).astype(np.float32)
    fn = (lambda v: (v * 2).softmax(-1)) if which == "softmax" else (lambda v: F.log_softmax(v * 2, -1))
    x = jitorch.from_numpy(xn.copy()).requires_grad_()
    jitorch.compile(fn)(x).backward(jitorch.from_numpy(gn))
    tx = torch.from_numpy(xn.copy()).requires_grad_()
    tfn = (lambda v: (v * 2).softmax(-1)) if which == "softmax" else (lambda v: torch.log_softmax(v * 2, -1))
    tfn(tx).backward(torch.from_numpy(gn))
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-5, atol=1e-5)


def test_epilogues_after_row_ops_join_their_kernel():
    rng = np.random.default_rng(2)
    x, y = _tensor(rng, (9, 17)), _tensor(rng, (9, 17))
    for fn, ops in [(lambda a, b: (a * 3).softmax(-1) + b, ["mul", "softmax", "add"]),
                    (lambda a, b: F.log_softmax(a, -1).exp() * b, ["log_softmax", "exp", "mul"])]:
        graph = _graph(fn, x, y)
        assert graph.kernel_ops == [ops]
        np.testing.assert_allclose(graph((x, y)).numpy(), fn(x, y).numpy(), rtol=1e-5, atol=1e-6)


def _gelu(x):
    return 0.5 * x * (1 + jitorch.tanh(C * (x + 0.044715 * x * x * x)))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_gelu_one_plus_tanh_becomes_one_exp(dtype):
    rng = np.random.default_rng(3)
    x = jitorch.from_numpy(np.concatenate([rng.standard_normal(5000) * 4, [-30, -9, -5, 0, 5, 9, 30, np.inf,
                                                                           -np.inf, np.nan]]).astype(dtype))
    graph = _graph(_gelu, x)
    assert len(graph.kernel_ops) == 1
    (kernel,) = _kernels(graph)
    ops = {e.op for s in kernel.stores for e in Kernel(kernel.shape, (), (), 0).nodes([s])}
    assert "tanh" not in ops and "exp" in ops
    got, want = graph((x,)).numpy(), _gelu(x).numpy()
    # Both are within a few ulp of max(|x|, 1) of the exact value; 1 + tanh cancels in the eager form.
    np.testing.assert_allclose(got, want, rtol=1e-5 if dtype == np.float32 else 1e-12,
                               atol=8 * np.finfo(dtype).eps)
    ref = torch.nn.functional.gelu(torch.from_numpy(x.numpy()), approximate="tanh").numpy()
    np.testing.assert_allclose(got, ref, rtol=1e-5 if dtype == np.float32 else 1e-12,
                               atol=8 * np.finfo(dtype).eps)


def test_one_plus_tanh_is_kept_when_tanh_is_read_elsewhere():
    x = load(0, "f32")
    t = op("tanh", op("mul", const(0.5, "f32"), x))
    stores = simplify([Store(1, op("add", const(1, "f32"), t)), Store(2, t)])
    assert stores[0].value.op == "add" and stores[1].value == t
    # A constant whose double overflows is not folded into the exponent.
    big = op("tanh", op("mul", const(3e38, "f32"), x))
    (s,) = simplify([Store(1, op("add", big, const(1, "f32")))])
    assert s.value.op == "div" and s.value.args[1].args[1].args[0].args[1] == big.args[0]


@pytest.mark.parametrize("limit", ["nodes", "inputs"])
def test_groups_split_at_the_size_and_input_limits(monkeypatch, limit):
    monkeypatch.setattr(fusion, "MAX_NODES" if limit == "nodes" else "MAX_INPUTS", 6)
    rng = np.random.default_rng(4)
    xs = tuple(_tensor(rng, (33,)) for _ in range(12))

    def fn(*xs):
        acc = xs[0]
        for v in xs[1:]:
            acc = acc * 0.5 + v
        return acc
    graph = _graph(fn, *xs)
    sizes = [len(ops) for ops in graph.kernel_ops]
    inputs = [len(u.inputs) for k, u in graph.steps if k is not None]
    assert sum(sizes) == 22 and len(sizes) > 1
    assert max(sizes if limit == "nodes" else inputs) <= 6
    np.testing.assert_allclose(graph(xs).numpy(), fn(*xs).numpy(), rtol=1e-6)


def test_contiguous_dimensions_collapse_and_strided_ones_do_not():
    rng = np.random.default_rng(5)
    x = _tensor(rng, (4, 5, 6))
    cases = [(lambda v: (v * 2).exp(), 1), (lambda v: v[:, :, :3] * 2 + 1, 2), (lambda v: v.transpose(0, 2) * 2, 3)]
    for fn, dims in cases:
        graph = _graph(fn, x)
        assert len(graph.kernel_ops) == 1
        got = graph((x,))
        (kernel,) = _kernels(graph)
        (ck,) = kernel.variants.values()
        assert len(ck.kernel.shape) == dims
        np.testing.assert_allclose(got.numpy(), fn(x).numpy(), rtol=1e-6)


def test_loop_hints_in_emitted_llvm():
    row = Kernel((8, 1024), (Buffer("f32", (1024, 1)), Buffer("f32", (1, 0))), (Store(1, load(0, "f32"), "sum"),), 1)
    assert "llvm.loop" not in emit_kernel(row)  # row loops carry no hints (LLVM bugs: see llvm_emit's notes)
    cheap = Kernel((64,), (Buffer("f32", (1,)), Buffer("f32", (1,))), (Store(1, op("neg", load(0, "f32"))),))
    costly = Kernel((64,), (Buffer("f32", (1,)), Buffer("f32", (1,))), (Store(1, op("exp", load(0, "f32"))),))
    assert "llvm.loop" not in emit_kernel(cheap) and "interleave.count" in emit_kernel(costly)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64])
@pytest.mark.parametrize("case", ["last_dim", "all", "keepdim_epilogue", "after_softmax_stats", "transposed"])
def test_argmax_and_argmin_fuse_with_their_prologue_and_match_torch(case, dtype):
    rng = np.random.default_rng(6)
    data = (rng.standard_normal((6, 7, 9)) * 3).astype(dtype)
    if dtype != np.int64:
        data[1, 2, [3, 5]] = np.nan
    x = jitorch.from_numpy(data)
    fns = {"last_dim": (lambda v: (v * 2).argmax(-1), ["mul", "argmax"]),
           "all": (lambda v: (v + 1).argmin(), ["add", "argmin"]),
           "keepdim_epilogue": (lambda v: (v * v).argmax(-1, keepdim=True) + 1, ["mul", "argmax", "add"]),
           "after_softmax_stats": (lambda v: (v - v.amax(-1, keepdim=True)).argmin(-1), ["amax", "sub", "argmin"]),
           "transposed": (lambda v: v.transpose(1, 2).argmax(), ["argmax"])}
    fn, ops = fns[case]
    graph = _graph(fn, x)
    assert graph.kernel_ops == [ops]
    got, want = graph((x,)), fn(x)
    assert got.dtype == jitorch.int64 and got.shape == want.shape
    np.testing.assert_array_equal(got.numpy(), want.numpy())
    torch_fns = {"last_dim": lambda v: (v * 2).argmax(-1), "all": lambda v: (v + 1).argmin(),
                 "keepdim_epilogue": lambda v: (v * v).argmax(-1, keepdim=True) + 1,
                 "after_softmax_stats": lambda v: (v - v.amax(-1, keepdim=True)).argmin(-1),
                 "transposed": lambda v: v.transpose(1, 2).argmax()}
    np.testing.assert_array_equal(got.numpy(), torch_fns[case](torch.from_numpy(data)).numpy())


def test_argmax_over_a_leading_dim_or_empty_rows_stays_eager():
    x = _tensor(np.random.default_rng(7), (5, 4))
    assert _graph(lambda v: (v * 2).argmax(0), x).kernel_ops == [["mul"]]
    empty = jitorch.zeros((3, 0))
    with pytest.raises(IndexError):
        jitorch.compile(lambda v: (v + 1).argmax(-1))(empty)


def test_loop_metadata_ids_of_kernels_pasted_into_one_module_are_distinct():
    import re

    costly = Kernel((64,), (Buffer("f32", (1,)), Buffer("f32", (1,))), (Store(1, op("exp", load(0, "f32"))),))
    ids = [set(re.findall(r"^!(\d+) =", emit_kernel(costly, name), re.M))
           for name in ("k0", "k1", "k10", "a_long_name")]
    assert all(ids) and sum(map(len, ids)) == len(set().union(*ids))


def test_parallel_for_hands_out_every_chunk_once_from_a_shared_queue():
    import threading

    from jitorch.runtime.threads import CHUNKS_PER_THREAD, parallel_for

    seen, who = [], set()

    def fn(a, b):
        seen.extend(range(a, b))
        who.add(threading.current_thread().name)
    parallel_for(fn, 1000, grain=10, num_threads=3)
    assert sorted(seen) == list(range(1000)) and len(who) >= 1
    pieces = []
    parallel_for(lambda a, b: pieces.append((a, b)), 1000, grain=10, num_threads=3)
    assert len(pieces) == 3 * CHUNKS_PER_THREAD
    with pytest.raises(ZeroDivisionError):
        parallel_for(lambda a, b: 1 / 0 if a else None, 100, num_threads=2)


@pytest.mark.parametrize("fn", [lambda v: v.softmax(-1), lambda v: F.log_softmax(v, -1)], ids=["softmax", "log"])
def test_softmax_shift_skips_nan_but_rows_with_nan_or_inf_match_eager(fn):
    data = np.random.default_rng(8).standard_normal((6, 40)).astype(np.float32)
    data[1, 7] = np.nan  # one nan: the whole row is nan
    data[2] = np.nan
    data[3] = -np.inf  # every element -inf: nan (-inf - -inf)
    data[4, 3] = np.inf  # +inf: nan (inf - inf) where it is, 0 elsewhere... as eager says
    data[5, :5] = -np.inf  # some -inf: exactly 0
    x = jitorch.from_numpy(data)
    graph = _graph(fn, x)
    assert len(graph.kernel_ops) == 1
    np.testing.assert_allclose(graph((x,)).numpy(), fn(x).numpy(), rtol=1e-5, atol=1e-7, equal_nan=True)
    ref = (torch.softmax if "softmax" in graph.kernel_ops[0] else torch.log_softmax)(torch.from_numpy(data), -1)
    np.testing.assert_allclose(graph((x,)).numpy(), ref.numpy(), rtol=1e-5, atol=1e-7, equal_nan=True)


def test_maxnum_reduction_is_the_max_of_rows_without_nan_in_llvm_interpreter_and_cuda():
    # With a nan in the row maxnum's value is unspecified (LLVM's vectorized ``nnan`` max): only softmax's shift
    # uses it, whose row a nan makes nan anyway (next test).
    from jitorch.codegen import interp, nvrtc
    from jitorch.codegen.cuda_emit import emit_cuda
    from jitorch.codegen.llvm_compile import compile_kernel

    rng = np.random.default_rng(0)
    x = rng.standard_normal((5, 67))
    x[1] = -np.inf
    x[2, 7] = np.inf
    k = Kernel((5, 67), (Buffer("f64", (67, 1)), Buffer("f64", (1, 0))), (Store(1, load(0, "f64"), "maxnum"),), 1)
    for run in (compile_kernel(k).run, lambda arrays: interp.run(k, arrays)):
        out = np.zeros(5)
        run([x.ravel(), out])
        np.testing.assert_array_equal(out, x.max(1))
    source = emit_cuda(k, "mx")
    assert "fmax(" in source and nvrtc.compile(source, "mx", arch="sm_80").log == ""


@pytest.mark.parametrize("where", [0, 31, 63, 64, 99])
def test_compiled_softmax_and_log_softmax_of_a_row_with_nan_are_nan_as_torchs(where):
    rng = np.random.default_rng(where)
    x = rng.standard_normal((4, 100)).astype(np.float32)
    x[1, where] = np.nan
    x[2] = np.nan
    x[3, where] = np.inf
    for name in ("softmax", "log_softmax"):
        want = getattr(torch, name)(torch.tensor(x), -1).numpy()
        got = jitorch.compile(lambda t, name=name: getattr(jitorch, name)(t, -1) * 1)(jitorch.tensor(x)).numpy()
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, equal_nan=True)
        assert np.isnan(got[1:3]).all()
