"""A sequence-to-sequence nn.Transformer (after the PyTorch "Language Translation with nn.Transformer" tutorial)
trained on a toy reversal task, with generate_square_subsequent_mask, src/tgt key-padding masks, sinusoidal
positional encoding as a buffer, Xavier init, then greedy decoding and batched beam search in the style of
fairseq/HF generate: log-probabilities accumulated over (batch * beam), candidates from topk over the flattened
beam x vocab scores, beam/token recovered with torch.div(rounding_mode="floor") and remainder, history reordered
with index_select, finished hypotheses masked with masked_fill(-inf), and a GNMT length penalty.

Weights come from the default init under torch.manual_seed (jitorch reproduces torch's stream) and no dropout is
used, so metrics must match torch.
"""
import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

PAD, BOS, EOS = 0, 1, 2


class PositionalEncoding(nn.Module):
    def __init__(self, emb_size, dropout, maxlen=64):
        super().__init__()
        den = torch.exp(-torch.arange(0, emb_size, 2) * math.log(10000) / emb_size)
        pos = torch.arange(0, maxlen).reshape(maxlen, 1)
        pos_embedding = torch.zeros((maxlen, emb_size))
        pos_embedding[:, 0::2] = torch.sin(pos * den)
        pos_embedding[:, 1::2] = torch.cos(pos * den)
        self.dropout = nn.Dropout(dropout)
        self.register_buffer("pos_embedding", pos_embedding.unsqueeze(-2))

    def forward(self, token_embedding):
        return self.dropout(token_embedding + self.pos_embedding[: token_embedding.size(0), :])


class Seq2SeqTransformer(nn.Module):
    def __init__(self, vocab, emb=32, nhead=4, layers=2, ff=64):
        super().__init__()
        self.transformer = nn.Transformer(d_model=emb, nhead=nhead, num_encoder_layers=layers,
                                          num_decoder_layers=layers, dim_feedforward=ff, dropout=0.0)
        self.generator = nn.Linear(emb, vocab)
        self.src_tok_emb, self.tgt_tok_emb = nn.Embedding(vocab, emb), nn.Embedding(vocab, emb)
        self.positional_encoding = PositionalEncoding(emb, dropout=0.0)
        self.emb_size = emb

    def embed(self, emb, tokens):
        return self.positional_encoding(emb(tokens.long()) * math.sqrt(self.emb_size))

    def forward(self, src, trg, tgt_mask, src_padding_mask, tgt_padding_mask):
        outs = self.transformer(self.embed(self.src_tok_emb, src), self.embed(self.tgt_tok_emb, trg), None, tgt_mask,
                                None, src_padding_mask, tgt_padding_mask, src_padding_mask)
        return self.generator(outs)

    def encode(self, src, src_padding_mask):
        return self.transformer.encoder(self.embed(self.src_tok_emb, src), src_key_padding_mask=src_padding_mask)

    def decode(self, tgt, memory, memory_padding_mask):
        tgt_mask = nn.Transformer.generate_square_subsequent_mask(tgt.size(0))
        return self.transformer.decoder(self.embed(self.tgt_tok_emb, tgt), memory, tgt_mask,
                                        memory_key_padding_mask=memory_padding_mask)


def make_batch(rs, n, vocab):
    srcs, tgts = [], []
    for _ in range(n):
        seq = rs.randint(3, vocab, rs.randint(3, 7)).tolist()
        srcs.append(torch.tensor(seq + [EOS]))
        tgts.append(torch.tensor([BOS] + seq[::-1] + [EOS]))
    pad = nn.utils.rnn.pad_sequence
    return pad(srcs, padding_value=PAD), pad(tgts, padding_value=PAD)  # (S, N), (T, N)


@torch.no_grad()
def beam_search(model, src, beam=3, max_len=9, alpha=0.6):
    n = src.size(1)
    src_pad = (src == PAD).transpose(0, 1)
    memory = model.encode(src, src_pad)
    memory = memory.repeat_interleave(beam, dim=1)
    mem_pad = src_pad.repeat_interleave(beam, dim=0)
    ys = torch.full((1, n * beam), BOS, dtype=torch.long)
    scores = torch.zeros(n, beam)
    scores[:, 1:] = float("-inf")  # all beams start identical: keep one
    finished = torch.zeros(n * beam, dtype=torch.bool)
    for _ in range(max_len):
        out = model.decode(ys, memory, mem_pad)
        logp = F.log_softmax(model.generator(out[-1]), dim=-1)  # (n*beam, V)
        V = logp.size(-1)
        logp = logp.masked_fill(finished.unsqueeze(1), float("-inf"))
        logp[:, PAD] = float("-inf")
        logp[finished, EOS] = 0.0  # a finished beam only extends with EOS at no cost
        cand = (scores.view(-1, 1) + logp).view(n, beam * V)
        top_scores, top_idx = cand.topk(beam, dim=1)
        beam_idx = torch.div(top_idx, V, rounding_mode="floor")
        token = top_idx.remainder(V)
        flat = (beam_idx + torch.arange(n).unsqueeze(1) * beam).view(-1)
        ys = torch.cat([ys.index_select(1, flat), token.view(1, -1)], dim=0)
        finished = finished.index_select(0, flat) | (token.view(-1) == EOS)
        scores = top_scores
        if finished.all():
            break
    lengths = ((ys != EOS).cumsum(0) == torch.arange(1, ys.size(0) + 1).unsqueeze(1)).sum(0).float()
    lp = ((5 + lengths) / 6) ** alpha
    best = (scores.view(-1) / lp).view(n, beam).argmax(1)
    pick = best + torch.arange(n) * beam
    return ys[:, pick], scores.gather(1, best.unsqueeze(1)).squeeze(1)


torch.manual_seed(0)
vocab = 12
model = Seq2SeqTransformer(vocab)
for p in model.parameters():
    if p.dim() > 1:
        nn.init.xavier_uniform_(p)
opt = torch.optim.Adam(model.parameters(), lr=2e-3, betas=(0.9, 0.98), eps=1e-9)
rs = np.random.RandomState(0)
losses = []
for step in range(60):
    src, tgt = make_batch(rs, 16, vocab)
    tgt_input, tgt_out = tgt[:-1, :], tgt[1:, :]
    tgt_mask = nn.Transformer.generate_square_subsequent_mask(tgt_input.size(0))
    logits = model(src, tgt_input, tgt_mask, (src == PAD).transpose(0, 1), (tgt_input == PAD).transpose(0, 1))
    loss = F.cross_entropy(logits.reshape(-1, vocab), tgt_out.reshape(-1), ignore_index=PAD)
    opt.zero_grad()
    loss.backward()
    nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    losses.append(loss.item())
model.eval()
src, tgt = make_batch(np.random.RandomState(5), 6, vocab)
hyps, hyp_scores = beam_search(model, src)
with torch.no_grad():  # greedy, for comparison
    mem = model.encode(src, (src == PAD).transpose(0, 1))
    ys = torch.full((1, 6), BOS, dtype=torch.long)
    for _ in range(8):
        nxt = model.generator(model.decode(ys, mem, (src == PAD).transpose(0, 1))[-1]).argmax(-1)
        ys = torch.cat([ys, nxt.unsqueeze(0)])
L = min(hyps.size(0), tgt.size(0))
exact = ((hyps[:L] == tgt[:L]) | (tgt[:L] == PAD)).all(0).float().mean().item()
print("beam:", hyps.t().tolist()[0], "target:", tgt.t().tolist()[0])
print(f"initial_loss={losses[0]:.6f}")
print(f"loss_30={losses[30]:.6f}")
print(f"final_loss={losses[-1]:.6f}")
print(f"beam_exact={exact:.6f}")
print(f"beam_score_sum={hyp_scores.sum().item():.5f}")
print(f"beam_checksum={sum((i + 1) * t for i, t in enumerate(hyps.flatten().tolist()))}")
print(f"greedy_checksum={sum((i + 1) * t for i, t in enumerate(ys.flatten().tolist()))}")
