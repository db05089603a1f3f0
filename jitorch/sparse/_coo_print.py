"""torch's ``repr`` of a sparse_coo tensor: ``tensor(indices=tensor([[...]]), values=tensor([...]), size=(2, 3),
nnz=3, layout=jitorch.sparse_coo)``, laid out on the lines torch uses (names read ``jitorch.``, as dense reprs do).

>>> import jitorch
>>> print(jitorch.sparse_coo_tensor([[0, 1]], [2.0, 3.0], (4,)))
tensor(indices=tensor([[0, 1]]),
       values=tensor([2., 3.]),
       size=(4,), nnz=2, layout=jitorch.sparse_coo)
"""
from __future__ import annotations

import numpy as np

from .. import _dtype
from .._printing import OPTIONS, bracketed_values

__all__ = ["sparse_repr"]

_PREFIX = "tensor("


def _body(arr, indent):
    """The bracketed values of ``arr`` as torch's ``_tensor_str`` writes them (no suffixes)."""
    return "[]" if arr.size == 0 else bracketed_values(arr, indent)


def _part(name, t, indent):
    arr = np.asarray(t.detach().cpu()._data)
    text = _body(arr, indent + len(name) + len(_PREFIX))
    if arr.size == 0:
        text += ", size=" + str(tuple(int(s) for s in arr.shape))
    return f"{name}{_PREFIX}{text})"


def sparse_repr(t):
    indent = len(_PREFIX)
    default = _dtype.get_default_dtype()
    complex_default = _dtype.complex128 if default is _dtype.float64 else _dtype.complex64
    suffixes = []
    if t.is_cuda:
        suffixes.append(f"device='{t.device}'")
    suffixes += [f"size={tuple(int(s) for s in t.shape)}", f"nnz={t._nnz()}"]
    if t.dtype not in (default, complex_default, _dtype.int64, _dtype.bool):
        suffixes.append(f"dtype=jitorch.{t.dtype.name}")
    suffixes.append("layout=jitorch.sparse_coo")
    if t.grad_fn is not None:
        suffixes.append(f"grad_fn=<{type(t.grad_fn).__name__}>")
    elif t.requires_grad:
        suffixes.append("requires_grad=True")
    parts = [_PREFIX + _part("indices=", t._sp_indices, indent) + ",\n" + " " * indent
             + _part("values=", t._sp_values, indent)]
    # torch's _add_suffixes with force_newline: the first suffix starts a line, the others wrap at the line width
    # (measured with torch's names, so the lines break where torch's do).
    last = 0
    for n, suffix in enumerate(suffixes):
        width = len(suffix.replace("jitorch.", "torch."))
        if n == 0 or last + width + 2 > OPTIONS.linewidth:
            parts.append(",\n" + " " * indent + suffix)
            last = indent + width
        else:
            parts.append(", " + suffix)
            last += width + 2
    return "".join(parts) + ")"
