"""Rows that lower to whole IR kernels, by name: ``lowering(record, constant=...) -> [(kernel, arrays, writes)]``.

One table for both users, CPU graph replay (`_native`) and compiled graphs (`jitorch._compile.native_lowering`);
``constant`` is how the caller keeps a constant array a kernel reads (an index table).

>>> sorted(KERNEL_ROWS)
['max_pool', 'max_pool_scatter', 'native_batch_norm', 'native_batch_norm_backward']
"""
from __future__ import annotations

from ._lower_batch_norm import BATCH_NORM_OPS
from ._lower_pool import POOL_OPS

__all__ = ["KERNEL_ROWS"]

KERNEL_ROWS = {**POOL_OPS, **BATCH_NORM_OPS}
