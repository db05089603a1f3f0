"""Products, sums and arithmetic of sparse_coo tensors against PyTorch, forward and backward (random upstream
gradients; the sparse operand's gradient is compared as torch's sparse gradient), and the CUDA path."""
import numpy as np
import pytest
import torch

import jitorch
from helpers import gradgradcheck_op, same_error

pytestmark = pytest.mark.filterwarnings("ignore:Sparse invariant checks:UserWarning")

RNG = np.random.default_rng(0)
I = np.array([[0, 1, 1, 0, 2], [2, 0, 2, 2, 1]])  # (0, 2) twice
V = RNG.standard_normal(5).astype(np.float32)
D = RNG.standard_normal((3, 4)).astype(np.float32)


def _np(t):
    return np.asarray(t.detach().cpu().numpy())


def run(fn, *, dtype="float32", coalesce=False, dense=D, grad=True, atol=1e-5):
    """``fn(L, s, d)`` in both libraries on the same leaves; compares the output, then (with a random upstream
    gradient) the dense leaf's gradient and the sparse leaf's gradient (layout, pattern, values)."""
    results = []
    for L in (jitorch, torch):
        s = L.sparse_coo_tensor(L.tensor(I), L.tensor(V.astype(dtype)), (3, 3), requires_grad=grad)
        d = L.tensor(dense.astype(dtype), requires_grad=grad)
        out = fn(L, s.coalesce() if coalesce else s, d)
        results.append((L, s, d, out))
    (_, js, jd, jo), (_, ts, td, to) = results
    if to.is_sparse:
        jo, to = jo.to_dense(), to.to_dense()
    np.testing.assert_allclose(_np(jo), _np(to), atol=atol, rtol=1e-5)
    assert jo.dtype.name == str(to.dtype).split(".")[1] and tuple(jo.shape) == tuple(to.shape)
    if not grad:
        return
    g = RNG.standard_normal(tuple(to.shape)).astype(dtype)
    jo.backward(jitorch.tensor(g))
    to.backward(torch.tensor(g))
    for jl, tl in ((jd, td), (js, ts)):
        assert (jl.grad is None) == (tl.grad is None)
        if tl.grad is None:
            continue
        if jl is js:
            # Always torch's sparse gradient (the leaf's pattern). Where torch gives a sparse leaf a dense gradient
            # (torch.mm, matmul, addmm, linear, s.sum(), dense + s), jitorch's holds that gradient's entries at the
            # pattern: autograd runs through the values (a documented difference).
            assert jl.grad.layout is jitorch.sparse_coo
            tg = tl.grad.coalesce() if tl.grad.is_sparse else tl.grad.sparse_mask(ts.detach().coalesce())
            jg = jl.grad.coalesce()
            np.testing.assert_array_equal(_np(jg.indices()), _np(tg.indices()))
            np.testing.assert_allclose(_np(jg.values()), _np(tg.values()), atol=atol, rtol=1e-5)
        else:
            np.testing.assert_allclose(_np(jl.grad), _np(tl.grad), atol=atol, rtol=1e-5)


PRODUCTS = {
    "sparse.mm": lambda L, s, d: L.sparse.mm(s, d), "mm": lambda L, s, d: L.mm(s, d),
    "spmm": lambda L, s, d: L.spmm(s, d), "matmul": lambda L, s, d: L.matmul(s, d), "operator": lambda L, s, d: s @ d,
    "method": lambda L, s, d: s.mm(d), "dense_sparse": lambda L, s, d: d.t() @ s,
    "mm_dense_sparse": lambda L, s, d: L.mm(d.t(), s), "transposed": lambda L, s, d: s.t() @ d,
    "vector": lambda L, s, d: s @ d[:, 0], "vector_left": lambda L, s, d: d[:, 1] @ s,
    "mv": lambda L, s, d: L.mv(s, d[:, 2]),
}


@pytest.mark.parametrize("coalesce", [False, True])
@pytest.mark.parametrize("name", list(PRODUCTS))
def test_products_and_their_gradients(name, coalesce):
    run(PRODUCTS[name], coalesce=coalesce)


@pytest.mark.parametrize("dtype", ["float64", "float16", "int64"])
def test_product_dtypes(dtype):
    run(PRODUCTS["sparse.mm"], dtype=dtype, grad=dtype == "float64", atol=1e-2 if dtype == "float16" else 1e-6,
        dense=np.round(D * 3) if dtype == "int64" else D)


@pytest.mark.parametrize("call", [
    lambda L, s, d: L.sparse.addmm(L.tensor(np.ones((3, 4), np.float32), requires_grad=True), s, d, beta=2, alpha=0.5),
    lambda L, s, d: L.addmm(L.ones(4), s, d),
    lambda L, s, d: L.addmm(L.full((3, 4), float("nan")), s, d, beta=0),
    lambda L, s, d: L.nn.functional.linear(s, d.t(), L.ones(4)),
], ids=["sparse_addmm", "addmm_broadcast", "addmm_beta0", "linear"])
def test_addmm_and_linear(call):
    run(call)


def test_nn_linear_on_a_sparse_input():
    layers = []
    for L in (jitorch, torch):
        L.manual_seed(0)
        layers.append(L.nn.Linear(3, 2))
    layers[0].load_state_dict({k: jitorch.tensor(v.detach().numpy()) for k, v in layers[1].state_dict().items()})
    run(lambda L, s, d: layers[0 if L is jitorch else 1](s) * d[:, :2].sum())


def test_empty_and_large_products():
    empty = [L.sparse_coo_tensor(L.zeros(2, 0, dtype=L.int64), L.zeros(0), (3, 3)) for L in (jitorch, torch)]
    np.testing.assert_array_equal(_np(empty[0] @ jitorch.tensor(D)), _np(empty[1] @ torch.tensor(D)))
    n = 500
    idx = RNG.integers(0, n, (2, 4000))
    val = RNG.standard_normal(4000).astype(np.float32)
    x = RNG.standard_normal((n, 7)).astype(np.float32)
    js, ts = (L.sparse_coo_tensor(L.tensor(idx), L.tensor(val), (n, n)) for L in (jitorch, torch))
    np.testing.assert_allclose(_np(jitorch.sparse.mm(js, jitorch.tensor(x))), _np(torch.sparse.mm(ts, torch.tensor(x))),
                               atol=1e-4)


@pytest.mark.parametrize("make", [
    lambda L, s: L.sparse.mm(s, L.ones(3, 2, dtype=L.float64)),
    lambda L, s: L.sparse.mm(s, L.ones(4, 2)),
    lambda L, s: L.sparse.mm(s.double(), L.ones(3, 2)),
    lambda L, s: L.sparse.sum(s, 0, keepdim=True),
], ids=["dtype", "shape", "dtype_double", "keepdim"])
def test_product_errors_match_torch(make):
    same_error(lambda L: make(L, L.sparse_coo_tensor(L.tensor(I), L.tensor(V), (3, 3))))


def test_double_backward_through_the_product():
    idx = jitorch.tensor(I)

    def f(values, dense):
        s = jitorch.sparse_coo_tensor(idx, values, (3, 3))
        return jitorch.sparse.mm(s, dense) * dense[:3].sum()

    gradgradcheck_op(f, [V, D])


# -- sums ------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("call", [
    lambda L, s, d: L.sparse.sum(s) * d.sum(), lambda L, s, d: s.sum() * d.sum(), lambda L, s, d: L.sum(s) + d.sum(),
    lambda L, s, d: L.sparse.sum(s, dim=(0, 1)), lambda L, s, d: L.sparse.sum(s, 0),
    lambda L, s, d: L.sparse.sum(s, -1), lambda L, s, d: L.sparse.sum(s, 0, dtype=L.float64),
    lambda L, s, d: s.sum(1, keepdim=True),
], ids=["all", "method", "torch_sum", "dims", "dim0", "dim-1", "dtype", "keepdim"])
def test_sums(call, request):
    run(call, coalesce=True, grad=request.node.callspec.id not in TORCH_HAS_NO_GRADIENT)


def test_hybrid_sums():
    for dim in (None, 0, 1, (0, 1)):
        outs = []
        for L in (jitorch, torch):
            s = L.sparse_coo_tensor(L.tensor([[0, 2, 0]]), L.tensor(np.arange(9.0).reshape(3, 3)), (4, 3))
            outs.append(L.sparse.sum(s) if dim is None else L.sparse.sum(s, dim))
        assert outs[0].is_sparse == outs[1].is_sparse
        dense = [o.to_dense() if o.is_sparse else o for o in outs]
        np.testing.assert_allclose(_np(dense[0]), _np(dense[1]))


# -- arithmetic ------------------------------------------------------------------------------------------------------
ARITHMETIC = {
    "mul": lambda L, s, d: (s * 2.5).to_dense(), "rmul": lambda L, s, d: (3 * s).to_dense(),
    "mul_0d": lambda L, s, d: (s * L.tensor(2.0)).to_dense(), "div": lambda L, s, d: (s / 4).to_dense(),
    "neg": lambda L, s, d: (-s).to_dense(), "neg_fn": lambda L, s, d: L.neg(s).to_dense(),
    "add": lambda L, s, d: (s + s * 2).to_dense(), "sub": lambda L, s, d: (s - s * 3).to_dense(),
    "add_coalesced": lambda L, s, d: (s.coalesce() + s.coalesce()),
    "dense_add": lambda L, s, d: d[:3, :3] + s, "dense_sub": lambda L, s, d: d[:3, :3] - s,
    "torch_add": lambda L, s, d: L.add(d[:3, :3], s, alpha=2),
    "mul_dense": lambda L, s, d: (s * d[:3, :3]).to_dense(), "dense_mul": lambda L, s, d: (d[:3, :3] * s).to_dense(),
    "mul_sparse": lambda L, s, d: (s * (s * 2)).to_dense(), "abs": lambda L, s, d: s.abs().to_dense(),
    "relu": lambda L, s, d: L.relu(s).to_dense(), "tanh": lambda L, s, d: s.tanh().to_dense(),
    "pow": lambda L, s, d: s.pow(2).to_dense(), "square": lambda L, s, d: (s ** 2).to_dense(),
    "t_todense": lambda L, s, d: s.t().to_dense() @ d[:3],
}


@pytest.mark.parametrize("coalesce", [False, True])
@pytest.mark.parametrize("name", list(ARITHMETIC))
def test_arithmetic_and_its_gradients(name, coalesce):
    run(ARITHMETIC[name], coalesce=coalesce, grad=name not in TORCH_HAS_NO_GRADIENT)


# torch's backward fails on these (expand or as_strided of a sparse tensor): values only.
TORCH_HAS_NO_GRADIENT = {"mul_dense", "dense_mul", "tanh", "keepdim"}


def test_coalesced_results_keep_torch_s_pattern():
    outs = []
    for L in (jitorch, torch):
        s = L.sparse_coo_tensor(L.tensor(I), L.tensor(V), (3, 3)).coalesce()
        outs.append([s + s, s * 2, s.abs(), L.sparse.sum(s, 0), s[1]])
    for j, t in zip(*outs):
        assert j.is_coalesced() == t.is_coalesced()
        np.testing.assert_array_equal(_np(j._indices()), _np(t._indices()))
        np.testing.assert_allclose(_np(j._values()), _np(t._values()), rtol=1e-6)


# -- CUDA ------------------------------------------------------------------------------------------------------------
@pytest.mark.cuda
def test_cuda_products_match_the_cpu():
    s_cpu = jitorch.sparse_coo_tensor(jitorch.tensor(I), jitorch.tensor(V), (3, 3), requires_grad=True)
    d_cpu = jitorch.tensor(D, requires_grad=True)
    s = s_cpu.detach().to("cuda").requires_grad_()
    d = d_cpu.detach().cuda().requires_grad_()
    assert s.is_cuda and s.device.type == "cuda" and "device='cuda:0'" in repr(s)
    g = RNG.standard_normal((3, 4)).astype(np.float32)
    for sp, dn, gg in ((s_cpu, d_cpu, jitorch.tensor(g)), (s, d, jitorch.tensor(g).cuda())):
        (jitorch.sparse.mm(sp, dn) + (dn.t() @ sp.t()).t() + sp.coalesce().to_dense() @ dn).backward(gg)
    np.testing.assert_allclose(_np(d.grad), _np(d_cpu.grad), atol=1e-4)
    np.testing.assert_allclose(_np(s.grad.to_dense()), _np(s_cpu.grad.to_dense()), atol=1e-4)
    back = s.detach().cpu()
    assert back.is_cpu and np.allclose(_np(back.to_dense()), _np(s_cpu.to_dense()))


def test_compiled_functions_take_sparse_arguments_and_closures():
    # A sparse argument runs the call eagerly (no strided memory for a kernel); a captured one is traced around.
    adj = jitorch.sparse_coo_tensor(jitorch.tensor([[0, 1, 1, 2], [2, 0, 2, 1]]), jitorch.tensor([3., 4., 5., 1.]),
                                    (3, 3)).coalesce()
    lin = jitorch.nn.Linear(4, 2)
    x = jitorch.randn(3, 4)

    def f(adj, x):
        return jitorch.spmm(adj, lin(x)).relu().sum()
    want = f(adj, x)
    got = jitorch.compile(f)(adj, x)
    assert jitorch.allclose(got, want)
    got.backward()
    grad = lin.weight.grad.clone()
    lin.weight.grad = None
    want.backward()
    assert jitorch.allclose(grad, lin.weight.grad)
    assert jitorch.allclose(jitorch.compile(lambda x: f(adj, x))(x), want)
