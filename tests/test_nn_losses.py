"""Losses (nn.functional and the loss modules) against PyTorch: every reduction, class weights, ignore_index, label
smoothing, spatial and probability targets, input and target gradients with random upstream gradients, gradcheck in
float64, legacy size_average/reduce, and PyTorch's error types."""
from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
import torch.nn.functional as TF
from helpers import check_error, check_op, gradcheck_op, to_jitorch, to_torch

import jitorch
import jitorch.nn.functional as F

from nn_losses_helpers import REDUCTIONS, TOL, call, f32, with_constants


# -- regression -----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("name,kw", [("mse_loss", {}), ("l1_loss", {}), ("smooth_l1_loss", {}),
                                     ("smooth_l1_loss", {"beta": 0.5}), ("smooth_l1_loss", {"beta": 0.0}),
                                     ("huber_loss", {}), ("huber_loss", {"delta": 2.0})])
def test_regression_losses_match_torch(name, kw, reduction, rng):
    x, y = f32(rng, (4, 5)), f32(rng, (4, 5))
    y.reshape(-1)[:3] = x.reshape(-1)[:3]  # zero differences: the kink of |d|
    jt, th = call(name, reduction=reduction, **kw)
    check_op(jt, th, [x, y], **TOL)
    gradcheck_op(jt, [rng.standard_normal((3, 2)), rng.standard_normal((3, 2))])


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("name", ["mse_loss", "l1_loss", "huber_loss"])
def test_weighted_regression_losses_match_torch(name, reduction, rng):
    x, y, w = f32(rng, (4, 3)), f32(rng, (4, 3)), f32(rng, (4, 3), 0.1, 2.0)
    jt, th = call(name, reduction=reduction)
    check_op(lambda x, y, w: jt(x, y, weight=w), lambda x, y, w: th(x, y, weight=w), [x, y, w], **TOL)


@pytest.mark.parametrize("name", ["mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss"])
def test_regression_broadcast_warns_like_torch(name, rng):
    x, y = f32(rng, (3, 1)), f32(rng, (3,))
    with pytest.warns(UserWarning, match="different to the input size"):
        out = getattr(F, name)(to_jitorch(x), to_jitorch(y))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expected = getattr(TF, name)(to_torch(x), to_torch(y))
    np.testing.assert_allclose(out.numpy(), expected.numpy(), **TOL)


@pytest.mark.parametrize("call_fn", [
    lambda F, lib: F.mse_loss(lib.ones(3), lib.ones(3), reduction="foo"),
    lambda F, lib: F.mse_loss(lib.ones(3), lib.ones(3), weight=lib.ones(2)),
    lambda F, lib: F.smooth_l1_loss(lib.ones(3), lib.ones(3), beta=-1.0),
    lambda F, lib: F.huber_loss(lib.ones(3), lib.ones(3), delta=0.0),
    lambda F, lib: F.mse_loss(lib.ones(3, dtype=lib.int64), lib.ones(3, dtype=lib.int64)),
    lambda F, lib: F.l1_loss(lib.ones(3), lib.ones(3), reduction="batchmean"),
])
def test_regression_errors_match_torch(call_fn):
    check_error(lambda: call_fn(F, jitorch), lambda: call_fn(TF, torch))


def test_legacy_size_average_and_reduce(rng):
    x, y = f32(rng, (3, 4)), f32(rng, (3, 4))
    for size_average, reduce in [(False, None), (None, False), (True, True), (False, True)]:
        with pytest.warns(UserWarning, match="size_average and reduce args will be deprecated"):
            out = F.mse_loss(to_jitorch(x), to_jitorch(y), size_average=size_average, reduce=reduce)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            expected = TF.mse_loss(to_torch(x), to_torch(y), size_average=size_average, reduce=reduce)
        np.testing.assert_allclose(out.numpy(), expected.numpy(), **TOL)


# -- cross entropy and nll ------------------------------------------------------------------------------------------
def _targets(rng, shape, classes, ignore_index=None):
    t = rng.integers(0, classes, shape).astype(np.int64)
    if ignore_index is not None and t.size > 1:
        t.reshape(-1)[1] = ignore_index
    return t


CE_SHAPES = [((5,), ()), ((4, 5), (4,)), ((2, 5, 3), (2, 3)), ((2, 5, 3, 2), (2, 3, 2))]


@pytest.mark.parametrize("shapes", CE_SHAPES)
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("ignore_index", [-100, -1, 2])
def test_cross_entropy_class_indices_match_torch(shapes, reduction, weighted, ignore_index, rng):
    x = f32(rng, shapes[0], -3, 3)
    t = _targets(rng, shapes[1], 5, ignore_index if ignore_index != -100 else None)
    extra = [f32(rng, (5,), 0.2, 2.0)] if weighted else []
    for smoothing in (0.0, 0.2):
        kw = {"reduction": reduction, "ignore_index": ignore_index, "label_smoothing": smoothing}
        jt, th = with_constants(lambda x, t, *w: F.cross_entropy(x, t, *w, **kw),
                                lambda x, t, *w: TF.cross_entropy(x, t, *w, **kw), extra)
        # PyTorch's own backward fails for a 1-D input with a 0-d target; jitorch's is covered by gradcheck.
        check_op(jt, th, [x, t], grad=len(shapes[0]) > 1, **TOL)
        gradcheck_op(lambda x: F.cross_entropy(x, to_jitorch(t), *[to_jitorch(w).double() for w in extra], **kw),
                     [x.astype(np.float64)])


@pytest.mark.parametrize("shape", [(4, 5), (2, 5, 3), (5,)])
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("smoothing", [0.0, 0.3])
def test_cross_entropy_probability_targets_match_torch(shape, reduction, smoothing, rng):
    x = f32(rng, shape, -3, 3)
    class_dim = 0 if len(shape) == 1 else 1
    p = torch.softmax(torch.from_numpy(f32(rng, shape)), class_dim).numpy()
    w = f32(rng, (5,), 0.2, 2.0)
    kw = {"reduction": reduction, "label_smoothing": smoothing}
    check_op(lambda x, p: F.cross_entropy(x, p, **kw), lambda x, p: TF.cross_entropy(x, p, **kw), [x, p], **TOL)
    check_op(*with_constants(lambda x, p, w: F.cross_entropy(x, p, w, **kw),
                             lambda x, p, w: TF.cross_entropy(x, p, w, **kw), [w]), [x, p], **TOL)


def test_cross_entropy_gradcheck(rng):
    t = jitorch.tensor([1, 0, 2, -100])
    w = jitorch.tensor([0.5, 2.0, 1.0], dtype=jitorch.float64)
    gradcheck_op(lambda x: F.cross_entropy(x, t, w, label_smoothing=0.1), [rng.standard_normal((4, 3))])
    gradcheck_op(lambda x, p: F.cross_entropy(x, p.softmax(1)), [rng.standard_normal((4, 3)),
                                                                 rng.standard_normal((4, 3))])


def test_cross_entropy_all_ignored_is_nan_and_uint8_targets(rng):
    x = f32(rng, (3, 5))
    check_op(lambda x, t: F.cross_entropy(x, t), lambda x, t: TF.cross_entropy(x, t), [x, np.full(3, -100)])
    check_op(lambda x, t: F.cross_entropy(x, t), lambda x, t: TF.cross_entropy(x, t),
             [x, np.array([1, 4, 0], np.uint8)], **TOL)


@pytest.mark.parametrize("args", [
    (np.zeros((3, 5), np.float32), np.array([1.0, 2.0, 3.0], np.float32)),  # float class indices
    (np.zeros((3, 5), np.float32), np.zeros((3, 5), np.int64)),  # integer probabilities
    (np.zeros((3, 5), np.float32), np.array([1, 7, 3])),  # out of range
    (np.zeros((3, 5), np.float32), np.array([1, -2, 3])),  # negative, not ignore_index
    (np.zeros((3, 5), np.float32), np.array([1, 2, 3, 4])),  # batch mismatch
    (np.zeros((3, 5), np.float32), np.array([1, 2, 3], np.int32)),  # int32 targets
    (np.zeros((3, 5, 2), np.float32), np.zeros((3, 3), np.int64)),  # spatial mismatch
    (np.zeros((3, 5), np.float32), np.array([1, 2, 3]), np.ones(4, np.float32)),  # weight size
    (np.zeros((3, 5), np.float64), np.array([1, 2, 3]), np.ones(5, np.float32)),  # weight dtype
])
def test_cross_entropy_errors_match_torch(args):
    check_error(F.cross_entropy, TF.cross_entropy, list(args), match="")
    if args[1].dtype != np.float32 or args[1].shape != args[0].shape:
        check_error(F.nll_loss, TF.nll_loss, list(args))


def test_cross_entropy_error_messages_name_the_problem():
    err = check_error(F.cross_entropy, TF.cross_entropy, [np.zeros((3, 5), np.float32), np.ones(3, np.float32)])
    assert "Long" in str(err) and "Float" in str(err)
    err = check_error(F.cross_entropy, TF.cross_entropy, [np.zeros((3, 5), np.float32), np.arange(4)])
    assert "(3)" in str(err) and "(4)" in str(err)
    check_error(lambda x, t: F.cross_entropy(x, t, label_smoothing=1.5),
                lambda x, t: TF.cross_entropy(x, t, label_smoothing=1.5), [np.zeros((3, 5), np.float32), np.arange(3)],
                match="label_smoothing")
    check_error(lambda x, p: F.cross_entropy(x, p, ignore_index=1), lambda x, p: TF.cross_entropy(x, p, ignore_index=1),
                [np.zeros((3, 5), np.float32), np.full((3, 5), 0.2, np.float32)], match="ignore_index")


@pytest.mark.parametrize("shapes", CE_SHAPES)
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("weighted", [False, True])
def test_nll_loss_matches_torch(shapes, reduction, weighted, rng):
    x = f32(rng, shapes[0], -3, 0)
    t = _targets(rng, shapes[1], 5, -100)
    extra = [f32(rng, (5,), 0.2, 2.0)] if weighted else []
    check_op(*with_constants(lambda x, t, *w: F.nll_loss(x, t, *w, reduction=reduction),
                             lambda x, t, *w: TF.nll_loss(x, t, *w, reduction=reduction), extra), [x, t],
             grad=len(shapes[0]) > 1, **TOL)
    gradcheck_op(lambda x: F.nll_loss(x, to_jitorch(t), reduction=reduction), [x.astype(np.float64)])


# -- binary cross entropy -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("weight_shape", [None, (4, 3), (3,)])
def test_binary_cross_entropy_matches_torch(reduction, weight_shape, rng):
    x = f32(rng, (4, 3), 0.02, 0.98)
    x.reshape(-1)[:3] = [0.0, 1.0, 1.0]  # saturated probabilities: logs floored at -100, gradients finite
    y = f32(rng, (4, 3), 0.0, 1.0)
    y.reshape(-1)[:3] = [1.0, 0.0, 0.3]
    extra = [f32(rng, weight_shape, 0.2, 2.0)] if weight_shape else []
    check_op(*with_constants(lambda x, y, *w: F.binary_cross_entropy(x, y, *w, reduction=reduction),
                             lambda x, y, *w: TF.binary_cross_entropy(x, y, *w, reduction=reduction), extra),
             [x, y], atol=1e-5, rtol=1e-4, grad_atol=1e-3)
    gradcheck_op(lambda x, y: F.binary_cross_entropy(x, y, reduction=reduction),
                 [rng.uniform(0.1, 0.9, (3, 2)), rng.uniform(0.1, 0.9, (3, 2))])


def test_binary_cross_entropy_double_backward(rng):
    from helpers import gradgradcheck_op

    gradgradcheck_op(lambda x, y: F.binary_cross_entropy(x, y), [rng.uniform(0.1, 0.9, (3,)),
                                                                 rng.uniform(0.1, 0.9, (3,))])


@pytest.mark.parametrize("args", [
    (np.full(3, 0.5, np.float32), np.full((3, 1), 0.5, np.float32)),
    (np.array([0.5, 1.5, 0.2], np.float32), np.full(3, 0.5, np.float32)),
    (np.array([0.5, np.nan, 0.2], np.float32), np.full(3, 0.5, np.float32)),
])
def test_binary_cross_entropy_errors_match_torch(args):
    check_error(F.binary_cross_entropy, TF.binary_cross_entropy, list(args))


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("pos_weight", [False, True])
@pytest.mark.parametrize("weight", [False, True])
def test_bce_with_logits_matches_torch(reduction, pos_weight, weight, rng):
    x = f32(rng, (4, 3), -5, 5)
    x.reshape(-1)[:2] = [100.0, -100.0]  # far beyond exp's float32 range: no overflow
    y = f32(rng, (4, 3), 0, 1)
    pw = f32(rng, (3,), 0.5, 3.0) if pos_weight else None
    w = f32(rng, (4, 3), 0.5, 2.0) if weight else None

    def wrap(fn, lib):
        def run(x, y):
            kw = {"weight": None if w is None else lib.tensor(w), "pos_weight": None if pw is None else lib.tensor(pw)}
            return fn(x, y, reduction=reduction, **kw)
        return run
    check_op(wrap(F.binary_cross_entropy_with_logits, jitorch), wrap(TF.binary_cross_entropy_with_logits, torch),
             [x, y], **TOL)
    consts = {k: jitorch.tensor(v.astype(np.float64)) for k, v in (("weight", w), ("pos_weight", pw)) if v is not None}
    gradcheck_op(lambda x, y: F.binary_cross_entropy_with_logits(x, y, reduction=reduction, **consts),
                 [x.astype(np.float64) / 10, y.astype(np.float64)])


def test_bce_with_logits_size_mismatch_raises():
    check_error(F.binary_cross_entropy_with_logits, TF.binary_cross_entropy_with_logits,
                [np.zeros(3, np.float32), np.zeros((3, 1), np.float32)], match="Target size")


# -- distribution losses --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("reduction", ["none", "sum", "batchmean", "mean"])
@pytest.mark.parametrize("log_target", [False, True])
def test_kl_div_matches_torch(reduction, log_target, rng):
    logp = torch.log_softmax(torch.from_numpy(f32(rng, (4, 5))), 1).numpy()
    q = torch.softmax(torch.from_numpy(f32(rng, (4, 5))), 1).numpy()
    if log_target:
        q = np.log(q)
    else:
        q[0, :2] = 0.0  # 0 * log(0) is 0
    # The target is a constant: at target == 0 PyTorch's target gradient is NaN, jitorch's is 0.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        check_op(*with_constants(lambda a, b: F.kl_div(a, b, reduction=reduction, log_target=log_target),
                                 lambda a, b: TF.kl_div(a, b, reduction=reduction, log_target=log_target), [q]),
                 [logp], **TOL)


def test_kl_div_mean_warns():
    with pytest.warns(UserWarning, match="batchmean"):
        F.kl_div(jitorch.zeros(2, 3), jitorch.ones(2, 3) / 3)


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("log_input", [True, False])
@pytest.mark.parametrize("full", [False, True])
def test_poisson_nll_loss_matches_torch(reduction, log_input, full, rng):
    x = f32(rng, (4, 3), 0.1, 3.0)
    y = rng.integers(0, 5, (4, 3)).astype(np.float32)
    # The target is a constant: where target == 0 PyTorch's target gradient of the Stirling term is NaN.
    check_op(*with_constants(lambda x, y: F.poisson_nll_loss(x, y, log_input, full, reduction=reduction),
                             lambda x, y: TF.poisson_nll_loss(x, y, log_input, full, reduction=reduction), [y]),
             [x], **TOL)


@pytest.mark.parametrize("var_shape", [(4, 3), (4,), (4, 1)])
@pytest.mark.parametrize("full", [False, True])
@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_gaussian_nll_loss_matches_torch(var_shape, full, reduction, rng):
    x, y = f32(rng, (4, 3)), f32(rng, (4, 3))
    var = f32(rng, var_shape, 0.1, 2.0)
    var.reshape(-1)[0] = 1e-8  # clamped to eps in value, not in gradient
    check_op(lambda x, y, v: F.gaussian_nll_loss(x, y, v, full=full, reduction=reduction),
             lambda x, y, v: TF.gaussian_nll_loss(x, y, v, full=full, reduction=reduction), [x, y, var], atol=1e-4,
             rtol=1e-4)
