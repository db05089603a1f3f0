"""Margin losses against PyTorch where ATen's loops have semantics a set-based formula misses: repeated class indices
in ``multilabel_margin_loss`` targets, and the target gradient ``soft_margin_loss`` refuses."""
from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as TF
from helpers import check_error, check_op

import jitorch
import jitorch.nn.functional as F
from nn_oracle import torch_single_thread  # noqa: F401 - an autouse fixture: one oracle thread

TOL = {"atol": 1e-5, "rtol": 1e-4}


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
def test_multilabel_margin_loss_counts_repeated_targets(reduction, dtype, rng):
    # ATen adds a listed class's hinge terms once per listing: [3, 3, -1] counts class 3 twice.
    x = rng.uniform(-2, 2, (4, 5)).astype(dtype)
    t = np.array([[3, 3, -1, 1, 0], [0, 1, 0, 1, -1], [2, 2, 2, 2, 2], [4, -1, 4, 4, 4]])
    check_op(lambda x, t: F.multilabel_margin_loss(x, t, reduction=reduction),
             lambda x, t: TF.multilabel_margin_loss(x, t, reduction=reduction), [x, t], **TOL)


def test_multilabel_margin_loss_random_targets(rng):
    x = rng.uniform(-2, 2, (6, 7)).astype("float32")
    t = rng.integers(-1, 7, (6, 7))
    check_op(lambda x, t: F.multilabel_margin_loss(x, t, reduction="none"),
             lambda x, t: TF.multilabel_margin_loss(x, t, reduction="none"), [x, t],
             layout=["transposed", "contiguous"], **TOL)


def test_soft_margin_loss_refuses_a_target_gradient(rng):
    x, y = rng.standard_normal((3, 4)).astype("float32"), np.sign(rng.standard_normal((3, 4))).astype("float32")
    check_op(lambda x, y: F.soft_margin_loss(x, y), lambda x, y: TF.soft_margin_loss(x, y), [x, y], grad=False, **TOL)
    jt_y, th_y = jitorch.tensor(y, requires_grad=True), torch.tensor(y, requires_grad=True)
    check_error(lambda x: F.soft_margin_loss(x, jt_y), lambda x: TF.soft_margin_loss(x, th_y), [x],
                match=["soft_margin_loss", "target"])

