"""minGPT-style character model (after karpathy/minGPT): causal self-attention both through
F.scaled_dot_product_attention(is_causal=True) and a registered-buffer mask with masked_fill(-inf), tied
token-embedding / lm-head weights, AdamW with decay / no-decay parameter groups, and top-k sampling.

Weights come from NumPy and there is no dropout, so training is deterministic; metrics must match torch.
"""
import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class CausalSelfAttention(nn.Module):
    def __init__(self, n_embd, n_head, block_size, flash):
        super().__init__()
        assert n_embd % n_head == 0
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)
        self.n_head, self.n_embd, self.flash = n_head, n_embd, flash
        self.register_buffer("bias", torch.tril(torch.ones(block_size, block_size))
                             .view(1, 1, block_size, block_size))

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        if self.flash:
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
            att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
            att = F.softmax(att, dim=-1)
            y = att @ v
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(y)


class NewGELU(nn.Module):
    def forward(self, x):
        return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


class Block(nn.Module):
    def __init__(self, n_embd, n_head, block_size, flash):
        super().__init__()
        self.ln_1 = nn.LayerNorm(n_embd)
        self.attn = CausalSelfAttention(n_embd, n_head, block_size, flash)
        self.ln_2 = nn.LayerNorm(n_embd)
        self.mlp = nn.ModuleDict(dict(c_fc=nn.Linear(n_embd, 4 * n_embd), c_proj=nn.Linear(4 * n_embd, n_embd),
                                      act=NewGELU() if flash else nn.GELU(approximate="tanh")))
        m = self.mlp
        self.mlpf = lambda x: m.c_proj(m.act(m.c_fc(x)))

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        x = x + self.mlpf(self.ln_2(x))
        return x


class GPT(nn.Module):
    def __init__(self, vocab_size, block_size, n_layer=2, n_head=4, n_embd=32):
        super().__init__()
        self.block_size = block_size
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(vocab_size, n_embd),
            wpe=nn.Embedding(block_size, n_embd),
            h=nn.ModuleList([Block(n_embd, n_head, block_size, flash=(i % 2 == 0)) for i in range(n_layer)]),
            ln_f=nn.LayerNorm(n_embd),
        ))
        self.lm_head = nn.Linear(n_embd, vocab_size, bias=False)
        self.transformer.wte.weight = self.lm_head.weight  # weight tying
        rng = np.random.RandomState(0)
        with torch.no_grad():
            for pn, p in self.named_parameters():
                if pn.endswith("bias"):
                    p.copy_(torch.from_numpy(rng.uniform(-0.02, 0.02, p.shape).astype(np.float32)))
                elif p.dim() >= 2:
                    std = 0.02 / math.sqrt(2 * n_layer) if pn.endswith("c_proj.weight") else 0.02
                    p.copy_(torch.from_numpy((rng.randn(*p.shape) * std).astype(np.float32)))

    def configure_optimizers(self, weight_decay, learning_rate, betas):
        decay, no_decay = set(), set()
        whitelist, blacklist = (torch.nn.Linear,), (torch.nn.LayerNorm, torch.nn.Embedding)
        for mn, m in self.named_modules():
            for pn, p in m.named_parameters():
                fpn = f"{mn}.{pn}" if mn else pn
                if pn.endswith("bias"):
                    no_decay.add(fpn)
                elif pn.endswith("weight") and isinstance(m, whitelist):
                    decay.add(fpn)
                elif pn.endswith("weight") and isinstance(m, blacklist):
                    no_decay.add(fpn)
        # the tied weight appears under both names; named_parameters() reports it once
        param_dict = {pn: p for pn, p in self.named_parameters()}
        decay &= set(param_dict)
        no_decay = (no_decay - decay) & set(param_dict)
        assert len(param_dict.keys() - (decay | no_decay)) == 0
        optim_groups = [
            {"params": [param_dict[pn] for pn in sorted(decay)], "weight_decay": weight_decay},
            {"params": [param_dict[pn] for pn in sorted(no_decay)], "weight_decay": 0.0},
        ]
        return torch.optim.AdamW(optim_groups, lr=learning_rate, betas=betas)

    def forward(self, idx, targets=None):
        b, t = idx.size()
        assert t <= self.block_size, f"Cannot forward sequence of length {t}, block size is only {self.block_size}"
        pos = torch.arange(0, t, dtype=torch.long, device=idx.device).unsqueeze(0)
        x = self.transformer.wte(idx) + self.transformer.wpe(pos)
        for block in self.transformer.h:
            x = block(x)
        logits = self.lm_head(self.transformer.ln_f(x))
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)
        return logits, loss

    @torch.no_grad()
    def generate(self, idx, max_new_tokens, temperature=1.0, do_sample=False, top_k=None):
        for _ in range(max_new_tokens):
            idx_cond = idx if idx.size(1) <= self.block_size else idx[:, -self.block_size:]
            logits, _ = self(idx_cond)
            logits = logits[:, -1, :] / temperature
            if top_k is not None:
                v, _ = torch.topk(logits, top_k)
                logits[logits < v[:, [-1]]] = -float("Inf")
            probs = F.softmax(logits, dim=-1)
            if do_sample:
                idx_next = torch.multinomial(probs, num_samples=1)
            else:
                _, idx_next = torch.topk(probs, k=1, dim=-1)
            idx = torch.cat((idx, idx_next), dim=1)
        return idx


text = "first citizen: before we proceed any further, hear me speak. all: speak, speak. " * 6
chars = sorted(set(text))
stoi = {ch: i for i, ch in enumerate(chars)}
data = torch.tensor([stoi[c] for c in text], dtype=torch.long)
block_size, batch_size = 16, 8
model = GPT(len(chars), block_size)
assert model.lm_head.weight is model.transformer.wte.weight
n_params = sum(p.numel() for p in model.parameters())
optimizer = model.configure_optimizers(weight_decay=0.1, learning_rate=3e-3, betas=(0.9, 0.95))
print(f"n_params={n_params}")

starts = np.random.RandomState(1).randint(0, len(data) - block_size - 1, size=(40, batch_size))
losses = []
model.train()
for it in range(40):
    ix = torch.from_numpy(starts[it])
    x = torch.stack([data[i:i + block_size] for i in ix])
    y = torch.stack([data[i + 1:i + 1 + block_size] for i in ix])
    y[0, :2] = -1  # ignored positions
    logits, loss = model(x, y)
    model.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    losses.append(loss.item())
    if it % 10 == 0:
        print(f"iter {it}: loss {loss.item():.4f}")

model.eval()
context = torch.tensor([[stoi[c] for c in "first "]], dtype=torch.long)
greedy = model.generate(context, 12, do_sample=False)
print("greedy:", "".join(chars[i] for i in greedy[0].tolist()))
torch.manual_seed(0)
sampled = model.generate(context.repeat(2, 1), 20, temperature=0.8, do_sample=True, top_k=5)
assert sampled.shape == (2, 26) and sampled.dtype == torch.long
print("sampled:", "".join(chars[i] for i in sampled[0].tolist()))
with torch.no_grad():
    _, eval_loss = model(data[:-1][:128].view(8, 16), data[1:][:128].view(8, 16))
print(f"initial_loss={losses[0]:.6f}")
print(f"loss_10={losses[10]:.6f}")
print(f"final_loss={losses[-1]:.6f}")
print(f"eval_loss={eval_loss.item():.6f}")
print(f"greedy_checksum={sum((i + 1) * t for i, t in enumerate(greedy[0].tolist()))}")
print(f"wte_norm={model.transformer.wte.weight.norm().item():.6f}")
