"""Shared helpers for the codegen tests: NumPy views as IR buffers."""
from __future__ import annotations

import numpy as np

from jitorch.codegen.ir import Buffer

NAMES = {np.dtype(np.float32): "f32", np.dtype(np.float64): "f64", np.dtype(np.int32): "i32",
         np.dtype(np.int64): "i64", np.dtype(np.bool_): "bool"}


def strided(base, view, shape):
    """The IR buffer for ``view`` (a view into flat ``base``) broadcast to ``shape``."""
    b = np.broadcast_to(view, shape)
    item = base.itemsize
    offset = (view.__array_interface__["data"][0] - base.__array_interface__["data"][0]) // item
    return Buffer(NAMES[base.dtype], tuple(s // item for s in b.strides), offset)


def random_view(rng, shape, dtype, kind):
    """A flat base array and a view of it with ``shape``: contiguous, transposed, sliced with steps, or broadcast."""
    if kind == "broadcast":
        shape = tuple(1 if rng.random() < 0.5 else s for s in shape)
    if kind == "sliced":
        big = tuple(2 * s + 1 for s in shape)
        base = _fill(rng, int(np.prod(big)), dtype)
        view = base.reshape(big)[tuple(slice(None, None, -2) if i % 2 else slice(1, None, 2) for i in range(len(big)))]
        return base, view[tuple(slice(0, s) for s in shape)]
    if kind == "transposed" and len(shape) > 1:
        base = _fill(rng, int(np.prod(shape)), dtype)
        return base, base.reshape(shape[::-1]).T
    base = _fill(rng, int(np.prod(shape)), dtype)
    return base, base.reshape(shape)


def _fill(rng, n, dtype):
    if np.dtype(dtype).kind == "f":
        return (rng.standard_normal(n) * 2).astype(dtype)
    return rng.integers(-5, 6, n).astype(dtype)
