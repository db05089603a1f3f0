"""Sequence-to-sequence research code, written once against ``lib`` and run with torch and jitorch.

An LSTM encoder-decoder on a toy reversal task: a bidirectional encoder over ``pack_padded_sequence`` (sorted with
``enforce_sorted=True`` and unsorted) and ``pad_packed_sequence``, Bahdanau attention masked with
``masked_fill(-inf)``, teacher forcing decided by NumPy's coin flips, ``CrossEntropyLoss(ignore_index=PAD,
label_smoothing=0.1)``, gradient clipping, and greedy decoding with ``argmax`` that stops once every sequence has
emitted EOS; then a small ``nn.Transformer`` with sinusoidal positions, ``generate_square_subsequent_mask`` and key
padding masks, trained a few steps and decoded greedily.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import jitorch
from sweep_helpers import assert_close_tree, load_numpy_state, numpy_state, to_numpy

pytestmark = pytest.mark.filterwarnings("ignore:Support for mismatched")

PAD, SOS, EOS, VOCAB = 0, 1, 2, 12
B, MAX_LEN = 6, 7


def make_batch(seed, sort):
    """Source sequences of random lengths and their reversals with SOS/EOS, padded with PAD."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(2, MAX_LEN + 1, B)
    lengths[0] = MAX_LEN
    if sort:
        lengths = np.sort(lengths)[::-1].copy()
    src = np.full((B, MAX_LEN), PAD)
    trg = np.full((B, MAX_LEN + 2), PAD)
    for i, n in enumerate(lengths):
        tokens = rng.integers(3, VOCAB, n)
        src[i, :n] = tokens
        trg[i, : n + 2] = [SOS, *tokens[::-1], EOS]
    return src, lengths, trg


def make_seq2seq(lib, emb=8, hid=16):
    nn, F = lib.nn, lib.nn.functional

    class Encoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.embedding = nn.Embedding(VOCAB, emb, padding_idx=PAD)
            self.rnn = nn.LSTM(emb, hid, batch_first=True, bidirectional=True)
            self.fc_h, self.fc_c = nn.Linear(2 * hid, hid), nn.Linear(2 * hid, hid)

        def forward(self, src, lengths, enforce_sorted):
            embedded = self.embedding(src)
            packed = nn.utils.rnn.pack_padded_sequence(embedded, lengths.cpu(), batch_first=True,
                                                       enforce_sorted=enforce_sorted)
            packed_out, (h, c) = self.rnn(packed)
            outputs, _ = nn.utils.rnn.pad_packed_sequence(packed_out, batch_first=True, padding_value=0.0)
            h = lib.tanh(self.fc_h(lib.cat((h[-2], h[-1]), dim=1)))
            c = self.fc_c(lib.cat((c[-2], c[-1]), dim=1))
            return outputs, (h, c)

    class BahdanauAttention(nn.Module):
        def __init__(self):
            super().__init__()
            self.W_enc, self.W_dec = nn.Linear(2 * hid, hid, bias=False), nn.Linear(hid, hid)
            self.v = nn.Linear(hid, 1, bias=False)

        def forward(self, hidden, enc_proj, mask):
            energy = self.v(lib.tanh(enc_proj + self.W_dec(hidden).unsqueeze(1))).squeeze(2)
            energy = energy.masked_fill(mask == 0, float("-inf"))
            return F.softmax(energy, dim=1)

    class Decoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.embedding = nn.Embedding(VOCAB, emb, padding_idx=PAD)
            self.attention = BahdanauAttention()
            self.rnn = nn.LSTMCell(emb + 2 * hid, hid)
            self.fc_out = nn.Linear(hid + 2 * hid + emb, VOCAB)
            self.dropout = nn.Dropout(0.0)

        def forward(self, token, state, enc_out, enc_proj, mask):
            embedded = self.dropout(self.embedding(token))
            a = self.attention(state[0], enc_proj, mask)
            context = lib.bmm(a.unsqueeze(1), enc_out).squeeze(1)
            h, c = self.rnn(lib.cat((embedded, context), dim=1), state)
            return self.fc_out(lib.cat((h, context, embedded), dim=1)), (h, c), a

    class Seq2Seq(nn.Module):
        def __init__(self):
            super().__init__()
            self.encoder, self.decoder = Encoder(), Decoder()

        def forward(self, src, lengths, trg, teacher, enforce_sorted=False):
            enc_out, state = self.encoder(src, lengths, enforce_sorted)
            mask = src[:, : enc_out.shape[1]] != PAD  # pad_packed_sequence pads to the longest length only
            enc_proj = self.decoder.attention.W_enc(enc_out)
            outputs = lib.zeros(trg.shape[0], trg.shape[1], VOCAB)
            token, attn = trg[:, 0], []
            for t in range(1, trg.shape[1]):
                logits, state, a = self.decoder(token, state, enc_out, enc_proj, mask)
                outputs[:, t] = logits
                attn.append(a)
                token = trg[:, t] if teacher[t] else logits.argmax(1)
            return outputs, lib.stack(attn, 1)

        @lib.no_grad()
        def greedy(self, src, lengths, max_len=12):
            enc_out, state = self.encoder(src, lengths, False)
            mask = src[:, : enc_out.shape[1]] != PAD
            enc_proj = self.decoder.attention.W_enc(enc_out)
            token = lib.full((src.shape[0],), SOS, dtype=lib.long)
            finished = lib.zeros(src.shape[0], dtype=lib.bool)
            out = []
            for _ in range(max_len):
                logits, state, _ = self.decoder(token, state, enc_out, enc_proj, mask)
                token = logits.argmax(-1).masked_fill(finished, PAD)
                out.append(token)
                finished |= token == EOS
                if finished.all():
                    break
            return lib.stack(out, 1)

    lib.manual_seed(0)
    return Seq2Seq()


def seq2seq_train(lib, state, sort, steps=4):
    rng = np.random.default_rng(5)
    model = load_numpy_state(lib, make_seq2seq(lib), state)
    criterion = lib.nn.CrossEntropyLoss(ignore_index=PAD, label_smoothing=0.1)
    opt = lib.optim.Adam(model.parameters(), lr=1e-2)
    history = []
    for step in range(steps):
        src, lengths, trg = (lib.tensor(a) for a in make_batch(step, sort))
        teacher = rng.uniform(size=trg.shape[1]) < 0.5
        model.train()
        outputs, attn = model(src, lengths, trg, teacher, enforce_sorted=sort)
        loss = criterion(outputs[:, 1:].reshape(-1, VOCAB), trg[:, 1:].reshape(-1))
        opt.zero_grad()
        loss.backward()
        norm = lib.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        history.append([loss, attn, norm, {n: p.grad for n, p in model.named_parameters()}])
    model.eval()
    src, lengths, _ = make_batch(9, sort)
    decoded = model.greedy(lib.tensor(src), lib.tensor(lengths))
    return to_numpy(history), numpy_state(model), to_numpy(decoded)


@pytest.mark.parametrize("sort", [True, False])
def test_lstm_attention_seq2seq_matches_torch(sort):
    state = numpy_state(make_seq2seq(torch))
    th, jt = seq2seq_train(torch, state, sort), seq2seq_train(jitorch, state, sort)
    attn = th[0][0][1]
    assert (attn[np.broadcast_to(make_batch(0, sort)[0][:, None, :] == PAD, attn.shape)] == 0).all()
    assert_close_tree(th, jt, rtol=1e-4, atol=1e-5)


def make_transformer(lib, d_model=16):
    nn = lib.nn

    class PositionalEncoding(nn.Module):
        def __init__(self, max_len=32):
            super().__init__()
            position = lib.arange(max_len).unsqueeze(1)
            div_term = lib.exp(lib.arange(0, d_model, 2) * (-math.log(10000.0) / d_model))
            pe = lib.zeros(max_len, 1, d_model)
            pe[:, 0, 0::2] = lib.sin(position * div_term)
            pe[:, 0, 1::2] = lib.cos(position * div_term)
            self.register_buffer("pe", pe.transpose(0, 1))

        def forward(self, x):
            return x + self.pe[:, : x.size(1)]

    class TransformerSeq2Seq(nn.Module):
        def __init__(self):
            super().__init__()
            self.src_emb = nn.Embedding(VOCAB, d_model, padding_idx=PAD)
            self.tgt_emb = nn.Embedding(VOCAB, d_model, padding_idx=PAD)
            self.pos = PositionalEncoding()
            self.transformer = nn.Transformer(d_model, nhead=2, num_encoder_layers=2, num_decoder_layers=2,
                                              dim_feedforward=32, dropout=0.0, batch_first=True)
            self.generator = nn.Linear(d_model, VOCAB)

        def encode(self, src):
            pad = src == PAD
            x = self.pos(self.src_emb(src) * math.sqrt(self.transformer.d_model))
            return self.transformer.encoder(x, src_key_padding_mask=pad), pad

        def decode(self, tgt, memory, src_pad):
            mask = nn.Transformer.generate_square_subsequent_mask(tgt.size(1))
            y = self.pos(self.tgt_emb(tgt) * math.sqrt(self.transformer.d_model))
            return self.generator(self.transformer.decoder(y, memory, tgt_mask=mask, tgt_is_causal=True,
                                                           tgt_key_padding_mask=tgt == PAD,
                                                           memory_key_padding_mask=src_pad))

        def forward(self, src, tgt):
            mask = nn.Transformer.generate_square_subsequent_mask(tgt.size(1))
            x = self.pos(self.src_emb(src) * math.sqrt(self.transformer.d_model))
            y = self.pos(self.tgt_emb(tgt) * math.sqrt(self.transformer.d_model))
            out = self.transformer(x, y, tgt_mask=mask, src_key_padding_mask=src == PAD,
                                   tgt_key_padding_mask=tgt == PAD, memory_key_padding_mask=src == PAD)
            return self.generator(out)

    lib.manual_seed(0)
    return TransformerSeq2Seq()


def transformer_train(lib, state, steps=4):
    model = load_numpy_state(lib, make_transformer(lib), state)
    criterion = lib.nn.CrossEntropyLoss(ignore_index=PAD, label_smoothing=0.1)
    opt = lib.optim.AdamW(model.parameters(), lr=3e-3, betas=(0.9, 0.98), eps=1e-9)
    sched = lib.optim.lr_scheduler.LambdaLR(opt, lambda s: min((s + 1) ** -0.5, (s + 1) * 3 ** -1.5))
    history = []
    for step in range(steps):
        src, _, trg = (lib.tensor(a) for a in make_batch(10 + step, False))
        model.train()
        logits = model(src, trg[:, :-1])
        loss = criterion(logits.reshape(-1, VOCAB), trg[:, 1:].reshape(-1))
        opt.zero_grad()
        loss.backward()
        lib.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        history.append([loss, logits, {n: p.grad for n, p in model.named_parameters()}])
    model.eval()
    src = lib.tensor(make_batch(20, False)[0])
    with lib.no_grad():
        memory, src_pad = model.encode(src)
        ys = lib.full((B, 1), SOS, dtype=lib.long)
        for _ in range(MAX_LEN + 1):
            next_token = model.decode(ys, memory, src_pad)[:, -1].argmax(-1)
            ys = lib.cat([ys, next_token.unsqueeze(1)], dim=1)
            if (ys == EOS).any(1).all():
                break
    params = numpy_state(model)
    # The key projection's bias has no effect on attention (softmax is shift-invariant), so its gradient is rounding
    # noise of either sign that AdamW turns into full steps: it is not compared.
    for name in params:
        if name.endswith("attn.in_proj_bias"):
            params[name] = np.concatenate([params[name][:16], params[name][32:]])
    # The encoder's padded rows differ between torch's nested-tensor fast path (zeros) and the dense path; they
    # are masked out of cross-attention, so only the valid rows are compared.
    return to_numpy(history), params, to_numpy([ys, memory[~src_pad]])


def test_transformer_seq2seq_matches_torch():
    state = numpy_state(make_transformer(torch))
    assert_close_tree(transformer_train(torch, state), transformer_train(jitorch, state), rtol=1e-4, atol=1e-5)
