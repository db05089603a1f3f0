"""Time-series forecasting, run with ``lib=torch`` and ``lib=jitorch`` from the same weights and series.

A bidirectional two-layer LSTM encoder over ``pack_padded_sequence`` (unsorted lengths) and ``pad_packed_sequence``,
a GRUCell decoder with teacher forcing, a pre-norm Transformer encoder with a causal mask
(``nn.Transformer.generate_square_subsequent_mask``) and a key padding mask, ``F.huber_loss``, ``clip_grad_norm_``,
AdamW under ``OneCycleLR`` and ``ReduceLROnPlateau``; packed GRU/LSTM(proj_size)/RNN layers on their own.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

import jitorch
from sweep_helpers import assert_close_tree, load_numpy_state, numpy_state, to_numpy

pytestmark = pytest.mark.filterwarnings("ignore:Support for mismatched src_key_padding_mask")

B, T, D = 5, 9, 3
_rng = np.random.default_rng(0)
SERIES = _rng.standard_normal((B, T, D)).astype(np.float32)
LENGTHS = np.array([9, 7, 7, 4, 2])
TARGET = _rng.standard_normal((B, 4, 1)).astype(np.float32)


def _forecaster(lib):
    nn = lib.nn

    class Forecaster(nn.Module):
        def __init__(self):
            super().__init__()
            self.enc = nn.LSTM(D, 8, num_layers=2, batch_first=True, bidirectional=True)
            self.dec, self.head = nn.GRUCell(1, 16), nn.Linear(16, 1)
            layer = nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True, norm_first=True)
            self.tf = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
            self.inp, self.tf_head = nn.Linear(D, 8), nn.Linear(8, 1)

        def forward(self, x, lengths, target, teacher):
            packed = nn.utils.rnn.pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
            out, (h, _) = self.enc(packed)
            padded, _ = nn.utils.rnn.pad_packed_sequence(out, batch_first=True, total_length=T)
            hidden, y, preds = lib.cat([h[-2], h[-1]], 1), x.new_zeros(x.shape[0], 1), []
            for t in range(target.shape[1]):
                hidden = self.dec(y, hidden)
                preds.append(self.head(hidden))
                y = target[:, t] if teacher[t] else preds[-1].detach()
            mask = nn.Transformer.generate_square_subsequent_mask(T)
            pad_mask = lib.arange(T)[None, :] >= lengths[:, None]
            z = self.tf(self.inp(x), mask=mask, is_causal=True, src_key_padding_mask=pad_mask)
            return lib.stack(preds, 1), padded, self.tf_head(z).squeeze(-1) * (~pad_mask)

    lib.manual_seed(0)
    return Forecaster()


def _train(lib, state, steps=4):
    F = lib.nn.functional
    model = load_numpy_state(lib, _forecaster(lib), state)
    opt = lib.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.01)
    sched = lib.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.05, total_steps=steps + 2)
    plateau_opt = lib.optim.SGD([lib.nn.Parameter(lib.zeros(1))], lr=0.1)
    plateau = lib.optim.lr_scheduler.ReduceLROnPlateau(plateau_opt, patience=0, factor=0.5, threshold=1e-2)
    x, lengths, target = lib.tensor(SERIES), lib.tensor(LENGTHS), lib.tensor(TARGET)
    valid = lib.arange(T)[None] < lengths[:, None]
    history = []
    for step in range(steps):
        opt.zero_grad()
        preds, padded, z = model(x, lengths, target, [True, False, True, step % 2 == 0])
        loss = (F.huber_loss(preds, target, delta=0.5) + padded.pow(2).mean()
                + F.huber_loss(z, x[..., 0] * valid, reduction="sum", delta=1.0) / 10)
        loss.backward()
        norm = lib.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        plateau.step(10 - step * 0.001 if step < 2 else 10)
        history.append([preds, padded, z, loss, norm, {k: p.grad for k, p in model.named_parameters()},
                        sched.get_last_lr(), plateau_opt.param_groups[0]["lr"], opt.param_groups[0]["betas"]])
    params = numpy_state(model)
    # The key projection's bias has no effect on attention (softmax is shift-invariant), so its gradient is rounding
    # noise of either sign (1e-10) that AdamW turns into full steps: it is not compared.
    for name in params:
        if name.endswith("self_attn.in_proj_bias"):
            params[name] = np.concatenate([params[name][:8], params[name][16:]])
    return to_numpy(history), params, sched.state_dict(), plateau.state_dict()


def test_forecaster_training_matches_torch():
    state = numpy_state(_forecaster(torch))
    assert_close_tree(_train(torch, state), _train(jitorch, state), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("kind", ["gru", "lstm_proj", "rnn_relu"])
def test_packed_recurrent_layers_match_torch(kind):
    rng = np.random.default_rng(1)
    sequences = [rng.standard_normal((n, 3)).astype(np.float32) for n in (5, 2, 4, 1)]
    weights = rng.standard_normal((5 * 4 * 12,)).astype(np.float32)

    def run(lib, state=None):
        R = lib.nn.utils.rnn
        lib.manual_seed(0)
        rnn = {"gru": lambda: lib.nn.GRU(3, 4, num_layers=2, bidirectional=True),
               "lstm_proj": lambda: lib.nn.LSTM(3, 6, num_layers=2, proj_size=2, bidirectional=True),
               "rnn_relu": lambda: lib.nn.RNN(3, 4, nonlinearity="relu")}[kind]()
        if state is None:
            return numpy_state(rnn)
        load_numpy_state(lib, rnn, state)
        seqs = [lib.tensor(s) for s in sequences]
        padded = R.pad_sequence(seqs, padding_value=-1.0)
        packed = R.pack_sequence(seqs, enforce_sorted=False)
        out, h = rnn(packed)
        out_padded, lengths = R.pad_packed_sequence(out, batch_first=True)
        h = h[0] if isinstance(h, tuple) else h
        upstream = lib.tensor(weights[:out_padded.numel()].reshape(out_padded.shape))
        grads = lib.autograd.grad((out_padded * upstream).sum() + h.pow(2).sum(), list(rnn.parameters()))
        unpadded = R.unpad_sequence(padded.clone(), lib.tensor([5, 2, 4, 1]))  # torch transposes its argument
        return to_numpy([padded, unpadded, packed.batch_sizes, packed.sorted_indices, packed.unsorted_indices,
                         out.data, out_padded, lengths, h, grads])

    state = run(torch)
    assert_close_tree(run(torch, state), run(jitorch, state), rtol=1e-5, atol=1e-6)
