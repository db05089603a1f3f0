"""TransformerEncoder sequence classifier with a float -inf causal mask and a key padding mask."""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class PositionalEncoding(nn.Module):
    def __init__(self, d_model, dropout=0.1, max_len=64):
        super().__init__()
        self.dropout = nn.Dropout(p=dropout)
        position = torch.arange(max_len).unsqueeze(1)
        div_term = torch.exp(torch.arange(0, d_model, 2) * (-math.log(10000.0) / d_model))
        pe = torch.zeros(max_len, 1, d_model)
        pe[:, 0, 0::2] = torch.sin(position * div_term)
        pe[:, 0, 1::2] = torch.cos(position * div_term)
        self.register_buffer("pe", pe)

    def forward(self, x):  # x: (seq, batch, d_model)
        x = x + self.pe[:x.size(0)]
        return self.dropout(x)


def generate_square_subsequent_mask(sz):
    return torch.triu(torch.full((sz, sz), float("-inf")), diagonal=1)


class Classifier(nn.Module):
    def __init__(self, ntoken, d_model=32, nhead=4, d_hid=64, nlayers=2, nclass=2, dropout=0.1):
        super().__init__()
        self.embedding = nn.Embedding(ntoken, d_model, padding_idx=0)
        self.pos_encoder = PositionalEncoding(d_model, dropout)
        encoder_layers = nn.TransformerEncoderLayer(d_model, nhead, d_hid, dropout)
        self.transformer_encoder = nn.TransformerEncoder(encoder_layers, nlayers, enable_nested_tensor=False)
        self.head = nn.Linear(d_model, nclass)
        self.d_model = d_model

    def forward(self, src, src_mask, padding_mask):
        # src: (seq, batch); padding_mask: (batch, seq) True where padded
        x = self.embedding(src) * math.sqrt(self.d_model)
        x = self.pos_encoder(x)
        out = self.transformer_encoder(x, mask=src_mask, src_key_padding_mask=padding_mask)
        lengths = (~padding_mask).sum(1)
        last = out[lengths - 1, torch.arange(src.size(1))]  # causal: last real token sees the whole sequence
        return self.head(last)


def make_batch(gen, batch, max_len=12, vocab=10):
    """Label 1 iff token 3 occurs in the (variable-length) sequence; 0 is the pad token."""
    lengths = torch.randint(4, max_len + 1, (batch,), generator=gen)
    src = torch.randint(1, vocab, (max_len, batch), generator=gen)
    pad = torch.arange(max_len).unsqueeze(0) >= lengths.unsqueeze(1)  # (batch, seq)
    src = src.masked_fill(pad.t(), 0)
    labels = ((src == 3) & ~pad.t()).any(0).long()
    return src, pad, labels


torch.manual_seed(0)
gen = torch.Generator().manual_seed(123)
model = Classifier(10)
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: min(1.0, (step + 1) / 10))
mask = generate_square_subsequent_mask(12)
losses = []
for step in range(60):
    model.train()
    src, pad, labels = make_batch(gen, 32)
    logits = model(src, mask, pad)
    loss = F.cross_entropy(logits, labels)
    optimizer.zero_grad()
    loss.backward()
    nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    scheduler.step()
    losses.append(loss.item())
    if step % 20 == 0:
        print(f"step {step:3d} loss {loss.item():.4f}")

model.eval()
with torch.inference_mode():
    src, pad, labels = make_batch(gen, 256)
    acc = (model(src, mask, pad).argmax(dim=-1) == labels).float().mean().item()
assert not math.isnan(losses[-1])
print(f"accuracy={acc:.4f}")
print(f"initial_loss={sum(losses[:5]) / 5:.6f}")
print(f"final_loss={sum(losses[-5:]) / 5:.6f}")
