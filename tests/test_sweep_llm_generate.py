"""Generation from the GPT/LLaMA-style decoder of ``test_sweep_llm.py``, written once against ``lib`` and run with
torch and jitorch from torch's (briefly trained) weights: a KV cache grown by ``cat`` along the sequence, or
preallocated and written by slice assignment, ``index_copy_`` or an index tensor, a prompt prefilled in chunks
(Meta's ``hstack`` mask), temperature, top-k (``topk`` + masked ``-inf``) and top-p (Hugging Face's ascending sort,
cumsum and ``scatter`` back; Meta's descending sort, renormalization and ``gather``), left-padded batches (positions
from the attention mask's ``cumsum``, Hugging Face's 4-D causal mask) and Meta-to-Hugging-Face weight conversion.
Tokens are drawn with NumPy from each run's own probabilities (the same uniforms), and the probabilities compared."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from sweep_helpers import LIBS, assert_runs_match, copy_weights
from test_sweep_llm import BLOCK, HEADS, KV_HEADS, MAX_SEQ, VOCAB, make_llm, token_stream, train_run


def sample(probs, u):
    """The categorical draw ``torch.multinomial(probs, 1)`` makes, inverse-CDF from NumPy uniforms ``u``."""
    cdf = np.cumsum(probs.detach().numpy().astype(np.float64), axis=-1)
    return (cdf < u[:, None] * cdf[:, -1:]).sum(-1).clip(max=probs.shape[-1] - 1)


def filter_logits(lib, logits, temperature, top_k, top_p, style):
    logits = logits / temperature
    if top_k is not None:
        if style == "nanogpt":
            v, _ = lib.topk(logits, min(top_k, logits.size(-1)))
            logits[logits < v[:, [-1]]] = -float("Inf")
        else:  # Hugging Face's TopKLogitsWarper
            indices_to_remove = logits < lib.topk(logits, top_k)[0][..., -1, None]
            logits = logits.masked_fill(indices_to_remove, -float("Inf"))
    if top_p is not None and style == "hf":  # TopPLogitsWarper: ascending sort, scatter the mask back
        sorted_logits, sorted_indices = lib.sort(logits, descending=False)
        cumulative_probs = sorted_logits.softmax(dim=-1).cumsum(dim=-1)
        sorted_indices_to_remove = cumulative_probs <= (1 - top_p)
        sorted_indices_to_remove[..., -1:] = 0
        indices_to_remove = sorted_indices_to_remove.scatter(1, sorted_indices, sorted_indices_to_remove)
        logits = logits.masked_fill(indices_to_remove, -float("Inf"))
    probs = lib.nn.functional.softmax(logits, dim=-1)
    if top_p is not None and style == "nanogpt":  # Meta's sample_top_p: descending sort, renormalize, gather
        probs_sort, probs_idx = lib.sort(probs, dim=-1, descending=True)
        probs_sum = lib.cumsum(probs_sort, dim=-1)
        mask = probs_sum - probs_sort > top_p
        probs_sort[mask] = 0.0
        probs_sort.div_(probs_sort.sum(dim=-1, keepdim=True))
        return probs_sort, probs_idx
    return probs, None


def generate(lib, model, prompt, max_new_tokens, use_cache, temperature=0.8, top_k=None, top_p=None, style="hf",
             prefill_chunks=1, seed=2, attention_mask=None):
    """nanoGPT's loop (the whole context each step) or Meta's (the prompt, possibly in chunks, then one token at a
    time against the cache); with ``attention_mask`` (left padding) Hugging Face's, the mask grown by a column of
    ones per step."""
    u = np.random.default_rng(seed).uniform(size=(max_new_tokens, prompt.shape[0]))
    idx = lib.tensor(prompt)
    am = None if attention_mask is None else lib.tensor(attention_mask)
    out = {"probs": [], "logits": []}
    model.eval()
    with lib.no_grad():
        model.setup_cache(idx.shape[0])
        start, cur = 0, idx
        for i in range(max_new_tokens):
            if use_cache:
                for chunk in (cur.tensor_split(prefill_chunks, dim=1) if i == 0 else (cur,)):
                    logits, _ = model(chunk, start_pos=start, use_cache=True, attention_mask=am)
                    start += chunk.shape[1]
            else:
                logits, _ = model(idx if idx.size(1) <= MAX_SEQ else idx[:, -MAX_SEQ:])
            logits = logits[:, -1, :]
            probs, order = filter_logits(lib, logits, temperature, top_k, top_p, style)
            idx_next = lib.tensor(sample(probs, u[i]))[:, None]
            if order is not None:
                idx_next = lib.gather(order, -1, idx_next)
            idx = lib.cat((idx, idx_next), dim=1)
            if am is not None:
                am = lib.cat([am, am.new_ones((am.shape[0], 1))], dim=-1)
            cur = idx_next
            out["probs"].append(probs)
            out["logits"].append(logits)
    out["tokens"] = idx
    return out


def trained_reference(**kw):
    torch.manual_seed(1)
    ref = make_llm(torch, **kw)
    train_run(torch, ref, steps=4, **kw)  # sharper distributions than at init, so filtering cuts something
    return ref


PROMPT = token_stream(40, seed=3)[:24].reshape(3, 8).astype(np.int64)


@pytest.mark.parametrize("cache,rope,chunks", [("cat", "complex", 1), ("slice", "rotate_half", 2),
                                               ("index_copy", "complex", 3), ("index_put", "rotate_half", 2)])
def test_kv_cache_generation_matches_torch_and_the_uncached_model(cache, rope, chunks):
    ref = trained_reference(rope=rope)
    runs = []
    for lib in LIBS:
        model = make_llm(lib, rope=rope, cache=cache)
        copy_weights(ref, model)
        cached = generate(lib, model, PROMPT, 10, use_cache=True, top_k=12, prefill_chunks=chunks)
        full = generate(lib, model, PROMPT, 10, use_cache=False, top_k=12)
        # the cache changes the order of no sum: one library's cached and uncached logits agree to rounding
        assert_runs_match(full["logits"], cached["logits"], rtol=1e-5, atol=1e-6, what=f"{lib.__name__} cache")
        np.testing.assert_array_equal(full["tokens"].numpy(), cached["tokens"].numpy())
        runs.append(cached)
    assert_runs_match(runs[0], runs[1], rtol=1e-5, atol=1e-6, what=f"generation {cache}/{rope}")
    assert (runs[1]["probs"][0] == 0).sum(-1).tolist() == [VOCAB - 12] * 3  # top-k left exactly k tokens


@pytest.mark.parametrize("style,top_k,top_p,temperature", [("hf", None, 0.8, 1.0), ("hf", 10, 0.9, 0.7),
                                                           ("nanogpt", 8, None, 1.3), ("nanogpt", None, 0.75, 0.9)])
def test_sampling_filters_match_torch(style, top_k, top_p, temperature):
    ref = trained_reference()
    runs = []
    for lib in LIBS:
        model = make_llm(lib)
        copy_weights(ref, model)
        runs.append(generate(lib, model, PROMPT, 12, use_cache=True, temperature=temperature, top_k=top_k,
                             top_p=top_p, style=style))
    assert_runs_match(runs[0], runs[1], rtol=1e-5, atol=1e-7, what=f"sampling {style}")
    kept = (runs[0]["probs"][0] > 0).sum(-1)
    assert (kept < VOCAB).all() and (kept >= 1).all()  # the filters removed something and kept something


def test_left_padded_batch_generation_matches_torch_and_each_prompt_alone():
    """A batch of prompts of different lengths, left-padded: each row's logits are those of its prompt generated
    alone (same tokens: greedy-like low temperature and shared uniforms), in each library, and across libraries."""
    ref = trained_reference(rope="rotate_half")
    lengths = [8, 5, 3]
    prompt = np.zeros((3, 8), np.int64)
    mask = np.zeros((3, 8), np.int64)
    for i, n in enumerate(lengths):
        prompt[i, 8 - n:], mask[i, 8 - n:] = PROMPT[i, :n], 1
    runs = []
    for lib in LIBS:
        model = make_llm(lib, rope="rotate_half", cache="slice")
        copy_weights(ref, model)
        batch = generate(lib, model, prompt, 6, use_cache=True, temperature=0.05, attention_mask=mask)
        for i, n in enumerate(lengths):
            alone = generate(lib, model, PROMPT[i: i + 1, :n], 6, use_cache=True, temperature=0.05)
            assert_runs_match([lg[i: i + 1] for lg in batch["logits"]], alone["logits"], rtol=1e-5, atol=1e-5,
                              what=f"{lib.__name__} row {i} alone")
            np.testing.assert_array_equal(batch["tokens"].numpy()[i, 8:], alone["tokens"].numpy()[0, n:])
        runs.append(batch)
    assert_runs_match(runs[0], runs[1], rtol=1e-5, atol=1e-6, what="left-padded generation")


def test_meta_to_hf_rotary_permutation_gives_the_same_logits():
    """Hugging Face's ``convert_llama_weights_to_hf`` permutes wq/wk so that rotate_half rotates the pairs Meta's
    complex form rotates: in each library the two models agree, and the libraries agree with each other."""
    torch.manual_seed(2)
    ref = make_llm(torch, rope="complex")
    tokens = np.random.default_rng(4).integers(0, VOCAB, (2, BLOCK))
    res = []
    for lib in LIBS:
        meta, hf = make_llm(lib, rope="complex"), make_llm(lib, rope="rotate_half")
        copy_weights(ref, meta)

        def permute(w, n_heads):
            dim1, dim2 = w.shape
            return w.view(n_heads, dim1 // n_heads // 2, 2, dim2).transpose(1, 2).reshape(dim1, dim2)
        sd = meta.state_dict()
        for k in list(sd):
            if k.endswith("wq.weight") or k.endswith("wk.weight"):
                sd[k] = permute(sd[k], HEADS if "wq" in k else KV_HEADS)
        hf.load_state_dict(sd)
        x = lib.tensor(tokens)
        a, b = meta(x)[0], hf(x)[0]
        np.testing.assert_allclose(b.detach().numpy(), a.detach().numpy(), rtol=1e-5, atol=1e-5)
        res.append([a, b])
    assert_runs_match(res[0], res[1], rtol=1e-5, atol=1e-6, what="meta/hf logits")
