"""Sentence classifier on nn.TransformerEncoder with a src_key_padding_mask over padded batches, plus a
cross-attention pooling head on nn.MultiheadAttention returning its (head-averaged and per-head) weights, a
norm_first layer, a key_padding_mask of bools and an additive float attn_mask, and nn.TransformerDecoder with a
generate_square_subsequent_mask target mask.

Deterministic: weights from NumPy, dropout 0; metrics must match torch.
"""
import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

rng = np.random.RandomState(0)
VOCAB, PAD, D, NHEAD = 20, 0, 32, 4


def make_batch(n):
    """Label: does token 5 appear before token 7? Lengths vary; padding at the end."""
    lengths = rng.randint(3, 12, size=n)
    seqs = np.full((n, lengths.max()), PAD)
    labels = np.zeros(n, dtype=np.int64)
    for i, L in enumerate(lengths):
        s = rng.randint(1, VOCAB, size=L)
        seqs[i, :L] = s
        p5 = np.where(s == 5)[0]
        p7 = np.where(s == 7)[0]
        labels[i] = int(len(p5) > 0 and (len(p7) == 0 or p5[0] < p7[0]))
    return torch.from_numpy(seqs), torch.from_numpy(labels), torch.from_numpy(lengths)


class PositionalEncoding(nn.Module):
    def __init__(self, d_model, max_len=64):
        super().__init__()
        position = torch.arange(max_len).unsqueeze(1)
        div_term = torch.exp(torch.arange(0, d_model, 2) * (-math.log(10000.0) / d_model))
        pe = torch.zeros(max_len, 1, d_model)
        pe[:, 0, 0::2] = torch.sin(position * div_term)
        pe[:, 0, 1::2] = torch.cos(position * div_term)
        self.register_buffer("pe", pe)

    def forward(self, x):  # (S, N, E)
        return x + self.pe[: x.size(0)]


class Classifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, D, padding_idx=PAD)
        self.pos = PositionalEncoding(D)
        layer = nn.TransformerEncoderLayer(D, NHEAD, dim_feedforward=64, dropout=0.0)
        self.encoder = nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False)
        self.extra = nn.TransformerEncoderLayer(D, NHEAD, 64, dropout=0.0, activation="gelu", batch_first=True,
                                                norm_first=True)
        self.query = nn.Parameter(torch.zeros(1, 1, D))
        self.pool = nn.MultiheadAttention(D, NHEAD, batch_first=True)
        self.head = nn.Linear(D, 2)

    def forward(self, tokens):
        pad_mask = tokens == PAD  # (N, S) True = ignore
        x = self.pos(self.embed(tokens).transpose(0, 1) * math.sqrt(D))
        x = self.encoder(x, src_key_padding_mask=pad_mask)
        x = self.extra(x.transpose(0, 1), src_key_padding_mask=pad_mask)
        q = self.query.expand(tokens.size(0), -1, -1)
        pooled, weights = self.pool(q, x, x, key_padding_mask=pad_mask, need_weights=True)
        return self.head(pooled.squeeze(1)), weights


def init_from_numpy(module, seed):
    r = np.random.RandomState(seed)
    with torch.no_grad():
        for name, p in module.named_parameters():
            if p.dim() > 1:
                bound = math.sqrt(6.0 / (p.shape[0] + p.shape[1]))
                p.copy_(torch.from_numpy(r.uniform(-bound, bound, p.shape).astype(np.float32)))
            elif "norm" in name and name.endswith("weight"):
                p.fill_(1.0)
            else:
                p.copy_(torch.from_numpy(r.uniform(-0.05, 0.05, p.shape).astype(np.float32)))


model = Classifier()
init_from_numpy(model, 1)
opt = torch.optim.Adam(model.parameters(), lr=2e-3)
losses = []
for step in range(50):
    tokens, labels, _ = make_batch(32)
    model.train()
    logits, _ = model(tokens)
    loss = F.cross_entropy(logits, labels)
    opt.zero_grad()
    loss.backward()
    opt.step()
    losses.append(loss.item())

model.eval()
with torch.no_grad():
    tokens, labels, lengths = make_batch(64)
    logits, weights = model(tokens)
    acc = (logits.argmax(1) == labels).float().mean().item()
    # padded keys get exactly zero attention
    pad_weight = weights.squeeze(1)[tokens == PAD].abs().max().item()
    # a padded batch gives the same logits as the unpadded sequences one at a time
    single = torch.cat([model(tokens[i:i + 1, :lengths[i]])[0] for i in range(4)])
    pad_invariance = (single - logits[:4]).abs().max().item()

# per-head weights and an additive float mask on a standalone MultiheadAttention (sequence-first)
mha = nn.MultiheadAttention(D, NHEAD, kdim=16, vdim=24)
init_from_numpy(mha, 2)
q = torch.from_numpy(rng.randn(5, 3, D).astype(np.float32)).requires_grad_()
k = torch.from_numpy(rng.randn(7, 3, 16).astype(np.float32))
v = torch.from_numpy(rng.randn(7, 3, 24).astype(np.float32))
float_mask = torch.from_numpy(rng.randn(5, 7).astype(np.float32))
kpm = torch.zeros(3, 7)
kpm[1, 5:] = float("-inf")  # additive, the same type as attn_mask
out, per_head = mha(q, k, v, key_padding_mask=kpm, attn_mask=float_mask, average_attn_weights=False)
assert per_head.shape == (3, NHEAD, 5, 7)
(out.square().sum() + per_head[:, 1].sum(-1).mean()).backward()

# decoder with a causal target mask
dec_layer = nn.TransformerDecoderLayer(D, NHEAD, 64, dropout=0.0, batch_first=True)
decoder = nn.TransformerDecoder(dec_layer, num_layers=2)
init_from_numpy(decoder, 3)
tgt = torch.from_numpy(rng.randn(2, 6, D).astype(np.float32))
memory = torch.from_numpy(rng.randn(2, 9, D).astype(np.float32))
causal = nn.Transformer.generate_square_subsequent_mask(6)
dec_out = decoder(tgt, memory, tgt_mask=causal, tgt_is_causal=True)
prefix = decoder(tgt[:, :3], memory, tgt_mask=causal[:3, :3])
causal_gap = (dec_out[:, :3] - prefix).abs().max().item()

print(f"initial_loss={losses[0]:.6f}")
print(f"loss_25={losses[25]:.6f}")
print(f"final_loss={losses[-1]:.6f}")
print(f"accuracy={acc:.6f}")
print(f"pad_weight={pad_weight:.6f}")
print(f"pad_invariance_ok={int(pad_invariance < 1e-4)}")
print(f"mha_out_sum={out.sum().item():.6f}")
print(f"mha_head_weight_sum={per_head[1, :, :, 5:].sum().item():.6f}")
print(f"mha_q_grad_norm={q.grad.norm().item():.6f}")
print(f"mha_in_proj_grad_norm={mha.q_proj_weight.grad.norm().item():.6f}")
print(f"decoder_sum={dec_out.sum().item():.6f}")
print(f"causal_ok={int(causal_gap < 1e-4)}")
