"""Regressions found by the s29 research scripts (tests/scripts/s29_*.py), each compared with torch."""
import warnings

import numpy as np
import pytest
import torch

import jitorch


def _np(t):
    return t.detach().float().numpy()


def _seeded(m, fn):
    """``fn(m)`` right after ``m.manual_seed(0)``, and the next draws of the default stream (where it stopped)."""
    m.manual_seed(0)
    out = fn(m)
    return out.detach().float().numpy(), m.rand(3).numpy()


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("shape", [(3, 5), (8, 8), (16, 4), (4, 16), (4, 3, 3, 3), (64, 32), (1, 20)])
def test_orthogonal_init_draws_torchs_matrix(shape, dtype):
    """RL code (CleanRL's layer_init, PPO baselines) inits with orthogonal_: a float32 weight of 16+ elements drew
    its normals in float64, off torch's float32 stream, so every seeded weight after it differed."""
    def draw(m):
        return m.nn.init.orthogonal_(m.empty(shape, dtype=getattr(m, dtype)), gain=np.sqrt(2))

    (a, a_next), (b, b_next) = _seeded(jitorch, draw), _seeded(torch, draw)
    np.testing.assert_allclose(a, b, rtol=0, atol=2e-6 if dtype == "float32" else 1e-12)
    np.testing.assert_array_equal(a_next, b_next)


def test_orthogonal_init_of_a_layer_in_place_and_with_generator():
    def build(m):
        layer = m.nn.Linear(24, 12)
        m.nn.init.orthogonal_(layer.weight, gain=0.01)
        m.nn.init.constant_(layer.bias, 0.0)
        return layer.weight

    (a, a_next), (b, b_next) = _seeded(jitorch, build), _seeded(torch, build)
    np.testing.assert_allclose(a, b, atol=1e-7)
    np.testing.assert_array_equal(a_next, b_next)
    ga = jitorch.nn.init.orthogonal_(jitorch.empty(6, 9), generator=jitorch.Generator().manual_seed(3))
    gb = torch.nn.init.orthogonal_(torch.empty(6, 9), generator=torch.Generator().manual_seed(3))
    np.testing.assert_allclose(_np(ga), gb.numpy(), atol=2e-6)


@pytest.mark.parametrize("dtype", ["float32", "float64", "bfloat16"])
@pytest.mark.parametrize("shape,sparsity", [((6, 4), 0.5), ((20, 10), 0.1), ((40, 3), 0.9), ((3, 2), 0.5)])
def test_sparse_init_draws_torchs_values(shape, sparsity, dtype):
    """sparse_ drew its normals in float64 whatever the tensor's dtype: float32/bfloat16 weights differed."""
    def draw(m):
        return m.nn.init.sparse_(m.empty(shape, dtype=getattr(m, dtype)), sparsity=sparsity, std=0.3)

    (a, a_next), (b, b_next) = _seeded(jitorch, draw), _seeded(torch, draw)
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(a_next, b_next)
    assert a.dtype == np.float32 and jitorch.nn.init.sparse_(jitorch.empty(0, 3), 0.5).shape == (0, 3)


def test_sparse_init_meta_and_errors():
    meta = jitorch.empty(4, 4, device="meta")
    assert jitorch.nn.init.sparse_(meta, 0.5) is meta
    with pytest.raises(ValueError, match="Only tensors with 2 dimensions are supported"):
        jitorch.nn.init.sparse_(jitorch.empty(2, 3, 4), 0.5)


LAZY = ["LazyConv1d", "LazyConv2d", "LazyConv3d", "LazyConvTranspose1d", "LazyConvTranspose2d", "LazyConvTranspose3d"]


@pytest.mark.parametrize("name", LAZY)
@pytest.mark.parametrize("kwargs", [{}, {"bias": False}, {"groups": 2, "padding": 1}])
def test_lazy_conv_draws_nothing_until_its_first_input(name, kwargs):
    """A lazy conv drew its placeholder bias at construction (torch's lazy mixin skips reset_parameters until the
    input gives in_channels), so its weights and everything seeded after it were off torch's stream."""
    nd = int(name[-2])
    x = np.random.default_rng(0).standard_normal((2, 4) + (5,) * nd).astype(np.float32)
    up = np.random.default_rng(1)
    results = []
    for m in (jitorch, torch):
        m.manual_seed(0)
        layer = getattr(m.nn, name)(6, 3, **kwargs)
        after_ctor = m.rand(2).numpy()
        inp = m.tensor(x, requires_grad=True)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            y = layer(inp)
        y.backward(m.tensor(up.standard_normal(tuple(y.shape)).astype(np.float32)))
        up = np.random.default_rng(1)
        results.append([after_ctor, m.rand(2).numpy(), _np(y), _np(layer.weight), _np(inp.grad),
                        _np(layer.weight.grad)])
        assert type(layer).__name__ == name[4:]
    for a, b in zip(*results):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


def test_lazy_conv_loaded_from_a_checkpoint_keeps_the_checkpoint():
    src = jitorch.nn.Conv2d(3, 4, 3)
    jitorch.manual_seed(0)
    lazy = jitorch.nn.LazyConv2d(4, 3)
    lazy.load_state_dict(src.state_dict())
    y = lazy(jitorch.ones(1, 3, 5, 5))
    np.testing.assert_array_equal(_np(lazy.weight), _np(src.weight))
    np.testing.assert_allclose(_np(y), _np(src(jitorch.ones(1, 3, 5, 5))))


@pytest.mark.xfail(strict=True, reason="jitorch has only the COO sparse layout: to_sparse_csr / sparse_csr_tensor "
                                       "refuse (a compressed layout is a new tensor type: crow/col indices, CSR "
                                       "matmul, conversions and autograd)")
def test_csr_layout_matmul():
    s = jitorch.tensor([[0.0, 2.0], [3.0, 0.0]]).to_sparse_csr()
    np.testing.assert_array_equal(_np(s.matmul(jitorch.eye(2))), [[0.0, 2.0], [3.0, 0.0]])


VIEWS = {
    "transpose": lambda x: x.transpose(0, 2),
    "permute": lambda x: x.permute(3, 1, 0, 2),
    "strided_slice": lambda x: x[:, :, ::2],
    "flip_transpose": lambda x: x.flip(1).transpose(1, 3),
    "matrix_t": lambda x: x[0, 0].t(),
    "row_major": lambda x: x,
    "expanded": lambda x: x[:, :1].expand(4, 3, 8, 5),
}


@pytest.mark.parametrize("fn", ["dropout", "alpha_dropout", "feature_alpha_dropout", "dropout2d"])
@pytest.mark.parametrize("view", list(VIEWS))
def test_dropout_mask_of_a_strided_input_follows_memory_order(view, fn):
    """torch draws the mask with empty_like(input).bernoulli_, which fills memory order: dropout of a transposed
    activation (attention heads before their merge, a conv's (B, T, C) view) dropped other elements than torch."""
    x_np = np.random.default_rng(0).standard_normal((4, 3, 8, 5)).astype(np.float32)
    up = np.random.default_rng(1)
    results = []
    for m in (jitorch, torch):
        m.manual_seed(0)
        leaf = m.tensor(x_np, requires_grad=True)
        x = VIEWS[view](leaf)
        y = getattr(m.nn.functional, fn)(x, 0.3, training=True)
        y.backward(m.tensor(up.standard_normal(tuple(y.shape)).astype(np.float32)))
        up = np.random.default_rng(1)
        results.append([_np(y), _np(leaf.grad), m.rand(2).numpy()])
    for a, b in zip(*results):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("view", ["transpose", "permute", "matrix_t"])
def test_inplace_dropout_module_on_a_view_matches_torch(view):
    x_np = np.random.default_rng(2).standard_normal((4, 3, 8, 5)).astype(np.float32)
    outs = []
    for m in (jitorch, torch):
        m.manual_seed(3)
        base = m.tensor(x_np)
        y = m.nn.Dropout(0.5, inplace=True)(VIEWS[view](base))
        outs.append((_np(y), _np(base), y.stride()))
    np.testing.assert_array_equal(outs[0][0], outs[1][0])
    np.testing.assert_array_equal(outs[0][1], outs[1][1])
    assert outs[0][2] == outs[1][2]


@pytest.mark.parametrize("view", ["transpose", "permute", "strided_slice", "matrix_t", "row_major"])
@pytest.mark.parametrize("kwargs", [{}, {"dtype": "float64"}, {"dtype": "bfloat16"}, {"memory_format": "channels_last"},
                                    {"memory_format": "contiguous_format"}, {"requires_grad": True}])
def test_randn_like_of_a_strided_tensor_draws_torchs_normals(view, kwargs):
    """randn_like is empty_like(x).normal_() in ATen: for a transposed or sliced x the normals land in memory order
    (and a non-contiguous float32 tensor takes normal_'s serial path), so noise added to permuted activations
    (diffusion training on channels-last or transposed tensors) differed from torch's."""
    x_np = np.random.default_rng(0).standard_normal((4, 3, 8, 5)).astype(np.float32)
    outs = []
    for m in (jitorch, torch):
        m.manual_seed(0)
        x = VIEWS[view](m.tensor(x_np))
        kw = {k: getattr(m, v) if k in ("dtype", "memory_format") else v for k, v in kwargs.items()}
        if kw.get("memory_format") is not None and x.dim() != 4:
            kw.pop("memory_format")
        y = m.randn_like(x, **kw)
        outs.append((_np(y), y.stride(), y.requires_grad, str(y.dtype).split(".")[-1], m.rand(3).numpy()))
    np.testing.assert_array_equal(outs[0][0], outs[1][0])
    assert outs[0][1:4] == outs[1][1:4]
    np.testing.assert_array_equal(outs[0][4], outs[1][4])


def test_randn_like_with_a_generator_leaves_the_default_stream():
    x_np = np.random.default_rng(0).standard_normal((6, 5)).astype(np.float32)
    outs = []
    for m in (jitorch, torch):
        m.manual_seed(0)
        y = m.randn_like(m.tensor(x_np).t(), generator=m.Generator().manual_seed(7))
        outs.append((_np(y), m.rand(2).numpy()))
    np.testing.assert_array_equal(outs[0][0], outs[1][0])
    np.testing.assert_array_equal(outs[0][1], outs[1][1])


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex128])
@pytest.mark.parametrize("shape", [(6, 4), (3, 5), (4, 4), (2, 5, 3), (0, 3), (3, 0)])
def test_geqrf_is_lapacks(shape, dtype):
    """torch.geqrf was missing (Householder-flow and orthogonal-parametrization code calls it before
    householder_product / ormqr): values, column-major strides, the named tuple."""
    rng = np.random.default_rng(0)
    a_np = rng.standard_normal(shape)
    if dtype is np.complex128:
        a_np = a_np + 1j * rng.standard_normal(shape)
    a_np = a_np.astype(dtype)
    (a1, t1), (a2, t2) = jitorch.geqrf(jitorch.tensor(a_np)), torch.geqrf(torch.tensor(a_np))
    tol = 1e-5 if dtype is np.float32 else 1e-12
    np.testing.assert_allclose(a1.numpy(), a2.numpy(), atol=tol)
    np.testing.assert_allclose(t1.numpy(), t2.numpy(), atol=tol)
    assert a1.shape == a2.shape and t1.shape == t2.shape and a1.dtype.itemsize == a2.dtype.itemsize
    if a_np.size:  # (an empty one's strides are not compared)
        assert a1.stride() == a2.stride()
    named = jitorch.tensor(a_np).geqrf()
    assert type(named).__name__ == "geqrf" and named.a is named[0] and named.tau is named[1]


def test_geqrf_errors_as_torch():
    with pytest.raises(RuntimeError, match="torch.geqrf: input must have at least 2 dimensions."):
        jitorch.geqrf(jitorch.ones(3))
    with pytest.raises(RuntimeError, match="\"geqrf_cpu\" not implemented for 'Int'"):
        jitorch.geqrf(jitorch.ones(3, 3, dtype=jitorch.int32))


@pytest.mark.parametrize("left", [True, False])
@pytest.mark.parametrize("transpose", [False, True])
@pytest.mark.parametrize("shape,k", [((5, 3), 3), ((4, 4), 4), ((2, 5, 2), 2), ((3, 5), 3)])
def test_ormqr_values_and_gradients(shape, k, left, transpose):
    """torch.ormqr (the full Q of geqrf's reflectors times a matrix) was missing; it is differentiable in torch."""
    from helpers import check_op

    rng = np.random.default_rng(1)
    a_np, tau_np = (x.numpy() for x in torch.geqrf(torch.tensor(rng.standard_normal(shape))))
    tau_np = tau_np[..., :k].copy()
    m = shape[-2]
    other = rng.standard_normal(shape[:-2] + ((m, 3) if left else (3, m)))
    check_op(lambda a, t, o: jitorch.ormqr(a, t, o, left=left, transpose=transpose),
             lambda a, t, o: torch.ormqr(a, t, o, left=left, transpose=transpose),
             [np.ascontiguousarray(a_np), tau_np, other], atol=1e-10, rtol=1e-8)


def test_ormqr_is_a_tensor_method_and_column_major():
    a, tau = jitorch.geqrf(jitorch.tensor(np.random.default_rng(2).standard_normal((4, 3))))
    other = jitorch.ones(4, 2, dtype=a.dtype)
    r = a.ormqr(tau, other)
    ta, ttau = torch.geqrf(torch.tensor(np.random.default_rng(2).standard_normal((4, 3))))
    tr = ta.ormqr(ttau, torch.ones(4, 2, dtype=ta.dtype))
    np.testing.assert_allclose(r.numpy(), tr.numpy(), atol=1e-12)
    assert r.stride() == tr.stride()


@pytest.mark.parametrize("bad", ["rank", "rows", "tau_len", "tau_rank", "dtype"])
def test_ormqr_checks_raise_like_torch(bad):
    def args(m):
        a, tau = m.geqrf(m.tensor(np.random.default_rng(3).standard_normal((4, 3))))
        other = m.ones(4, 2, dtype=a.dtype)
        if bad == "rank":
            other = m.ones(4, dtype=a.dtype)
        elif bad == "rows":
            other = m.ones(5, 2, dtype=a.dtype)
        elif bad == "tau_len":
            tau = m.ones(4, dtype=a.dtype)
        elif bad == "tau_rank":
            tau = m.ones(1, 3, dtype=a.dtype)
        elif bad == "dtype":
            other = other.float()
        return a, tau, other

    with pytest.raises(RuntimeError) as expected:
        torch.ormqr(*args(torch))
    with pytest.raises(RuntimeError) as got:
        jitorch.ormqr(*args(jitorch))
    if bad != "dtype":  # torch names its dtypes its own way
        assert str(got.value) == str(expected.value)


def test_orthogonal_init_of_a_meta_tensor_draws_nothing():
    """Meta-device construction (to_empty later) runs the inits on meta tensors: torch draws nothing there."""
    outs = []
    for m in (jitorch, torch):
        m.manual_seed(0)
        w = m.nn.init.orthogonal_(m.empty(4, 6, device="meta"))
        outs.append((tuple(w.shape), w.device.type, m.rand(2).numpy()))
    assert outs[0][:2] == outs[1][:2] == ((4, 6), "meta")
    np.testing.assert_array_equal(outs[0][2], outs[1][2])
