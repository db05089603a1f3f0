"""Losses (nn.functional and the loss modules) against PyTorch: every reduction, class weights, ignore_index, label
smoothing, spatial and probability targets, input and target gradients with random upstream gradients, gradcheck in
float64, legacy size_average/reduce, and PyTorch's error types."""
from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
import torch.nn as tnn
import torch.nn.functional as TF
from helpers import check_error, check_op, gradcheck_op, to_jitorch, to_torch

import jitorch
import jitorch.nn.functional as F
from jitorch.nn.modules import loss as L

TOL = {"atol": 1e-5, "rtol": 1e-4}
REDUCTIONS = ["none", "mean", "sum"]


def f32(rng, shape, low=-2.0, high=2.0):
    return rng.uniform(low, high, shape).astype(np.float32)


def with_constants(jt_fn, th_fn, consts):
    """Functions of the gradient-carrying arrays only: ``consts`` (weights, targets that PyTorch refuses to
    differentiate) are appended as constant tensors."""
    jt_c = [to_jitorch(c) for c in consts]
    th_c = [to_torch(c) for c in consts]
    return (lambda *t: jt_fn(*t, *jt_c)), (lambda *t: th_fn(*t, *th_c))


def call(name, **kw):
    """(jitorch fn, torch fn) calling the functional ``name`` with keyword arguments ``kw``."""
    return (lambda *a: getattr(F, name)(*a, **kw)), (lambda *a: getattr(TF, name)(*a, **kw))


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


# -- embedding and margin losses ------------------------------------------------------------------------------------
@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_embedding_and_margin_losses_match_torch(reduction, rng):
    a, b, c = f32(rng, (5, 4)), f32(rng, (5, 4)), f32(rng, (5, 4))
    sign = np.array([1, -1, 1, -1, -1], np.float32)
    s1, s2 = f32(rng, (5,)), f32(rng, (5,))
    cases = [
        ("cosine_embedding_loss", [a, b, sign], {"margin": 0.2}),
        ("cosine_embedding_loss", [a[0], b[0], np.array(-1.0, np.float32)], {}),
        ("margin_ranking_loss", [s1, s2, sign], {"margin": 0.5}),
        ("hinge_embedding_loss", [a, np.where(rng.random((5, 4)) < 0.5, 1.0, -1.0).astype(np.float32)],
         {"margin": 1.5}),
        ("soft_margin_loss", [a], {"target": np.where(rng.random((5, 4)) < 0.5, 1.0, -1.0).astype(np.float32)}),
        ("triplet_margin_loss", [a, b, c], {}),
        ("triplet_margin_loss", [a, b, c], {"p": 1.0, "swap": True, "margin": 2.0}),
        ("multilabel_soft_margin_loss", [a, (rng.random((5, 4)) < 0.5).astype(np.float32)], {}),
    ]
    for name, args, kw in cases:
        consts = [kw.pop("target")] if "target" in kw else []  # PyTorch refuses a soft_margin target gradient
        check_op(*with_constants(*call(name, reduction=reduction, **kw), consts), args, **TOL)


def test_triplet_margin_with_distance_loss(rng):
    a, b, c = f32(rng, (5, 4)), f32(rng, (5, 4)), f32(rng, (5, 4))
    for distance in (None, "cosine"):
        jt_d = None if distance is None else (lambda x, y: 1 - F.cosine_similarity(x, y))
        th_d = None if distance is None else (lambda x, y: 1 - TF.cosine_similarity(x, y))
        check_op(lambda *t: F.triplet_margin_with_distance_loss(*t, distance_function=jt_d, swap=True),
                 lambda *t: TF.triplet_margin_with_distance_loss(*t, distance_function=th_d, swap=True), [a, b, c],
                 **TOL)


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("p", [1, 2])
@pytest.mark.parametrize("weighted", [False, True])
def test_multi_margin_loss_matches_torch(reduction, p, weighted, rng):
    x, t = f32(rng, (5, 4)), rng.integers(0, 4, 5)
    extra = [f32(rng, (4,), 0.5, 2.0)] if weighted else []
    check_op(*with_constants(lambda x, t, *w: F.multi_margin_loss(x, t, p, 0.7, *w, reduction=reduction),
                             lambda x, t, *w: TF.multi_margin_loss(x, t, p, 0.7, *w, reduction=reduction), extra),
             [x, t], **TOL)
    check_op(lambda x, t: F.multi_margin_loss(x, t), lambda x, t: TF.multi_margin_loss(x, t),
             [f32(rng, (4,)), np.array(2)], **TOL)


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_multilabel_margin_loss_matches_torch(reduction, rng):
    x = f32(rng, (3, 4))
    t = np.array([[3, 0, -1, 1], [0, 1, 2, 3], [-1, 2, 1, 0]])
    check_op(lambda x, t: F.multilabel_margin_loss(x, t, reduction=reduction),
             lambda x, t: TF.multilabel_margin_loss(x, t, reduction=reduction), [x, t], **TOL)
    check_op(lambda x, t: F.multilabel_margin_loss(x, t), lambda x, t: TF.multilabel_margin_loss(x, t),
             [x[0], t[0]], **TOL)


@pytest.mark.parametrize("name,args,kw", [
    ("margin_ranking_loss", [(3,), (3,), (3, 1)], {}),
    ("triplet_margin_loss", [(3, 2), (3, 2), (3,)], {}),
    ("triplet_margin_loss", [(3, 2), (3, 2), (3, 2)], {"margin": 0.0}),
    ("cosine_embedding_loss", [(3, 2), (3, 2), (3, 1)], {}),
    ("multi_margin_loss", [(3, 2), None], {"p": 3}),
])
def test_margin_loss_errors_match_torch(name, args, kw):
    arrays = [np.ones(s, np.float32) if s is not None else np.zeros(3, np.int64) for s in args]
    check_error(*call(name, **kw), arrays)


def test_margin_losses_gradcheck(rng):
    a, b, c = (rng.standard_normal((3, 4)) for _ in range(3))
    gradcheck_op(lambda a, b, c: F.triplet_margin_loss(a, b, c, margin=3.0, swap=True), [a, b, c])
    gradcheck_op(lambda a, b: F.cosine_embedding_loss(a, b, jitorch.tensor([1.0, -1.0, -1.0]), margin=-0.9),
                 [a, b])
    gradcheck_op(lambda a: F.soft_margin_loss(a, jitorch.tensor([[1.0, -1.0, 1.0, -1.0]])), [a])
    gradcheck_op(lambda a, b: F.kl_div(a, b, reduction="batchmean"), [a, rng.uniform(0.1, 1.0, (3, 4))])
    gradcheck_op(lambda a: F.multilabel_soft_margin_loss(a, jitorch.tensor([[1.0, 0.0, 1.0, 0.0]])), [a])


# -- loss modules ---------------------------------------------------------------------------------------------------
def _module_cases(rng):
    x, y = f32(rng, (4, 5)), f32(rng, (4, 5))
    probs, labels = f32(rng, (4, 5), 0.05, 0.95), f32(rng, (4, 5), 0, 1)
    logits, classes = f32(rng, (4, 5), -3, 3), rng.integers(0, 5, 4)
    w5 = f32(rng, (5,), 0.5, 2.0)
    sign4 = np.array([1, -1, 1, -1], np.float32)
    return [
        ("L1Loss", {}, [x, y]), ("MSELoss", {"reduction": "sum"}, [x, y]),
        ("SmoothL1Loss", {"beta": 0.5}, [x, y]), ("HuberLoss", {"delta": 0.7}, [x, y]),
        ("CrossEntropyLoss", {"weight": w5, "label_smoothing": 0.1}, [logits, classes]),
        ("CrossEntropyLoss", {"ignore_index": 1, "reduction": "none"}, [logits, classes]),
        ("NLLLoss", {"weight": w5}, [np.log(probs), classes]),
        ("BCELoss", {"weight": w5}, [probs, labels]),
        ("BCEWithLogitsLoss", {"pos_weight": w5}, [logits, labels]),
        ("KLDivLoss", {"reduction": "batchmean", "log_target": True}, [np.log(probs), np.log(labels + 0.1)]),
        ("PoissonNLLLoss", {"full": True}, [x, np.abs(y) * 3]),
        ("HingeEmbeddingLoss", {"margin": 0.5}, [x, np.sign(y)]),
        ("SoftMarginLoss", {}, [x, np.sign(y).astype(np.int64)]),
        ("MultiLabelSoftMarginLoss", {"weight": w5}, [x, labels.round()]),
        ("MultiMarginLoss", {"p": 2, "weight": w5}, [x, classes]),
        ("MultiLabelMarginLoss", {}, [x, np.array([[1, 2, -1, 0, 0]] * 4)]),
        ("CosineEmbeddingLoss", {"margin": 0.1}, [x, y, sign4]),
        ("MarginRankingLoss", {"margin": 0.1}, [x[:, 0], y[:, 0], sign4]),
        ("TripletMarginLoss", {"swap": True}, [x, y, f32(rng, (4, 5))]),
        ("TripletMarginWithDistanceLoss", {}, [x, y, f32(rng, (4, 5))]),
    ]


def test_loss_modules_match_torch(rng):
    for name, kw, args in _module_cases(rng):
        jt_kw = {k: jitorch.tensor(v) if isinstance(v, np.ndarray) else v for k, v in kw.items()}
        th_kw = {k: torch.from_numpy(v) if isinstance(v, np.ndarray) else v for k, v in kw.items()}
        jt_mod, th_mod = getattr(L, name)(**jt_kw), getattr(tnn, name)(**th_kw)
        assert repr(jt_mod) == repr(th_mod)
        check_op(jt_mod, th_mod, args, **TOL)
        if "weight" in kw:
            assert "weight" in dict(jt_mod.named_buffers())  # a buffer: it follows .to() and state_dict


def test_gaussian_nll_module_and_legacy_module_args(rng):
    x, y, var = f32(rng, (4, 3)), f32(rng, (4, 3)), f32(rng, (4, 3), 0.1, 2)
    check_op(L.GaussianNLLLoss(full=True), tnn.GaussianNLLLoss(full=True), [x, y, var], **TOL)
    with pytest.warns(UserWarning, match="size_average"):
        assert L.MSELoss(size_average=False).reduction == "sum"
    with pytest.warns(FutureWarning, match="NLLLoss2d"):
        L.NLLLoss2d()
    with pytest.raises(ValueError):
        L.TripletMarginLoss(margin=0.0)
    with pytest.raises(ValueError):
        L.MultiMarginLoss(p=3)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_losses_keep_half_dtypes(dtype, rng):
    x = jitorch.tensor(f32(rng, (4, 5))).to(getattr(jitorch, dtype))
    t = jitorch.tensor([1, 0, 4, -100])
    assert F.cross_entropy(x, t).dtype is x.dtype
    assert F.cross_entropy(x, t, label_smoothing=0.1).dtype is x.dtype
    assert F.nll_loss(x, t, reduction="none").dtype is x.dtype
    assert F.binary_cross_entropy_with_logits(x, x.sigmoid()).dtype is x.dtype
    assert F.mse_loss(x, x * 2).dtype is x.dtype
