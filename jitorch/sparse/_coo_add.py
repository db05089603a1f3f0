"""Sums with sparse_coo tensors as torch's CPU kernels make them: ``sparse + sparse`` (``add``/``add_``, and the
backward engine's sum of two sparse gradients), ``dense + sparse`` (in place or not), and the in-place methods an
optimizer or ``Module.to`` calls on a sparse gradient or momentum buffer (``mul_``, ``zero_``, ``detach_``,
``data =``).

ATen's ``add_out_sparse_cpu`` walks both entry lists once, as the merge step of a merge sort does, whether or not they
are sorted: at each step the entry with the smaller index is taken, and two entries with the same index become one
entry holding their sum. So the result is uncoalesced unless both inputs were coalesced, and its order is observable
(``_indices()``). When either values tensor is not contiguous ATen concatenates the two lists instead (coalescing once
there are more entries than elements). `walk_positions` (``_coo_walk.py``) computes the walk's outcome; the values are
then summed by position (`group_sums`), so gradients reach both operands' values.

``add_out_dense_sparse_cpu`` adds the entries into the dense tensor one after the other: two entries at one position
give ``(d + v1) + v2``, which rounds differently from ``d + (v1 + v2)``. `add_dense_sparse` does the same, by levels
(the first entry of every position, then the second...), each level a scatter to distinct positions.

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
from .._grad_state import GradState
from .._memory_format import contiguous_format
from .._tensor import Tensor
from ..runtime import array_module_for, is_cupy, scatter_add
from ._coo import SparseCooTensor, make_sparse
from ._coo_index import group_sums, linear_index
from ._coo_walk import walk_positions

__all__ = ["add_sparse", "add_sparse_", "add_dense_sparse", "sparse_grad_sum", "owned_grad", "accumulate_grad"]

# Below this many elements an update is added by ``np.add.at`` (in order, entry by entry) rather than by levels.
_AT_ONCE = 4096


def _host_keys(s):
    # A host read (the walk's order depends on the values): a CPU graph capture refuses it, as it should.
    return linear_index(s._sp_indices, s.shape[:s.sparse_dim()]).numpy(force=True)


def _contiguous(t):
    return t._data.flags.c_contiguous


def add_sparse(t, s, alpha=1):
    """``t + alpha * s`` for two sparse_coo tensors of one size, entries in ATen's order (module docstring). The
    result owns its memory, as ATen's (an empty operand's partner is copied)."""
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
        return make_sparse(t._sp_indices.clone(), tv.clone() if tv is t._sp_values else tv, t.shape,
                           t._sp_coalesced)
    if t._nnz() == 0:
        return make_sparse(s._sp_indices.clone(), sv.clone() if sv is s._sp_values else sv, s.shape,
                           s._sp_coalesced)
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
    t._rebind(out._sp_indices, out._sp_values.to(t.dtype), out._sp_coalesced)
    t._bump_version()
    return t


def _levels(flat):
    """The entries (by their positions ``flat``, from 0) in levels: the first entry at every position, then the
    second..., each level by position. Returns the order and each level's size (non-increasing)."""
    n = flat.size
    if int(flat.max()) < (1 << 62) // n:  # one unstable sort of (position, entry): NumPy's fast sort, yet stable
        tagged = np.sort(flat * n + np.arange(n))
        order, grouped = tagged % n, tagged // n
    else:
        order = np.argsort(flat, kind="stable")
        grouped = flat[order]
    new = np.empty(n, dtype=bool)
    new[0] = True
    np.not_equal(grouped[1:], grouped[:-1], out=new[1:])
    if new.all():
        return np.arange(n), np.array([n])
    rank = np.arange(n) - np.maximum.accumulate(np.where(new, np.arange(n), 0))  # of the position-sorted entries
    # Ranks are small: a narrow dtype makes the stable sort a radix sort. A level's positions come out increasing
    # (its scatter walks the target in order).
    narrow = rank.astype(np.uint8 if rank.max() < 1 << 8 else np.uint16 if rank.max() < 1 << 16 else np.int64)
    return order[np.argsort(narrow, kind="stable")], np.bincount(rank)


def _add_in_turn(xp, target, key, values):
    """``target[key] += values`` on arrays, entry by entry where positions repeat (ATen's rounding). CuPy's
    scatter-add has no defined order (nor has ATen's CUDA kernel)."""
    if is_cupy(xp):
        scatter_add(xp, target, key, values)
        return
    if values.size < _AT_ONCE:
        np.add.at(target, key, values)
        return
    order, sizes = _levels(np.ravel_multi_index(key, target.shape[:len(key)]))
    width, done = values.size // max(values.shape[0], 1), 0
    for size in sizes.tolist():
        part = order[done:]
        if size * width < _AT_ONCE:  # the rest is small: add.at takes it in order (each position's entries in turn)
            np.add.at(target, tuple(k[part] for k in key), values[part])
            return
        part = part[:size]
        target[tuple(k[part] for k in key)] += values[part]  # distinct positions: a plain fancy-index add
        done += size


def _in_turn_recorded(dense, s, values):
    """``dense`` plus ``values`` at ``s``'s entries in turn, in jitorch ops: one scatter per level (recorded,
    differentiable in both)."""
    order, sizes = _levels(_host_keys(s))
    done = 0
    for size in sizes.tolist():
        part = _creation.tensor(order[done:done + size], device=s.device)
        key = tuple(s._sp_indices.index_select(1, part).unbind(0))
        dense = dense.index_put(key, values.index_select(0, part), accumulate=True)
        done += size
    return dense


def add_dense_sparse(dense, s, alpha=1, *, inplace=False):
    """``dense + alpha * s`` for a dense tensor and a sparse_coo one of its size, as ATen's ``add(dense, sparse)``:
    each entry of ``s`` added in turn (module docstring), in the promoted dtype. ``inplace``: into ``dense``'s array
    without autograd (the engine's accumulation into a dense ``.grad``, the optimizers' updates; computed in the
    promoted dtype, then rounded to ``dense``'s, as ATen). A sum autograd or a mode records takes jitorch ops.

    >>> import jitorch
    >>> s = jitorch.sparse_coo_tensor([[1, 1]], [2.0 ** -24, 2.0 ** -24], (2,))
    >>> add_dense_sparse(jitorch.ones(2), s) - 1  # (1 + eps) + eps: both round away, as in torch
    tensor([0., 0.])
    """
    from .._dispatch import MODES

    if tuple(dense.shape) != tuple(s.shape):
        raise RuntimeError(f"add: expected 'self' and 'other' to have same size, but self has size "
                           f"{list(dense.shape)} while other has size {list(s.shape)} (FYI: dense-sparse addition does "
                           "not currently support broadcasting)")
    common = _dtype.promote_types(dense.dtype, s.dtype)
    if inplace:
        from ..optim._kernels import capturing, refuse_capture

        if capturing():  # the arrays change outside the recorded ops
            refuse_capture("CPU graph capture: adding a sparse tensor into a dense one is not captured (its sizes "
                           "depend on the sparse tensor's indices); run the step uncaptured")
    elif MODES or GradState.enabled and (dense.requires_grad or s.requires_grad):
        out = dense.to(common)
        if not s._nnz():
            return out.clone() if out is dense else out  # a new tensor, as ATen's
        if s.sparse_dim() == 0:  # every entry is the whole tensor: ATen adds their sum
            values = s.coalesce()._sp_values[0].to(common)
            return out + (values if alpha == 1 else values * alpha)
        values = s._sp_values.to(common)
        return _in_turn_recorded(out, s, values if alpha == 1 else values * alpha)
    xp = array_module_for(dense.device.type)
    target = dense._data if inplace else dense._data.astype(common.np, copy=True)
    work = target if target.dtype == common.np else target.astype(common.np)
    if s._nnz():
        values = (s.coalesce() if s.sparse_dim() == 0 else s)._sp_values._data  # (no sparse dims: their sum)
        values = (values if alpha == 1 else values * alpha).astype(common.np, copy=False)
        if s.sparse_dim() == 0:
            work += values[0]
        else:
            # A host read through numpy(): a reduce-overhead warm-up sees it and does not capture the step.
            indices = s._sp_indices.numpy(force=True) if xp is np else s._sp_indices._data
            _add_in_turn(xp, work, tuple(indices), values)
    if work is not target:
        target[...] = work
    if not inplace:
        return Tensor._make(target)
    dense._bump_version()
    return dense


def sparse_grad_sum(a, b):
    """``a + b`` for two gradients of one tensor, one or both sparse, as torch's engine sums them: dense + sparse is
    dense (in whichever order they came, each sparse entry added in turn), sparse + sparse is sparse."""
    if isinstance(a, SparseCooTensor) and not isinstance(b, SparseCooTensor):
        a, b = b, a
    if isinstance(a, SparseCooTensor):
        return add_sparse(a, b)
    return add_dense_sparse(a, b)


def owned_grad(g, user_grads, create_graph=False):
    """The first sparse gradient a leaf stores, as torch's ``AccumulateGrad`` makes it: a new sparse tensor over
    ``g``'s indices and values (a shallow copy, which ATen marks coalesced only below two entries), or under
    ``create_graph`` or with non-contiguous values (an expanded ``sum()`` gradient) a clone, which keeps the flag.
    Values that are a view of a gradient the user passed to ``backward`` are copied too (flag as torch's)."""
    values = g._sp_values
    root = values._ver_owner
    cloned = create_graph or not _contiguous(values)
    if cloned or root is not None and any(
            u is root or u._ver_owner is root for u in user_grads if isinstance(u, Tensor)):
        values = values.clone(memory_format=contiguous_format)
    indices = g._sp_indices.clone() if cloned else g._sp_indices
    return make_sparse(indices, values, g.shape, g._sp_coalesced if cloned else g._nnz() < 2)


def accumulate_grad(grad, g, create_graph=False):
    """The leaf's ``.grad`` after a backward's gradient ``g`` joins it, as torch's ``AccumulateGrad``: sparse into
    sparse in place (the same object), sparse into dense in place, and a dense gradient into a sparse ``.grad``
    gives a new dense one; a new sum under ``create_graph``."""
    if create_graph:
        return sparse_grad_sum(grad, g) if grad.is_sparse or g.is_sparse else grad + g
    if isinstance(grad, SparseCooTensor):
        if isinstance(g, SparseCooTensor):
            return add_sparse_(grad, g)
        return add_dense_sparse(g, grad)
    if isinstance(g, SparseCooTensor):
        return add_dense_sparse(grad, g, inplace=True)
    grad._inplace_accumulate(g)
    return grad


def _mul_(self, other):
    """``self *= other`` for a number or a 0-d dense tensor (new values, the same tensor; ATen's in-place product
    leaves it marked uncoalesced)."""
    from ._coo_math import _scalar_like

    if not _scalar_like(other):
        raise RuntimeError("mul_: a sparse_coo tensor is scaled in place by a number or a 0-d dense tensor only; use "
                           "s * other for other operands")
    self._rebind(self._sp_indices, self._sp_values * other, False)
    self._bump_version()
    return self


def _zero_(self):
    """No entries left (``_nnz() == 0``, coalesced), as torch's sparse ``zero_``."""
    values = self._sp_values
    self._rebind(self._sp_indices.new_zeros((self.sparse_dim(), 0)),
                 values.detach().new_zeros((0,) + tuple(values.shape[1:])), True)
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
    self._rebind(value._sp_indices, value._sp_values.detach().requires_grad_(self.requires_grad),
                 value._sp_coalesced)
    self._sp_size = value._sp_size


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
