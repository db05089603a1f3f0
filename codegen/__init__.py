"""jitorch.codegen: kernel IR and the LLVM CPU backend (the CUDA backend and fusion come later).

It knows nothing of Tensor or nn: it turns descriptions of kernels into compiled machine code.

>>> import numpy as np
>>> from jitorch.codegen import Buffer, Kernel, Store, compile_kernel, load, op
>>> k = Kernel((4,), (Buffer("f32", (1,)), Buffer("f32", (1,))), (Store(1, op("exp", load(0, "f32"))),))
>>> out = np.zeros(4, np.float32)
>>> compile_kernel(k).run([np.zeros(4, np.float32), out]); out.tolist()
[1.0, 1.0, 1.0, 1.0]
"""
from .interp import run as interpret
from .ir import (BINARY, COMPARE, DTYPES, EXPR_FUNCTIONS, INFIX_OPS, PRIMITIVES, REDUCTIONS, TERNARY, UNARY, Buffer,
                 Expr, Kernel, Store, collapse, const, identity, load, op)
from .llvm_compile import CompiledKernel, compile_function, compile_kernel, optimize
from .llvm_emit import emit_kernel

__all__ = ["BINARY", "COMPARE", "DTYPES", "EXPR_FUNCTIONS", "INFIX_OPS", "PRIMITIVES", "REDUCTIONS", "TERNARY", "UNARY",
           "Buffer", "CompiledKernel", "Expr", "Kernel", "Store", "collapse", "compile_function", "compile_kernel",
           "const", "emit_kernel", "identity", "interpret", "load", "op", "optimize"]

# The CUDA C emitter (compiled with NVRTC; see cuda_emit for the launch contract).
from .cuda_emit import emit_cuda  # noqa: E402

__all__ += ["emit_cuda"]
