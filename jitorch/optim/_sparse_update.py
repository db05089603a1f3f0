"""The update at a sparse gradient's entries that SparseAdam and Adagrad share (``sparse=True`` embeddings): the
gradient coalesced (their updates are not linear: each position once), the state and parameter rows read at its
entries, updated on the arrays by the optimizer's rule, written back, their versions bumped.

It runs on the arrays, which a CPU graph capture would not record: `refuse_sparse_capture` ends one first.

>>> import jitorch
>>> p = jitorch.zeros(3, 2)
>>> g = jitorch.sparse_coo_tensor([[2, 0, 2]], jitorch.ones(3, 2), (3, 2))
>>> update_at_entries(g, False, (p,), lambda values, rows: (rows - values,))
>>> p
tensor([[-1., -1.],
        [ 0.,  0.],
        [-2., -2.]])
"""
from __future__ import annotations

from ._kernels import capturing, refuse_capture

__all__ = ["refuse_sparse_capture", "update_at_entries"]


def refuse_sparse_capture(what):
    """End a CPU graph capture in progress: ``what`` (a step with a sparse gradient) is not captured."""
    if capturing():
        refuse_capture(f"CPU graph capture: {what} is not captured (its sizes depend on the gradient's indices); run "
                       "the step uncaptured")


def update_at_entries(grad, maximize, tensors, update):
    """``tensors`` (the state and the parameter, dense) at the entries of the sparse ``grad`` (coalesced, negated
    when ``maximize``) become ``update(values, *rows)``: the gradient's values and each tensor's rows there, arrays
    in, one new array per tensor out. Nothing changes for a gradient without entries."""
    grad = (-grad if maximize else grad).coalesce()
    values = grad._values()._data
    if values.size == 0:
        return
    key = tuple(grad._indices()._data)
    for t, rows in zip(tensors, update(values, *(t._data[key] for t in tensors))):
        t._data[key] = rows
        t._bump_version()
