"""The 2x2 stride-2 float32 max pool and its gradient as generated functions (`codegen.llvm_maxpool2`): values,
indices and gradients equal torch's (ties, NaN, odd sizes, rows longer than a vector), the same answer split over
threads, and eager calls, CPU graphs and compiled graphs taking them."""
import numpy as np
import pytest
import torch

import jitorch
import jitorch.nn.functional as F
from jitorch.codegen.llvm_maxpool2 import lanes, maxpool2_backward, maxpool2_forward, pool_address
from jitorch.codegen.llvm_objcache import default_cache
from jitorch.codegen.llvm_program import Function, FunctionCall, Ref, compile_program
from jitorch.cpu import CPUGraph, graph

SHAPES = [(1, 1, 2, 2), (2, 3, 6, 10), (3, 2, 7, 9), (2, 2, 4, 4 * lanes() + 2), (1, 2, 28, 28), (2, 1, 3, 2)]


def _ties_and_nan(rng, shape):
    x = rng.integers(0, 3, shape).astype(np.float32)
    x[rng.random(shape) < 0.1] = np.nan
    return x


@pytest.mark.parametrize("shape", SHAPES)
def test_forward_and_backward_equal_torch(shape):
    rng = np.random.default_rng(sum(shape))
    x = _ties_and_nan(rng, shape)
    values, indices = maxpool2_forward(x)
    tx = torch.tensor(x, requires_grad=True)
    tv, ti = torch.nn.functional.max_pool2d(tx, 2, return_indices=True)
    np.testing.assert_array_equal(values, tv.detach().numpy())  # NaN where torch has NaN
    np.testing.assert_array_equal(indices, ti.numpy())
    if shape[2] % 2 == 0 and shape[3] % 2 == 0:  # the gradient function needs tiles that cover the input
        g = rng.standard_normal(values.shape).astype(np.float32)
        tv.backward(torch.tensor(g))
        np.testing.assert_array_equal(maxpool2_backward(g, indices, shape), tx.grad.numpy())


def test_a_split_over_threads_changes_no_bit():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4, 8, 20, 36)).astype(np.float32)
    outs = []
    for split in (0, 2, 3):
        values, indices = np.zeros((4, 8, 10, 18), np.float32), np.zeros((4, 8, 10, 18), np.int64)
        f = Function("maxpool2_forward", lambda: pool_address("forward", default_cache()), 3, (20, 36, 10, 18),
                     4 * 8 * 10, True)
        table = np.array([x.ctypes.data, values.ctypes.data, indices.ctypes.data], np.uint64)
        compile_program([FunctionCall(f, (Ref(0), Ref(1), Ref(2)), split)], default_cache())(table.ctypes.data)
        outs.append((values, indices))
    want = maxpool2_forward(x)
    for values, indices in outs:
        np.testing.assert_array_equal(values, want[0])
        np.testing.assert_array_equal(indices, want[1])


def test_graphs_and_eager_take_the_functions_and_match_torch():
    rng = np.random.default_rng(1)
    x_np = _ties_and_nan(rng, (4, 3, 12, 16))
    g_np = rng.standard_normal((4, 3, 6, 8)).astype(np.float32)
    tx = torch.tensor(x_np, requires_grad=True)
    torch.nn.functional.max_pool2d(tx, 2).backward(torch.tensor(g_np))

    x = jitorch.tensor(x_np, requires_grad=True)
    y = F.max_pool2d(x, 2)  # eager: the lowering's functions run from Python
    y.backward(jitorch.tensor(g_np))
    np.testing.assert_array_equal(x.grad.numpy(), tx.grad.numpy())

    x.grad = None
    gup = jitorch.tensor(g_np)
    cg = CPUGraph()
    with graph(cg):
        F.max_pool2d(x, 2).backward(gup)
    x.grad.zero_()
    cg.replay()
    calls = cg._build().program_calls
    names = sorted(c.function.name for c in calls if isinstance(c, FunctionCall))
    assert names == ["maxpool2_backward", "maxpool2_forward"]
    np.testing.assert_array_equal(x.grad.numpy(), tx.grad.numpy())


def test_eight_lane_functions_are_right_too():
    # AVX2 hosts compile the functions with 8 lanes: the same code at that width runs here.
    rng = np.random.default_rng(8)
    shape = (2, 3, 6, 38)
    x = _ties_and_nan(rng, shape)
    values, indices = maxpool2_forward(x, n=8)
    tx = torch.tensor(x, requires_grad=True)
    tv, ti = torch.nn.functional.max_pool2d(tx, 2, return_indices=True)
    np.testing.assert_array_equal(values, tv.detach().numpy())
    np.testing.assert_array_equal(indices, ti.numpy())
    g = rng.standard_normal(values.shape).astype(np.float32)
    tv.backward(torch.tensor(g))
    np.testing.assert_array_equal(maxpool2_backward(g, indices, shape, n=8), tx.grad.numpy())


def test_eager_calls_split_over_threads_give_the_same_answer():
    from jitorch.codegen.llvm_pool import SPLIT_WORK

    rng = np.random.default_rng(2)
    x_np = _ties_and_nan(rng, (4, 16, 64, 64))
    assert x_np.size >= SPLIT_WORK  # the function asks for the split
    g_np = rng.standard_normal((4, 16, 32, 32)).astype(np.float32)
    answers = []
    before = jitorch.get_num_threads()
    try:
        for threads in (1, 2):
            jitorch.set_num_threads(threads)
            x = jitorch.tensor(x_np, requires_grad=True)
            y = F.max_pool2d(x, 2)
            y.backward(jitorch.tensor(g_np))
            answers.append((y.detach().numpy().copy(), x.grad.numpy().copy()))
    finally:
        jitorch.set_num_threads(before)
    for got, want in zip(answers[1], answers[0]):
        np.testing.assert_array_equal(got, want)
    want_v, want_i = maxpool2_forward(x_np)
    np.testing.assert_array_equal(answers[0][0], want_v)
