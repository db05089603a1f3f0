"""BERT-style masked-language-model pretraining on a toy corpus (after the HuggingFace run_mlm recipe, in plain
PyTorch): the 80/10/10 masking with torch.bernoulli / torch.randint, ignore_index=-100 labels, a batch-first
nn.TransformerEncoder with a key padding mask, token-type and position embeddings, a tied decoder with its own
bias, AdamW with a linear warmup/decay LambdaLR, gradient accumulation, clip_grad_norm_(error_if_nonfinite=True),
a checkpoint round trip through torch.save/torch.load, and evaluation under torch.inference_mode.

Stochastic (masks from torch's generator): the loss must fall.
"""
import io
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
words = ("the quick brown fox jumps over the lazy dog while a small cat sleeps on the warm mat "
         "and the old man reads a long book by the fire").split()
vocab = ["[PAD]", "[CLS]", "[SEP]", "[MASK]"] + sorted(set(words))
stoi = {w: i for i, w in enumerate(vocab)}
PAD, CLS, SEP, MASK = 0, 1, 2, 3
V, D, MAXLEN = len(vocab), 32, 16


def make_batch(n):
    seqs = []
    for _ in range(n):
        start = int(torch.randint(0, len(words) - 6, (1,)))
        length = int(torch.randint(4, 12, (1,)))
        ids = [CLS] + [stoi[w] for w in words[start:start + length]] + [SEP]
        seqs.append(torch.tensor(ids))
    batch = nn.utils.rnn.pad_sequence(seqs, batch_first=True, padding_value=PAD)
    types = torch.zeros_like(batch)
    types[:, batch.size(1) // 2:] = 1
    return batch, types


def mask_tokens(inputs, mlm_probability=0.15):
    labels = inputs.clone()
    probability_matrix = torch.full(labels.shape, mlm_probability)
    special = (inputs == PAD) | (inputs == CLS) | (inputs == SEP)
    probability_matrix.masked_fill_(special, value=0.0)
    masked_indices = torch.bernoulli(probability_matrix).bool()
    labels[~masked_indices] = -100
    indices_replaced = torch.bernoulli(torch.full(labels.shape, 0.8)).bool() & masked_indices
    inputs = inputs.clone()
    inputs[indices_replaced] = MASK
    indices_random = torch.bernoulli(torch.full(labels.shape, 0.5)).bool() & masked_indices & ~indices_replaced
    random_words = torch.randint(4, V, labels.shape, dtype=torch.long)
    inputs[indices_random] = random_words[indices_random]
    return inputs, labels


class TinyBert(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok = nn.Embedding(V, D, padding_idx=PAD)
        self.pos = nn.Embedding(MAXLEN, D)
        self.typ = nn.Embedding(2, D)
        self.ln = nn.LayerNorm(D, eps=1e-12)
        layer = nn.TransformerEncoderLayer(D, 4, 64, dropout=0.1, activation="gelu", batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, 2)
        self.transform = nn.Sequential(nn.Linear(D, D), nn.GELU(), nn.LayerNorm(D, eps=1e-12))
        self.decoder = nn.Linear(D, V, bias=False)
        self.decoder.weight = self.tok.weight
        self.bias = nn.Parameter(torch.zeros(V))
        self.apply(self._init_weights)

    @staticmethod
    def _init_weights(module):
        if isinstance(module, (nn.Linear, nn.Embedding)):
            module.weight.data.normal_(mean=0.0, std=0.02)
            if isinstance(module, nn.Embedding) and module.padding_idx is not None:
                module.weight.data[module.padding_idx].zero_()
        if isinstance(module, nn.Linear) and module.bias is not None:
            module.bias.data.zero_()

    def forward(self, ids, types):
        pos = torch.arange(ids.size(1), device=ids.device).unsqueeze(0).expand_as(ids)
        h = self.ln(self.tok(ids) + self.pos(pos) + self.typ(types))
        h = self.encoder(h, src_key_padding_mask=ids.eq(PAD))
        return self.decoder(self.transform(h)) + self.bias


model = TinyBert()
no_decay = ["bias", "ln.weight", "norm1.weight", "norm2.weight", "transform.2.weight"]
groups = [
    {"params": [p for n, p in model.named_parameters() if not any(nd in n for nd in no_decay)], "weight_decay": 0.01},
    {"params": [p for n, p in model.named_parameters() if any(nd in n for nd in no_decay)], "weight_decay": 0.0},
]
optimizer = torch.optim.AdamW(groups, lr=5e-3)
total_steps, warmup, accum = 80, 8, 2
scheduler = torch.optim.lr_scheduler.LambdaLR(
    optimizer, lambda step: step / warmup if step < warmup else max(0.0, (total_steps - step) / (total_steps - warmup)))

losses = []
model.train()
for step in range(total_steps * accum):
    ids, types = make_batch(16)
    inputs, labels = mask_tokens(ids)
    logits = model(inputs, types)
    loss = F.cross_entropy(logits.view(-1, V), labels.view(-1), ignore_index=-100)
    (loss / accum).backward()
    if (step + 1) % accum == 0:
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0, error_if_nonfinite=True)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
    if not math.isnan(loss.item()):
        losses.append(loss.item())

buffer = io.BytesIO()
torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict()},
           buffer)
buffer.seek(0)
state = torch.load(buffer)
restored = TinyBert()
restored.load_state_dict(state["model"])
assert restored.decoder.weight is restored.tok.weight
model.eval()
restored.eval()
with torch.inference_mode():
    ids, types = make_batch(32)
    inputs, labels = mask_tokens(ids)
    a, b = model(inputs, types), restored(inputs, types)
    assert torch.equal(a, b)
    keep = labels != -100
    acc = (a.argmax(-1)[keep] == labels[keep]).float().mean().item()

k = 20
print(f"initial_loss={sum(losses[:k]) / k:.6f}")
print(f"final_loss={sum(losses[-k:]) / k:.6f}")
print(f"masked_accuracy={acc:.6f}")
print(f"last_lr={scheduler.get_last_lr()[0]:.8f}")
