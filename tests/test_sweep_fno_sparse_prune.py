"""Fourier neural operators, complex-valued networks and word2vec, written once against ``lib`` and run with torch
and jitorch from the same NumPy data.

A 2-D spectral convolution (``rfft2``/``irfft2(s=)`` under each ``norm``, complex ``nn.Parameter`` weights, ``einsum``
on complex tensors into a zero ``out_ft``) trained by Adam; complex convolutions (``Conv1d/2d(dtype=cfloat)``,
``conv_transpose2d``, groups, their double backward), ``prod``/``cumprod`` of complex tensors, ``view_as_real`` /
``view_as_complex`` (empty included), a complex linear layer built from real and imaginary parts with ``abs``/
``angle`` losses, and the max pools and norm layers torch refuses complex inputs for; skip-gram with negative sampling
on ``Embedding(sparse=True)`` tables under SparseAdam, SGD (with momentum) and Adagrad, ``EmbeddingBag``'s
``scale_grad_by_freq``. ``nn.utils.prune`` is in ``test_sweep_prune.py``; statistics utilities and parametrizations
are in ``test_sweep_stats_parametrize.py``."""
from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.utils.parametrize  # noqa: F401 - torch's submodules load on import

import jitorch
from sweep_helpers import assert_close_tree, assert_runs_match

_RNG = np.random.default_rng(0)


def _cplx(*shape):
    return (_RNG.standard_normal(shape) + 1j * _RNG.standard_normal(shape)).astype(np.complex64)


# -- Fourier neural operator ------------------------------------------------------------------------------------------
FNO_X = _RNG.standard_normal((2, 3, 8, 6)).astype(np.float32)
FNO_W = (0.3 * _cplx(3, 4, 5, 3)).astype(np.complex64)
FNO_W2 = (0.3 * _cplx(3, 4, 5, 3)).astype(np.complex64)


def _fno_run(lib, norm):
    w1 = lib.nn.Parameter(lib.tensor(FNO_W))
    w2 = lib.nn.Parameter(lib.tensor(FNO_W2))
    x = lib.tensor(FNO_X)
    opt = lib.optim.Adam([w1, w2], lr=1e-2)
    out = []
    for _ in range(3):
        opt.zero_grad()
        x_ft = lib.fft.rfft2(x, norm=norm)
        out_ft = lib.zeros(2, 4, 8, 4, dtype=lib.cfloat)
        out_ft[:, :, :5, :3] = lib.einsum("bixy,ioxy->boxy", x_ft[:, :, :5, :3], w1)
        out_ft[:, :, -3:, :3] = lib.einsum("bixy,ioxy->boxy", x_ft[:, :, -3:, :3], w2[:, :, :3])
        y = lib.fft.irfft2(out_ft, s=(x.size(-2), x.size(-1)), norm=norm)
        loss = lib.nn.functional.gelu(y).pow(2).mean() + 0.01 * w1.abs().mean() + 0.001 * w2.angle().sum()
        loss.backward()
        out += [loss, w1.grad.clone(), w2.grad.clone()]
        opt.step()
    return out + [w1, w2]


@pytest.mark.parametrize("norm", [None, "ortho", "forward"])
def test_fno_spectral_training_matches_torch(norm):
    assert_runs_match(_fno_run(torch, norm), _fno_run(jitorch, norm), rtol=1e-4)


# -- complex-valued networks ------------------------------------------------------------------------------------------
CONV_CASES = {
    "conv1d": (_cplx(2, 3, 9), _cplx(4, 3, 3), {"padding": 1}),
    "conv1d_strided": (_cplx(2, 3, 9), _cplx(4, 3, 3), {"stride": 2, "dilation": 2}),
    "conv2d": (_cplx(2, 3, 6, 5), _cplx(4, 3, 3, 3), {"padding": 1}),
    "conv2d_groups": (_cplx(2, 3, 6, 5), _cplx(6, 1, 3, 3), {"groups": 3}),
    "conv_transpose2d": (_cplx(2, 3, 6, 5), _cplx(3, 4, 3, 3), {"stride": 2, "padding": 1}),
    "conv3d": (_cplx(1, 2, 4, 4, 4), _cplx(2, 2, 2, 2, 2), {}),
}


def _complex_conv(lib, case):
    x_np, w_np, kw = CONV_CASES[case]
    fn = getattr(lib.nn.functional, case.split("_strided")[0].split("_groups")[0])
    x = lib.tensor(x_np, requires_grad=True)
    w = lib.tensor(w_np, requires_grad=True)
    y = fn(x, w, **kw)
    ((y.abs() ** 2).sum() + y.angle().sum()).backward()
    out = [y, x.grad, w.grad]
    # Double backward: a gradient-penalty style second derivative through both operands.
    x2 = lib.tensor(x_np, requires_grad=True)
    w2 = lib.tensor(w_np, requires_grad=True)
    gx, gw = lib.autograd.grad((fn(x2, w2, **kw).abs() ** 2).sum(), (x2, w2), create_graph=True)
    (gx.abs().sum() + (gw * gw.conj()).real.sum()).backward()
    return out + [gx, gw, x2.grad, w2.grad]


@pytest.mark.parametrize("case", list(CONV_CASES))
def test_complex_convolution_gradients_match_torch(case):
    """The gradients are the conjugate Wirtinger ones: jitorch's convolution backward used the unconjugated operands."""
    assert_runs_match(_complex_conv(torch, case), _complex_conv(jitorch, case), rtol=1e-4)


def _complex_conv_module(lib):
    x_np, w_np, _ = CONV_CASES["conv2d"]
    m = lib.nn.Conv2d(3, 4, 3, dtype=lib.cfloat)
    m.weight.data.copy_(lib.tensor(w_np))
    m.bias.data.copy_(lib.tensor(x_np[0, 0, 0, :4].copy()))
    opt = lib.optim.Adam(m.parameters(), lr=0.01)
    out = []
    for _ in range(3):
        opt.zero_grad()
        loss = m(lib.tensor(x_np)).abs().mean()
        loss.backward()
        opt.step()
        out += [loss, m.weight.grad.clone(), m.bias.grad.clone()]
    return out + [m.weight]


def test_complex_conv_module_trains_as_torch():
    assert_runs_match(_complex_conv_module(torch), _complex_conv_module(jitorch), rtol=1e-4)


PROD_Z = _cplx(4, 3)
PROD_Z_ZEROS = PROD_Z.copy()
PROD_Z_ZEROS[[1, 2, 2], [1, 0, 2]] = 0


@pytest.mark.parametrize("with_zeros", [False, True])
@pytest.mark.parametrize("reduce", ["prod1", "prod_all", "prod0_keepdim", "cumprod1", "cumprod0"])
def test_complex_prod_and_cumprod_gradients_match_torch(reduce, with_zeros):
    fns = {"prod1": lambda z: z.prod(1), "prod_all": lambda z: z.prod(), "prod0_keepdim": lambda z: z.prod(0, True),
           "cumprod1": lambda z: z.cumprod(1), "cumprod0": lambda z: z.cumprod(0)}

    def run(lib):
        z = lib.tensor(PROD_Z_ZEROS if with_zeros else PROD_Z, requires_grad=True)
        y = fns[reduce](z)
        (y.real.sum() + 2 * y.imag.sum()).backward()
        return [y, z.grad]

    assert_runs_match(run(torch), run(jitorch), rtol=1e-5)


VIEW_X = _RNG.standard_normal((4, 3, 2)).astype(np.float32)
LIN_Z = _cplx(4, 3)
LIN_W = _cplx(3, 5)


def _complex_views_and_linear(lib):
    x = lib.tensor(VIEW_X, requires_grad=True)
    z = lib.view_as_complex(x)
    ((z * z).abs().sum() + z.angle().sum()).backward()
    out = [z, x.grad]
    zc = lib.tensor(LIN_Z, requires_grad=True)
    r = lib.view_as_real(zc)
    (r[..., 0] ** 2 * r[..., 1]).sum().backward()
    out += [r, zc.grad, lib.view_as_real(zc.detach()[:, ::2]), lib.view_as_real(zc.detach().t())]
    # Complex linear through real and imaginary weights, a log-magnitude and phase loss.
    xr, xi = lib.tensor(LIN_Z.real.copy()), lib.tensor(LIN_Z.imag.copy())
    fr, fi = lib.nn.Linear(3, 5), lib.nn.Linear(3, 5)
    fr.weight.data.copy_(lib.tensor(LIN_W.real.T.copy()))
    fi.weight.data.copy_(lib.tensor(LIN_W.imag.T.copy()))
    fr.bias.data.zero_()
    fi.bias.data.fill_(0.1)
    y = lib.complex(fr(xr) - fi(xi), fr(xi) + fi(xr))
    loss = lib.log1p(y.abs()).sum() + lib.atan2(y.imag, y.real).sum()
    loss.backward()
    out += [loss, fr.weight.grad, fi.weight.grad, fi.bias.grad]
    # The same layer as a complex matmul, with a double backward through |y|^2.
    zz = lib.tensor(LIN_Z.astype(np.complex128), requires_grad=True)
    g, = lib.autograd.grad(((zz @ lib.tensor(LIN_W.astype(np.complex128))).abs() ** 2).sum(), zz, create_graph=True)
    g.abs().sum().backward()
    return out + [g, zz.grad]


def test_complex_views_and_linear_match_torch():
    assert_runs_match(_complex_views_and_linear(torch), _complex_views_and_linear(jitorch), rtol=1e-5)


@pytest.mark.parametrize("shape", [(0, 2), (2, 0, 2), (3, 1, 2)])
def test_view_as_complex_of_empty_and_size_one_dims(shape):
    """NumPy zeroes an empty array's strides: the layout check read them as a last dim of stride 0."""
    def run(lib):
        x = lib.zeros(shape, requires_grad=True)
        z = lib.view_as_complex(x)
        z.abs().sum().backward()
        return [z, x.grad]

    assert_close_tree(run(torch), run(jitorch))


def test_view_as_complex_layout_errors_match_torch():
    for lib in (torch, jitorch):
        with pytest.raises(RuntimeError, match="Tensor must have a last dimension with stride 1"):
            lib.view_as_complex(lib.zeros(2, 2).t())
        with pytest.raises(RuntimeError, match="Tensor must have a last dimension of size 2"):
            lib.view_as_complex(lib.zeros(2, 3))


@pytest.mark.parametrize("dtype", ["bool", "cfloat"])
@pytest.mark.parametrize("pool", ["max_pool1d", "max_pool1d_indices", "max_pool2d", "max_pool3d"])
def test_max_pools_refuse_bool_and_complex_as_torch(pool, dtype):
    """NumPy failed looking up the padding's lowest value (``Invalid integer data type 'c'``)."""
    def run(lib):
        x = lib.ones(1, 3, 4, dtype=getattr(lib, dtype))
        F = lib.nn.functional
        {"max_pool1d": lambda: F.max_pool1d(x, 2),
         "max_pool1d_indices": lambda: F.max_pool1d(x, 2, return_indices=True),
         "max_pool2d": lambda: F.max_pool2d(x[None], 2), "max_pool3d": lambda: F.max_pool3d(x[None, None], 1)}[pool]()

    with pytest.raises(NotImplementedError) as expected:
        run(torch)
    with pytest.raises(NotImplementedError) as got:
        run(jitorch)
    assert str(got.value) == str(expected.value)


@pytest.mark.parametrize("dtypes", ["cfloat", "long", "bool", "float64/float32", "float32/float64", "half/bfloat16"])
@pytest.mark.parametrize("norm", ["layer_norm", "group_norm", "batch_norm_train", "batch_norm_eval", "instance_norm"])
def test_norm_layers_refuse_what_torch_refuses(norm, dtypes):
    """A complex network's normalization is written by hand: torch's norm kernels refuse complex inputs, which
    jitorch's composites normalized (batch norm's integers failed inside a mean, or came back as integers); and on
    CPU parameters of another dtype than the input only as float32 ones of a half input, where jitorch promoted."""
    def run(lib):
        x_dtype, p_dtype = (getattr(lib, d) for d in (dtypes.split("/") * 2)[:2])
        x, ones = lib.ones(2, 4, 3, dtype=x_dtype), lambda n: lib.ones(n, dtype=p_dtype)
        F = lib.nn.functional
        {"layer_norm": lambda: F.layer_norm(x, (3,), ones(3), ones(3)),
         "group_norm": lambda: F.group_norm(x, 2, ones(4)),
         "batch_norm_train": lambda: F.batch_norm(x, None, None, ones(4), training=True),
         "batch_norm_eval": lambda: F.batch_norm(x, ones(4) * 0, ones(4)),
         "instance_norm": lambda: F.instance_norm(x, weight=ones(4), bias=ones(4))}[norm]()

    with pytest.raises(Exception) as expected:
        run(torch)
    with pytest.raises(Exception) as got:
        run(jitorch)
    assert (type(got.value), str(got.value)) == (type(expected.value), str(expected.value))


def test_rms_norm_still_takes_complex_inputs():
    def run(lib):
        z = lib.tensor(LIN_Z, requires_grad=True)
        y = lib.nn.functional.rms_norm(z, (3,))
        y.abs().sum().backward()
        return [y, z.grad]

    assert_runs_match(run(torch), run(jitorch))


# -- word2vec: skip-gram with negative sampling on sparse tables ------------------------------------------------------
W2V_IN = _RNG.standard_normal((20, 6)).astype(np.float32)
W2V_OUT = _RNG.standard_normal((20, 6)).astype(np.float32)
W2V_CENTER = _RNG.integers(0, 20, 8)
W2V_CONTEXT = _RNG.integers(0, 20, (8, 4))  # column 0 the positive context, the rest negative samples


def _skipgram(lib, optimizer):
    emb, ctx = lib.nn.Embedding(20, 6, sparse=True), lib.nn.Embedding(20, 6, sparse=True)
    emb.weight.data.copy_(lib.tensor(W2V_IN))
    ctx.weight.data.copy_(lib.tensor(W2V_OUT))
    params = list(emb.parameters()) + list(ctx.parameters())
    opt = {"sparseadam": lambda: lib.optim.SparseAdam(params, lr=0.05),
           "sgd_momentum": lambda: lib.optim.SGD(params, lr=0.1, momentum=0.9),
           "adagrad": lambda: lib.optim.Adagrad(params, lr=0.1)}[optimizer]()
    out = []
    for _ in range(3):
        opt.zero_grad()
        u = emb(lib.tensor(W2V_CENTER))
        v = ctx(lib.tensor(W2V_CONTEXT))
        score = lib.bmm(v, u.unsqueeze(2)).squeeze(2)
        F = lib.nn.functional
        loss = -F.logsigmoid(score[:, 0]).mean() - F.logsigmoid(-score[:, 1:]).sum(1).mean()
        loss.backward()
        g = emb.weight.grad.coalesce()
        out += [loss, emb.weight.grad.is_sparse, g.indices(), g.values(), ctx.weight.grad.to_dense()]
        opt.step()
    return out + [emb.weight, ctx.weight]


@pytest.mark.parametrize("optimizer", ["sparseadam", "sgd_momentum", "adagrad"])
def test_skipgram_negative_sampling_on_sparse_tables_matches_torch(optimizer):
    assert_close_tree(_skipgram(torch, optimizer), _skipgram(jitorch, optimizer), rtol=1e-5, atol=1e-6)


BAG_INPUT = np.array([1, 0, 4, 5, 0, 3, 2, 9, 0, 7])
BAG_OFFSETS = np.array([0, 2, 2, 5, 7])


@pytest.mark.parametrize("padding_idx", [None, 0, 4])
@pytest.mark.parametrize("mode", ["sum", "mean"])
def test_embedding_bag_scale_grad_by_freq_matches_torch(mode, padding_idx):
    """ATen's CPU backward divides the i-th distinct index's rows by the count of the i-th sorted index."""
    def run(lib):
        out = []
        for inp, offsets in [(BAG_INPUT, BAG_OFFSETS), (BAG_INPUT[:8].reshape(2, 4), None)]:
            bag = lib.nn.EmbeddingBag(20, 6, mode=mode, scale_grad_by_freq=True, padding_idx=padding_idx)
            bag.weight.data.copy_(lib.tensor(W2V_IN))
            y = bag(lib.tensor(inp), None if offsets is None else lib.tensor(offsets))
            (y * lib.arange(6.0)).sum().backward()
            out += [y, bag.weight.grad]
        return out

    assert_runs_match(run(torch), run(jitorch))


def test_max_bag_refuses_scale_grad_by_freq():
    for lib in (torch, jitorch):
        with pytest.raises(ValueError, match="max mode does not support scaling the gradient by the frequency"):
            lib.nn.functional.embedding_bag(lib.tensor([1, 0]), lib.ones(3, 2), lib.tensor([0]), mode="max",
                                            scale_grad_by_freq=True)
