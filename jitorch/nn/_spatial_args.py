"""Argument normalization shared by the spatial functionals (convolution, pooling, padding, resampling).

>>> from jitorch.nn._spatial_args import ntuple
>>> ntuple(3, 2, "kernel_size"), ntuple([1, 2], 2, "stride")
((3, 3), (1, 2))
"""
from __future__ import annotations

from .._dispatch import TORCH_TYPE_NAMES
from .._memory_format import contiguous_format, suggested_format, written_in

__all__ = ["ntuple", "torch_type_name", "lower_type_name", "check_input_dims", "batchify", "layout_as", "written_in"]


def ntuple(value, n, name):
    """``value`` as an ``n``-tuple of ints: a single int (or a one-element sequence) is repeated."""
    if isinstance(value, (list, tuple)):
        if len(value) == 1 and n != 1:
            value = tuple(value) * n
        if len(value) != n:
            raise RuntimeError(f"expected {name} to be a single integer value or a list of {n} values to match the "
                               f"convolution dimensions, but got {name}={list(value)}")
        return tuple(int(v) for v in value)
    return (int(value),) * n


def torch_type_name(dtype):
    """PyTorch's scalar type name (``Float``, ``Double``...) of a jitorch dtype."""
    return TORCH_TYPE_NAMES[dtype.name] if hasattr(dtype, "name") else str(dtype)


def lower_type_name(dtype):
    """The lower-case C type name PyTorch's conv messages use (``float``, ``double``...)."""
    name = getattr(dtype, "name", str(dtype))
    return {"float32": "float", "float64": "double", "float16": "c10::Half", "bfloat16": "c10::BFloat16",
            "int64": "long int", "int32": "int"}.get(name, name)


def check_input_dims(input, nd, op):
    """Raise PyTorch's error unless ``input`` has ``nd + 1`` (unbatched) or ``nd + 2`` (batched) dims."""
    if input.dim() not in (nd + 1, nd + 2):
        raise RuntimeError(f"Expected {nd + 1}D (unbatched) or {nd + 2}D (batched) input to {op}, but got input of "
                           f"size: {list(input.shape)}")


def batchify(input, nd):
    """(input with a batch dim, whether one was added) for inputs of ``nd + 1`` or ``nd + 2`` dims."""
    if input.dim() == nd + 1:
        return input.unsqueeze(0), True
    return input, False


def layout_as(out, *sources):
    """``out`` laid out channels-last (channels_last_3d for 5-D) when one of ``sources`` of its rank suggests that
    format, else row-major: PyTorch's convolution, pooling and resampling kernels write such outputs for such inputs
    (one copy here where the kernel's layout differs, size-1 dims' strides included)."""
    fmt = None
    for source in sources:
        if source is not None and source.dim() == out.dim():
            fmt = suggested_format(source)
            if fmt is not contiguous_format:
                break
    return out if fmt is None else written_in(out, fmt)
