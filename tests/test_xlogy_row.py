"""``xlogy`` and ``special.xlog1py`` as op-table rows (`jitorch.ops.xlogy_ops`) against torch: values (x == 0 gives
0 unless y is NaN), promotion (integers to the default float, half types), Python-number operands, broadcasting,
``out=``, in-place ``xlogy_``, gradients with random upstream gradients (torch's masks at x == 0, inf and nan where
torch has them), float64 gradcheck/gradgradcheck, grad_fn names, fusion in compiled graphs."""
import math

import numpy as np
import pytest
import torch

import jitorch
from helpers import assert_same, check_op, gradcheck_op, gradgradcheck_op, make_array, tol_for
from jitorch.ops import OPS
from jitorch.ops.table import validate_row

INF, NAN = math.inf, math.nan
# Every edge torch's kernel and derivative formulas distinguish: x == 0 with y <= 0, y == inf, y nan, tiny y, -0.0.
EDGE_X = [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0, -1.0, 2.0, 0.0, NAN, 3.0, -0.0, 0.0, 0.5, -2.0]
EDGE_Y = [0.0, -1.0, INF, -INF, NAN, 2.0, 0.0, 0.0, -2.0, 1e-300, 1.0, INF, 3.0, -0.5, -1.0, -0.999]

OPS_UNDER_TEST = {"xlogy": (jitorch.xlogy, torch.xlogy), "xlog1py": (jitorch.special.xlog1py, torch.special.xlog1py)}


@pytest.mark.parametrize("name", ["xlogy", "special_xlog1py"])
def test_rows_fill_every_column(name):
    assert validate_row(OPS[name]) is OPS[name]


@pytest.mark.parametrize("op", list(OPS_UNDER_TEST))
def test_edge_values_and_gradients_match_torch(op):
    jt, th = OPS_UNDER_TEST[op]
    x, y = np.array(EDGE_X), np.array(EDGE_Y)
    check_op(jt, th, [x, y], atol=0, rtol=1e-14, seed=3)


@pytest.mark.parametrize("op", list(OPS_UNDER_TEST))
def test_edge_gradients_with_graph_match_torch(op):
    # The x gradient at x == 0 and y == inf is inf, the y gradient at x == 0 and y == 0 is nan (the old composite
    # gave 0 for both); second derivatives through the formulas match too.
    # (y = 1e-300 left out: the second derivative in y goes through div's backward, whose -g * x / (y * y)
    # underflows to 0 / 0 where ATen's -g * ((x / y) / y) gives 0)
    jt, th = OPS_UNDER_TEST[op]
    edge_y = [1e-100 if v == 1e-300 else v for v in EDGE_Y]
    g = np.random.default_rng(1).standard_normal(len(EDGE_X))
    g[1] = 0.0
    h = np.random.default_rng(2).standard_normal(len(EDGE_X))
    results = []
    for lib, fn in ((jitorch, jt), (torch, th)):
        x = lib.tensor(EDGE_X, dtype=lib.float64, requires_grad=True)
        y = lib.tensor(edge_y, dtype=lib.float64, requires_grad=True)
        gx, gy = lib.autograd.grad(fn(x, y), (x, y), lib.tensor(g), create_graph=True)
        (gyx, gyy) = lib.autograd.grad(gy, (x, y), lib.tensor(h))
        (gxy,) = lib.autograd.grad(gx, y, lib.tensor(h))
        results.append([t.detach() for t in (gx, gy, gyx, gyy, gxy)])
    for what, a, b in zip(("gx", "gy", "d2/dydx", "d2/dy2", "d2/dxdy"), *results):
        assert_same(a, b, rtol=1e-13, what=what)
    if op == "xlogy":
        assert results[0][0][2].item() == INF and math.isnan(results[0][1][0].item())


@pytest.mark.parametrize("op", list(OPS_UNDER_TEST))
@pytest.mark.parametrize("scalar", [0.0, -1.0, -2.0, NAN, 2.0, INF, 3])
def test_python_number_operands_match_torch(op, scalar):
    # torch's Scalar overloads: a number y masks every x == 0 unless y is above the log's pole (y > 0, y > -1);
    # a number x differentiates in y only.
    jt, th = OPS_UNDER_TEST[op]
    x, y = np.array(EDGE_X), np.array(EDGE_Y)
    check_op(lambda a: jt(a, scalar), lambda a: th(a, scalar), [x], atol=0, rtol=1e-14, seed=4)
    check_op(lambda b: jt(scalar, b), lambda b: th(scalar, b), [y], atol=0, rtol=1e-14, seed=5)


@pytest.mark.parametrize("op", list(OPS_UNDER_TEST))
def test_grad_fn_names_follow_torch_overloads(op):
    jt, th = OPS_UNDER_TEST[op]
    names = []
    for lib, fn in ((jitorch, jt), (torch, th)):
        a = lib.tensor([0.5, 2.0], requires_grad=True)
        names.append([type(r.grad_fn).__name__ for r in (fn(a, a), fn(2.0, a), fn(a, 2.0))])
    assert names[0] == names[1]


@pytest.mark.parametrize("op", list(OPS_UNDER_TEST))
@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "bfloat16"])
@pytest.mark.parametrize("layout", ["contiguous", "transposed", "sliced"])
def test_random_values_and_gradients_match_torch(op, dtype, layout):
    jt, th = OPS_UNDER_TEST[op]
    rng = np.random.default_rng(7)
    x = make_array((6, 40), dtype, rng)
    x[:, ::5] = 0
    y = make_array((6, 40), dtype, rng, low=-0.9 if op == "xlog1py" else 0.01, high=6.0)
    atol, rtol = tol_for(dtype)
    check_op(jt, th, [x, y], atol=atol, rtol=rtol, layout=layout, seed=11)


@pytest.mark.parametrize("op", list(OPS_UNDER_TEST))
def test_broadcasting_and_mixed_dtypes_match_torch(op):
    jt, th = OPS_UNDER_TEST[op]
    rng = np.random.default_rng(8)
    x = make_array((4, 1, 5), "float32", rng)
    y = make_array((3, 1), "float64", rng, low=0.1, high=4.0)
    check_op(jt, th, [x, y], atol=1e-6, rtol=1e-6, seed=12)
    x16 = make_array((2, 3), "float16", rng)
    y0d = np.array(2.5)  # a 0-d float64 tensor does not widen a float16 one
    check_op(jt, th, [x16, y0d], atol=2e-3, rtol=2e-3, seed=13)


@pytest.mark.parametrize("op", list(OPS_UNDER_TEST))
@pytest.mark.parametrize("dtypes", [("int64", "int64"), ("int32", "float32"), ("bool", "uint8"), ("int8", "float64")])
def test_integer_and_bool_inputs_promote_to_float(op, dtypes):
    jt, th = OPS_UNDER_TEST[op]
    rng = np.random.default_rng(9)
    x = make_array((3, 4), dtypes[0], rng, low=-2, high=3)
    y = make_array((3, 4), dtypes[1], rng, low=0, high=5)
    check_op(jt, th, [x, y], atol=1e-6, rtol=1e-6, grad=False)
    check_op(lambda a: jt(a, 3), lambda a: th(a, 3), [x], atol=1e-6, rtol=1e-6, grad=False)


@pytest.mark.parametrize("op", list(OPS_UNDER_TEST))
def test_out_argument_matches_torch(op):
    jt, th = OPS_UNDER_TEST[op]
    x, y = np.array(EDGE_X, dtype=np.float32), np.array(EDGE_Y, dtype=np.float32)
    j_out, t_out = jitorch.empty(len(x), dtype=jitorch.float64), torch.empty(len(x), dtype=torch.float64)
    assert jt(jitorch.tensor(x), jitorch.tensor(y), out=j_out) is j_out
    th(torch.tensor(x), torch.tensor(y), out=t_out)
    assert_same(j_out, t_out, rtol=1e-6)
    with pytest.raises(RuntimeError, match="can't be cast"):
        jt(jitorch.tensor(x), jitorch.tensor(y), out=jitorch.empty(len(x), dtype=jitorch.int64))
    with pytest.raises(RuntimeError, match="automatic differentiation"):
        jt(jitorch.tensor(x, requires_grad=True), jitorch.tensor(y), out=jitorch.empty(len(x)))


def test_inplace_xlogy_matches_torch_and_records_its_node():
    x, y = np.array(EDGE_X), np.array(EDGE_Y)
    g = np.random.default_rng(10).standard_normal(len(x))
    grads = []
    for lib in (jitorch, torch):
        a = lib.tensor(x, requires_grad=True)
        b = lib.tensor(y, requires_grad=True)
        c = a.clone()
        assert c.xlogy_(b) is c and type(c.grad_fn).__name__ == "XlogyBackward0"
        c.backward(lib.tensor(g))
        grads.append((c.detach(), a.grad, b.grad))
    for what, a, b in zip(("value", "x grad", "y grad"), *grads):
        assert_same(a, b, rtol=1e-14, what=what)
    with pytest.raises(RuntimeError, match="can't be cast to the desired output type Long"):
        jitorch.tensor([1, 2]).xlogy_(jitorch.tensor([1.0, 2.0]))
    assert jitorch.xlogy_(jitorch.tensor([0.0, 2.0]), 3.0).tolist() == pytest.approx([0.0, 2 * math.log(3)])


@pytest.mark.parametrize("op", list(OPS_UNDER_TEST))
def test_errors_match_torch(op):
    jt, th = OPS_UNDER_TEST[op]
    name = "xlogy_cpu" if op == "xlogy" else "xlog1py_cpu"
    for fn in (jt, th):
        with pytest.raises(NotImplementedError, match=name):
            fn(jitorch.tensor([1 + 1j]) if fn is jt else torch.tensor([1 + 1j]),
               jitorch.tensor([1.0]) if fn is jt else torch.tensor([1.0]))
        with pytest.raises(TypeError):
            fn(2.0, 3.0)


@pytest.mark.parametrize("op", list(OPS_UNDER_TEST))
def test_gradcheck_and_gradgradcheck(op):
    jt = OPS_UNDER_TEST[op][0]
    rng = np.random.default_rng(12)
    x = rng.uniform(-2, 2, (3, 4))
    x[0, :2] = 0.0
    y = rng.uniform(0.2, 3, (3, 4))
    gradcheck_op(jt, [x, y])
    gradgradcheck_op(jt, [x, y])
    gradcheck_op(lambda a: jt(a, 2.5), [x])
    gradgradcheck_op(lambda b: jt(1.5, b), [y])


def test_xlogy_fuses_in_compiled_graphs():
    from jitorch._compile.backend import CompiledGraph
    from jitorch._compile.trace import trace

    x = jitorch.tensor([0.0, 1.0, 2.0, -1.0, 0.0, 3.0])
    y = jitorch.tensor([0.0, 2.0, NAN, INF, NAN, 0.5])

    def fn(a, b):
        return jitorch.xlogy(a * 2, b) + 1

    graph = CompiledGraph(trace(fn, (x, y), {}).gm)
    assert len(graph.kernel_ops) == 1 and "xlogy" in str(graph.kernel_ops[0])
    got = graph((x, y))
    got = got[0] if isinstance(got, (tuple, list)) else got
    assert_same(got, torch.xlogy(torch.tensor(x.numpy()) * 2, torch.tensor(y.numpy())) + 1, rtol=1e-6)


@pytest.mark.parametrize("op", list(OPS_UNDER_TEST))
def test_meta_tensors_give_the_broadcast_shape(op):
    jt, th = OPS_UNDER_TEST[op]
    out = jt(jitorch.empty(3, 1, 4, device="meta"), jitorch.empty(5, 1, dtype=jitorch.float64, device="meta"))
    want = th(torch.empty(3, 1, 4, device="meta"), torch.empty(5, 1, dtype=torch.float64, device="meta"))
    assert out.shape == want.shape and str(out.dtype) == str(want.dtype).replace("torch", "jitorch")
    assert out.device.type == "meta"
