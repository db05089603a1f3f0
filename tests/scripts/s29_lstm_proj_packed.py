"""Speech / language sequence models with the less common recurrent options (after ESPnet's RNNP encoders, the
LSTMP of Sak et al. 2014 and AllenNLP's encoders): a 2-layer bidirectional nn.LSTM with proj_size over
pack_sequence(enforce_sorted=False) input, h0/c0 of the projected / cell sizes, pad_packed_sequence with
total_length, unpack_sequence / unpad_sequence / PackedSequence.sorted_indices bookkeeping, a GRU with
batch_first=False over pack_padded_sequence, an nn.RNN(nonlinearity="relu"), an LSTMCell / GRUCell decoder loop
with teacher forcing, a layer-normalised LSTM cell written by hand, gradient clipping by value, and masked
sequence-level accuracy on a reversal task.

Data from NumPy, weights from torch.manual_seed, dropout 0: every metric must match torch.
"""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.utils.rnn import (pack_padded_sequence, pack_sequence, pad_packed_sequence, pad_sequence,
                                unpack_sequence, unpad_sequence)

VOCAB, PAD, BOS = 12, 0, 1


class LayerNormLSTMCell(nn.Module):
    def __init__(self, n_in, hidden):
        super().__init__()
        self.ih, self.hh = nn.Linear(n_in, 4 * hidden, bias=False), nn.Linear(hidden, 4 * hidden, bias=False)
        self.ln_ih, self.ln_hh, self.ln_c = nn.LayerNorm(4 * hidden), nn.LayerNorm(4 * hidden), nn.LayerNorm(hidden)

    def forward(self, x, state):
        h, c = state
        gates = self.ln_ih(self.ih(x)) + self.ln_hh(self.hh(h))
        i, f, g, o = gates.chunk(4, 1)
        c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        return torch.sigmoid(o) * torch.tanh(self.ln_c(c)), c


class Seq2Seq(nn.Module):
    def __init__(self, emb=8, hidden=16, proj=6):
        super().__init__()
        self.emb = nn.Embedding(VOCAB, emb, padding_idx=PAD)
        self.enc = nn.LSTM(emb, hidden, num_layers=2, bidirectional=True, proj_size=proj)
        self.bridge = nn.Linear(2 * proj, hidden)
        self.gru = nn.GRU(2 * proj, hidden)
        self.rnn = nn.RNN(emb, hidden, nonlinearity="relu", batch_first=True)
        self.dec = nn.LSTMCell(emb + 2 * proj, hidden)
        self.ln_dec = LayerNormLSTMCell(hidden, hidden)
        self.out = nn.Linear(hidden, VOCAB)
        self.proj, self.hidden = proj, hidden

    def encode(self, seqs):
        packed = pack_sequence([self.emb(s) for s in seqs], enforce_sorted=False)
        b = len(seqs)
        h0 = torch.zeros(4, b, self.proj)
        c0 = torch.zeros(4, b, self.hidden)
        out, (h, c) = self.enc(packed, (h0, c0))
        padded, lengths = pad_packed_sequence(out, total_length=max(len(s) for s in seqs) + 1)
        gru_out, _ = self.gru(pack_padded_sequence(padded, lengths, enforce_sorted=False))
        gru_pad, _ = pad_packed_sequence(gru_out)
        return padded, lengths, h, out, gru_pad

    def forward(self, seqs, targets):
        enc, lengths, h, packed_out, gru_pad = self.encode(seqs)
        mask = torch.arange(enc.shape[0])[:, None] < lengths[None, :]  # T, B
        summary = (enc * mask[..., None]).sum(0) / lengths[:, None]
        h_init = torch.tanh(self.bridge(summary)) + gru_pad.sum(0) / lengths[:, None]
        state = (h_init, torch.zeros(len(seqs), self.hidden))
        state2 = (torch.zeros(len(seqs), self.hidden), torch.zeros(len(seqs), self.hidden))
        prev = torch.full((len(seqs),), BOS, dtype=torch.long)
        logits = []
        for t in range(targets.shape[1]):
            h_dec, c_dec = self.dec(torch.cat([self.emb(prev), summary], 1), state)
            state = (h_dec, c_dec)
            state2 = self.ln_dec(h_dec, state2)
            logits.append(self.out(state2[0]))
            prev = targets[:, t]
        rnn_out, _ = self.rnn(self.emb(targets))
        return torch.stack(logits, 1), rnn_out, packed_out


rng = np.random.RandomState(0)
lengths = rng.randint(3, 8, 24)
seqs = [torch.from_numpy(rng.randint(2, VOCAB, L)) for L in lengths]
targets = pad_sequence([s.flip(0) for s in seqs], batch_first=True, padding_value=PAD)

torch.manual_seed(0)
model = Seq2Seq()
opt = torch.optim.Adam(model.parameters(), lr=1e-2)
losses = []
for epoch in range(4):
    for i in range(0, 24, 8):
        logits, rnn_out, _ = model(seqs[i:i + 8], targets[i:i + 8])
        loss = F.cross_entropy(logits.transpose(1, 2), targets[i:i + 8], ignore_index=PAD)
        loss = loss + 1e-3 * rnn_out.pow(2).mean()
        opt.zero_grad()
        loss.backward()
        nn.utils.clip_grad_value_(model.parameters(), 0.5)
        opt.step()
        losses.append(loss.item())
with torch.no_grad():
    logits, _, packed_out = model(seqs, targets)
    pred = logits.argmax(-1)
    valid = targets != PAD
    tok_acc = ((pred == targets) & valid).sum().item() / valid.sum().item()
    seq_acc = ((pred == targets) | ~valid).all(1).float().mean().item()
    unpacked = unpack_sequence(packed_out)
    padded = pad_sequence(unpacked, batch_first=True)
    unpadded = unpad_sequence(padded, torch.tensor([len(u) for u in unpacked]), batch_first=True)
print(f"initial_loss={losses[0]:.6f}")
print(f"final_loss={losses[-1]:.6f}")
print(f"token_acc={tok_acc:.6f}")
print(f"seq_acc={seq_acc:.6f}")
print(f"proj_out_dim={packed_out.data.shape[-1]}")
print(f"sorted_first={packed_out.sorted_indices[0].item()}")
print(f"unpack_ok={float(all(len(u) == len(s) for u, s in zip(unpadded, seqs)))}")
print(f"unpack_sum={sum(u.sum().item() for u in unpacked):.6f}")
print(f"weight_hr_shape={tuple(model.enc.weight_hr_l0.shape)[0] * 100 + tuple(model.enc.weight_hr_l0.shape)[1]}")
