"""sparse_coo tensors against PyTorch: creation (``sparse_coo_tensor``, ``to_sparse``, the legacy constructors), the
attributes, ``repr``, coalescing, ``to_dense`` and its gradient, conversions, pickling and checkpoints, and the clear
refusals of ops that take no sparse tensor (never a computation on the missing dense memory)."""
import copy
import io
import pickle
import warnings

import numpy as np
import pytest
import torch
from helpers import same_error

import jitorch
from jitorch import _dispatch
from jitorch.ops import OPS

pytestmark = [pytest.mark.filterwarnings("ignore:Sparse invariant checks:UserWarning"),
              pytest.mark.filterwarnings("ignore:torch.sparse.SparseTensor:UserWarning")]

I = np.array([[0, 1, 1, 0], [2, 0, 2, 2]])  # (0, 2) twice: uncoalesced
V = np.array([3.0, 4.0, 5.0, 6.0], dtype=np.float32)
G = np.random.default_rng(0).standard_normal((2, 3)).astype(np.float32)


def both(indices=I, values=V, size=(2, 3), **kw):
    """The same sparse tensor in jitorch and torch."""
    return tuple(L.sparse_coo_tensor(L.tensor(indices), L.tensor(values), size, **kw) for L in (jitorch, torch))


def _np(t):
    return np.asarray(t.detach().cpu().numpy())


def assert_sparse_equal(js, ts, *, coalesced_flag=True, atol=1e-6):
    """Layout, size, dtype, nnz, flag and the raw indices and values (torch's order) agree."""
    assert js.layout is jitorch.sparse_coo and js.is_sparse and ts.layout is torch.sparse_coo
    assert tuple(js.shape) == tuple(ts.shape) and js.dtype.name == str(ts.dtype).split(".")[1]
    assert (js.sparse_dim(), js.dense_dim(), js._nnz()) == (ts.sparse_dim(), ts.dense_dim(), ts._nnz())
    if coalesced_flag:
        assert js.is_coalesced() == ts.is_coalesced()
    np.testing.assert_array_equal(_np(js._indices()), _np(ts._indices()))
    np.testing.assert_allclose(_np(js._values()), _np(ts._values()), atol=atol, rtol=1e-6)


def assert_dense_equal(jt, tt, atol=1e-6):
    np.testing.assert_allclose(_np(jt), _np(tt), atol=atol, rtol=1e-5)
    assert jt.dtype.name == str(tt.dtype).split(".")[1] and tuple(jt.shape) == tuple(tt.shape)


# -- creation and attributes -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("case", ["size", "inferred", "lists", "float64", "int32_indices", "hybrid", "empty",
                                  "int_values", "coalesced_flag", "one_entry", "size_only"])
def test_creation_matches_torch(case):
    kw = {}
    args = {"size": (I, V, (2, 3)), "inferred": (I, V, None), "lists": (I.tolist(), V.tolist(), (2, 4)),
            "float64": (I, V, (3, 3)), "int32_indices": (I.astype(np.int32), V, (2, 3)),
            "hybrid": (np.array([[0, 2]]), np.ones((2, 3), np.float32), None),
            "empty": (np.zeros((2, 0), np.int64), np.zeros(0, np.float32), None),
            "int_values": (I, np.arange(4), (2, 3)), "coalesced_flag": (np.array([[0, 1], [1, 2]]), V[:2], (2, 3)),
            "one_entry": (np.array([[1], [2]]), V[:1], (2, 3)), "size_only": None}[case]
    if case == "size_only":  # torch's (size) overload: an empty tensor
        assert_sparse_equal(jitorch.sparse_coo_tensor((2, 3), dtype=jitorch.float64),
                            torch.sparse_coo_tensor((2, 3), dtype=torch.float64))
        return
    if case == "float64":
        kw["dtype"] = "float64"
    if case == "coalesced_flag":
        kw["is_coalesced"] = True
    out = []
    for L in (jitorch, torch):
        i, v = (a if isinstance(a, list) else L.tensor(a) for a in args[:2])
        extra = {k: getattr(L, x) if k == "dtype" else x for k, x in kw.items()}
        out.append(L.sparse_coo_tensor(i, v, **extra) if args[2] is None else L.sparse_coo_tensor(i, v, args[2],
                                                                                                    **extra))
    js, ts = out
    assert_sparse_equal(js, ts)
    assert js.dim() == ts.dim() and js.ndim == ts.ndim and js.numel() == ts.numel() and len(js) == len(ts)
    assert js.size() == tuple(ts.size()) and js.size(-1) == ts.size(-1)
    assert js.device == jitorch.device("cpu") and not js.is_cuda and js.is_floating_point() == ts.is_floating_point()
    assert isinstance(js, jitorch.Tensor) and jitorch.is_tensor(js) and js.is_contiguous() is False


def test_values_are_shared_and_requires_grad_stays_on_the_sparse_tensor():
    v = jitorch.tensor(V.copy())
    s = jitorch.sparse_coo_tensor(jitorch.tensor(I), v, (2, 3), requires_grad=True)
    v[0] = 100.0  # torch aliases the values
    assert s._values()[0].item() == 100.0
    assert s.requires_grad and s.is_leaf and not v.requires_grad and s.grad_fn is None
    w = jitorch.tensor(V.copy(), requires_grad=True)
    s2 = jitorch.sparse_coo_tensor(jitorch.tensor(I), w * 1, (2, 3))
    assert s2.requires_grad and not s2.is_leaf


@pytest.mark.parametrize("make", [
    lambda L: L.sparse_coo_tensor(L.tensor(I), L.tensor(V[:3]), (2, 3)),
    lambda L: L.sparse_coo_tensor(L.tensor(I), L.tensor(V), (2, 3, 4)),
    lambda L: L.sparse_coo_tensor(L.tensor([[[0, 2]]]), L.ones(2), (3,)),
    lambda L: L.sparse_coo_tensor(L.tensor([[0, 2]]), L.ones(2, 3), (3, 4)),
    lambda L: L.sparse_coo_tensor(L.tensor(I), L.tensor(V), (2, 2), check_invariants=True),
    lambda L: L.sparse_coo_tensor(L.tensor([[0, -1]]), L.ones(2), (2,), check_invariants=True),
    lambda L: L.sparse_coo_tensor(L.tensor(I), L.tensor(V), (2, 3)).indices(),
    lambda L: L.sparse_coo_tensor(L.tensor(I), L.tensor(V), (2, 3)).values(),
    lambda L: L.ones(2, 2).to_sparse(3),
    lambda L: L.ones(2, 2).to_sparse(0),
    lambda L: L.ones(2, 2).to_sparse().to_sparse(1),
    lambda L: L.sparse_coo_tensor(L.tensor(I), L.tensor(V), (2, 3)) + L.ones(2, 3),
    lambda L: L.sparse_coo_tensor(L.tensor(I), L.tensor(V), (2, 3)) + 1,
    lambda L: L.sparse_coo_tensor(L.tensor(I), L.tensor(V), (2, 3)).pow(0),
], ids=["nnz", "len_size", "indices_3d", "dense_size", "bounds", "negative", "indices_uncoalesced",
        "values_uncoalesced", "to_sparse_dim", "to_sparse_zero", "sparse_to_sparse_dim", "sparse_plus_dense",
        "sparse_plus_scalar", "pow0"])
def test_errors_match_torch(make):
    same_error(make)


def test_indices_are_checked_even_without_check_invariants():
    # torch skips the check by default and then reads out of bounds; jitorch always refuses.
    with pytest.raises(RuntimeError, match="size is inconsistent with indices: for dim 1, size is 2 but found index 2"):
        jitorch.sparse_coo_tensor(jitorch.tensor(I), jitorch.tensor(V), (2, 2))


def test_legacy_constructors():
    for name in ("FloatTensor", "DoubleTensor", "LongTensor"):
        values = V if name != "LongTensor" else np.arange(4)
        js, ts = (getattr(L.sparse, name)(L.tensor(I), L.tensor(values), L.Size([2, 3])) for L in (jitorch, torch))
        assert_sparse_equal(js, ts)
        je, te = getattr(jitorch.sparse, name)(2, 3), getattr(torch.sparse, name)(2, 3)
        assert_sparse_equal(je, te)


@pytest.mark.parametrize("dense,sparse_dim", [
    (np.array([[0.0, 1.0], [2.0, 0.0]]), None), (np.array([[0.0, 1.0], [0.0, 0.0]]), 1), (np.zeros((2, 2)), None),
    (np.array(3.0), None), (np.array(0.0), None), (np.arange(12.0).reshape(2, 3, 2) % 5, 2)])
def test_to_sparse_matches_torch_with_gradient(dense, sparse_dim):
    x = [L.tensor(dense, requires_grad=True) for L in (jitorch, torch)]
    js, ts = (t.to_sparse() if sparse_dim is None else t.to_sparse(sparse_dim) for t in x)
    assert_sparse_equal(js, ts)
    g = np.random.default_rng(1).standard_normal(dense.shape)
    for s, L, t in ((js, jitorch, x[0]), (ts, torch, x[1])):
        (s * 2).to_dense().backward(L.tensor(g))
    np.testing.assert_allclose(_np(x[0].grad), _np(x[1].grad))
    assert jitorch.tensor(dense).to_dense().shape == tuple(dense.shape)


# -- repr ------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("make", [
    lambda L: L.sparse_coo_tensor(L.tensor(I), L.tensor(V), (2, 3)),
    lambda L: L.sparse_coo_tensor(L.tensor(I), L.tensor(V), (2, 3), dtype=L.float64, requires_grad=True),
    lambda L: L.sparse_coo_tensor(L.tensor(I), L.tensor(V), (2, 3)).coalesce(),
    lambda L: L.sparse_coo_tensor(L.tensor(I), L.arange(4), (2, 3)),
    lambda L: L.sparse_coo_tensor(L.tensor(I), L.arange(4, dtype=L.int32), (2, 3)),
    lambda L: L.sparse_coo_tensor(L.zeros(2, 0, dtype=L.int64), L.zeros(0), (2, 3)),
    lambda L: L.sparse_coo_tensor(L.tensor([[0, 2]]), L.arange(6.0).view(2, 3) / 7, (4, 3)),
    lambda L: L.tensor(3.0).to_sparse(),
    lambda L: L.sparse_coo_tensor(L.tensor([list(range(40)), list(range(40))]), L.arange(40.0) * 1000, (40, 40)),
    lambda L: L.sparse_coo_tensor(L.tensor(I), L.tensor(V, requires_grad=True) * 2, (2, 3)),
], ids=["plain", "float64_grad", "coalesced", "int64", "int32", "empty", "hybrid", "scalar", "long", "grad_fn"])
def test_repr_matches_torch(make):
    expected = repr(make(torch)).replace("torch.", "jitorch.")
    got = repr(make(jitorch))
    if "grad_fn" in expected:  # torch names the constructor's node; jitorch's gradient runs through the values
        assert "grad_fn=<" in got
        expected, got = expected.split("layout=")[0], got.split("layout=")[0]
    assert got == expected


# -- coalesce, to_dense and the sparse gradient ----------------------------------------------------------------------
def test_coalesce_matches_torch():
    js, ts = both()
    jc, tc = js.coalesce(), ts.coalesce()
    assert_sparse_equal(jc, tc)
    assert jc.coalesce() is jc and not js.is_coalesced()
    np.testing.assert_array_equal(_np(jc.indices()), _np(tc.indices()))
    np.testing.assert_allclose(_np(jc.values()), _np(tc.values()))


@pytest.mark.parametrize("coalesce", [False, True])
def test_to_dense_and_its_sparse_gradient(coalesce):
    js, ts = both(requires_grad=True)
    outs = []
    for s, L in ((js, jitorch), (ts, torch)):
        src = s.coalesce() if coalesce else s
        d = src.to_dense()
        d.backward(L.tensor(G))
        outs.append(d)
    assert_dense_equal(*outs)
    assert_sparse_equal(js.grad, ts.grad)  # the coalesced pattern, flagged uncoalesced, as torch's
    assert js.grad.layout is jitorch.sparse_coo


def test_gradient_reaches_values_that_built_the_sparse_tensor():
    w = [L.tensor(V.copy(), requires_grad=True) for L in (jitorch, torch)]
    for L, x in zip((jitorch, torch), w):
        s = L.sparse_coo_tensor(L.tensor(I), x.exp(), (2, 3))
        (s.coalesce().to_dense() * L.tensor(G)).sum().backward()
    np.testing.assert_allclose(_np(w[0].grad), _np(w[1].grad), rtol=1e-6)


def test_grad_accumulates_over_uses_and_resets():
    js, ts = both(requires_grad=True)
    for s, L in ((js, jitorch), (ts, torch)):
        (s.to_dense() * L.tensor(G)).sum().backward()
        (s.to_dense() * 2).sum().backward()
    np.testing.assert_allclose(_np(js.grad.to_dense()), _np(ts.grad.to_dense()))
    js.grad = None
    assert js.grad is None and js._sp_values.grad is None


# -- conversions -----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("convert", [
    lambda s, L: s.double(), lambda s, L: s.float(), lambda s, L: s.to(L.float64), lambda s, L: s.detach(),
    lambda s, L: s.clone(), lambda s, L: s.coalesce().clone(), lambda s, L: s.t(), lambda s, L: s.transpose(1, 0),
    lambda s, L: s.coalesce().t(), lambda s, L: s.long(), lambda s, L: s.type(L.float64),
    lambda s, L: s.coalesce()[1], lambda s, L: s.coalesce().select(1, 2), lambda s, L: s.half(),
], ids=["double", "float", "to", "detach", "clone", "clone_c", "t", "transpose", "t_c", "long", "type", "getitem",
        "select", "half"])
def test_conversions_match_torch(convert):
    js, ts = both()
    assert_sparse_equal(convert(js, jitorch), convert(ts, torch))


def test_conversion_identities_and_flags():
    js, _ = both()
    assert js.float() is js and js.to("cpu") is js and js.cpu() is js
    assert js.requires_grad_() is js and js.requires_grad and not js.detach().requires_grad
    assert js.layout is jitorch.sparse_coo and jitorch.ones(1).layout is jitorch.strided


# -- refusals --------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("call,name", [
    (lambda s: s.exp(), "exp"), (lambda s: jitorch.exp(s), "exp"), (lambda s: s.view(6), "view"),
    (lambda s: s.reshape(6), "reshape"), (lambda s: jitorch.cat([s, s]), "cat"), (lambda s: s.abs_(), "abs"),
    (lambda s: s.mean(), "mean"), (lambda s: s[0:1], "index"), (lambda s: s.sigmoid(), "sigmoid"),
    (lambda s: jitorch.nn.functional.softmax(s, 0), "softmax"), (lambda s: s.permute(1, 0), "permute"),
    (lambda s: s < 1, "lt"), (lambda s: s.clamp_(0, 1), "clamp_"), (lambda s: s.backward(), "backward"),
])
def test_unsupported_ops_raise_naming_op_and_layout(call, name):
    js, _ = both()
    with pytest.raises(NotImplementedError) as info:
        call(js)
    assert name in str(info.value) and "sparse" in str(info.value)


def test_reads_of_dense_memory_are_refused():
    js, _ = both()
    with pytest.raises(TypeError, match="Sparse layout tensor to numpy"):
        js.numpy()
    with pytest.raises(TypeError, match="Sparse layout tensor to numpy"):
        np.asarray(js)
    with pytest.raises(RuntimeError, match="doesn't have storage"):
        js.data_ptr()
    with pytest.raises(RuntimeError, match="strides"):
        js.stride()
    with pytest.raises(RuntimeError, match="6 elements cannot be converted"):
        js.item()
    # A row reached directly (not through a public function) refuses too, naming the op.
    with pytest.raises(NotImplementedError, match="exp: sparse_coo"):
        _dispatch.apply(OPS["exp"], js)
    with pytest.raises(NotImplementedError, match="maximum: sparse_coo"):
        _dispatch.apply(OPS["maximum"], jitorch.ones(2, 3), js)
    with pytest.raises(RuntimeError, match="no strided memory"):
        js._data.shape


# -- pickling and checkpoints ----------------------------------------------------------------------------------------
def test_save_load_round_trips_with_torch():
    js, ts = both()
    buf = io.BytesIO()
    jitorch.save({"adj": js, "x": jitorch.ones(2)}, buf)
    buf.seek(0)
    back = jitorch.load(buf)
    assert_sparse_equal(back["adj"], ts)
    buf.seek(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert_sparse_equal(js, torch.load(buf)["adj"])
    buf = io.BytesIO()
    torch.save(ts.coalesce(), buf)
    buf.seek(0)
    assert_sparse_equal(jitorch.load(buf), ts.coalesce())


def test_pickle_and_deepcopy():
    js, ts = both(requires_grad=True)
    for out in (pickle.loads(pickle.dumps(js)), copy.deepcopy(js)):
        assert_sparse_equal(out, ts.detach())
        assert out.requires_grad
