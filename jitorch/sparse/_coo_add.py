"""Sums with sparse_coo tensors as torch's CPU kernels make them: ``sparse + sparse`` (``add``/``add_``, and the
backward engine's sum of two sparse gradients), a sparse tensor added into a dense one in place, and the in-place
methods an optimizer or ``Module.to`` calls on a sparse gradient or momentum buffer (``mul_``, ``zero_``, ``detach_``,
``data =``).

ATen's ``add_out_sparse_cpu`` walks both entry lists once, as the merge step of a merge sort does, whether or not they
are sorted: at each step the entry with the smaller index is taken, and two entries with the same index become one
entry holding their sum. So the result is uncoalesced unless both inputs were coalesced, and its order is observable
(``_indices()``). When either values tensor is not contiguous ATen concatenates the two lists instead (coalescing once
there are more entries than elements). `walk_positions` computes the walk's outcome without walking it entry by entry
(see its docstring); the values are then summed by position (`group_sums`), so gradients reach both operands'
values.

>>> import jitorch
>>> a = jitorch.sparse_coo_tensor([[3, 1]], [1.0, 2.0], (4,))
>>> b = jitorch.sparse_coo_tensor([[1, 3]], [10.0, 20.0], (4,))
>>> s = a + b
>>> s._indices(), s._values(), s.is_coalesced()
(tensor([[1, 3, 1]]), tensor([10., 21.,  2.]), False)
"""
from __future__ import annotations

import numpy as np

from .. import _creation, _dtype
from .._memory_format import contiguous_format
from .._tensor import Tensor
from ._coo import SparseCooTensor, make_sparse
from ._coo_index import group_sums, linear_index

__all__ = ["walk_positions", "add_sparse", "add_sparse_", "add_into_dense_", "sparse_grad_sum", "owned_grad",
           "accumulate_grad"]

# Below this many entries in all, a walk is replayed in Python: cheaper than the vectorized steps' NumPy calls.
_REPLAY = 256


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


def _blocks(keys):
    """Start, length and leading key of each block of ``keys``: a block starts at a key above every key before it."""
    running = np.maximum.accumulate(keys)
    starts = np.flatnonzero(np.concatenate([[True], keys[1:] > running[:-1]]))
    return starts, np.diff(np.append(starts, keys.size)), keys[starts]


def walk_positions(kt, ks):
    """Where ATen's walk puts each entry: ``(pos_t, pos_s, count)`` for the int64 position arrays ``kt`` and ``ks``
    (an entry of t and one of s with the same position were summed into one).

    Every key inside a block is at most its leading key (the block's record), so once the walk takes a block's record
    it takes the rest of the block before the other list's next record. Blocks therefore come out whole, ordered by
    their records; when both lists have a block with the same record, the two records become one entry and the two
    blocks' remainders merge by the same walk (recursively). Equal leading entries are paired up first. A recursion
    that would not shrink the problem by a tenth, and any small one, replays the walk in Python instead.

    >>> walk_positions(np.array([5, 3]), np.array([3, 5]))
    (array([1, 2]), array([0, 1]), 3)
    """
    n, m = kt.size, ks.size
    if not n or not m:
        return np.arange(n, dtype=np.int64), np.arange(n, n + m, dtype=np.int64), n + m
    if n + m <= _REPLAY:
        return _replay(kt, ks)
    k = min(n, m)
    same = kt[:k] == ks[:k]
    p = k if same.all() else int(same.argmin())
    if p:  # a common prefix pairs up entry by entry
        pt, ps, count = walk_positions(kt[p:], ks[p:])
        head = np.arange(p, dtype=np.int64)
        return np.concatenate([head, pt + p]), np.concatenate([head, ps + p]), count + p
    st, lt, rt = _blocks(kt)
    ss, ls, rs = _blocks(ks)
    units = np.union1d(rt, rs)
    ut, us = np.searchsorted(units, rt), np.searchsorted(units, rs)
    size = np.zeros(units.size, dtype=np.int64)
    size[ut] += lt
    size[us] += ls
    _, it, is_ = np.intersect1d(rt, rs, assume_unique=True, return_indices=True)
    size[ut[it]] -= 1  # the two records of a shared block are one entry
    merged = []
    both = (lt[it] > 1) & (ls[is_] > 1)  # shared blocks whose remainders both have entries
    for bt, bs in zip(it[both].tolist(), is_[both].tolist()):
        a, b, c, d = st[bt] + 1, st[bt] + lt[bt], ss[bs] + 1, ss[bs] + ls[bs]
        walk = _replay if (b - a) + (d - c) > 0.9 * (n + m) else walk_positions
        sub = walk(kt[a:b], ks[c:d])
        size[ut[bt]] = 1 + sub[2]
        merged.append((ut[bt], a, b, c, d, sub))
    start = np.cumsum(size) - size
    pos_t = np.repeat(start[ut] - st, lt) + np.arange(n, dtype=np.int64)
    pos_s = np.repeat(start[us] - ss, ls) + np.arange(m, dtype=np.int64)
    for unit, a, b, c, d, (pt, ps, _) in merged:
        pos_t[a:b] = start[unit] + 1 + pt
        pos_s[c:d] = start[unit] + 1 + ps
    return pos_t, pos_s, int(size.sum())


def _host_keys(s):
    # A host read (the walk's order depends on the values): a CPU graph capture refuses it, as it should.
    return linear_index(s._sp_indices, s.shape[:s.sparse_dim()]).numpy(force=True)


def _refuse_capture(what):
    """Raw-array updates would escape a CPU graph capture: end it with the reason (``reduce-overhead`` has seen the
    host reads of the same step in its warm-up and does not capture it)."""
    from .._dispatch_modes import MODES

    if MODES and getattr(MODES[-1], "records_updates", False):
        MODES[-1].fail(f"CPU graph capture: {what} is not captured (its sizes depend on the sparse tensor's "
                       "indices); run the step uncaptured")


def _contiguous(t):
    return t._data.flags.c_contiguous


def add_sparse(t, s, alpha=1):
    """``t + alpha * s`` for two sparse_coo tensors of one size, entries in ATen's order (module docstring)."""
    from .._movement import cat

    if t.shape != s.shape:
        raise RuntimeError(f"add: expected sizes of 'self' and 'other' to match, but {list(t.shape)} != "
                           f"{list(s.shape)}")
    common = _dtype.promote_types(t.dtype, s.dtype)
    tv = t._sp_values.to(common)
    sv = s._sp_values.to(common)
    if alpha != 1:
        sv = sv * alpha
    if s._nnz() == 0:
        return make_sparse(t._sp_indices, tv, t.shape, t._sp_coalesced)
    if t._nnz() == 0:
        return make_sparse(s._sp_indices, sv, s.shape, s._sp_coalesced)
    if t.sparse_dim() != s.sparse_dim():
        raise RuntimeError(f"add: expected 'self' and 'other' to have same density, but 'self' has {t.sparse_dim()} "
                           f"sparse dimensions while 'other' has {s.sparse_dim()} sparse dimensions")
    if not (_contiguous(t._sp_values) and _contiguous(s._sp_values)):
        out = make_sparse(cat([t._sp_indices, s._sp_indices], 1), cat([tv, sv]), t.shape, False)
        return out.coalesce() if out._nnz() > out.numel() else out
    pos_t, pos_s, count = walk_positions(_host_keys(t), _host_keys(s))
    positions = _creation.tensor(np.concatenate([pos_t, pos_s]), device=t.device)
    indices = t._sp_indices.new_zeros((t.sparse_dim(), count))
    indices.index_copy_(1, positions, cat([t._sp_indices, s._sp_indices], 1))
    # t's value, then s's where both have an entry (ATen's order of the additions).
    values = group_sums(cat([tv, sv]), positions, count)
    return make_sparse(indices, values, t.shape, t._sp_coalesced and s._sp_coalesced)


def add_sparse_(t, s, alpha=1):
    """``t += alpha * s`` in place (``t`` keeps its dtype and its identity: an accumulated ``.grad``)."""
    out = add_sparse(t, s, alpha)
    t._sp_indices, t._sp_values, t._sp_coalesced = out._sp_indices, out._sp_values.to(t.dtype), out._sp_coalesced
    t._bump_version()
    return t


def add_into_dense_(dense, s, alpha=1):
    """``dense += alpha * s`` in place on ``dense``'s array, without a dense copy of ``s`` and without autograd (the
    engine's accumulation into a dense ``.grad``, the optimizers' updates). Duplicates are summed first (`coalesce`),
    then each position is written once."""
    if tuple(dense.shape) != tuple(s.shape):
        raise RuntimeError(f"add: expected 'self' and 'other' to have same size, but self has size "
                           f"{list(dense.shape)} while other has size {list(s.shape)} (FYI: dense-sparse addition does "
                           "not currently support broadcasting)")
    _refuse_capture("adding a sparse tensor into a dense one")
    if s._nnz() == 0:
        return dense
    c = s.coalesce()
    target = dense._data
    values = c._sp_values._data
    if alpha != 1:
        values = values * alpha
    values = values.astype(target.dtype, copy=False)
    if c.sparse_dim() == 0:  # no sparse dims: the one entry is the whole tensor
        target += values[0]
    else:
        target[tuple(c._sp_indices._data)] += values  # distinct positions: a plain fancy-index add is exact
    dense._bump_version()
    return dense


def sparse_grad_sum(a, b):
    """``a + b`` for two gradients of one tensor, one or both sparse, as torch's engine sums them: dense + sparse is
    dense (in whichever order they came), sparse + sparse is sparse."""
    if isinstance(a, SparseCooTensor) and not isinstance(b, SparseCooTensor):
        a, b = b, a
    if isinstance(a, SparseCooTensor):
        return add_sparse(a, b)
    return a + b.to_dense()


def owned_grad(g, user_grads):
    """The first sparse gradient a leaf stores: a new sparse tensor over ``g``'s indices and values (torch's shallow
    copy), its values copied when they are not contiguous (an expanded ``sum()`` gradient), as torch's clone, or
    when they are a view of a gradient the user passed to ``backward``."""
    values = g._sp_values
    root = values._ver_owner
    if not _contiguous(values) or root is not None and any(
            u is root or u._ver_owner is root for u in user_grads if isinstance(u, Tensor)):
        values = values.clone(memory_format=contiguous_format)
    return make_sparse(g._sp_indices, values, g.shape, g._sp_coalesced)


def accumulate_grad(grad, g, create_graph=False):
    """The leaf's ``.grad`` after a backward's gradient ``g`` joins it, as torch's ``AccumulateGrad``: sparse into
    sparse in place (the same object), sparse into dense in place, and a dense gradient into a sparse ``.grad``
    gives a new dense one; a new sum under ``create_graph``."""
    if create_graph:
        return sparse_grad_sum(grad, g) if grad.is_sparse or g.is_sparse else grad + g
    if isinstance(grad, SparseCooTensor):
        if isinstance(g, SparseCooTensor):
            return add_sparse_(grad, g)
        return g + grad
    if isinstance(g, SparseCooTensor):
        add_into_dense_(grad, g)
        return grad
    grad._inplace_accumulate(g)
    return grad


def _mul_(self, other):
    """``self *= other`` for a number or a 0-d dense tensor (new values, the same tensor; ATen's in-place product
    leaves it marked uncoalesced)."""
    from ._coo_math import _scalar_like

    if not _scalar_like(other):
        raise RuntimeError("mul_: a sparse_coo tensor is scaled in place by a number or a 0-d dense tensor only; use "
                           "s * other for other operands")
    self._sp_values = self._sp_values * other
    self._sp_coalesced = False
    self._bump_version()
    return self


def _zero_(self):
    """No entries left (``_nnz() == 0``, coalesced), as torch's sparse ``zero_``."""
    values = self._sp_values
    self._sp_indices = self._sp_indices.new_zeros((self.sparse_dim(), 0))
    self._sp_values = values.detach().new_zeros((0,) + tuple(values.shape[1:]))
    self._sp_coalesced = True
    self._bump_version()
    return self


def _detach_(self):
    self._sp_values = self._sp_values.detach()
    return self


def _set_data(self, value):
    # ``Module.to``/``double()`` convert a sparse ``.grad`` through ``grad.data = ...``, as torch's ``set_data``.
    if not isinstance(value, SparseCooTensor):
        raise RuntimeError(f"data: a sparse_coo tensor's data is set from a sparse_coo tensor, got layout "
                           f"{value.layout}")
    requires_grad = self.requires_grad
    self._sp_indices, self._sp_size, self._sp_coalesced = value._sp_indices, value._sp_size, value._sp_coalesced
    self._sp_values = value._sp_values.detach().requires_grad_(requires_grad)


def _add_(self, other, *, alpha=1):
    """``self += alpha * other`` for a sparse_coo ``other`` (a dense one would make the sum dense: refused)."""
    if not isinstance(other, SparseCooTensor):
        raise RuntimeError("add_: a dense tensor cannot be added into a sparse_coo tensor in place (the sum is "
                           "dense); use dense.add_(sparse) or sparse.to_dense() + dense")
    return add_sparse_(self, other, alpha)


def _sub_(self, other, *, alpha=1):
    return _add_(self, other, alpha=-alpha)


def _install():
    SparseCooTensor.data = property(SparseCooTensor.detach, _set_data)
    for name, fn in (("add_", _add_), ("sub_", _sub_), ("mul_", _mul_), ("zero_", _zero_), ("detach_", _detach_)):
        setattr(SparseCooTensor, name, fn)


_install()
