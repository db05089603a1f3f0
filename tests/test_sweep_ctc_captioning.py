"""Sequence transduction research code, written once against ``lib`` and run with torch and jitorch: a CRNN (Conv2d
features, ``permute``/``reshape`` to (T, N, C), a bidirectional LSTM, ``log_softmax(2)``) trained with
``nn.CTCLoss(zero_infinity=True)``, greedy (``argmax``/``unique_consecutive``) and prefix-beam decoding; ``F.ctc_loss``
over padded and concatenated targets, tensor and tuple lengths, int32 and int64, with random upstream gradients
through ``reduction='none'`` and the infinite-loss cases with and without ``zero_infinity``.
The char-RNN and captioning decoders are in ``test_sweep_ctc_captioning_decode.py``."""
from __future__ import annotations

import collections

import numpy as np
import pytest
import torch

import jitorch
from sweep_helpers import LIBS, assert_runs_match, copy_weights

T, N, C = 12, 3, 6
TARGETS = [[1, 2, 2, 3], [4, 4], [5, 1, 3]]
INPUT_LENGTHS = [12, 10, 7]


def make_crnn(lib, n_cls=C):
    nn = lib.nn

    class CRNN(nn.Module):
        def __init__(self):
            super().__init__()
            self.cnn = nn.Sequential(nn.Conv2d(1, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8), nn.ReLU(),
                                     nn.MaxPool2d(2, 2), nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(),
                                     nn.MaxPool2d((2, 1), (2, 1)))
            self.rnn = nn.LSTM(16 * 2, 12, num_layers=2, bidirectional=True)
            self.fc = nn.Linear(24, n_cls)

        def forward(self, x):
            f = self.cnn(x)
            n, c, h, w = f.shape
            f = f.permute(3, 0, 1, 2).reshape(w, n, c * h)  # width is time
            out, _ = self.rnn(f)
            t, b, hid = out.shape
            return self.fc(out.view(t * b, hid)).view(t, b, -1).log_softmax(2)

    return CRNN()


def greedy_decode(lib, log_probs, blank=0):
    """Best path: the most likely class per frame, repeats merged, blanks dropped."""
    outs = []
    for seq in log_probs.argmax(2).transpose(0, 1):
        merged = lib.unique_consecutive(seq)
        outs.append(merged[merged != blank].tolist())
    return outs


def prefix_beam_search(probs, beam=3, blank=0):
    """CTC prefix beam search over one sequence's frame probabilities ``(T, C)`` (NumPy), as tutorials write it."""
    beams = {(): (1.0, 0.0)}  # prefix -> (p ending in blank, p ending in a label)
    for t in range(probs.shape[0]):
        nxt = collections.defaultdict(lambda: [0.0, 0.0])
        for prefix, (p_b, p_nb) in beams.items():
            for c in range(probs.shape[1]):
                p = float(probs[t, c])
                if c == blank:
                    nxt[prefix][0] += (p_b + p_nb) * p
                elif prefix and prefix[-1] == c:
                    nxt[prefix + (c,)][1] += p_b * p
                    nxt[prefix][1] += p_nb * p
                else:
                    nxt[prefix + (c,)][1] += (p_b + p_nb) * p
        beams = dict(sorted(nxt.items(), key=lambda kv: -sum(kv[1]))[:beam])
    return list(max(beams.items(), key=lambda kv: sum(kv[1]))[0])


def crnn_run(lib, ref, compiled=False, steps=3):
    rng = np.random.default_rng(0)
    x = lib.tensor(rng.normal(size=(3, 1, 8, 20)).astype(np.float32))
    targets = lib.cat([lib.tensor(t, dtype=lib.int32) for t in TARGETS])
    target_lengths = lib.tensor([len(t) for t in TARGETS], dtype=lib.int32)
    model = make_crnn(lib)
    copy_weights(ref, model)
    forward = lib.compile(model) if compiled else model
    opt = lib.optim.Adam(model.parameters(), lr=1e-2)
    criterion = lib.nn.CTCLoss(blank=0, reduction="mean", zero_infinity=True)
    out = {"loss": [], "norm": []}
    for i in range(steps):
        opt.zero_grad()
        log_probs = forward(x)
        input_lengths = lib.full((log_probs.size(1),), log_probs.size(0), dtype=lib.int64)
        loss = criterion(log_probs, targets, input_lengths, target_lengths)
        loss.backward()
        if i == 0:
            out["grads"] = {k: p.grad.clone() for k, p in model.named_parameters()}
        out["norm"].append(lib.nn.utils.clip_grad_norm_(model.parameters(), 5.0))
        opt.step()
        out["loss"].append(loss.detach())
    model.eval()
    with lib.no_grad():
        log_probs = model(x)
    out["log_probs"] = log_probs
    out["params"] = dict(model.named_parameters())
    decoded = {"greedy": greedy_decode(lib, log_probs),
               "beam": [prefix_beam_search(log_probs[:, b].exp().numpy()) for b in range(log_probs.size(1))]}
    return out, decoded


def test_crnn_ctc_training_and_decoding_match_torch():
    torch.manual_seed(0)
    ref = make_crnn(torch)
    want, want_decoded = crnn_run(torch, ref)
    got, got_decoded = crnn_run(jitorch, ref)
    assert got_decoded == want_decoded
    assert_runs_match(want, got, rtol=1e-4, atol=1e-5, what="crnn")


def test_compiled_crnn_trains_as_eager():
    torch.manual_seed(1)
    ref = make_crnn(torch)
    eager, eager_decoded = crnn_run(jitorch, ref)
    compiled, compiled_decoded = crnn_run(jitorch, ref, compiled=True)
    assert compiled_decoded == eager_decoded
    assert_runs_match(eager, compiled, rtol=1e-4, atol=1e-5, what="compiled crnn")


def ctc_case(lib, *, reduction, zero_infinity, length_dtype, concatenated, as_tuples, logits, targets, input_lengths,
             target_lengths, upstream, dtype="float32"):
    """``F.ctc_loss`` on ``log_softmax(logits)`` and the logits' gradient (a random upstream gradient under
    ``reduction='none'``)."""
    x = lib.tensor(logits.astype(dtype), requires_grad=True)
    ldt = getattr(lib, length_dtype)
    if concatenated:
        tg = lib.tensor(np.concatenate([t[:n] for t, n in zip(targets, target_lengths)]), dtype=ldt)
    else:
        tg = lib.tensor(targets, dtype=ldt)
    if as_tuples:
        il, tl = tuple(input_lengths), tuple(target_lengths)
    else:
        il, tl = lib.tensor(input_lengths, dtype=ldt), lib.tensor(target_lengths, dtype=ldt)
    loss = lib.nn.functional.ctc_loss(x.log_softmax(2), tg, il, tl, blank=0, reduction=reduction,
                                      zero_infinity=zero_infinity)
    loss.backward(lib.tensor(upstream.astype(dtype)) if reduction == "none" else None)
    return loss.detach(), x.grad


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
@pytest.mark.parametrize("length_dtype", ["int32", "int64"])
@pytest.mark.parametrize("concatenated,as_tuples", [(False, False), (True, True), (True, False)])
def test_ctc_loss_targets_lengths_and_reductions_match_torch(reduction, length_dtype, concatenated, as_tuples):
    rng = np.random.default_rng(2)
    padded = np.array([t + [0] * (4 - len(t)) for t in TARGETS])
    kw = dict(reduction=reduction, zero_infinity=True, length_dtype=length_dtype, concatenated=concatenated,
              as_tuples=as_tuples, logits=rng.normal(size=(T, N, C)), targets=padded,
              input_lengths=INPUT_LENGTHS, target_lengths=[len(t) for t in TARGETS], upstream=rng.normal(size=N))
    want, got = (ctc_case(lib, **kw) for lib in LIBS)
    assert_runs_match(want, got, rtol=1e-5, atol=1e-6, what="ctc")


# Losses finite, inf (three repeated labels need 5 frames, sequence 1 has 4), finite (an empty target: all blanks) and
# inf (one label, no frames: its gradient is 0, as no frame is read).
INFEASIBLE = dict(targets=np.array([[1, 2, 0], [3, 3, 3], [0, 0, 0], [1, 0, 0]]), input_lengths=[5, 4, 3, 0],
                  target_lengths=[2, 3, 0, 1])


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
@pytest.mark.parametrize("zero_infinity", [False, True])
def test_ctc_loss_infinite_losses_and_their_gradients_match_torch(dtype, reduction, zero_infinity):
    """Without ``zero_infinity`` ATen's gradient is NaN over the frames of a sequence whose loss is infinite (and 0
    past its input length); with it, that sequence's loss and gradient are zero."""
    rng = np.random.default_rng(3)
    kw = dict(INFEASIBLE, reduction=reduction, zero_infinity=zero_infinity, length_dtype="int64",
              concatenated=False, as_tuples=False, logits=rng.normal(size=(5, 4, 5)), upstream=rng.normal(size=4),
              dtype=dtype)
    (want_loss, want_grad), (got_loss, got_grad) = (ctc_case(lib, **kw) for lib in LIBS)
    np.testing.assert_array_equal(np.isnan(got_grad.numpy()), np.isnan(want_grad.numpy()))
    assert np.isnan(want_grad.numpy()).any() != zero_infinity
    assert_runs_match([want_loss, want_grad], [got_loss, got_grad], rtol=1e-5, atol=1e-6, what="ctc inf")


def test_ctc_loss_targets_holding_the_blank_follow_atens_recursion():
    """A target label equal to ``blank`` (bad data, but torch computes it) may still be skipped to from the label two
    states back, as ATen's recursion tests the labels, not blankness."""
    rng = np.random.default_rng(4)
    logits = rng.normal(size=(6, 2, 5))
    g = rng.normal(size=2)
    results = []
    for lib in LIBS:
        x = lib.tensor(logits, requires_grad=True)
        loss = lib.nn.functional.ctc_loss(x.log_softmax(2), lib.tensor([[1, 0, 2], [3, 3, 0]]), [6, 6], [3, 2],
                                          blank=0, reduction="none")
        loss.backward(lib.tensor(g))
        results.append([loss.detach(), x.grad])
    assert_runs_match(*results, rtol=1e-10, atol=1e-12, what="blank in targets")


@pytest.mark.parametrize("bad", ["input_lengths", "target_lengths"])
def test_ctc_loss_refuses_floating_lengths_as_torch(bad):
    lengths = {"input_lengths": [6, 6], "target_lengths": [2, 2]}
    for lib in LIBS:
        args = {k: lib.tensor(v, dtype=lib.float32 if k == bad else lib.int64) for k, v in lengths.items()}
        with pytest.raises(RuntimeError, match=f"{bad} must be integral"):
            lib.nn.functional.ctc_loss(lib.randn(6, 2, 5).log_softmax(2), lib.tensor([[1, 2], [3, 3]]), **args)


def test_ctc_loss_refuses_integer_log_probs_as_torch():
    for lib in LIBS:
        with pytest.raises(NotImplementedError, match="\"ctc_loss_cpu\" not implemented for 'Long'"):
            lib.nn.functional.ctc_loss(lib.ones(6, 2, 5, dtype=lib.int64), lib.tensor([[1, 2], [3, 3]]), [6, 6],
                                       [2, 2])


def test_compiled_ctc_loss_matches_eager_including_nan_gradients():
    rng = np.random.default_rng(5)
    logits = rng.normal(size=(8, 2, 5)).astype(np.float32)

    def loss_fn(x, targets, input_lengths, target_lengths):
        return jitorch.nn.functional.ctc_loss(x.log_softmax(2), targets, input_lengths, target_lengths,
                                              reduction="none")

    results = []
    for fn in (loss_fn, jitorch.compile(loss_fn)):
        x = jitorch.tensor(logits, requires_grad=True)
        loss = fn(x, jitorch.tensor([[1, 1, 2], [3, 3, 3]]), jitorch.tensor([8, 4]), jitorch.tensor([3, 3]))
        loss.backward(jitorch.tensor([0.5, 2.0]))
        results.append([loss.detach(), x.grad])
    assert np.isnan(results[0][1].numpy()[:4, 1]).all() and not np.isnan(results[0][1].numpy()[:, 0]).any()
    assert_runs_match(*results, rtol=1e-5, atol=1e-6, what="compiled ctc")
