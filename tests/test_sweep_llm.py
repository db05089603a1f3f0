"""GPT/LLaMA-style decoder research code, written once against ``lib`` and run with torch and jitorch from torch's
initial weights and the same NumPy token stream: a hand-written RMSNorm, rotary embeddings in Meta's complex form
(``polar``/``view_as_complex``/``view_as_real``) and in Hugging Face's ``rotate_half`` cos/sin form, a SwiGLU MLP,
grouped-query attention (k/v repeated by ``expand``+``reshape`` or ``repeat_interleave``) through
``scaled_dot_product_attention(is_causal=True)`` or by hand, tied input/output embeddings, nanoGPT's init (residual
projections scaled by layer count), AdamW with decay/no-decay groups (``fused=False, foreach=True``), nanoGPT's
warmup+cosine learning rate set by hand, gradient accumulation and ``clip_grad_norm_``. Generation with KV caches and
sampling filters is in ``test_sweep_llm_generate.py``."""
from __future__ import annotations

import inspect
import math

import numpy as np
import pytest
import torch

import jitorch
from sweep_helpers import assert_runs_match, copy_weights

VOCAB, DIM, LAYERS, HEADS, KV_HEADS, BLOCK, MAX_SEQ = 40, 32, 2, 4, 2, 16, 32
HEAD_DIM = DIM // HEADS


def make_llm(lib, rope="complex", repeat="expand", attn="sdpa", cache="cat", tie=True):
    nn, F = lib.nn, lib.nn.functional

    class RMSNorm(nn.Module):
        def __init__(self, dim, eps=1e-6):
            super().__init__()
            self.eps = eps
            self.weight = nn.Parameter(lib.ones(dim))

        def _norm(self, x):
            return x * lib.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)

        def forward(self, x):
            return self._norm(x.float()).type_as(x) * self.weight

    def precompute_freqs_cis(dim, end, theta=10000.0):
        freqs = 1.0 / (theta ** (lib.arange(0, dim, 2)[: (dim // 2)].float() / dim))
        t = lib.arange(end, device=freqs.device, dtype=lib.float32)
        freqs = lib.outer(t, freqs).float()
        return lib.polar(lib.ones_like(freqs), freqs)  # complex64

    def apply_rotary_emb(xq, xk, freqs_cis):
        xq_ = lib.view_as_complex(xq.float().reshape(*xq.shape[:-1], -1, 2))
        xk_ = lib.view_as_complex(xk.float().reshape(*xk.shape[:-1], -1, 2))
        freqs_cis = freqs_cis.view(1, xq_.shape[1], 1, xq_.shape[-1])
        xq_out = lib.view_as_real(xq_ * freqs_cis).flatten(3)
        xk_out = lib.view_as_real(xk_ * freqs_cis).flatten(3)
        return xq_out.type_as(xq), xk_out.type_as(xk)

    class RotaryEmbedding(nn.Module):  # Hugging Face's LlamaRotaryEmbedding
        def __init__(self, dim, base=10000.0):
            super().__init__()
            inv_freq = 1.0 / (base ** (lib.arange(0, dim, 2, dtype=lib.int64).float() / dim))
            self.register_buffer("inv_freq", inv_freq, persistent=False)

        @lib.no_grad()
        def forward(self, x, position_ids):
            inv_freq_expanded = self.inv_freq[None, :, None].float().expand(position_ids.shape[0], -1, 1)
            position_ids_expanded = position_ids[:, None, :].float()
            freqs = (inv_freq_expanded.float() @ position_ids_expanded.float()).transpose(1, 2)
            emb = lib.cat((freqs, freqs), dim=-1)
            return emb.cos().to(dtype=x.dtype), emb.sin().to(dtype=x.dtype)

    def rotate_half(x):
        x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
        return lib.cat((-x2, x1), dim=-1)

    def repeat_kv(x, n_rep):  # (bs, slen, n_kv_heads, head_dim) -> (bs, slen, n_heads, head_dim)
        bs, slen, n_kv_heads, head_dim = x.shape
        if n_rep == 1:
            return x
        if repeat == "expand":
            return x[:, :, :, None, :].expand(bs, slen, n_kv_heads, n_rep, head_dim) \
                .reshape(bs, slen, n_kv_heads * n_rep, head_dim)
        return lib.repeat_interleave(x, dim=2, repeats=n_rep)

    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            self.n_rep = HEADS // KV_HEADS
            self.wq = nn.Linear(DIM, HEADS * HEAD_DIM, bias=False)
            self.wk = nn.Linear(DIM, KV_HEADS * HEAD_DIM, bias=False)
            self.wv = nn.Linear(DIM, KV_HEADS * HEAD_DIM, bias=False)
            self.wo = nn.Linear(HEADS * HEAD_DIM, DIM, bias=False)
            self.cache_k = self.cache_v = None

        def setup_cache(self, bsz):
            if cache == "cat":
                self.cache_k = self.cache_v = None
            else:
                self.cache_k = lib.zeros((bsz, MAX_SEQ, KV_HEADS, HEAD_DIM))
                self.cache_v = lib.zeros((bsz, MAX_SEQ, KV_HEADS, HEAD_DIM))

        def update_cache(self, xk, xv, start_pos):
            bsz, seqlen = xk.shape[:2]
            if cache == "cat":  # Hugging Face's DynamicCache
                if self.cache_k is not None:
                    xk, xv = lib.cat([self.cache_k, xk], dim=1), lib.cat([self.cache_v, xv], dim=1)
                self.cache_k, self.cache_v = xk, xv
                return xk, xv
            if cache == "slice":  # Meta's llama
                self.cache_k[:bsz, start_pos: start_pos + seqlen] = xk
                self.cache_v[:bsz, start_pos: start_pos + seqlen] = xv
            else:
                pos = lib.arange(start_pos, start_pos + seqlen)
                if cache == "index_copy":  # Hugging Face's StaticCache
                    self.cache_k.index_copy_(1, pos, xk)
                    self.cache_v.index_copy_(1, pos, xv)
                else:  # gpt-fast's KVCache.update
                    self.cache_k[:, pos] = xk
                    self.cache_v[:, pos] = xv
            return self.cache_k[:bsz, : start_pos + seqlen], self.cache_v[:bsz, : start_pos + seqlen]

        def forward(self, x, start_pos, rot, mask, use_cache):
            bsz, seqlen, _ = x.shape
            xq = self.wq(x).view(bsz, seqlen, HEADS, HEAD_DIM)
            xk = self.wk(x).view(bsz, seqlen, KV_HEADS, HEAD_DIM)
            xv = self.wv(x).view(bsz, seqlen, KV_HEADS, HEAD_DIM)
            if rope == "complex":
                xq, xk = apply_rotary_emb(xq, xk, freqs_cis=rot)
            else:
                cos, sin = rot[0].unsqueeze(2), rot[1].unsqueeze(2)  # heads are dim 2 here
                xq, xk = (xq * cos) + (rotate_half(xq) * sin), (xk * cos) + (rotate_half(xk) * sin)
            keys, values = self.update_cache(xk, xv, start_pos) if use_cache else (xk, xv)
            keys, values = repeat_kv(keys, self.n_rep), repeat_kv(values, self.n_rep)
            xq, keys, values = xq.transpose(1, 2), keys.transpose(1, 2), values.transpose(1, 2)
            if attn == "sdpa":
                if mask is None:
                    out = F.scaled_dot_product_attention(xq, keys, values, is_causal=seqlen > 1)
                else:
                    out = F.scaled_dot_product_attention(xq, keys, values, attn_mask=mask)
            else:
                scores = lib.matmul(xq, keys.transpose(2, 3)) / math.sqrt(HEAD_DIM)
                if mask is None and seqlen > 1:
                    mask = lib.triu(lib.full((seqlen, seqlen), float("-inf")), diagonal=1)
                if mask is not None:
                    scores = scores + mask
                out = lib.matmul(F.softmax(scores.float(), dim=-1).type_as(xq), values)
            return self.wo(out.transpose(1, 2).contiguous().view(bsz, seqlen, -1))

    class FeedForward(nn.Module):
        def __init__(self, multiple_of=16):
            super().__init__()
            hidden = int(2 * (4 * DIM) / 3)
            hidden = multiple_of * ((hidden + multiple_of - 1) // multiple_of)
            self.w1 = nn.Linear(DIM, hidden, bias=False)
            self.w2 = nn.Linear(hidden, DIM, bias=False)
            self.w3 = nn.Linear(DIM, hidden, bias=False)

        def forward(self, x):
            return self.w2(F.silu(self.w1(x)) * self.w3(x))

    class TransformerBlock(nn.Module):
        def __init__(self):
            super().__init__()
            self.attention, self.feed_forward = Attention(), FeedForward()
            self.attention_norm, self.ffn_norm = RMSNorm(DIM), RMSNorm(DIM)

        def forward(self, x, start_pos, rot, mask, use_cache):
            h = x + self.attention(self.attention_norm(x), start_pos, rot, mask, use_cache)
            return h + self.feed_forward(self.ffn_norm(h))

    class Transformer(nn.Module):
        def __init__(self):
            super().__init__()
            self.tok_embeddings = nn.Embedding(VOCAB, DIM)
            self.layers = nn.ModuleList([TransformerBlock() for _ in range(LAYERS)])
            self.norm = RMSNorm(DIM)
            self.output = nn.Linear(DIM, VOCAB, bias=False)
            if tie:  # nanoGPT: https://paperswithcode.com/method/weight-tying
                self.tok_embeddings.weight = self.output.weight
            if rope == "complex":
                self.freqs_cis = precompute_freqs_cis(HEAD_DIM, MAX_SEQ)
            else:
                self.rotary_emb = RotaryEmbedding(HEAD_DIM)
            self.apply(self._init_weights)
            for pn, p in self.named_parameters():  # GPT-2: residual projections scaled by 1/sqrt(2 * n_layer)
                if pn.endswith("wo.weight") or pn.endswith("w2.weight"):
                    nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * LAYERS))

        def _init_weights(self, module):
            if isinstance(module, nn.Linear):
                nn.init.normal_(module.weight, mean=0.0, std=0.02)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)
            elif isinstance(module, nn.Embedding):
                nn.init.normal_(module.weight, mean=0.0, std=0.02)

        def setup_cache(self, bsz):
            for layer in self.layers:
                layer.attention.setup_cache(bsz)

        def forward(self, tokens, targets=None, start_pos=0, use_cache=False, attention_mask=None):
            bsz, seqlen = tokens.shape
            h = self.tok_embeddings(tokens)
            positions = lib.arange(start_pos, start_pos + seqlen)[None].expand(bsz, -1)
            if attention_mask is not None:  # Hugging Face's left-padded batches: positions count real tokens
                positions = attention_mask.long().cumsum(-1) - 1
                positions = positions.masked_fill_(attention_mask == 0, 1)[:, -seqlen:]
            if rope == "complex":
                rot = self.freqs_cis[start_pos: start_pos + seqlen]
            else:
                rot = self.rotary_emb(h, positions)
            mask = None
            if attention_mask is not None:
                mask = causal_mask_4d(lib, attention_mask, start_pos, seqlen, h.dtype)
            elif use_cache and seqlen > 1 and start_pos > 0:  # Meta's mask: the cached prefix stays visible
                mask = lib.triu(lib.full((seqlen, seqlen), float("-inf")), diagonal=1)
                mask = lib.hstack([lib.zeros((seqlen, start_pos)), mask]).type_as(h)
            for layer in self.layers:
                h = layer(h, start_pos, rot, mask, use_cache)
            logits = self.output(self.norm(h)).float()
            if targets is None:
                return logits, None
            return logits, F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)

    return Transformer()


def causal_mask_4d(lib, attention_mask, start_pos, seqlen, dtype):
    """Hugging Face's ``_prepare_4d_causal_attention_mask_with_cache_position`` and, for SDPA,
    ``AttentionMaskConverter._unmask_unattended``: the padding queries of a left-padded row see no key, and are made
    to attend everywhere (their outputs are never read). Without it torch's fused CPU attention gives such a row of
    ``finfo.min`` scores n times the math kernel's (and jitorch's) gradient: it recomputes the probabilities from a
    log-sum-exp that lost ``log(n)`` to rounding."""
    min_dtype = lib.finfo(dtype).min
    target_length, cache_position = start_pos + seqlen, lib.arange(start_pos, start_pos + seqlen)
    causal_mask = lib.full((seqlen, target_length), fill_value=min_dtype, dtype=dtype)
    if seqlen != 1:
        causal_mask = lib.triu(causal_mask, diagonal=1)
    causal_mask *= lib.arange(target_length) > cache_position.reshape(-1, 1)
    causal_mask = causal_mask[None, None, :, :].expand(attention_mask.shape[0], 1, -1, -1).clone()
    mask_length = attention_mask.shape[-1]
    padding_mask = (causal_mask[:, :, :, :mask_length] + attention_mask[:, None, None, :]) == 0
    causal_mask[:, :, :, :mask_length] = causal_mask[:, :, :, :mask_length].masked_fill(padding_mask, min_dtype)
    return causal_mask.mul(~lib.all(causal_mask == min_dtype, dim=-1, keepdim=True))


def configure_optimizers(lib, model, weight_decay, learning_rate, betas):
    """nanoGPT's: every 2-D tensor decays, biases and norms do not; fused only when the signature has it."""
    param_dict = {pn: p for pn, p in model.named_parameters() if p.requires_grad}
    decay_params = [p for n, p in param_dict.items() if p.dim() >= 2]
    nodecay_params = [p for n, p in param_dict.items() if p.dim() < 2]
    optim_groups = [{"params": decay_params, "weight_decay": weight_decay},
                    {"params": nodecay_params, "weight_decay": 0.0}]
    assert "fused" in inspect.signature(lib.optim.AdamW).parameters
    return lib.optim.AdamW(optim_groups, lr=learning_rate, betas=betas, fused=False, foreach=True)


def get_lr(it, learning_rate=3e-3, min_lr=3e-4, warmup_iters=2, lr_decay_iters=6):
    if it < warmup_iters:
        return learning_rate * (it + 1) / (warmup_iters + 1)
    if it > lr_decay_iters:
        return min_lr
    decay_ratio = (it - warmup_iters) / (lr_decay_iters - warmup_iters)
    coeff = 0.5 * (1.0 + math.cos(math.pi * decay_ratio))
    return min_lr + coeff * (learning_rate - min_lr)


def token_stream(n=600, seed=0):
    """A stream with structure to learn: runs of an arithmetic progression mod VOCAB with random restarts."""
    rng = np.random.default_rng(seed)
    out, tok, step = [], 0, 1
    for _ in range(n):
        if rng.uniform() < 0.1:
            tok, step = int(rng.integers(VOCAB)), int(rng.integers(1, 4))
        out.append(tok)
        tok = (tok + step) % VOCAB
    return np.array(out, dtype=np.uint16)


def train_run(lib, ref, steps=6, accum=2, batch=4, **kw):
    data = token_stream()
    rng = np.random.default_rng(1)

    def get_batch():
        ix = rng.integers(len(data) - BLOCK, size=(batch,))
        x = lib.stack([lib.from_numpy((data[i: i + BLOCK]).astype(np.int64)) for i in ix])
        y = lib.stack([lib.from_numpy((data[i + 1: i + 1 + BLOCK]).astype(np.int64)) for i in ix])
        return x, y

    model = make_llm(lib, **kw)
    copy_weights(ref, model)
    assert model.tok_embeddings.weight is model.output.weight
    optimizer = configure_optimizers(lib, model, 0.1, 3e-3, (0.9, 0.95))
    out = {"loss": [], "lr": [], "norm": [], "n_params": sum(p.numel() for p in model.parameters())}
    X, Y = get_batch()
    model.train()
    for it in range(steps):
        lr = get_lr(it)
        for param_group in optimizer.param_groups:
            param_group["lr"] = lr
        for _ in range(accum):
            _, loss = model(X, Y)
            loss = loss / accum
            X, Y = get_batch()
            loss.backward()
            out["loss"].append(loss.detach() * accum)
        out["norm"].append(lib.nn.utils.clip_grad_norm_(model.parameters(), 1.0))
        out["grads"] = {n: p.grad for n, p in model.named_parameters()}
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        out["lr"].append(lr)
    out["state"] = [[s["exp_avg"], s["exp_avg_sq"], s["step"]] for s in optimizer.state.values()]
    out["params"] = dict(model.named_parameters())
    return model, out


@pytest.mark.parametrize("rope,repeat,attn", [("complex", "expand", "sdpa"), ("rotate_half", "interleave", "sdpa"),
                                               ("complex", "interleave", "manual"),
                                               ("rotate_half", "expand", "manual")])
def test_llm_pretraining_matches_torch(rope, repeat, attn):
    torch.manual_seed(0)
    ref = make_llm(torch, rope=rope, repeat=repeat, attn=attn)
    kw = dict(rope=rope, repeat=repeat, attn=attn)
    (_, th), (_, jt) = train_run(torch, ref, **kw), train_run(jitorch, ref, **kw)
    assert th["n_params"] == jt["n_params"]
    assert float(th["loss"][-1]) < float(th["loss"][0])  # it learns something, or the comparison says little
    # AdamW moves an element by up to lr whatever its gradient's size, so weights are compared to a fraction of lr
    assert_runs_match(th.pop("params"), jt.pop("params"), rtol=1e-4, atol=1e-4, what="params")
    assert_runs_match(th, jt, rtol=1e-4, atol=1e-6, what=f"llm {rope}/{repeat}/{attn}")


@pytest.mark.parametrize("attn", ["sdpa", "manual"])
def test_left_padded_fine_tuning_step_matches_torch(attn):
    """Supervised fine-tuning on left-padded prompts: the 4-D mask from the attention mask, positions from its
    cumsum, padded targets ignored (-1)."""
    torch.manual_seed(4)
    ref = make_llm(torch, rope="rotate_half", attn=attn)
    data = token_stream(80, seed=5)[:4 * (BLOCK + 1)].reshape(4, BLOCK + 1).astype(np.int64)
    mask = (np.arange(BLOCK)[None] >= np.array([[0], [3], [7], [12]])).astype(np.int64)
    res = []
    for lib in (torch, jitorch):
        model = make_llm(lib, rope="rotate_half", attn=attn)
        copy_weights(ref, model)
        x, y = lib.tensor(data[:, :-1] * mask), lib.tensor(np.where(mask == 1, data[:, 1:], -1))
        logits, loss = model(x, y, attention_mask=lib.tensor(mask))
        loss.backward()
        res.append([logits, loss, {n: p.grad for n, p in model.named_parameters()}])
    assert_runs_match(res[0], res[1], rtol=1e-4, atol=1e-7, what=f"left-padded step {attn}")

