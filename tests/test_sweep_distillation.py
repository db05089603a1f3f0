"""Knowledge distillation and weighted losses, run with ``lib=torch`` and ``lib=jitorch`` from the same weights.

A frozen teacher and a student trained by RMSprop on: ``F.kl_div`` with probabilities and with ``log_target=True``
(``batchmean``, ``none``, ``sum``, the ``KLDivLoss`` module), temperature scaling, label-smoothed cross-entropy with
class weights and ``ignore_index`` (class indices, K-dimensional, probabilities), a focal loss from primitives and a
weighted ``nll_loss``; then the edge cases of these losses (every target ignored, ``label_smoothing=1``, zero and
``-inf`` targets).
"""
from __future__ import annotations

import warnings

import numpy as np
import torch

import jitorch
from sweep_helpers import assert_close_tree, load_numpy_state, numpy_state, to_numpy

_rng = np.random.default_rng(0)
X = _rng.standard_normal((12, 8)).astype(np.float32)
Y = _rng.integers(0, 5, 12)
Y[[2, 7]] = -1
Y_SPATIAL = _rng.integers(0, 5, (3, 4))
Y_SPATIAL[0, 1] = -1
CLASS_WEIGHTS = _rng.uniform(0.2, 2, 5).astype(np.float32)


def _teacher_student(lib):
    lib.manual_seed(0)
    nn = lib.nn
    return (nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 5)),
            nn.Sequential(nn.Linear(8, 8), nn.Tanh(), nn.Linear(8, 5)))


def _focal(lib, logits, target, alpha, gamma=2.0, ignore=-1):
    valid = target != ignore
    target = target.clamp(min=0)
    logp = lib.nn.functional.log_softmax(logits, -1).gather(-1, target.unsqueeze(-1)).squeeze(-1)
    loss = -((1 - logp.exp()) ** gamma) * logp * alpha[target]
    return (loss * valid).sum() / valid.sum().clamp(min=1)


def _distill(lib, states, steps=4, temperature=3.0):
    F = lib.nn.functional
    teacher, student = _teacher_student(lib)
    load_numpy_state(lib, teacher, states[0]).eval()
    load_numpy_state(lib, student, states[1])
    opt = lib.optim.RMSprop(student.parameters(), lr=1e-2, momentum=0.5, centered=True)
    x, y, w = lib.tensor(X), lib.tensor(Y), lib.tensor(CLASS_WEIGHTS)
    T = temperature
    history = []
    for _ in range(steps):
        with lib.no_grad():
            t_logits = teacher(x)
        s_logits = student(x)
        s_log, t_log = F.log_softmax(s_logits / T, -1), F.log_softmax(t_logits / T, -1)
        terms = [
            F.kl_div(s_log, t_log.exp(), reduction="batchmean") * T * T,
            F.kl_div(s_log, t_log, reduction="batchmean", log_target=True) * T * T,
            F.kl_div(F.log_softmax(s_logits, -1), F.log_softmax(t_logits, -1), reduction="none",
                     log_target=True).sum(-1).mean(),
            lib.nn.KLDivLoss(reduction="sum")(F.log_softmax(s_logits, -1), F.softmax(t_logits, -1)) * 0.01,
            F.cross_entropy(s_logits, y, weight=w, ignore_index=-1, label_smoothing=0.1),
            lib.nn.CrossEntropyLoss(weight=w, ignore_index=-1, label_smoothing=0.2, reduction="sum")(s_logits, y) / 12,
            F.cross_entropy(s_logits, y, ignore_index=-1, label_smoothing=0.3, reduction="none").mean(),
            F.cross_entropy(s_logits.reshape(3, 4, 5).permute(0, 2, 1), lib.tensor(Y_SPATIAL), weight=w,
                            ignore_index=-1, label_smoothing=0.15),
            F.cross_entropy(s_logits, F.softmax(t_logits, -1), label_smoothing=0.1, weight=w),
            _focal(lib, s_logits, y, w),
            F.nll_loss(F.log_softmax(s_logits, -1), y, weight=w, ignore_index=-1),
        ]
        loss = sum(terms)
        opt.zero_grad()
        loss.backward()
        opt.step()
        history.append([terms, {k: p.grad for k, p in student.named_parameters()}])
    return to_numpy(history), numpy_state(student)


def test_distillation_and_weighted_losses_match_torch():
    states = tuple(numpy_state(m) for m in _teacher_student(torch))
    assert_close_tree(_distill(torch, states), _distill(jitorch, states), rtol=1e-5, atol=1e-6)


def _loss_edges(lib, logits_np):
    F = lib.nn.functional
    logits = lib.tensor(logits_np, requires_grad=True)
    w, y = lib.tensor([0.5, 1.0, 2.0]), lib.tensor([0, 2, -1, 1])
    ignored = lib.tensor([-1, -1, -1, -1])
    log_p = logits.log_softmax(1)
    losses = {
        "all_ignored_smoothed_weighted": F.cross_entropy(logits, ignored, weight=w, ignore_index=-1,
                                                         label_smoothing=0.1),
        "all_ignored": F.cross_entropy(logits, ignored, ignore_index=-1),
        "all_ignored_sum": F.cross_entropy(logits, ignored, ignore_index=-1, reduction="sum", label_smoothing=0.1),
        "full_smoothing": F.cross_entropy(logits, y, ignore_index=-1, label_smoothing=1.0, weight=w),
        "unbatched": F.cross_entropy(logits[0], y[0], label_smoothing=0.1),
        "unbatched_probs": F.cross_entropy(logits[0], logits[1].softmax(0), label_smoothing=0.1),
        "kl_mean": F.kl_div(log_p, log_p.exp().flip(0), reduction="mean"),
        "kl_zero_target": F.kl_div(log_p, lib.tensor([[0.0, 0.5, 0.5]] * 4), reduction="sum"),
        "kl_log_target_inf": F.kl_div(log_p, lib.tensor([[-float("inf"), 0.0, -float("inf")]] * 4),
                                      reduction="sum", log_target=True),
    }
    return {k: to_numpy([v, lib.autograd.grad(v, logits, retain_graph=True)[0]]) for k, v in losses.items()}


def test_loss_edge_cases_match_torch():
    logits = np.random.default_rng(3).standard_normal((4, 3)).astype(np.float32)
    results = []
    for lib in (torch, jitorch):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # kl_div's reduction="mean" warning, in both
            results.append(_loss_edges(lib, logits))
    assert_close_tree(*results, rtol=1e-5, atol=1e-6)
