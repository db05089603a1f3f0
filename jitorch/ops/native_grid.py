"""Generated eager kernels over a ``rows x cols`` grid whose sizes change from call to call (`native_broadcast`'s
binary rows, `native_sum`'s row sums).

A grid kernel is compiled once, for two sentinel sizes, through `codegen.ir_params` (sizes and size-derived strides
become run-time arguments, so the machine code serves every size); `GridKernel` remembers which of its arguments are
the rows and which the columns, and each call passes its own sizes. Large grids are split by rows over jitorch's
threads.

>>> import numpy as np
>>> from jitorch.codegen.ir import Buffer, Kernel, Store, load, op
>>> k = GridKernel(lambda r, c: Kernel((r, c), (Buffer("f32", (c, 1)), Buffer("f32", (0, 1)), Buffer("f32", (c, 1))),
...                                    (Store(2, op("mul", load(0, "f32"), load(1, "f32"))),)))
>>> x, w, out = np.arange(6, dtype=np.float32).reshape(2, 3), np.float32([1, 2, 3]), np.empty((2, 3), np.float32)
>>> k.run([x, w, out], 2, 3); out.tolist()
[[0.0, 2.0, 6.0], [3.0, 8.0, 15.0]]
"""
from __future__ import annotations

from ..codegen.ir_params import arguments
from ..codegen.llvm_compile import compile_kernel
from ..codegen.llvm_objcache import default_cache
from ..codegen.llvm_pool import shared_pool, worth_splitting
from ..runtime.host_pointer import data_address
from ..runtime.threads import get_num_threads
from .native_eager import _GRAIN, argument_roles

__all__ = ["GridKernel"]

# Sentinel sizes the kernel is compiled for, which tell its run-time arguments apart: rows, then columns.
_ROWS0, _COLS0 = 1000003, 1009


class GridKernel:
    """``make(rows, cols)`` (an IR `Kernel` over a grid of those sizes, buffers in call order) compiled once, run at
    any sizes of at least 2 (a size of 1 is a different template: a dimension collapses). A grid whose dimensions
    collapse into one (every buffer row-major) is refused: its one size is the product."""

    def __init__(self, make):
        self.compiled = compile_kernel(make(_ROWS0, _COLS0), cache=default_cache())
        self.roles = argument_roles(self.compiled, (_ROWS0, _COLS0))
        if 0 not in self.roles or 1 not in self.roles:
            raise ValueError("GridKernel: the kernel's grid collapses into one dimension; run it as a flat kernel")
        if any(r is None and type(v) is int for r, v in zip(self.roles, self.compiled.values)):
            # a size-derived integer (rows * cols...) would stay fixed at the sentinels' value
            raise ValueError(f"GridKernel: run-time values {self.compiled.values} hold an integer other than the "
                             "grid's rows and columns")
        self.types = ("ptr",) * len(self.compiled.source.buffers) + tuple(arguments(self.compiled.kernel))

    def run(self, arrays, rows, cols, work=None):
        """Run over ``rows x cols`` on ``arrays`` (NumPy arrays laid out as the kernel's buffers say), split by rows
        when ``work`` (elements, default the grid's) pays for the hand-off."""
        sizes = (rows, cols)
        values = [v if r is None else sizes[r] for r, v in zip(self.roles, self.compiled.values)]
        addresses = [data_address(a) for a in arrays]
        threads = get_num_threads()
        work = rows * cols if work is None else work
        pool = shared_pool(threads) if threads > 1 and rows > 1 and worth_splitting(self.compiled, work) else None
        if pool is not None:
            pool.run_function(self.compiled.address, self.types, [*addresses, *values], rows,
                              max(1, _GRAIN // max(cols, 1)))
        else:
            self.compiled._fn(0, rows, *addresses, *values)
