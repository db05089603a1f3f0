"""Top-level torch.* functions with ATen's signatures (jitorch/_aten_aliases.py, jitorch/_aten_misc.py) against
torch: values and gradients of the nn.functional spellings, int reductions, control flow, buffers, settings."""
from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

import jitorch

RNG = np.random.default_rng(0)


def _arr(*shape):
    return RNG.standard_normal(shape)


def _compare(fn, arrays, grad=True, rtol=1e-6, atol=1e-7, ints=()):
    """``fn(lib, *tensors)`` in torch and jitorch; outputs (and, with ``grad``, input gradients) compared."""
    results = []
    for m in (torch, jitorch):
        ts = [m.tensor(a, requires_grad=grad and i not in ints) for i, a in enumerate(arrays)]
        out = fn(m, *ts)
        outs = list(out) if isinstance(out, (tuple, list)) else [out]
        grads = []
        if grad:
            diff = [o for o in outs if isinstance(o, m.Tensor) and o.requires_grad]
            ups = [np.linspace(-1, 1, o.numel()).reshape(tuple(o.shape)) for o in diff]
            m.autograd.backward(diff, [m.tensor(u, dtype=o.dtype) for u, o in zip(ups, diff)])
            grads = [t.grad for t in ts if t.requires_grad]
        results.append((outs, grads))
    (t_outs, t_grads), (j_outs, j_grads) = results
    for t, j in zip(t_outs + t_grads, j_outs + j_grads):
        if isinstance(t, torch.Tensor):
            assert tuple(j.shape) == tuple(t.shape) and str(j.dtype).split(".")[-1] == str(t.dtype).split(".")[-1]
            np.testing.assert_allclose(j.detach().numpy(), t.detach().numpy(), rtol=rtol, atol=atol)
        else:
            assert j == t


X3, X4, X5 = _arr(2, 3, 8), _arr(2, 3, 6, 6), _arr(1, 2, 4, 4, 4)
P, Q = _arr(4, 5), _arr(4, 5)
Y01 = RNG.integers(0, 2, (4, 5)).astype(np.float64)
SIGN = np.where(RNG.random(4) > 0.5, 1.0, -1.0)

CASES = {
    "adaptive_avg_pool1d": (lambda m, x: m.adaptive_avg_pool1d(x, 3), [X3]),
    "adaptive_max_pool1d": (lambda m, x: m.adaptive_max_pool1d(x, 3), [X3]),
    "avg_pool1d": (lambda m, x: m.avg_pool1d(x, 3, 2, 1, True, False), [X3]),
    "max_pool1d": (lambda m, x: m.max_pool1d(x, 3, [], 1), [X3]),
    "max_pool1d_with_indices": (lambda m, x: m.max_pool1d_with_indices(x, 2, 2), [X3]),
    "max_pool2d": (lambda m, x: m.max_pool2d(x, 3, 2, 1, 1, True), [X4]),
    "max_pool3d": (lambda m, x: m.max_pool3d(x, 2), [X5]),
    "conv3d": (lambda m, x, w: m.conv3d(x, w, None, 1, 1), [X5, _arr(3, 2, 2, 2, 2)]),
    "conv_transpose3d": (lambda m, x, w: m.conv_transpose3d(x, w, None, 2), [X5, _arr(2, 3, 2, 2, 2)]),
    "convolution": (lambda m, x, w, b: m.convolution(x, w, b, [1, 2], [1, 0], [1, 1], False, [0, 0], 1),
                    [X4, _arr(4, 3, 3, 3), _arr(4)]),
    "convolution_transposed": (lambda m, x, w: m.convolution(x, w, None, [2], [1], [1], True, [1], 1),
                               [X3, _arr(3, 2, 3)]),
    "constant_pad_nd": (lambda m, x: m.constant_pad_nd(x, [1, 2, 0, 1], 0.5), [X4]),
    "bilinear": (lambda m, a, b, w: m.bilinear(a, b, w), [_arr(3, 4), _arr(3, 5), _arr(2, 4, 5)]),
    "channel_shuffle": (lambda m, x: m.channel_shuffle(x, 3), [_arr(2, 6, 3)]),
    "grid_sampler": (lambda m, x, g: m.grid_sampler(x, g, 0, 1, False), [X4, _arr(2, 3, 3, 2) * 0.8]),
    "bce_logits": (lambda m, x, y: m.binary_cross_entropy_with_logits(x, y, None, None, 2), [P, Y01]),
    "cosine_embedding": (lambda m, a, b, y: m.cosine_embedding_loss(a, b, y, 0.1, 0), [P, Q, SIGN]),
    "hinge_embedding": (lambda m, x, y: m.hinge_embedding_loss(x, y, 0.5, 1), [P, np.where(Y01 > 0, 1.0, -1.0)]),
    "kl_div": (lambda m, x, y: m.kl_div(x.log_softmax(-1), y.softmax(-1), 1), [P, Q]),
    "kl_div_log_target": (lambda m, x, y: m.kl_div(x, y, 2, log_target=True), [P, Q]),
    "margin_ranking": (lambda m, a, b, y: m.margin_ranking_loss(a, b, y, 0.2, 2), [P[:, 0], Q[:, 0], SIGN]),
    "poisson_nll": (lambda m, x, y: m.poisson_nll_loss(x, y, True, True, 1e-8, 1), [P, np.abs(Q)]),
    "triplet_margin": (lambda m, a, p, n: m.triplet_margin_loss(a, p, n, 1.0, 2.0, 1e-6, True, 0), [P, Q, _arr(4, 5)]),
    "rms_norm": (lambda m, x, w: m.rms_norm(x, [8], w, 1e-5), [X3, _arr(8)]),
    "native_layer_norm": (lambda m, x, w, b: m.native_layer_norm(x, [3, 8], w, b, 1e-5), [X3, _arr(3, 8), _arr(3, 8)]),
    "rsub": (lambda m, a, b: m.rsub(a, b, alpha=2), [P, Q]),
    "rsub_scalar": (lambda m, a: m.rsub(a, 3.0), [P]),
    "fill": (lambda m, a: m.fill(a, 2.5), [P]),
    "nuclear_norm": (lambda m, a: m.nuclear_norm(a, True), [P]),
    "frobenius_norm": (lambda m, a: m.frobenius_norm(a, [0, 1]), [P]),
    "rnn_tanh_cell": (lambda m, x, h, wi, wh, bi, bh: m.rnn_tanh_cell(x, h, wi, wh, bi, bh),
                      [_arr(3, 4), _arr(3, 5), _arr(5, 4), _arr(5, 5), _arr(5), _arr(5)]),
    "rnn_relu_cell": (lambda m, x, h, wi, wh: m.rnn_relu_cell(x, h, wi, wh), [_arr(3, 4), _arr(3, 5), _arr(5, 4),
                                                                             _arr(5, 5)]),
    "lstm_cell": (lambda m, x, h, c, wi, wh, bi, bh: m.lstm_cell(x, (h, c), wi, wh, bi, bh),
                  [_arr(3, 4), _arr(3, 5), _arr(3, 5), _arr(20, 4), _arr(20, 5), _arr(20), _arr(20)]),
    "gru_cell": (lambda m, x, h, wi, wh, bi, bh: m.gru_cell(x, h, wi, wh, bi, bh),
                 [_arr(3, 4), _arr(3, 5), _arr(15, 4), _arr(15, 5), _arr(15), _arr(15)]),
    "unsafe_chunk": (lambda m, a: m.unsafe_chunk(a, 2, 1), [P]),
    "unsafe_split": (lambda m, a: m.unsafe_split(a, 3, 0), [P]),
}


@pytest.mark.parametrize("name", list(CASES))
def test_alias_matches_torch(name):
    fn, arrays = CASES[name]
    _compare(fn, arrays)


def test_ctc_loss_with_int_reduction_matches_torch():
    log_probs = RNG.standard_normal((6, 2, 4))
    targets = np.array([[1, 2], [3, 1]])
    _compare(lambda m, lp: m.ctc_loss(lp.log_softmax(-1), m.tensor(targets), [6, 5], [2, 2], 0, 2), [log_probs])


def test_inplace_activation_spellings_match_torch():
    for name, call in (("threshold_", lambda m, x: m.threshold_(x, 0.1, -1.0)), ("selu_", lambda m, x: m.selu_(x)),
                       ("celu_", lambda m, x: m.celu_(x, 0.5)), ("rrelu_", lambda m, x: m.rrelu_(x, 0.1, 0.3))):
        outs = []
        for m in (torch, jitorch):
            x = m.tensor(P.copy())
            y = call(m, x)
            assert y is x, name
            outs.append(x.numpy())
        np.testing.assert_allclose(outs[1], outs[0], rtol=1e-6, err_msg=name)


def test_dropout_spellings_keep_or_scale_and_respect_train():
    x = jitorch.ones(4, 6, 5)
    for fn in (jitorch.feature_dropout, jitorch.alpha_dropout, jitorch.feature_alpha_dropout):
        assert jitorch.equal(fn(x, 0.5, False), x)
    dropped = jitorch.feature_dropout(x, 0.5, True)
    per_channel = dropped.reshape(4, 6, 5)
    assert all(len(set(row.tolist())) == 1 for row in per_channel.reshape(24, 5))  # whole channels
    assert set(dropped.unique().tolist()) <= {0.0, 2.0}
    out, mask = jitorch.native_dropout(x, 0.25, True)
    assert mask.dtype is jitorch.bool and jitorch.equal(out, mask * (1 / 0.75))
    out, mask = jitorch.native_dropout(x, 0.25, False)
    assert jitorch.equal(out, x) and bool(mask.all())
    y = jitorch.ones(3, 4)
    assert jitorch.dropout_(y, 0.5, True) is y and set(y.unique().tolist()) <= {0.0, 2.0}


def test_control_flow_and_vmap_alias_match_torch():
    for m in (torch, jitorch):
        assert m.cond(m.tensor(False), lambda a: a + 1, lambda a: a - 1, (m.ones(2),)).tolist() == [0.0, 0.0]
        i, x = m.while_loop(lambda i, x: i < 3, lambda i, x: (i + 1, x * 2), (m.tensor(0), m.ones(2)))
        assert int(i) == 3 and x.tolist() == [8.0, 8.0]
        assert m.vmap(lambda r: r.sum())(m.ones(3, 2)).tolist() == [2.0, 2.0, 2.0]


def test_frombuffer_unravel_index_frexp_empty_permuted_match_torch():
    raw = bytearray(np.arange(6, dtype=np.int32).tobytes())
    for kwargs in ({}, {"count": 2, "offset": 8}):
        got = jitorch.frombuffer(raw, dtype=jitorch.int32, **kwargs)
        want = torch.frombuffer(raw, dtype=torch.int32, **kwargs)
        assert got.tolist() == want.tolist()
    got = jitorch.frombuffer(raw, dtype=jitorch.int32)
    got[0] = 42  # shares the buffer's memory, as torch's
    assert np.frombuffer(raw, np.int32)[0] == 42
    with pytest.raises(ValueError):
        jitorch.frombuffer(raw, dtype=jitorch.int32, count=10)
    idx = [0, 5, 7, -1]
    for a, b in zip(jitorch.unravel_index(jitorch.tensor(idx), (2, 4)), torch.unravel_index(torch.tensor(idx), (2, 4))):
        assert a.tolist() == b.tolist() and str(a.dtype).endswith("int64")
    values = np.array([8.0, 0.3, 0.0, -1.5, 1e-40, np.inf], np.float32)
    got, want = jitorch.frexp(jitorch.tensor(values)), torch.frexp(torch.tensor(values))
    np.testing.assert_array_equal(got.mantissa.numpy(), want.mantissa.numpy())
    np.testing.assert_array_equal(got.exponent.numpy(), want.exponent.numpy())
    assert got.exponent.dtype is jitorch.int32 and jitorch.tensor(values).frexp()[1].tolist() == got[1].tolist()
    e = jitorch.empty_permuted((2, 3, 4), (0, 2, 1))
    assert e.shape == (2, 3, 4) and e.stride() == torch.empty_permuted((2, 3, 4), (0, 2, 1)).stride()


def test_binomial_samples_are_in_range_with_the_right_mean():
    jitorch.manual_seed(0)
    count = jitorch.full((20000,), 10.0)
    draws = jitorch.binomial(count, jitorch.full((20000,), 0.3))
    assert draws.dtype is jitorch.float32 and float(draws.min()) >= 0 and float(draws.max()) <= 10
    assert abs(float(draws.mean()) - 3.0) < 0.05


def test_process_settings():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        jitorch.set_default_tensor_type(jitorch.DoubleTensor)
    try:
        assert jitorch.get_default_dtype() is jitorch.float64 and "deprecated" in str(caught[0].message)
        jitorch.set_default_tensor_type("torch.FloatTensor")
        assert jitorch.get_default_dtype() is jitorch.float32
    finally:
        jitorch.set_default_dtype(jitorch.float32)
    try:
        for mode, name in ((1, "warn"), (2, "error"), (0, "default")):
            jitorch.set_deterministic_debug_mode(name)
            assert jitorch.get_deterministic_debug_mode() == mode
            assert jitorch.is_deterministic_algorithms_warn_only_enabled() == (mode == 1)
    finally:
        jitorch.use_deterministic_algorithms(False)
    jitorch.set_warn_always(True)
    assert jitorch.is_warn_always_enabled()
    jitorch.set_warn_always(False)
    assert jitorch.get_device_module("cpu") is jitorch.cpu and jitorch.is_neg(jitorch.ones(1)) is False
    assert jitorch.is_storage(jitorch.ones(2).untyped_storage()) and not jitorch.is_storage(jitorch.ones(2))


def test_histogram_and_histogramdd_match_torch():
    x = RNG.standard_normal(200).astype(np.float32)
    w = RNG.random(200).astype(np.float32)
    for kwargs in ({"bins": 7}, {"bins": 5, "range": (-1.0, 1.0)}, {"bins": 4, "weight": w, "density": True}):
        got = jitorch.histogram(jitorch.tensor(x), **{k: jitorch.tensor(v) if isinstance(v, np.ndarray) else v
                                                       for k, v in kwargs.items()})
        want = torch.histogram(torch.tensor(x), **{k: torch.tensor(v) if isinstance(v, np.ndarray) else v
                                                    for k, v in kwargs.items()})
        np.testing.assert_allclose(got.hist.numpy(), want.hist.numpy(), rtol=1e-5)
        np.testing.assert_allclose(got.bin_edges.numpy(), want.bin_edges.numpy(), rtol=1e-6)
        assert got.hist.dtype is jitorch.float32
    edges = np.array([-3.0, -0.5, 0.0, 2.0], np.float32)
    got = jitorch.histogram(jitorch.tensor(x), jitorch.tensor(edges))
    assert got.hist.tolist() == torch.histogram(torch.tensor(x), torch.tensor(edges)).hist.tolist()
    pts = RNG.standard_normal((50, 2)).astype(np.float32)
    got = jitorch.histogramdd(jitorch.tensor(pts), bins=[3, 4], weight=jitorch.tensor(w[:50]))
    want = torch.histogramdd(torch.tensor(pts), bins=[3, 4], weight=torch.tensor(w[:50]))
    np.testing.assert_allclose(got.hist.numpy(), want.hist.numpy(), rtol=1e-5)
    for a, b in zip(got.bin_edges, want.bin_edges):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-6)
    with pytest.raises(RuntimeError):
        jitorch.histogram(jitorch.tensor([1, 2]), bins=2)


def test_lowrank_decompositions_reconstruct_as_torch():
    a = RNG.standard_normal((8, 5)) @ RNG.standard_normal((5, 6))  # rank 5
    for m in (torch, jitorch):
        u, s, v = m.svd_lowrank(m.tensor(a), q=5)
        assert tuple(u.shape) == (8, 5) and tuple(s.shape) == (5,) and tuple(v.shape) == (6, 5)
        np.testing.assert_allclose((u * s @ v.T).numpy(), a, atol=1e-8)
        u, s, v = m.pca_lowrank(m.tensor(a), q=3)
        assert tuple(v.shape) == (6, 3)
    np.testing.assert_allclose(jitorch.pca_lowrank(jitorch.tensor(a), q=3)[1].numpy(),
                               torch.linalg.svdvals(torch.tensor(a - a.mean(0)))[:3].numpy(), rtol=1e-8)


def test_from_file_maps_or_copies(tmp_path):
    path = tmp_path / "data.bin"
    np.arange(6, dtype=np.float32).tofile(path)
    copy = jitorch.from_file(str(path), shared=False, size=6, dtype=jitorch.float32)
    mapped = jitorch.from_file(str(path), shared=True, size=6, dtype=jitorch.float32)
    assert copy.tolist() == torch.from_file(str(path), shared=False, size=6, dtype=torch.float32).tolist()
    mapped[0] = 42.0
    assert np.fromfile(path, np.float32)[0] == 42.0 and copy[0].item() == 0.0
    assert jitorch.is_distributed(copy) is False
