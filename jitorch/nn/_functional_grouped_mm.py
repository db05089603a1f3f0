"""``F.grouped_mm``: the per-expert products of a mixture-of-experts layer in one call. A 2-D operand is cut into
groups along its jagged dimension by ``offs`` (each group's end), a 3-D one enumerates its groups; each group is one
matrix product, written from ``matmul``, ``cat`` and ``stack``, so gradients flow to both operands.

Rows (or columns) past ``offs[-1]`` are zeros here (torch leaves them uninitialized).

>>> import jitorch
>>> import jitorch.nn.functional as F
>>> tokens, experts = jitorch.ones(5, 2), jitorch.stack([jitorch.eye(2), 2 * jitorch.eye(2)])
>>> F.grouped_mm(tokens, experts, offs=jitorch.tensor([2, 5], dtype=jitorch.int32)).tolist()
[[1.0, 1.0], [1.0, 1.0], [2.0, 2.0], [2.0, 2.0], [2.0, 2.0]]
"""
from __future__ import annotations

from .._offsets import read_offsets

__all__ = ["grouped_mm"]


def _bounds(offs, groups, length, what):
    if offs is None:
        raise RuntimeError(f"grouped_mm: offs is required when {what} is 2-D (it marks where each group ends)")
    ends = read_offsets(offs, "grouped_mm", "offs")
    if groups is not None and len(ends) != groups:
        raise RuntimeError(f"grouped_mm: offs has {len(ends)} groups but the 3-D operand has {groups}")
    if ends and ends[-1] > length:
        raise RuntimeError(f"grouped_mm: offs must end within the jagged dimension's {length} elements, got {ends}")
    starts = [0, *ends[:-1]]
    return list(zip(starts, ends))


def grouped_mm(mat_a, mat_b, *, offs=None, bias=None, out_dtype=None):
    """Grouped matrix products (see the module docstring for the four operand layouts).

    - 2-D ``a`` (M, K), 3-D ``b`` (G, K, N): rows ``offs[i-1]:offs[i]`` of ``a`` times ``b[i]``; (M, N).
    - 3-D ``a`` (G, M, K), 3-D ``b`` (G, K, N): a batched product; ``offs`` must be None; (G, M, N).
    - 2-D ``a`` (M, K), 2-D ``b`` (K, N): ``a[:, s:e] @ b[s:e]`` per group (weight gradients); (G, M, N).
    - 3-D ``a`` (G, M, K), 2-D ``b`` (K, N): ``a[i] @ b[:, s:e]`` per group, side by side; (M, N).

    >>> import jitorch
    >>> import jitorch.nn.functional as F
    >>> F.grouped_mm(jitorch.ones(2, 3, 4), jitorch.ones(2, 4, 5)).shape
    jitorch.Size([2, 3, 5])
    """
    import jitorch

    dims = (mat_a.dim(), mat_b.dim())
    if any(d not in (2, 3) for d in dims):
        raise RuntimeError(f"grouped_mm: mat_a and mat_b must be 2-D or 3-D, got {dims[0]}-D and {dims[1]}-D")
    if mat_a.dtype != mat_b.dtype:
        raise RuntimeError(f"grouped_mm: mat_a and mat_b must have the same dtype, got {mat_a.dtype} and "
                           f"{mat_b.dtype}")
    if mat_a.shape[-1] != mat_b.shape[-2]:
        raise RuntimeError(f"grouped_mm: contraction sizes differ: mat_a {tuple(mat_a.shape)}, mat_b "
                           f"{tuple(mat_b.shape)}")
    if bias is not None:
        raise RuntimeError("grouped_mm: bias is not supported (nor in torch 2.13); add it to each group's rows of "
                           "the result")
    a, b = mat_a, mat_b
    if out_dtype is not None and out_dtype != a.dtype:
        a, b = a.to(out_dtype), b.to(out_dtype)     # accumulate (and return) in out_dtype, as asked
    if dims == (3, 3):
        if offs is not None:
            raise RuntimeError("grouped_mm: offs must be None when both operands are 3-D")
        if a.shape[0] != b.shape[0]:
            raise RuntimeError(f"grouped_mm: group counts differ: {a.shape[0]} and {b.shape[0]}")
        return jitorch.matmul(a, b)
    if dims == (2, 3):
        spans = _bounds(offs, b.shape[0], a.shape[0], "mat_a")
        parts = [a[s:e] @ b[i] for i, (s, e) in enumerate(spans)]
        tail = a.shape[0] - (spans[-1][1] if spans else 0)
        parts.append(a.new_zeros((tail, b.shape[-1])))
        return jitorch.cat(parts, 0)
    if dims == (2, 2):
        spans = _bounds(offs, None, a.shape[1], "both operands")
        parts = [a[:, s:e] @ b[s:e] for i, (s, e) in enumerate(spans)]
        return jitorch.stack(parts) if parts else a.new_zeros((0, a.shape[0], b.shape[1]))
    spans = _bounds(offs, a.shape[0], b.shape[1], "mat_b")
    parts = [a[i] @ b[:, s:e] for i, (s, e) in enumerate(spans)]
    tail = b.shape[1] - (spans[-1][1] if spans else 0)
    parts.append(a.new_zeros((a.shape[1], tail)))
    return jitorch.cat(parts, 1)
