"""``nn.functional`` dropouts, embeddings and ``one_hot``, checked against PyTorch 2.13."""
from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as TF
from helpers import check_error, check_op, gradcheck_op, to_jitorch, to_torch

import jitorch
import jitorch.nn.functional as F

from nn_functional_helpers import F32


# -- dropout --------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("fn,shape", [(F.dropout, (2, 3)), (F.alpha_dropout, (2, 3)),
                                      (F.feature_alpha_dropout, (2, 3, 4)), (F.dropout1d, (2, 3, 4)),
                                      (F.dropout2d, (2, 3, 4, 5)), (F.dropout3d, (2, 3, 4, 5, 6))])
def test_dropout_identity_when_not_training_or_p0(fn, shape):
    x = jitorch.randn(*shape)
    assert fn(x, 0.5, training=False) is x
    assert fn(x, 0.0, training=True) is x
    th = torch.randn(*shape)
    assert getattr(TF, fn.__name__)(th, 0.5, training=False) is th


@pytest.mark.parametrize("p", [0.2, 0.5])
def test_dropout_scales_kept_elements_and_masks_gradient(p):
    x = jitorch.rand(200, 100) + 0.5
    x.requires_grad_(True)
    out = F.dropout(x, p)
    kept = (out != 0).detach()
    assert abs(1 - float(kept.float().mean()) - p) < 0.02
    np.testing.assert_allclose(out[kept].detach().numpy(), (x[kept] / (1 - p)).detach().numpy(), rtol=1e-6)
    out.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), kept.float().numpy() / (1 - p), rtol=1e-6)


def test_dropout_p1_zeroes_and_inplace_writes_input():
    x = jitorch.ones(3, 4)
    assert float(F.dropout(x, 1.0).abs().sum()) == 0
    y = jitorch.ones(1000)
    assert F.dropout(y, 0.5, inplace=True) is y
    assert set(np.unique(y.numpy())) <= {0.0, 2.0}


@pytest.mark.parametrize("fn,shape,batched", [(F.dropout1d, (8, 50, 6), True), (F.dropout1d, (50, 6), False),
                                              (F.dropout2d, (8, 50, 3, 3), True),
                                              (F.dropout3d, (8, 50, 2, 2, 2), True),
                                              (F.dropout3d, (50, 2, 2, 2), False)])
def test_feature_dropout_drops_whole_channels(fn, shape, batched):
    out = fn(jitorch.ones(*shape), 0.5).numpy()
    channels = out.reshape((shape[0], shape[1], -1) if batched else (1, shape[0], -1))
    assert (channels.std(-1) == 0).all()  # each channel is all 0 or all 2
    assert set(np.unique(channels)) <= {0.0, 2.0}
    assert 0.3 < (channels[..., 0] == 0).mean() < 0.7


def test_alpha_dropout_keeps_mean_and_variance():
    x = jitorch.randn(200000)
    out = F.alpha_dropout(x, 0.3, training=True).numpy()
    assert abs(out.mean()) < 0.02 and abs(out.std() - 1) < 0.02
    feat = F.feature_alpha_dropout(jitorch.randn(400, 300, 4), 0.3, training=True).numpy()
    assert abs(feat.mean()) < 0.03 and abs(feat.std() - 1) < 0.03


@pytest.mark.parametrize("call,error,match", [
    (lambda F, lib: F.dropout(lib.ones(3), 1.5), ValueError, "between 0 and 1"),
    (lambda F, lib: F.dropout(lib.ones(3), -0.1), ValueError, "between 0 and 1"),
    (lambda F, lib: F.dropout1d(lib.ones(3), 0.5), RuntimeError, "dropout1d"),
    (lambda F, lib: F.alpha_dropout(lib.ones(3), 2.0), ValueError, "between 0 and 1"),
])
def test_dropout_errors_match_torch(call, error, match):
    with pytest.raises(error):
        call(TF, torch)
    with pytest.raises(error, match=match):
        call(F, jitorch)


def test_dropout2d_warns_like_torch():
    with pytest.warns(UserWarning, match="dropout2d: Received a 3D input"):
        F.dropout2d(jitorch.ones(2, 3, 4), 0.5)
    with pytest.warns(UserWarning, match="dropout2d: Received a 2-D input"):
        F.dropout2d(jitorch.ones(2, 3), 0.5)


# -- embedding and one_hot ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("padding_idx", [None, 2, -1])
@pytest.mark.parametrize("scale_grad_by_freq", [False, True])
def test_embedding_matches_torch(padding_idx, scale_grad_by_freq, rng):
    w = rng.standard_normal((6, 3)).astype(np.float32)
    idx = np.array([[0, 2, 5, 2], [5, 5, 1, 0]])
    check_op(lambda i, w: F.embedding(i, w, padding_idx, scale_grad_by_freq=scale_grad_by_freq),
             lambda i, w: TF.embedding(i, w, padding_idx, scale_grad_by_freq=scale_grad_by_freq), [idx, w], **F32)
    check_op(lambda i, w: F.embedding(i, w), lambda i, w: TF.embedding(i, w), [idx[0].astype(np.int32), w], **F32)


@pytest.mark.parametrize("norm_type", [2.0, 1.0])
def test_embedding_max_norm_renormalizes_rows_in_place(norm_type, rng):
    w = (rng.standard_normal((6, 4)) * 3).astype(np.float32)
    idx = np.array([1, 3, 3, 5])
    jt_w, th_w = to_jitorch(w), to_torch(w)
    out = F.embedding(to_jitorch(idx), jt_w, max_norm=1.5, norm_type=norm_type)
    expected = TF.embedding(to_torch(idx), th_w, max_norm=1.5, norm_type=norm_type)
    np.testing.assert_allclose(out.numpy(), expected.numpy(), **F32)
    np.testing.assert_allclose(jt_w.numpy(), th_w.numpy(), **F32)  # rows 1, 3, 5 rescaled; others untouched


def test_embedding_gradcheck(rng):
    # Without padding_idx: its row's gradient is defined as 0 although the output depends on it.
    idx = jitorch.tensor([[0, 2], [2, 1]])
    gradcheck_op(lambda w: F.embedding(idx, w), [rng.standard_normal((3, 2))])



@pytest.mark.parametrize("call,error", [
    (lambda F, lib: F.embedding(lib.tensor([1, 5]), lib.ones(4, 3)), IndexError),
    (lambda F, lib: F.embedding(lib.tensor([-1]), lib.ones(4, 3)), IndexError),
    (lambda F, lib: F.embedding(lib.tensor([1.0]), lib.ones(4, 3)), RuntimeError),
    (lambda F, lib: F.embedding(lib.tensor([1]), lib.ones(4, 3), padding_idx=4), AssertionError),
    (lambda F, lib: F.embedding(lib.tensor([1]), lib.ones(4, 3), padding_idx=-5), AssertionError),
])
def test_embedding_errors_match_torch(call, error):
    with pytest.raises(error):
        call(TF, torch)
    with pytest.raises(error):
        call(F, jitorch)


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
@pytest.mark.parametrize("padding_idx", [None, 0])
def test_embedding_bag_matches_torch(mode, padding_idx, rng):
    w = rng.standard_normal((7, 3)).astype(np.float32)
    idx2d = np.array([[1, 0, 4], [6, 6, 0], [0, 0, 0]])
    check_op(lambda i, w: F.embedding_bag(i, w, mode=mode, padding_idx=padding_idx),
             lambda i, w: TF.embedding_bag(i, w, mode=mode, padding_idx=padding_idx), [idx2d, w], **F32)
    flat, offsets = np.array([1, 0, 4, 6, 2, 0, 3]), np.array([0, 2, 2, 5])
    check_op(lambda i, o, w: F.embedding_bag(i, w, o, mode=mode, padding_idx=padding_idx),
             lambda i, o, w: TF.embedding_bag(i, w, o, mode=mode, padding_idx=padding_idx), [flat, offsets, w],
             **F32)
    last = np.array([0, 2, 2, 5, 7])
    check_op(lambda i, o, w: F.embedding_bag(i, w, o, mode=mode, include_last_offset=True),
             lambda i, o, w: TF.embedding_bag(i, w, o, mode=mode, include_last_offset=True), [flat, last, w], **F32)


def test_embedding_bag_per_sample_weights(rng):
    w = rng.standard_normal((5, 3)).astype(np.float32)
    psw = rng.standard_normal(6).astype(np.float32)
    flat, offsets = np.array([1, 0, 4, 2, 2, 3]), np.array([0, 3])
    check_op(lambda i, o, w, s: F.embedding_bag(i, w, o, mode="sum", per_sample_weights=s),
             lambda i, o, w, s: TF.embedding_bag(i, w, o, mode="sum", per_sample_weights=s),
             [flat, offsets, w, psw], **F32)


@pytest.mark.parametrize("num_classes", [-1, 6])
@pytest.mark.parametrize("shape", [(5,), (2, 3), ()])
def test_one_hot_matches_torch(num_classes, shape, rng):
    x = rng.integers(0, 4, shape).astype(np.int64)
    check_op(lambda t: F.one_hot(t, num_classes), lambda t: TF.one_hot(t, num_classes), [x])


@pytest.mark.parametrize("x,num_classes", [(np.array([1, 2], np.int32), -1), (np.array([1, -2]), -1),
                                           (np.array([1, 4]), 3), (np.zeros(0, np.int64), -1)])
def test_one_hot_errors_match_torch(x, num_classes):
    check_error(lambda t: F.one_hot(t, num_classes), lambda t: TF.one_hot(t, num_classes), [x])
