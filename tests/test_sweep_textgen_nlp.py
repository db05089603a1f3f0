"""Hand-written text-generation utilities as Hugging Face's ``generation/`` code and tutorials write them, run with
``lib=torch`` and ``lib=jitorch`` on the same logits: top-k (``topk(...)[0][..., -1, None]`` + ``masked_fill``), top-p
(descending sort, softmax, cumsum, the mask shifted right, ``scatter`` back, ``min_tokens_to_keep``), typical
sampling (entropy of the log-softmax), repetition penalty (``gather``/``where``/``scatter_``), no-repeat-ngram blocking
in Python, temperature, ``multinomial`` on half-precision probabilities and its errors, greedy and beam search with a
length penalty and early stopping (``view(-1)``, ``topk(2 * num_beams)``, floor division, ``fmod``), ``finfo.min``
masks, ``where`` over int64 attention masks and left-padded position ids. The toy "model" is a fixed linear map of
the last token and the sequence length so both libraries score exactly the same tokens."""
from __future__ import annotations

import numpy as np
import pytest

import jitorch
from sweep_helpers import LIBS, assert_close_tree

VOCAB = 40
RNG = np.random.default_rng(0)
LOGITS = (RNG.standard_normal((4, VOCAB)) * 2).astype(np.float32)
INPUT_IDS = RNG.integers(0, VOCAB, (4, 9))
EMB = (RNG.standard_normal((VOCAB, 16)) * 0.8).astype(np.float32)
HEAD = RNG.standard_normal((16, VOCAB)).astype(np.float32)
SCORES = RNG.standard_normal((3, 1, 5, 5)).astype(np.float32)


def top_k(lib, scores, k, filter_value=-float("inf")):
    indices_to_remove = scores < lib.topk(scores, k)[0][..., -1, None]
    return scores.masked_fill(indices_to_remove, filter_value)


def top_p(lib, scores, p, min_tokens_to_keep=1):
    sorted_logits, sorted_indices = lib.sort(scores, descending=True)
    cumulative_probs = lib.cumsum(lib.nn.functional.softmax(sorted_logits, dim=-1), dim=-1)
    sorted_indices_to_remove = cumulative_probs > p
    if min_tokens_to_keep > 1:
        sorted_indices_to_remove[..., :min_tokens_to_keep] = 0
    sorted_indices_to_remove[..., 1:] = sorted_indices_to_remove[..., :-1].clone()  # keep the first above p
    sorted_indices_to_remove[..., 0] = 0
    indices_to_remove = sorted_indices_to_remove.scatter(1, sorted_indices, sorted_indices_to_remove)
    return scores.masked_fill(indices_to_remove, -float("inf"))


def typical(lib, scores, mass=0.9, min_tokens_to_keep=1):
    normalized = lib.nn.functional.log_softmax(scores, dim=-1)
    p = lib.exp(normalized)
    ent = -(normalized * p).nansum(-1, keepdim=True)
    shifted_scores = lib.abs((-normalized) - ent)
    sorted_scores, sorted_indices = lib.sort(shifted_scores, descending=False)
    sorted_logits = scores.gather(-1, sorted_indices)
    cumulative_probs = sorted_logits.softmax(dim=-1).cumsum(dim=-1)
    last_ind = (cumulative_probs < mass).sum(dim=1)
    last_ind.clamp_(max=sorted_scores.shape[-1] - 1)
    sorted_indices_to_remove = sorted_scores > sorted_scores.gather(1, last_ind.view(-1, 1))
    sorted_indices_to_remove[..., :min_tokens_to_keep] = 0
    indices_to_remove = sorted_indices_to_remove.scatter(1, sorted_indices, sorted_indices_to_remove)
    return scores.masked_fill(indices_to_remove, -float("inf")), ent


def repetition_penalty(lib, input_ids, scores, penalty, inplace):
    score = lib.gather(scores, 1, input_ids)
    score = lib.where(score < 0, score * penalty, score / penalty)
    if inplace:
        scores.scatter_(1, input_ids, score)
        return scores
    return scores.scatter(1, input_ids, score)


def banned_ngram_tokens(prev_input_ids, num_hypos, ngram_size, cur_len):
    """Hugging Face's ``_get_ngrams``/``_calc_banned_ngram_tokens``: Python dictionaries over ``tolist()``."""
    banned = []
    for idx in range(num_hypos):
        gen_tokens = prev_input_ids[idx].tolist()
        ngrams = {}
        for ngram in zip(*[gen_tokens[i:] for i in range(ngram_size)]):
            ngrams.setdefault(tuple(ngram[:-1]), []).append(ngram[-1])
        key = tuple(gen_tokens[cur_len + 1 - ngram_size:cur_len])
        banned.append(ngrams.get(key, []))
    return banned


def no_repeat_ngram(lib, input_ids, scores, n):
    for i, tokens in enumerate(banned_ngram_tokens(input_ids, input_ids.shape[0], n, input_ids.shape[-1])):
        scores[i, tokens] = -float("inf")
    return scores


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_logits_processors_match_torch(dtype):
    out = []
    for lib in LIBS:
        scores = lib.tensor(LOGITS).to(getattr(lib, dtype))
        ids = lib.tensor(INPUT_IDS)
        typ, ent = typical(lib, scores)
        res = {"top_k": top_k(lib, scores, 5), "top_k_min": top_k(lib, scores, 3, lib.finfo(scores.dtype).min),
               "top_p": top_p(lib, scores, 0.8), "top_p_keep": top_p(lib, scores / 0.5, 0.3, min_tokens_to_keep=4),
               "typical": typ, "entropy": ent, "temperature": scores / 0.7,
               "rep": repetition_penalty(lib, ids, scores, 1.3, inplace=False),
               "rep_inplace": repetition_penalty(lib, ids, scores.clone(), 1.3, inplace=True),
               "ngram": no_repeat_ngram(lib, lib.cat([ids, ids[:, :2]], 1), scores.clone(), 3)}
        res["probs"] = lib.softmax(res["top_p"].float(), dim=-1)
        out.append({k: (v.float() if v.dtype != lib.float32 else v, str(v.dtype).split(".")[-1])
                    for k, v in res.items()})
    tol = 1e-6 if dtype == "float32" else 1e-2
    assert_close_tree(out[0], out[1], rtol=tol, atol=tol)
    kept = np.isfinite(out[1]["top_p_keep"][0].numpy()).sum(-1)
    assert (kept >= 4).all() and (kept < VOCAB).all()
    assert np.isinf(out[1]["ngram"][0].numpy()).any()


def test_multinomial_half_probs_and_torch_errors():
    for lib in LIBS:
        for dt in (lib.float16, lib.bfloat16):
            probs = lib.softmax(top_k(lib, lib.tensor(LOGITS), 1), -1).to(dt)  # one token left: the draw is known
            draw = lib.multinomial(probs, 1)
            assert draw.dtype == lib.int64 and tuple(draw.shape) == (4, 1)
            np.testing.assert_array_equal(draw.numpy()[:, 0], LOGITS.argmax(-1))
    for bad, msg in [(0.0, "invalid multinomial distribution (sum of probabilities <= 0)"),
                     (float("nan"), "probability tensor contains either `inf`, `nan` or element < 0")]:
        for replacement in (False, True):
            errors = []
            for lib in LIBS:
                probs = lib.softmax(lib.tensor(LOGITS), -1).half()
                probs[1] = bad
                with pytest.raises(RuntimeError) as info:
                    lib.multinomial(probs, 1 if not replacement else 3, replacement=replacement)
                errors.append(str(info.value))
            assert errors[0] == errors[1]
            # with replacement ATen's row walk reports a NaN as an entry < 0
            assert (msg if bad == 0.0 or not replacement else "encountering probability entry < 0") in errors[1]


def toy_logits(lib, input_ids):
    """A fixed 'language model': the last token's embedding (scaled by the length) times a head."""
    h = lib.tensor(EMB)[input_ids[:, -1]] * (1.0 + 0.1 * input_ids.shape[1])
    return lib.log_softmax(h @ lib.tensor(HEAD), dim=-1)


def greedy(lib, input_ids, steps, eos=3):
    unfinished = lib.ones(input_ids.shape[0], dtype=lib.long)
    for _ in range(steps):
        scores = no_repeat_ngram(lib, input_ids, toy_logits(lib, input_ids), 2)
        next_tokens = lib.argmax(scores, dim=-1)
        next_tokens = next_tokens * unfinished + 0 * (1 - unfinished)
        input_ids = lib.cat([input_ids, next_tokens[:, None]], dim=-1)
        unfinished = unfinished & (next_tokens != eos).long()
        if unfinished.max() == 0:
            break
    return input_ids


def beam_search(lib, input_ids, num_beams, steps, length_penalty=1.0, early_stopping=True, eos=3):
    """``BeamScorer``-like bookkeeping: beams flattened with ``view(-1)``, ``topk(2 * num_beams)`` over
    beams x vocab, beam index by floor division and token by ``fmod``, finished hypotheses scored by
    ``sum_logprobs / len ** length_penalty``."""
    batch = input_ids.shape[0]
    input_ids = input_ids.repeat_interleave(num_beams, dim=0)
    beam_scores = lib.zeros((batch, num_beams), dtype=lib.float32)
    beam_scores[:, 1:] = -1e9
    beam_scores = beam_scores.view((batch * num_beams,))
    hyps = [[] for _ in range(batch)]
    done = [False] * batch
    for _ in range(steps):
        next_token_scores = toy_logits(lib, input_ids) + beam_scores[:, None].expand(-1, VOCAB)
        next_token_scores = next_token_scores.view(batch, num_beams * VOCAB)
        next_token_scores, next_tokens = lib.topk(next_token_scores, 2 * num_beams, dim=1, largest=True, sorted=True)
        next_indices = lib.div(next_tokens, VOCAB, rounding_mode="floor")
        next_tokens = lib.fmod(next_tokens, VOCAB)
        new_scores = lib.zeros((batch, num_beams), dtype=next_token_scores.dtype)
        new_tokens = lib.zeros((batch, num_beams), dtype=next_tokens.dtype)
        new_indices = lib.zeros((batch, num_beams), dtype=next_indices.dtype)
        for b in range(batch):
            beam_idx = 0
            for rank, (tok, score, idx) in enumerate(zip(next_tokens[b], next_token_scores[b], next_indices[b])):
                batch_beam_idx = b * num_beams + idx
                if tok.item() == eos:
                    if rank >= num_beams:
                        continue
                    seq = input_ids[batch_beam_idx].clone()
                    hyps[b].append((score.item() / (seq.shape[-1] ** length_penalty), seq.tolist()))
                else:
                    new_scores[b, beam_idx], new_tokens[b, beam_idx] = score, tok
                    new_indices[b, beam_idx] = batch_beam_idx
                    beam_idx += 1
                if beam_idx == num_beams:
                    break
            done[b] = done[b] or (early_stopping and len(hyps[b]) >= num_beams)
        beam_scores = new_scores.view(-1)
        input_ids = lib.cat([input_ids[new_indices.view(-1), :], new_tokens.view(-1).unsqueeze(-1)], dim=-1)
        if all(done):
            break
    for b in range(batch):
        for i in range(num_beams):
            seq = input_ids[b * num_beams + i]
            hyps[b].append((beam_scores[b * num_beams + i].item() / seq.shape[-1] ** length_penalty, seq.tolist()))
    return [sorted(h, key=lambda x: -x[0])[:num_beams] for h in hyps], beam_scores, input_ids


@pytest.mark.parametrize("length_penalty,early_stopping", [(1.0, True), (0.6, False), (2.0, True)])
def test_greedy_and_beam_search_match_torch(length_penalty, early_stopping):
    prompt = INPUT_IDS[:2, :4]
    runs = []
    for lib in LIBS:
        g = greedy(lib, lib.tensor(prompt), 8)
        hyps, scores, ids = beam_search(lib, lib.tensor(prompt), 3, 7, length_penalty, early_stopping)
        runs.append({"greedy": g, "scores": scores, "ids": ids, "hyps": hyps})
    assert_close_tree(runs[0], runs[1], rtol=1e-5, atol=1e-5)
    assert runs[1]["ids"].dtype == jitorch.int64


def test_left_padding_masks_and_position_ids_match_torch():
    mask = np.array([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1], [0, 0, 0, 1, 1]], np.int64)
    out = []
    for lib in LIBS:
        am = lib.tensor(mask)
        position_ids = am.long().cumsum(-1) - 1
        position_ids.masked_fill_(am == 0, 1)
        scores = lib.tensor(SCORES)
        neg = lib.finfo(scores.dtype).min
        causal = lib.triu(lib.full((5, 5), neg), diagonal=1)
        expanded = (1.0 - am[:, None, None, :].to(scores.dtype)) * neg
        combined = (causal[None, None] + expanded).clamp(min=neg)
        masked = lib.where(am.bool()[:, None, None, :], scores, lib.tensor(neg))
        half = lib.where(am[:, None, None, :].bool(), scores.half(), lib.finfo(lib.float16).min)
        probs = lib.softmax(scores + combined, dim=-1)
        out.append({"pos": position_ids, "combined": combined, "masked": masked, "half": half, "probs": probs,
                    "strides": list(position_ids.stride()) + list(masked.stride())})
    assert_close_tree(out[0], out[1], rtol=1e-6, atol=1e-7)



# -- fixes found by this sweep ------------------------------------------------------------------------------------
@pytest.mark.parametrize("n", [17, 40, 300])
@pytest.mark.parametrize("dtype", ["float32", "float16", "int64"])
def test_sort_with_ties_matches_torch_up_to_the_order_of_equal_values(n, dtype):
    """Without ``stable`` ATen's CPU sort is libstdc++'s introsort, whose order among equal values torch leaves
    unspecified; jitorch's is always stable (replaying the introsort in Python was 75x slower with ties). Values match
    exactly, indices are a sorting permutation, and ``stable=True`` indices match torch's exactly."""
    rng = np.random.default_rng(n)
    vals = rng.integers(0, 4, (3, n)).astype(dtype)
    if dtype != "int64":
        vals[0, ::7] = np.nan
    got = {}
    for lib in LIBS:
        t = lib.tensor(vals)
        got[lib.__name__] = [lib.sort(t, descending=d) for d in (True, False)] + [lib.sort(t, stable=True).indices]
    (td, ta, ts), (jd, ja, js) = got["torch"], got["jitorch"]
    for (tv, _), (jv, ji) in ((td, jd), (ta, ja)):
        np.testing.assert_array_equal(jv.numpy(), tv.numpy())
        np.testing.assert_array_equal(np.take_along_axis(vals, ji.numpy(), 1), jv.numpy())
        assert all(sorted(row) == list(range(n)) for row in ji.tolist())
    np.testing.assert_array_equal(js.numpy(), ts.numpy())


def test_where_names_a_non_boolean_condition_as_torch():
    errors = []
    for lib in LIBS:
        with pytest.raises(RuntimeError) as info:
            lib.where(lib.tensor(np.array([[0, 1, 1]])), lib.ones(1, 3), lib.finfo(lib.float32).min)
        errors.append(str(info.value))
    assert errors[1] == errors[0] == "where expected condition to be a boolean tensor, but got a tensor with dtype Long"


def test_multinomial_writes_out_as_torch():
    """``torch.multinomial(probs, 1, out=next_tokens)`` fills (and returns) the given int64 buffer, and refuses
    another dtype in torch's words."""
    for lib in LIBS:
        probs = lib.softmax(top_k(lib, lib.tensor(LOGITS), 1), -1)
        buf = lib.zeros(4, 1, dtype=lib.long)
        assert lib.multinomial(probs, 1, out=buf) is buf
        np.testing.assert_array_equal(buf.numpy()[:, 0], LOGITS.argmax(-1))
        with pytest.raises(RuntimeError, match="multinomial expects Long tensor out, got: Float"):
            lib.multinomial(probs, 1, out=lib.zeros(4, 1))


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("dim", [-1, 0])
def test_half_log_softmax_rounds_as_torch_cpu(dtype, dim):
    """ATen's last-dim CPU kernel keeps a row's sum of exponentials and its log in the input's dtype (other dims:
    float32); the backward reads the rounded output. Values and gradients are bit-identical, -inf logits included."""
    rng = np.random.default_rng(7)
    x = (rng.standard_normal((16, 300)) * 3).astype(np.float32)
    x[:, ::5] = -np.inf  # top-k filtered logits
    g = rng.standard_normal(x.shape).astype(np.float32)
    out = []
    for lib in LIBS:
        t = lib.tensor(x).to(getattr(lib, dtype)).requires_grad_()
        y = lib.log_softmax(t, dim)
        y.backward(lib.tensor(g).to(y.dtype))
        out.append((y.float(), t.grad.float(), str(y.dtype).split(".")[-1]))
    np.testing.assert_array_equal(out[1][0].detach().numpy(), out[0][0].detach().numpy())
    assert out[1][2] == out[0][2]
    # the gradient: float32 exp of the rounded output (SLEEF's and NumPy's can differ in the last bit)
    a, b = out[1][1].numpy(), out[0][1].numpy()
    assert ((a != b) & ~(np.isnan(a) & np.isnan(b))).mean() < 1e-3


def test_bfloat16_compares_with_a_number_rounded_to_bfloat16():
    """torch casts the Python number of ``cumulative_probs < top_p`` to the tensor's bfloat16 (0.9 is 0.8984375);
    the cut of a bfloat16 typical/top-p filter depends on it."""
    out = []
    for lib in LIBS:
        x = lib.tensor([0.8984375, 0.9, 0.1, 1.0]).bfloat16()
        out.append([x < 0.9, x == 0.9, x >= 0.9, 0.9 > x, x.ne(0.9), lib.le(x, 0.9), x > 1e39, x.half() < 0.9])
    assert_close_tree(out[0], out[1])
