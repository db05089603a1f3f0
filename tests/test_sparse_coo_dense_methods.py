"""sparse_coo tensors against PyTorch where a review found them wrong: a dense tensor's methods with a sparse operand
(``d.add(s)``, ``d.mm(s)``, ``d += s``... forward and gradients), negative indices with an inferred size, rounding
division of duplicates, the attributes and conversions torch has (``mH``, ``bool()``...), clear refusals naming the op,
CUDA's refused dtypes, and the smaller semantics (``sparse.sum`` of repeated dims, ``select`` to a dense slice...)."""
import types

import numpy as np
import pytest
import torch
from helpers import same_error

import jitorch
from jitorch.ops.sparse_ops import _sparse_mm_kernel

pytestmark = [pytest.mark.filterwarnings("ignore:Sparse invariant checks:UserWarning"),
              pytest.mark.filterwarnings("ignore:torch.sparse.SparseTensor:UserWarning")]

I = np.array([[0, 1, 1, 0], [2, 0, 2, 2]])  # (0, 2) twice: uncoalesced
V = np.array([3.0, 4.0, 5.0, 6.0], dtype=np.float32)
RNG = np.random.default_rng(0)


def sparse(L, values=V, indices=I, size=(2, 3), **kw):
    return L.sparse_coo_tensor(L.tensor(indices), L.tensor(values), size, **kw)


def _np(t):
    return np.asarray(t.detach().numpy())


def assert_same(j, t, atol=1e-6):
    """Layout, shape, dtype and values (dense view) agree; a sparse result also its coalesced flag and entries."""
    assert j.is_sparse == t.is_sparse and tuple(j.shape) == tuple(t.shape)
    assert j.dtype.name == str(t.dtype).split(".")[1]
    if t.is_sparse:
        assert j.is_coalesced() == t.is_coalesced()
        np.testing.assert_array_equal(_np(j._indices()), _np(t._indices()))
        np.testing.assert_allclose(_np(j._values()), _np(t._values()), atol=atol)
    else:
        np.testing.assert_allclose(_np(j), _np(t), atol=atol)


# -- creation -------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("indices", [[[0, -1], [1, 0]], [[0, 1], [-2, 0]], [[-1]]])
def test_negative_indices_are_refused_when_the_size_is_inferred(indices):
    values = [1.0] * len(indices[0])
    same_error(lambda L: L.sparse_coo_tensor(indices, values))


def test_legacy_constructor_without_sizes_is_one_dimensional_and_empty():
    for name in ("FloatTensor", "DoubleTensor", "LongTensor"):
        j, t = jitorch.sparse.__dict__[name](), torch.sparse.__dict__[name]()
        assert tuple(j.shape) == tuple(t.shape) == (0,) and j.sparse_dim() == t.sparse_dim() == 1
        assert j.dtype.name == str(t.dtype).split(".")[1]


# -- rounding division --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("case", ["floordiv_int", "floor_float", "trunc_float", "true_div", "coalesced_floor"])
def test_rounding_division_sums_duplicates_first(case):
    out = []
    for L in (jitorch, torch):
        ints = sparse(L, np.array([3, 4, 5, 1]))
        floats = sparse(L, np.array([1.5, -4.0, 5.0, 1.5], np.float32))
        out.append({"floordiv_int": lambda: ints // 2,
                    "floor_float": lambda: L.div(floats, 2, rounding_mode="floor"),
                    "trunc_float": lambda: floats.div(-2, rounding_mode="trunc"),
                    "true_div": lambda: floats / 2,
                    "coalesced_floor": lambda: L.div(floats.coalesce(), 2, rounding_mode="floor")}[case]())
    assert_same(*out)


def test_division_by_a_dense_tensor_is_refused_as_torch():
    with pytest.raises(RuntimeError, match=r"Sparse division requires a scalar or zero-dim dense tensor divisor "
                                           r"\(got shape \[2, 3\] for divisor\)"):
        jitorch.ones(2, 3).div(sparse(jitorch))
    with pytest.raises(RuntimeError, match="Sparse division requires"):
        sparse(jitorch) / jitorch.ones(2, 3)


# -- a dense tensor's methods with a sparse operand ---------------------------------------------------------------
METHODS = {
    "add": lambda L, d, s: d.add(s), "add_alpha": lambda L, d, s: d.add(s, alpha=2),
    "sub": lambda L, d, s: d.sub(s), "sub_alpha": lambda L, d, s: d.sub(s, alpha=0.5),
    "mul": lambda L, d, s: d.mul(s), "mul_coalesced": lambda L, d, s: d.mul(s.coalesce()),
    "matmul": lambda L, d, s: d[:, :2].matmul(s), "mm": lambda L, d, s: d[:, :2].mm(s),
    "mm_float64": lambda L, d, s: d[:, :2].double().mm(s.double()),
    "matmul_vector": lambda L, d, s: d[0, :2].matmul(s), "mv_sparse_matrix": lambda L, d, s: s.mv(d[0]),
    "mv_sparse_vector": lambda L, d, s: d.mv(L.sparse_coo_tensor(L.tensor([[0, 2, 0]]), L.tensor([1.0, 2.0, 3.0]),
                                                                 (3,))),
    "torch_mv": lambda L, d, s: L.mv(s, d[1]),
}


@pytest.mark.parametrize("name", list(METHODS))
def test_dense_methods_take_a_sparse_operand(name):
    d = RNG.standard_normal((2, 3)).astype(np.float32)
    out = [METHODS[name](L, L.tensor(d), sparse(L)) for L in (jitorch, torch)]
    assert_same(*out, atol=1e-5)


INPLACE = {
    "add_": lambda d, s: d.add_(s), "add_alpha": lambda d, s: d.add_(s, alpha=-2), "sub_": lambda d, s: d.sub_(s),
    "mul_": lambda d, s: d.mul_(s), "iadd": lambda d, s: d.__iadd__(s), "isub": lambda d, s: d.__isub__(s),
    "imul": lambda d, s: d.__imul__(s), "float64_self": lambda d, s: d.double().add_(s),
}


@pytest.mark.parametrize("name", list(INPLACE))
def test_in_place_methods_write_the_result_into_the_dense_tensor(name):
    d = RNG.standard_normal((2, 3)).astype(np.float32)
    out = []
    for L in (jitorch, torch):
        x = L.tensor(d)
        r = INPLACE[name](x, sparse(L))
        assert r is x or name == "float64_self"
        out.append(r)
    assert_same(*out, atol=1e-5)


def test_in_place_operators_on_a_dense_tensor():
    out = []
    for L in (jitorch, torch):
        x = L.ones(2, 3)
        x += sparse(L)
        x -= sparse(L) * 0.5
        x *= sparse(L)
        out.append(x)
    assert_same(*out)


def test_in_place_with_a_sparse_operand_keeps_torch_s_refusals():
    with pytest.raises(RuntimeError, match="can't be cast to the desired output type Long"):
        jitorch.ones(2, 3, dtype=jitorch.int64).add_(sparse(jitorch))
    same_error(lambda L: L.ones(3).add_(sparse(L)))  # "... (FYI: dense-sparse addition does not ... broadcasting)"
    with pytest.raises(RuntimeError, match="a leaf Variable that requires grad"):
        jitorch.ones(2, 3, requires_grad=True).add_(sparse(jitorch))


@pytest.mark.parametrize("case", ["add_", "sub_alpha_", "add", "mm", "matmul", "mv_sparse_vector"])
def test_gradients_through_dense_methods_with_a_sparse_operand(case):
    g = RNG.standard_normal((2, 3)).astype(np.float32)
    d0 = RNG.standard_normal((2, 3)).astype(np.float32)
    grads = []
    for L in (jitorch, torch):
        v = L.tensor(V, requires_grad=True)
        w = L.tensor(d0, requires_grad=True)
        s = L.sparse_coo_tensor(L.tensor(I), v, (2, 3))
        if case == "add_":
            out = L.ones(2, 3)
            out.add_(s)
            out = out * w
        elif case == "sub_alpha_":
            out = w * 1
            out.sub_(s, alpha=0.5)
        elif case == "add":
            out = w.add(s)
        elif case == "mm":
            out = w[:, :2].mm(s)
        elif case == "matmul":
            out = w[:, :2].matmul(s)
        else:
            out = w.mv(L.sparse_coo_tensor(L.tensor(I[1:]), v, (3,)))[:, None] * L.ones(1, 3)
        out.backward(L.tensor(g))
        grads.append((v.grad, w.grad))
    for j, t in zip(*grads):  # (torch's gradient of a dense matrix times a sparse vector is sparse; jitorch's dense)
        np.testing.assert_allclose(_np(j), _np(t.to_dense()), atol=1e-5)


# -- attributes and conversions ------------------------------------------------------------------------------------
@pytest.mark.parametrize("case", ["mH", "H", "adjoint", "mH_coalesced", "conj", "mH_real"])
def test_conjugate_transposes_match_torch(case):
    c = np.array([1 + 2j, 3j, 2, -1j], np.complex64)
    out = []
    for L in (jitorch, torch):
        s = sparse(L, c)
        out.append({"mH": lambda: s.mH, "H": lambda: s.H, "adjoint": lambda: s.adjoint(),
                    "mH_coalesced": lambda: s.coalesce().mH, "conj": lambda: s.conj(),
                    "mH_real": lambda: sparse(L).mH}[case]())
    assert_same(*out)


def test_bool_nbytes_and_h_errors_match_torch():
    assert bool(jitorch.sparse_coo_tensor([[0]], [5.0], (1,))) is bool(torch.sparse_coo_tensor([[0]], [5.0], (1,)))
    assert bool(jitorch.sparse_coo_tensor([[0]], [0.0], (1,))) is False
    assert bool(jitorch.sparse_coo_tensor(jitorch.zeros(1, 0, dtype=jitorch.int64), jitorch.zeros(0), (1,))) is False
    same_error(lambda L: bool(sparse(L)))
    same_error(lambda L: sparse(L).nbytes)
    same_error(lambda L: L.sparse_coo_tensor([[0], [1], [0]], [1.0], (2, 2, 2)).H)


def test_parameters_and_optimizers_refuse_sparse_tensors_naming_the_op():
    s = sparse(jitorch, requires_grad=True)
    with pytest.raises(NotImplementedError, match=r"Parameter\(\): a sparse_coo tensor cannot be a Parameter"):
        jitorch.nn.Parameter(s)
    with pytest.raises(NotImplementedError, match="SGD: jitorch's optimizers do not update sparse_coo tensors"):
        jitorch.optim.SGD([s], lr=0.1)


def test_is_sparse_csr_is_false_for_dense_and_coo_tensors():
    for L in (jitorch, torch):
        assert L.ones(2).is_sparse_csr is False and sparse(L).is_sparse_csr is False


# -- CUDA's products -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype,name", [("int64", "Long"), ("int16", "Short"), ("int8", "Char"), ("uint8", "Byte"),
                                        ("bool", "Bool")])
def test_cuda_products_refuse_the_dtypes_cupy_cannot_scatter(dtype, name):
    cupy_like = types.SimpleNamespace(__name__="cupy")  # the refusal comes before any array call
    with pytest.raises(NotImplementedError, match=f"\"addmm_sparse_cuda\" not implemented for '{name}'"):
        _sparse_mm_kernel(cupy_like, np.zeros((2, 1), np.int64), np.ones(1, dtype), np.ones((2, 2), dtype), rows=2,
                          cols=2, transpose=False, coalesced=True)


# -- smaller semantics ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dims", [(0, 0), (0, -2), (1, 0, 1)])
def test_sparse_sum_refuses_a_repeated_dim(dims):
    same_error(lambda L: L.sparse.sum(sparse(L), dims))


@pytest.mark.parametrize("case", ["1d", "1d_duplicates", "1d_missing", "hybrid", "hybrid_dense_dim", "2d_row",
                                  "int_1d"])
def test_select_to_no_sparse_dim_is_dense(case):
    out = []
    for L in (jitorch, torch):
        one = L.sparse_coo_tensor([[0, 2, 2]], [1.0, 2.0, 3.0], (4,))
        hybrid = L.sparse_coo_tensor(L.tensor([[0, 2, 0]]), L.arange(9.0).reshape(3, 3), (4, 3))
        out.append({"1d": lambda: one[0], "1d_duplicates": lambda: one[2], "1d_missing": lambda: one.select(0, -1),
                    "hybrid": lambda: hybrid[0], "hybrid_dense_dim": lambda: hybrid.select(1, 1),
                    "2d_row": lambda: sparse(L)[0],
                    "int_1d": lambda: L.sparse_coo_tensor([[1, 1]], L.tensor([2, 3], dtype=L.int32), (2,))[1]}[case]())
    assert_same(*out)


def test_addmm_with_beta_zero_still_checks_the_input_broadcasts():
    with pytest.raises(RuntimeError, match="expand"):
        jitorch.addmm(jitorch.ones(5, 7), sparse(jitorch), jitorch.ones(3, 2), beta=0)
    out = [L.addmm(L.ones(2), sparse(L), L.ones(3, 2), beta=0) for L in (jitorch, torch)]
    assert_same(*out)


def test_mul_by_a_dense_tensor_keeps_the_duplicates_as_torch():
    d = RNG.standard_normal((2, 3)).astype(np.float32)
    out = [sparse(L) * L.tensor(d) for L in (jitorch, torch)]
    assert_same(*out)


def test_check_sparse_tensor_invariants_is_torch_s_flag_and_context():
    for L in (jitorch, torch):
        flag = L.sparse.check_sparse_tensor_invariants
        assert flag.is_enabled() is False
        with flag():
            assert flag.is_enabled() is True
            with flag(enable=False):
                assert flag.is_enabled() is False
            with pytest.raises(RuntimeError, match="size is inconsistent with indices"):
                L.sparse_coo_tensor([[5]], [1.0], (2,))
        assert flag.is_enabled() is False
        flag.enable()
        assert flag.is_enabled() is True
        flag.disable()
        assert flag(enable=True)(lambda: flag.is_enabled())() is True and flag.is_enabled() is False


def test_product_errors_name_the_product():
    s = sparse(jitorch)
    with pytest.raises(NotImplementedError, match="^matmul: sparse @ sparse"):
        s @ s.t()
    with pytest.raises(NotImplementedError, match="^mm: sparse @ sparse"):
        jitorch.mm(s, s.t())
    with pytest.raises(RuntimeError, match="^spmm: matrices expected"):
        jitorch.spmm(s, jitorch.ones(3))


# -- the override machinery while a sparse tensor lives ------------------------------------------------------------
def test_overriding_types_are_still_found_while_a_sparse_tensor_lives():
    from jitorch import _overrides

    s = sparse(jitorch)

    class Later:
        pass

    x = jitorch.ones(2)
    assert _overrides.find_override((x, [1, (Later(),)], {"k": 2})) is None and jitorch.add(x, x).sum().item() == 4
    Later.__jitorch_function__ = classmethod(lambda cls, func, args, kwargs: "intercepted")
    value = Later()
    _overrides.acquire()  # a type that opts in counts its instances: the first one makes the new method seen
    try:
        assert _overrides.find_override((x, [1, (value,)])) is value
        assert jitorch.relu(value) == "intercepted" and jitorch.cat([x, {"v": value}]) == "intercepted"
    finally:
        _overrides.release()
    gm = jitorch.fx.symbolic_trace(lambda a: jitorch.relu(a) + 1)  # fx Proxies take over as before
    assert [n.op for n in gm.graph.nodes] == ["placeholder", "call_function", "call_function", "output"]
    assert jitorch.mm(s, jitorch.ones(3, 1)).shape == (2, 1)
