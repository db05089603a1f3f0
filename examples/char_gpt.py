"""A character-level GPT trained on a few KB of Shakespeare: ordinary PyTorch code under ``import jitorch as torch``.

Token and position embeddings, pre-norm Transformer blocks (causal self-attention written with ``masked_fill`` and
``softmax``, or ``F.scaled_dot_product_attention(is_causal=True)`` with ``--attention sdpa``), a tied output head, AdamW
and cross-entropy. It prints the loss as it falls, then samples text with ``torch.multinomial``.

Run::

    python examples/char_gpt.py                   # jitorch, 800 steps (30-60 s on this 2-core machine)
    python examples/char_gpt.py --backend torch   # the very same code on PyTorch
    python examples/char_gpt.py --steps 30        # a smoke test
    python examples/char_gpt.py --compile         # training through torch.compile(model)

Everything below the imports is plain PyTorch; only the backend switch knows there are two libraries.
"""
import jitorch as torch

import argparse
import math
import time
from pathlib import Path

DEFAULT_TEXT = Path(__file__).resolve().parent / "data" / "tiny_shakespeare.txt"


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=("jitorch", "torch"), default="jitorch",
                        help="library behind the name `torch` (default: jitorch)")
    parser.add_argument("--steps", type=int, default=800)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--block-size", type=int, default=64, help="context length in characters")
    parser.add_argument("--n-embd", type=int, default=64)
    parser.add_argument("--n-head", type=int, default=4)
    parser.add_argument("--n-layer", type=int, default=2)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--attention", choices=("manual", "sdpa"), default="manual",
                        help="masked_fill + softmax, or F.scaled_dot_product_attention(is_causal=True)")
    parser.add_argument("--compile", action="store_true", help="train through torch.compile(model)")
    parser.add_argument("--sample-chars", type=int, default=300)
    parser.add_argument("--text", type=Path, default=DEFAULT_TEXT)
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args(argv)


ARGS = parse_args()
if ARGS.backend == "torch":
    import torch  # noqa: F811 - the reference run: the same code on PyTorch

nn = torch.nn
F = torch.nn.functional


class CausalSelfAttention(nn.Module):
    def __init__(self, n_embd, n_head, block_size, attention):
        super().__init__()
        assert n_embd % n_head == 0
        self.n_head, self.attention = n_head, attention
        self.qkv = nn.Linear(n_embd, 3 * n_embd)
        self.proj = nn.Linear(n_embd, n_embd)
        # A buffer, not a parameter: it moves with .to() and is saved, but the optimizer never sees it.
        self.register_buffer("mask", torch.tril(torch.ones(block_size, block_size)).view(1, 1, block_size, block_size))

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=2)
        # (B, T, C) -> (B, heads, T, head size): every head attends independently.
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
        if self.attention == "sdpa":
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
            att = att.masked_fill(self.mask[:, :, :T, :T] == 0, float("-inf"))
            y = F.softmax(att, dim=-1) @ v
        return self.proj(y.transpose(1, 2).contiguous().view(B, T, C))


class Block(nn.Module):
    """Pre-norm residual block: x + attention(norm(x)), then x + MLP(norm(x))."""

    def __init__(self, n_embd, n_head, block_size, attention):
        super().__init__()
        self.ln1 = nn.LayerNorm(n_embd)
        self.attn = CausalSelfAttention(n_embd, n_head, block_size, attention)
        self.ln2 = nn.LayerNorm(n_embd)
        self.mlp = nn.Sequential(nn.Linear(n_embd, 4 * n_embd), nn.GELU(), nn.Linear(4 * n_embd, n_embd))

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class CharGPT(nn.Module):
    def __init__(self, vocab_size, block_size, n_embd, n_head, n_layer, attention):
        super().__init__()
        self.block_size = block_size
        self.tok_emb = nn.Embedding(vocab_size, n_embd)
        self.pos_emb = nn.Embedding(block_size, n_embd)
        self.blocks = nn.ModuleList([Block(n_embd, n_head, block_size, attention) for _ in range(n_layer)])
        self.ln_f = nn.LayerNorm(n_embd)
        self.head = nn.Linear(n_embd, vocab_size, bias=False)
        # Weight tying (as GPT-2): the output head reads logits off the input embedding table.
        self.head.weight = self.tok_emb.weight
        self.apply(self._init_weights)

    @staticmethod
    def _init_weights(module):
        # GPT-2's small normal init keeps the initial logits near uniform: the first loss is about log(vocab_size).
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def forward(self, idx, targets=None):
        B, T = idx.shape
        positions = torch.arange(T, device=idx.device)
        x = self.tok_emb(idx) + self.pos_emb(positions)
        for block in self.blocks:
            x = block(x)
        logits = self.head(self.ln_f(x))
        if targets is None:
            return logits, None
        return logits, F.cross_entropy(logits.view(B * T, -1), targets.view(B * T))

    @torch.no_grad()
    def generate(self, idx, new_tokens, temperature=0.8, generator=None):
        for _ in range(new_tokens):
            logits, _ = self(idx[:, -self.block_size:])
            probs = F.softmax(logits[:, -1, :] / temperature, dim=-1)
            idx = torch.cat([idx, torch.multinomial(probs, num_samples=1, generator=generator)], dim=1)
        return idx


def get_batch(data, batch_size, block_size):
    """Random windows of the text; the targets are the inputs shifted by one character."""
    starts = torch.randint(len(data) - block_size - 1, (batch_size,))
    x = torch.stack([data[i:i + block_size] for i in starts.tolist()])
    y = torch.stack([data[i + 1:i + 1 + block_size] for i in starts.tolist()])
    return x, y


def main():
    torch.manual_seed(ARGS.seed)
    text = ARGS.text.read_text(encoding="utf-8")
    chars = sorted(set(text))
    stoi = {c: i for i, c in enumerate(chars)}
    data = torch.tensor([stoi[c] for c in text], dtype=torch.long)

    model = CharGPT(len(chars), ARGS.block_size, ARGS.n_embd, ARGS.n_head, ARGS.n_layer, ARGS.attention)
    optimizer = torch.optim.AdamW(model.parameters(), lr=ARGS.lr, weight_decay=0.01)
    # Tied weights count once: parameters() yields each Parameter a single time.
    print(f"backend {ARGS.backend}: {len(text)} characters, vocabulary {len(chars)}, "
          f"{sum(p.numel() for p in model.parameters())} parameters, uniform loss {math.log(len(chars)):.3f}")

    train_model = torch.compile(model) if ARGS.compile else model
    log_every = max(1, ARGS.steps // 10)
    start = time.perf_counter()
    for step in range(1, ARGS.steps + 1):
        x, y = get_batch(data, ARGS.batch_size, ARGS.block_size)
        _, loss = train_model(x, y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        if step == 1 or step % log_every == 0 or step == ARGS.steps:
            print(f"step {step:5d}  loss {loss.item():.4f}  ({time.perf_counter() - start:.1f} s)", flush=True)
    elapsed = time.perf_counter() - start
    print(f"trained {ARGS.steps} steps in {elapsed:.1f} s ({ARGS.steps / elapsed:.1f} steps/s)")

    model.eval()
    generator = torch.Generator().manual_seed(ARGS.seed)
    prompt = torch.tensor([[stoi["\n"]]], dtype=torch.long)
    sample = model.generate(prompt, ARGS.sample_chars, generator=generator)[0].tolist()
    print("--- sample ---")
    print("".join(chars[i] for i in sample).strip())


if __name__ == "__main__":
    main()
