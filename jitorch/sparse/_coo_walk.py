"""ATen's merge walk over two COO entry lists (``add_out_sparse_cpu``), computed without walking it entry by entry.

The walk looks at the head of each list: the smaller key is taken, two equal keys become one entry (their sum), and
the rest of the longer list follows, whether or not the lists are sorted. `walk_positions` says where each entry ends
up (an entry of each list with the same position were summed into one).

Split each list into blocks, a block starting at a key above every key before it (a record). Every key inside a block
is at most its record, so once the walk takes a record it takes the rest of the block before the other list's next
record: blocks come out whole, ordered by their records. A record present in both lists is one entry, and the two
blocks' remainders merge by the same walk (a sub-walk), before either list's next record. `walk_positions` resolves
every sub-walk of one depth at once (segmented running maxima over the concatenated entries, a ``searchsorted``
match of the two lists' records), so a walk costs a few NumPy passes per depth; the slots each sub-walk fills are
summed back up the depths, then each entry's slot is laid out from the top down. Real lists nest two or three
depths; inputs that nest deeper than `_MAX_WORK` allows (contrived interleavings) finish by `_replay`.

>>> walk_positions(np.array([5, 3]), np.array([3, 5]))
(array([1, 2]), array([0, 1]), 3)
"""
from __future__ import annotations

import numpy as np

__all__ = ["walk_positions"]

# Below this many entries in all, a walk is replayed in Python: cheaper than the vectorized steps' NumPy calls.
_REPLAY = 256
# The vectorized depths may handle this many times the walk's entries in all (and two depths in a row may fail to
# shrink it by a tenth) before the remaining sub-walks are replayed.
_MAX_WORK = 4


def _replay(kt, ks):
    """ATen's walk, entry by entry (``kt``/``ks``: the linear positions of t's and s's entries)."""
    t, s = kt.tolist(), ks.tolist()
    n, m = len(t), len(s)
    pt, ps = [0] * n, [0] * m
    i = j = r = 0
    while i < n and j < m:
        a, b = t[i], s[j]
        if a < b:
            pt[i] = r
            i += 1
        elif b < a:
            ps[j] = r
            j += 1
        else:
            pt[i] = ps[j] = r
            i += 1
            j += 1
        r += 1
    for i in range(i, n):
        pt[i] = r
        r += 1
    for j in range(j, m):
        ps[j] = r
        r += 1
    return np.array(pt, dtype=np.int64), np.array(ps, dtype=np.int64), r


def walk_positions(kt, ks):
    """Where ATen's walk puts each entry: ``(pos_t, pos_s, count)`` for the int64 position arrays ``kt`` and ``ks``
    (module docstring).

    >>> walk_positions(np.array([2, 9, 4]), np.array([9, 1]))
    (array([0, 1, 3]), array([1, 2]), 4)
    """
    n, m = kt.size, ks.size
    if not n or not m:
        return np.arange(n, dtype=np.int64), np.arange(n, n + m, dtype=np.int64), n + m
    if n + m <= _REPLAY:
        return _replay(kt, ks)
    kt, ks = kt.astype(np.int64, copy=False), ks.astype(np.int64, copy=False)
    pos = np.empty(n + m, dtype=np.int64)
    # A common prefix pairs up entry by entry.
    k = min(n, m)
    same = kt[:k] == ks[:k]
    p = k if same.all() else int(same.argmin())
    pos[:p] = pos[n:n + p] = np.arange(p)
    if p == k:  # one list is used up: the rest of the other follows
        pos[p:n] = np.arange(p, n)
        pos[n + p:] = np.arange(p, m)
        return pos[:n], pos[n:], n + m - p
    return pos[:n], pos[n:], p + _Walk(kt, ks).lay_out((p, n, n + p, n + m), p, pos)


class _Walk:
    """The depths of one walk over ``kt`` and ``ks`` (the entries numbered t's first, then s's).

    A depth's entries are ordered by sub-walk, then list, then position: ``(a, b, c, d)`` is one sub-walk over
    entries a..b-1 (t's) and c..d-1 (s's); an array of entries comes with each one's group (2 * sub-walk + list),
    offset by ``span`` per group in the running maxima.
    """

    def __init__(self, kt, ks):
        self.kt, self.ks = kt, ks
        self.n = kt.size
        self.keys = None

    def _flat(self):
        """All keys, from 0 and with ``span * (2 * entries + 2)`` within int64 (dense ranks where they are not)."""
        if self.keys is None:
            keys = np.concatenate([self.kt, self.ks])
            low, high = int(keys.min()), int(keys.max())
            if (high - low + 1) * (2 * keys.size + 2) < 1 << 62:
                keys -= low
            else:
                keys = np.unique(keys, return_inverse=True)[1].reshape(-1)
            self.keys, self.span = keys, int(keys.max()) + 1
        return self.keys

    def lay_out(self, entries, first, pos):
        """Place the entries of the walk over ``entries`` from slot ``first`` on; returns its entry count."""
        depths, group, work, total = [], None, 0, _count(entries)
        slow, last = 0, None
        while entries is not None:
            count = _count(entries)
            work += count
            slow = slow + 1 if last is not None and count > 0.9 * last else 0
            last = count
            if work > _MAX_WORK * total or slow >= 2:  # nesting deeper than real lists do: replayed
                depths.append(self._replayed(entries, group))
                break
            depth, entries, group = self._depth(entries, group)
            depths.append(depth)
        return _lay_out(depths, np.array([first]), pos)

    def _depth(self, entries, group):
        """One depth of sub-walks: its units (a record of one list or both, with its block(s)), and the next depth's
        entries and groups, the remainders of the shared records whose blocks both go on (None when none do)."""
        if isinstance(entries, tuple):
            a, b, c, d = entries
            nt = b - a
            run = np.empty(nt + d - c, dtype=np.int64)
            np.maximum.accumulate(self.kt[a:b], out=run[:nt])
            np.maximum.accumulate(self.ks[c - self.n:d - self.n], out=run[nt:])
        else:
            keys = self._flat()
            run = np.maximum.accumulate(group * self.span + keys[entries])
        lead = np.empty(run.size, dtype=bool)
        lead[0] = True
        np.not_equal(run[1:], run[:-1], out=lead[1:])  # a record, or a new (sub-walk, list)
        if isinstance(entries, tuple):
            lead[nt] = True
            starts = np.flatnonzero(lead)
            walk, in_s = np.zeros(starts.size, dtype=np.int64), starts >= nt
            unit_key = run[starts]
        else:
            starts = np.flatnonzero(lead)
            group = run[starts] // self.span
            walk, in_s = group >> 1, (group & 1).astype(bool)
            unit_key = run[starts] - (group - walk) * self.span  # (sub-walk, record): the walk's order of units
        lengths = np.diff(np.append(starts, run.size))
        # The units in the walk's order: each list's blocks are sorted by (sub-walk, record), so a stable sort of the
        # two runs merges them (t's block first on a tie); a record in both lists is one unit, its s block the second.
        blocks = np.concatenate([np.flatnonzero(~in_s), np.flatnonzero(in_s)])
        merged = blocks[np.argsort(unit_key[blocks], kind="stable")]
        pair = np.zeros(merged.size, dtype=bool)
        ordered = unit_key[merged]
        np.equal(ordered[1:], ordered[:-1], out=pair[1:])
        unit = np.empty(starts.size, dtype=np.int64)
        unit[merged] = np.cumsum(~pair) - 1
        alone = merged[~pair]  # each unit's first block
        unit_walk, size = walk[alone], lengths[alone]
        bt, bs = merged[np.flatnonzero(pair) - 1], merged[pair]
        size[unit[bs]] += lengths[bs] - 1  # the two records are one entry
        # A shared record whose blocks both go on: a sub-walk of the next depth (its slots are added when known).
        both = (lengths[bt] > 1) & (lengths[bs] > 1)
        bt, bs = bt[both], bs[both]
        nested = unit[bt]
        size[nested] = 1
        depth = {"unit_walk": unit_walk, "size": size, "nested": nested, "entries": entries, "starts": starts,
                 "lengths": lengths, "unit": unit}
        if not nested.size:
            return depth, None, None
        # The next depth: sub-walk k's t remainder, then its s remainder, for k in unit order.
        first = np.stack([starts[bt], starts[bs]], 1).reshape(-1) + 1
        length = np.stack([lengths[bt], lengths[bs]], 1).reshape(-1) - 1
        if isinstance(entries, tuple) and nested.size == 1:
            t0, s0 = a + int(first[0]), c + int(first[1]) - nt
            return depth, (t0, t0 + int(length[0]), s0, s0 + int(length[1])), None
        ends = np.cumsum(length)
        picked = np.repeat(first - (ends - length), length) + np.arange(int(ends[-1]))
        return depth, _global(entries, picked), np.repeat(np.arange(length.size, dtype=np.int64), length)

    def _replayed(self, entries, group):
        """The remaining sub-walks, each replayed: one unit per sub-walk holding all of its entries."""
        keys = self._flat()
        if isinstance(entries, tuple):
            a, b, c, d = entries
            entries = np.concatenate([np.arange(a, b), np.arange(c, d)])
            group = np.repeat(np.array([0, 1], dtype=np.int64), [b - a, d - c])
        walk = group >> 1
        bounds = np.flatnonzero(np.diff(walk)) + 1
        starts, ends = np.concatenate([[0], bounds]), np.append(bounds, walk.size)
        at = np.empty(entries.size, dtype=np.int64)
        size = np.empty(starts.size, dtype=np.int64)
        for u, (a, b) in enumerate(zip(starts.tolist(), ends.tolist())):
            mid = a + int(np.count_nonzero(group[a:b] & 1 == 0))
            pt, ps, size[u] = _replay(keys[entries[a:mid]], keys[entries[mid:b]])
            at[a:mid], at[mid:b] = pt, ps
        return {"unit_walk": walk[starts], "size": size, "nested": np.zeros(0, dtype=np.int64), "entries": entries,
                "lengths": ends - starts, "at": at}


def _count(entries):
    return entries[1] - entries[0] + entries[3] - entries[2] if isinstance(entries, tuple) else entries.size


def _global(entries, local):
    """The entries at the places ``local`` of a depth's order."""
    if not isinstance(entries, tuple):
        return entries[local]
    a, b, c, _ = entries
    return np.where(local < b - a, local + a, local + (c - b + a))


def _lay_out(depths, first, pos):
    """Fill ``pos`` from the depths' units: slots summed from the deepest sub-walks up, then each unit's first slot
    from the top down (the units of one sub-walk are consecutive, in order; ``first``: the top walk's first slot).
    Returns the top walk's entry count."""
    below = None
    for depth in reversed(depths):
        if below is not None:
            depth["size"][depth["nested"]] += below
        below = np.bincount(depth["unit_walk"], weights=depth["size"]).astype(np.int64)
    for depth in depths:
        size, walk = depth["size"], depth["unit_walk"]
        ends = np.cumsum(size)
        begin = np.flatnonzero(np.concatenate([[True], walk[1:] != walk[:-1]]))
        base = np.repeat(first[walk[begin]] - (ends[begin] - size[begin]), np.diff(np.append(begin, walk.size)))
        start = base + ends - size
        entries = depth["entries"]
        if "at" in depth:  # replayed: one unit per sub-walk
            pos[entries] = np.repeat(start, depth["lengths"]) + depth["at"]
            break
        # Every entry of the depth, in its order (a sub-walk's remainders are placed again by the next depth).
        placed = np.repeat(start[depth["unit"]] - depth["starts"], depth["lengths"])
        placed += np.arange(placed.size)
        if isinstance(entries, tuple):
            a, b, c, d = entries
            pos[a:b], pos[c:d] = placed[:b - a], placed[b - a:]
        else:
            pos[entries] = placed
        first = start[depth["nested"]] + 1
    return int(below[0])
