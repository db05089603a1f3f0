"""LLVM IR text -> host machine code through llvmlite: O3 with loop and SLP vectorization, MCJIT, ctypes callables.

One target machine (host CPU name and features, like numba's JIT codegen) and one MCJIT engine serve the process;
every kernel is a new module added to it. Modules are never removed (MCJIT leaks removed modules anyway), and the
engine keeps the machine code alive for as long as the process runs.
"""
from __future__ import annotations

import ctypes
import threading

import llvmlite.binding as llvm

from .ir import DTYPES, collapse
from .llvm_emit import emit_kernel

_lock = threading.Lock()
_state = {}


def _target():
    """(target machine, engine), made once; llvmlite >= 0.45 must not call ``llvm.initialize()``."""
    if not _state:
        llvm.initialize_native_target()
        llvm.initialize_native_asmprinter()
        target = llvm.Target.from_default_triple()
        tm = target.create_target_machine(cpu=llvm.get_host_cpu_name(), features=llvm.get_host_cpu_features().flatten(),
                                          opt=3, reloc="static", codemodel="jitdefault", jit=True)
        engine = llvm.create_mcjit_compiler(llvm.parse_assembly(""), tm)
        _state.update(tm=tm, engine=engine, count=0)
    return _state["tm"], _state["engine"]


def optimize(llvm_ir):
    """Parse, verify and run the O3 pipeline with loop+SLP vectorization; returns the optimized module.

    >>> mod = optimize("define i64 @f(i64 %x) {\\n  %y = add i64 %x, 0\\n  ret i64 %y\\n}")
    >>> "ret i64 %x" in str(mod)
    True
    """
    tm, _ = _target()
    mod = llvm.parse_assembly(llvm_ir)
    mod.verify()
    pto = llvm.create_pipeline_tuning_options(speed_level=3)
    pto.loop_vectorization = True
    pto.slp_vectorization = True
    pto.loop_unrolling = True
    pb = llvm.create_pass_builder(tm, pto)
    pb.getModulePassManager().run(mod, pb)
    return mod


def compile_function(llvm_ir, name):
    """Optimize ``llvm_ir``, add it to the process's engine and return the address of function ``name``.

    >>> addr = compile_function("define i64 @twice(i64 %x) {\\n  %y = mul i64 %x, 2\\n  ret i64 %y\\n}", "twice")
    >>> ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_int64)(addr)(21)
    42
    """
    mod = optimize(llvm_ir)
    with _lock:
        _, engine = _target()
        engine.add_module(mod)
        engine.finalize_object()
        return engine.get_function_address(name)


class CompiledKernel:
    """A JIT-compiled IR kernel: ``kernel(start, stop, *buffer_addresses)`` runs dimension 0 over ``[start, stop)``.

    ``outer`` is the size of that dimension (the range to split across threads); ``kernel.run(arrays)`` is the
    single-threaded convenience that takes flat NumPy arrays, one per IR buffer. The ctypes call releases the GIL.

    >>> import numpy as np
    >>> from jitorch.codegen.ir import Buffer, Kernel, Store, load, op
    >>> k = Kernel((3,), (Buffer("f64", (1,)), Buffer("f64", (1,))), (Store(1, op("neg", load(0, "f64"))),))
    >>> ck = compile_kernel(k)
    >>> out = np.zeros(3); ck.run([np.arange(3.0), out]); out.tolist()
    [-0.0, -1.0, -2.0]
    """

    def __init__(self, kernel, name):
        self.source = kernel
        self.kernel = collapse(kernel)
        self.outer = self.kernel.shape[0]
        self.llvm_ir = emit_kernel(kernel, name)
        self.address = compile_function(self.llvm_ir, name)
        argtypes = [ctypes.c_int64, ctypes.c_int64] + [ctypes.c_void_p] * len(kernel.buffers)
        self._fn = ctypes.CFUNCTYPE(None, *argtypes)(self.address)

    def __call__(self, start, stop, *addresses):
        self._fn(start, stop, *addresses)

    def addresses(self, arrays):
        """Base addresses of flat arrays after checking their dtypes against the IR buffers."""
        out = []
        for i, (a, b) in enumerate(zip(arrays, self.source.buffers, strict=True)):
            if a.dtype != DTYPES[b.dtype] or not a.flags.c_contiguous:
                raise TypeError(f"buffer {i}: expected a contiguous {b.dtype} array, got {a.dtype}")
            out.append(a.__array_interface__["data"][0])
        return out

    def run(self, arrays):
        self(0, self.outer, *self.addresses(arrays))


def compile_kernel(kernel):
    """Compile an IR kernel for the host CPU (see `CompiledKernel`)."""
    with _lock:
        _target()
        _state["count"] += 1
        name = f"jitorch_kernel_{_state['count']}"
    return CompiledKernel(kernel, name)
