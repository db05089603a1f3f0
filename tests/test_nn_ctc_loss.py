"""``F.ctc_loss`` and ``nn.CTCLoss`` against PyTorch: padded and concatenated targets, repeated labels, empty targets,
zero-length inputs, impossible alignments (``zero_infinity``), a non-zero blank, unbatched input, every reduction,
and ATen's ``log_probs`` gradient (``exp(log_probs) - posterior``) with and without a ``log_softmax`` in front."""
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


def ctc(targets, input_lengths, target_lengths, softmax=True, module=False, **kw):
    """(jitorch fn, torch fn) of the logits (or log-probabilities when ``softmax`` is False)."""
    def make(lib, fn):
        def call(x):
            lp = x.log_softmax(-1) if softmax else x
            as_t = [lib.tensor(v) if isinstance(v, np.ndarray) else v for v in (targets, input_lengths, target_lengths)]
            loss = fn(**kw) if module else (lambda *a: fn(*a, **kw))
            return loss(lp, *as_t)
        return call
    return (make(jitorch, jitorch.nn.CTCLoss if module else F.ctc_loss),
            make(torch, torch.nn.CTCLoss if module else TF.ctc_loss))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
@pytest.mark.parametrize("softmax", [True, False])
def test_ctc_loss_padded_targets(reduction, dtype, softmax, rng):
    x = rng.uniform(-2, 2, (8, 4, 5)).astype(dtype)
    targets = rng.integers(1, 5, (4, 4))
    targets[0, 1] = targets[0, 0]  # a repeated label needs a blank between its two frames
    check_op(*ctc(targets, [8, 6, 5, 0], [4, 2, 0, 0], softmax, reduction=reduction), [x], **TOL)


@pytest.mark.parametrize("reduction", ["none", "mean"])
def test_ctc_loss_concatenated_targets_and_tensor_lengths(reduction, rng):
    x = rng.uniform(-2, 2, (7, 3, 6)).astype("float32")
    targets = rng.integers(1, 6, (7,))
    lengths = (np.array([7, 5, 4]), np.array([3, 3, 1]))
    check_op(*ctc(targets, *lengths, reduction=reduction), [x], layout="transposed", **TOL)
    check_op(*ctc(targets.astype("int32"), *(v.astype("int32") for v in lengths), reduction=reduction), [x], **TOL)


@pytest.mark.parametrize("reduction", ["none", "sum"])
def test_ctc_loss_impossible_alignments(reduction, rng):
    x = rng.uniform(-2, 2, (6, 3, 4)).astype("float32")
    targets = np.array([[1, 1, 2, 3], [1, 2, 0, 0], [3, 0, 0, 0]])
    # [1, 1, 2, 3] needs 5 frames: 3 give an infinite loss, zeroed with its gradient under zero_infinity.
    check_op(*ctc(targets, [3, 6, 1], [4, 2, 1], reduction=reduction, zero_infinity=True), [x], **TOL)
    check_op(*ctc(targets, [3, 6, 1], [4, 2, 1], reduction=reduction), [x], grad=False, **TOL)


def test_ctc_loss_blank_unbatched_and_module(rng):
    x = rng.uniform(-2, 2, (6, 2, 4)).astype("float64")
    targets = np.array([[0, 2, 1], [1, 1, 0]])  # blank=3: label 0 is an ordinary class
    check_op(*ctc(targets, [6, 5], [3, 2], blank=3, reduction="sum"), [x], **TOL)
    check_op(*ctc(targets[0], np.array(6), np.array(3)), [x[:, 0]], **TOL)
    check_op(*ctc(targets, [6, 4], [3, 2], module=True, blank=3, zero_infinity=True), [x], **TOL)


@pytest.mark.parametrize("case", ["input_lengths past T", "targets too short", "concatenated size", "empty"])
def test_ctc_loss_errors(case, rng):
    x = rng.standard_normal((5, 2, 3)).astype("float32")
    targets, lengths = np.array([[1, 2], [2, 1]]), ([5, 4], [2, 1])
    if case == "input_lengths past T":
        lengths = ([6, 4], [2, 1])
    elif case == "targets too short":
        lengths = ([5, 4], [3, 1])
    elif case == "concatenated size":
        targets = np.array([1, 2, 1, 1])
    else:
        x = x[:0]
    jt, th = ctc(targets, *lengths, softmax=False)
    check_error(jt, th, [x], match="ctc_loss")
