"""Seq2seq GRU encoder-decoder with Bahdanau (additive) attention learning to reverse digit strings
(after the PyTorch seq2seq translation tutorial): variable-length sources padded by pad_sequence, a bidirectional
encoder over pack_padded_sequence(enforce_sorted=False) / pad_packed_sequence, a source-padding mask in the
attention, teacher forcing on a NumPy coin, NLLLoss(ignore_index=PAD), greedy decoding.

Deterministic: weights from NumPy, no dropout; metrics must match torch.
"""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence, pad_sequence

PAD, SOS, EOS = 0, 1, 2
VOCAB = 13  # 3 specials + digits 0..9
rng = np.random.RandomState(0)


def make_pair():
    n = rng.randint(2, 7)
    src = rng.randint(3, VOCAB, size=n)
    return torch.tensor(list(src) + [EOS]), torch.tensor(list(src[::-1]) + [EOS])


class Encoder(nn.Module):
    def __init__(self, vocab, emb, hid):
        super().__init__()
        self.embedding = nn.Embedding(vocab, emb, padding_idx=PAD)
        self.rnn = nn.GRU(emb, hid, batch_first=True, bidirectional=True)
        self.fc = nn.Linear(hid * 2, hid)

    def forward(self, src, src_len):
        embedded = self.embedding(src)
        packed = pack_padded_sequence(embedded, src_len, batch_first=True, enforce_sorted=False)
        packed_outputs, hidden = self.rnn(packed)
        outputs, lengths = pad_packed_sequence(packed_outputs, batch_first=True, total_length=src.size(1))
        assert torch.equal(lengths, src_len)
        hidden = torch.tanh(self.fc(torch.cat((hidden[-2, :, :], hidden[-1, :, :]), dim=1)))
        return outputs, hidden


class BahdanauAttention(nn.Module):
    def __init__(self, enc_hid, dec_hid):
        super().__init__()
        self.Wa = nn.Linear(enc_hid * 2 + dec_hid, dec_hid)
        self.Va = nn.Linear(dec_hid, 1, bias=False)

    def forward(self, hidden, encoder_outputs, mask):
        src_len = encoder_outputs.shape[1]
        hidden = hidden.unsqueeze(1).repeat(1, src_len, 1)
        energy = torch.tanh(self.Wa(torch.cat((hidden, encoder_outputs), dim=2)))
        scores = self.Va(energy).squeeze(2)
        scores = scores.masked_fill(mask == 0, -1e10)
        return F.softmax(scores, dim=1)


class AttnDecoder(nn.Module):
    def __init__(self, vocab, emb, enc_hid, dec_hid):
        super().__init__()
        self.embedding = nn.Embedding(vocab, emb)
        self.attention = BahdanauAttention(enc_hid, dec_hid)
        self.rnn = nn.GRU(enc_hid * 2 + emb, dec_hid)
        self.out = nn.Linear(enc_hid * 2 + dec_hid + emb, vocab)

    def forward(self, inp, hidden, encoder_outputs, mask):
        embedded = self.embedding(inp.unsqueeze(0))  # (1, B, E)
        a = self.attention(hidden, encoder_outputs, mask).unsqueeze(1)  # (B, 1, S)
        weighted = torch.bmm(a, encoder_outputs).permute(1, 0, 2)  # (1, B, 2H)
        output, hidden = self.rnn(torch.cat((embedded, weighted), dim=2), hidden.unsqueeze(0))
        assert (output == hidden).all()
        pred = self.out(torch.cat((output.squeeze(0), weighted.squeeze(0), embedded.squeeze(0)), dim=1))
        return F.log_softmax(pred, dim=1), hidden.squeeze(0), a.squeeze(1)


class Seq2Seq(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = Encoder(VOCAB, 12, 24)
        self.decoder = AttnDecoder(VOCAB, 12, 24, 24)

    def forward(self, src, src_len, trg, teacher_forcing):
        batch_size, trg_len = trg.shape
        outputs = torch.zeros(trg_len, batch_size, VOCAB)
        encoder_outputs, hidden = self.encoder(src, src_len)
        mask = src != PAD
        inp = torch.full((batch_size,), SOS, dtype=torch.long)
        attentions = []
        for t in range(trg_len):
            output, hidden, attn = self.decoder(inp, hidden, encoder_outputs, mask)
            outputs[t] = output
            attentions.append(attn)
            top1 = output.argmax(1)
            inp = trg[:, t] if teacher_forcing[t] else top1
        return outputs, torch.stack(attentions, 1)


model = Seq2Seq()
init = np.random.RandomState(42)
with torch.no_grad():
    for name, p in model.named_parameters():
        p.copy_(torch.from_numpy(init.uniform(-0.08, 0.08, p.shape).astype(np.float32)))
    model.encoder.embedding.weight[PAD].zero_()
optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
criterion = nn.NLLLoss(ignore_index=PAD)

losses = []
for step in range(60):
    pairs = [make_pair() for _ in range(16)]
    src = pad_sequence([p[0] for p in pairs], batch_first=True, padding_value=PAD)
    trg = pad_sequence([p[1] for p in pairs], batch_first=True, padding_value=PAD)
    src_len = torch.tensor([len(p[0]) for p in pairs])
    teacher = rng.rand(trg.size(1)) < 0.75
    model.train()
    optimizer.zero_grad()
    output, _ = model(src, src_len, trg, teacher)
    loss = criterion(output.view(-1, VOCAB), trg.t().reshape(-1))
    loss.backward()
    nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    losses.append(loss.item())
    if step % 20 == 0:
        print(f"step {step}: loss {loss.item():.4f}")

model.eval()
with torch.no_grad():
    pairs = [make_pair() for _ in range(32)]
    src = pad_sequence([p[0] for p in pairs], batch_first=True)
    trg = pad_sequence([p[1] for p in pairs], batch_first=True)
    src_len = torch.tensor([len(p[0]) for p in pairs])
    out, attn = model(src, src_len, trg, np.zeros(trg.size(1), dtype=bool))
    pred = out.argmax(-1).t()
    keep = trg != PAD
    token_acc = ((pred == trg) & keep).sum().item() / keep.sum().item()
    eval_loss = criterion(out.view(-1, VOCAB), trg.t().reshape(-1)).item()
    # attention never looks at padding
    pad_attn = attn.masked_select(~(src != PAD).unsqueeze(1).expand_as(attn)).abs().max().item()
print(f"initial_loss={losses[0]:.6f}")
print(f"loss_30={losses[30]:.6f}")
print(f"final_loss={losses[-1]:.6f}")
print(f"eval_loss={eval_loss:.6f}")
print(f"token_acc={token_acc:.6f}")
print(f"pad_attention={pad_attn:.6f}")
