"""Offsets tensors (``offs`` of ``grouped_mm``, ``cu_seq_*`` of ``varlen_attn``): a 1-D int32 tensor of
non-decreasing, non-negative positions cutting a jagged dimension, read into Python once per call.

>>> import jitorch
>>> read_offsets(jitorch.tensor([0, 2, 5], dtype=jitorch.int32), "op", "offs")
[0, 2, 5]
"""
from __future__ import annotations

__all__ = ["read_offsets"]


def read_offsets(t, op, name):
    """``t``'s values as ints, after torch's checks (named after ``op`` and the argument ``name``)."""
    import jitorch

    if t.dim() != 1 or t.dtype != jitorch.int32:
        raise RuntimeError(f"{op}: {name} must be a 1-D int32 tensor, got shape {tuple(t.shape)} and dtype {t.dtype}")
    values = [int(v) for v in t.tolist()]
    if any(b < a for a, b in zip(values, values[1:])) or (values and values[0] < 0):
        raise RuntimeError(f"{op}: {name} must be non-decreasing and non-negative, got {values}")
    return values
