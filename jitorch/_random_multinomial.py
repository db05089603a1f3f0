"""``multinomial`` on the host: every row of the weights sampled at once (torch's distribution, not its stream).

A Python loop over rows with a full sort per row took 2 ms for 64 rows of 64 categories where torch takes 0.3, and
``rng.choice`` per row re-normalises and re-checks each. Here:

- with replacement: the inverse CDF. Each row's normalised cumulative sum is shifted by twice the row's number, so
  one ``searchsorted`` over the flattened rows answers every draw (a draw ``u + 2r`` with ``u`` in ``[0, 1)`` lands
  in row ``r``'s range). ``side="right"`` skips zero-weight categories (their CDF step is empty); a draw above a
  row's last CDF value (rounding) takes the row's last category of non-zero weight;
- without replacement: the exponential race (torch's CPU method). With ``E ~ Exp(1)`` per category, the categories
  sorted by ``w / E`` in decreasing order are a sample without replacement in proportion to ``w``: the first is
  category ``i`` with probability ``w_i / sum w``, each next one in proportion among those left. ``argpartition``
  picks each row's ``S`` largest keys, one ``argsort`` orders them.

>>> import numpy as np
>>> rng = np.random.default_rng(0)
>>> sample_rows(rng, np.array([[0.0, 1.0, 0.0], [1.0, 0.0, 0.0]]), 4, True).tolist()
[[1, 1, 1, 1], [0, 0, 0, 0]]
>>> sorted(sample_rows(rng, np.array([[1.0, 2.0, 0.0, 3.0]]), 3, False)[0].tolist())
[0, 1, 3]
"""
from __future__ import annotations

import numpy as np

__all__ = ["sample_rows"]


def sample_rows(rng, rows, num_samples, replacement):
    """``num_samples`` category indices (int64, ``(R, num_samples)``) from each row of the float64 weights ``rows``
    (``(R, K)``, non-negative and finite), drawn from the NumPy Generator ``rng``."""
    nrows, k = rows.shape
    totals = rows.sum(axis=1)
    if nrows and not (totals > 0).all():
        raise RuntimeError("invalid multinomial distribution (sum of probabilities <= 0)")
    if nrows == 0:
        return np.empty((0, num_samples), dtype=np.int64)
    return _with_replacement(rng, rows, totals, num_samples) if replacement else \
        _without_replacement(rng, rows, num_samples)


def _with_replacement(rng, rows, totals, num_samples):
    nrows, k = rows.shape
    shift = 2.0 * np.arange(nrows)[:, None]
    cdf = np.cumsum(rows, axis=1)
    cdf /= totals[:, None]
    cdf += shift
    draws = rng.random((nrows, num_samples))
    draws += shift
    pos = np.searchsorted(cdf.reshape(-1), draws.reshape(-1), side="right").reshape(nrows, num_samples)
    pos -= np.arange(nrows)[:, None] * k
    last = k - 1 - np.argmax(rows[:, ::-1] > 0, axis=1)  # each row's last category of non-zero weight
    return np.minimum(pos, last[:, None]).astype(np.int64, copy=False)


def _without_replacement(rng, rows, num_samples):
    k = rows.shape[1]
    # 1 - U is in (0, 1]: E = -log(1 - U) is finite, so every positive weight gets a positive key and a zero weight
    # a key of 0, chosen only once every positive one is (as torch's CPU kernel, which then fills with zero-weight
    # categories; here in increasing order, by the stable sort).
    race = -np.log1p(-rng.random(rows.shape))
    with np.errstate(divide="ignore", invalid="ignore"):
        keys = np.where(rows > 0, rows / race, 0.0)  # E == 0 (U == 0): an infinite key, the race's first
    if num_samples < k and int((rows > 0).sum(axis=1).min()) >= num_samples:
        top = np.argpartition(-keys, num_samples - 1, axis=1)[:, :num_samples]
    else:  # every key, so that ties at 0 are broken by position, not by where the partition left them
        top = np.broadcast_to(np.arange(k), keys.shape)
    order = np.argsort(-np.take_along_axis(keys, top, axis=1), axis=1, kind="stable")[:, :num_samples]
    return np.take_along_axis(top, order, axis=1).astype(np.int64, copy=False)
