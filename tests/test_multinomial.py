"""``multinomial`` on the CPU: the distribution torch draws from (not its stream), checked with chi-square statistics
on fixed seeds (deterministic; each bound is the chi-square quantile at 1 - 1e-6, which a sampler giving one
category 5% more than its share exceeds at these sample counts), plus torch's shapes, filling and errors."""
from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from scipy.stats import chi2

import jitorch
from helpers import check_error

WEIGHTS = np.array([[0.0, 1.0, 3.0, 0.0, 6.0, 0.5], [2.0, 2.0, 0.0, 4.0, 0.0, 1.0], [1.0] * 6], np.float32)


def _chi2(counts, probs):
    """(statistic, bound) of observed ``counts`` against ``probs`` (categories of probability 0 excluded)."""
    keep = probs > 0
    expected = probs[keep] * counts.sum()
    stat = float((((counts[keep] - expected) ** 2) / expected).sum())
    return stat, chi2.ppf(1 - 1e-6, keep.sum() - 1)


def _gen(seed):
    return jitorch.Generator().manual_seed(seed)


@pytest.mark.parametrize("seed", [0, 1])
def test_with_replacement_follows_the_weights(seed):
    n = 200000
    drawn = jitorch.multinomial(jitorch.tensor(WEIGHTS), n, True, generator=_gen(seed)).numpy()
    assert drawn.shape == (3, n) and drawn.dtype == np.int64
    probs = WEIGHTS / WEIGHTS.sum(1, keepdims=True)
    for row, p in zip(drawn, probs):
        counts = np.bincount(row, minlength=6)
        assert not counts[p == 0].any()  # a zero weight is never drawn
        stat, bound = _chi2(counts, p)
        assert stat < bound, (stat, bound)
    one = jitorch.multinomial(jitorch.tensor(WEIGHTS[0]), n, True, generator=_gen(seed)).numpy()
    assert one.shape == (n,)
    stat, bound = _chi2(np.bincount(one, minlength=6), probs[0])
    assert stat < bound, (stat, bound)


def test_with_replacement_tiny_and_huge_weights():
    """Weights spread over 40 orders of magnitude: the CDF's rounding must neither give mass to a zero weight after
    the last positive one, nor lose the dominant category."""
    w = np.array([[1e-30, 1.0, 0.0, 0.0], [0.0, 0.0, 1e-20, 0.0]], np.float64)
    drawn = jitorch.multinomial(jitorch.tensor(w), 5000, True, generator=_gen(2)).numpy()
    assert (drawn[0] == 1).all() and (drawn[1] == 2).all()


@pytest.mark.parametrize("seed", [0, 1])
def test_without_replacement_draws_in_sequence(seed):
    """Ordered triples from weights (1, 2, 3, 4, 0): P(i, j, k) = p_i * p_j / (1 - p_i) * p_k / (1 - p_i - p_j),
    the law of drawing one at a time, each in proportion to the weights left."""
    w = np.array([1.0, 2.0, 3.0, 4.0, 0.0])
    rows = 40000
    drawn = jitorch.multinomial(jitorch.tensor(np.tile(w, (rows, 1))), 3, generator=_gen(seed)).numpy()
    assert drawn.shape == (rows, 3)
    assert (np.sort(drawn, 1)[:, 1:] != np.sort(drawn, 1)[:, :-1]).all() and not (drawn == 4).any()
    p = w / w.sum()
    triples = list(itertools.permutations(range(4), 3))
    probs = np.array([p[i] * p[j] / (1 - p[i]) * p[k] / (1 - p[i] - p[j]) for i, j, k in triples])
    index = {t: n for n, t in enumerate(triples)}
    counts = np.bincount([index[tuple(r)] for r in drawn.tolist()], minlength=len(triples))
    stat, bound = _chi2(counts.astype(np.float64), probs)
    assert stat < bound, (stat, bound)


def test_without_replacement_fills_with_zero_weights_as_torch():
    """torch's CPU kernel draws every positive weight, then zero-weight categories (here in increasing order)."""
    w = [[0.0, 0.0, 1.0, 0.0, 2.0]] * 4
    got = jitorch.multinomial(jitorch.tensor(w), 4, generator=_gen(3))
    want = torch.multinomial(torch.tensor(w), 4)
    assert got.shape == want.shape and got.dtype.name == "int64"
    assert {tuple(sorted(r[:2])) for r in got.tolist()} == {(2, 4)}
    assert all(r[2:] == [0, 1] for r in got.tolist())
    assert sorted(jitorch.multinomial(jitorch.ones(5), 5, generator=_gen(4)).tolist()) == list(range(5))


def test_same_seed_same_draws():
    a = jitorch.multinomial(jitorch.tensor(WEIGHTS), 4, generator=_gen(5))
    b = jitorch.multinomial(jitorch.tensor(WEIGHTS), 4, generator=_gen(5))
    c = jitorch.multinomial(jitorch.tensor(WEIGHTS), 7, True, generator=_gen(6))
    d = jitorch.multinomial(jitorch.tensor(WEIGHTS), 7, True, generator=_gen(7))
    assert a.tolist() == b.tolist() and c.tolist() != d.tolist()


@pytest.mark.parametrize("fn", [
    lambda T: T.multinomial(T.ones(3), 0),
    lambda T: T.multinomial(T.ones(2, 3), 0, True),
    lambda T: T.multinomial(T.tensor([[1.0, 1.0], [0.0, 0.0]]), 1, True),
    lambda T: T.multinomial(T.tensor([[0.0, 0.0]]), 1),
    lambda T: T.multinomial(T.tensor([1.0, float("nan")]), 1),
    lambda T: T.multinomial(T.tensor([1.0, float("inf")]), 1, True),
    lambda T: T.multinomial(T.ones(2), 3),
    lambda T: T.multinomial(T.ones(2, 2, 2), 1),
])
def test_errors_match_torch(fn):
    check_error(lambda: fn(jitorch), lambda: fn(torch))


def test_empty_batch():
    assert tuple(jitorch.multinomial(jitorch.zeros(0, 3), 2).shape) == tuple(torch.multinomial(torch.zeros(0, 3),
                                                                                                2).shape)
