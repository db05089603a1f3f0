"""Embedding and margin losses, the loss modules and half-precision losses, checked against PyTorch 2.13."""
from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn as tnn
import torch.nn.functional as TF
from helpers import check_error, check_op, gradcheck_op

import jitorch
import jitorch.nn.functional as F
from jitorch.nn.modules import loss as L

from nn_losses_helpers import REDUCTIONS, TOL, call, f32, with_constants


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
