"""LLVM IR text -> host machine code through llvmlite: O3 with loop and SLP vectorization, MCJIT, ctypes callables.

One target machine (host CPU name and features, like numba's JIT codegen) and one MCJIT engine serve the process;
every kernel is a new module added to it. Modules are never removed (MCJIT leaks removed modules anyway), and the
engine keeps the machine code alive for as long as the process runs.

With a `cache.KernelCache`, the machine code is cached as an object file (`llvm_objcache`): a hit loads it into the
engine without parsing or optimizing anything. Kernel functions are named by a hash of the kernel's canonical text,
so the same kernel has the same symbol in every process and its cached object can be loaded anywhere; a function
already in the engine is reused rather than linked twice (two definitions of one symbol would clash).
"""
from __future__ import annotations

import ctypes
import hashlib
import re
import threading

import llvmlite.binding as llvm

from .ir import NP_TYPES
from .ir_params import arguments, outer_size, parametrize
from .llvm_emit import emit_kernel
from .llvm_host import has_avx512, target, target_info
from .llvm_objcache import emit_object, key_parts, load_object

_lock = threading.Lock()
_state = {"loaded": {}}  # function name -> (LLVM IR, address) of what the engine holds
_PLACEHOLDER = "jitorch_kernel"
_CTYPES = {"i64": ctypes.c_int64, "i32": ctypes.c_int32, "float": ctypes.c_float, "double": ctypes.c_double}


def _prefer_wide_vectors(llvm_ir):
    """With AVX-512, ask for 512-bit vectors: LLVM's Intel server tunings prefer 256 bits (against the frequency drop
    of early AVX-512 parts), which halves the lanes of the compute-bound loops (measured on an Emerald Rapids host:
    exp 0.70 -> 0.52 ns an element, erf 1.45 -> 1.16, tanh 0.90 -> 0.66, with data in cache). Explicit vectors
    (`llvm_gemm`, `llvm_conv`) are unaffected."""
    if not has_avx512():
        return llvm_ir
    return re.sub(r"^(define [^\n]*\)[^\n{]*)\{$", r'\1 "prefer-vector-width"="512" {', llvm_ir, flags=re.M)


def optimize(llvm_ir):
    """Parse, verify and run the O3 pipeline with loop+SLP vectorization; returns the optimized module.

    >>> mod = optimize("define i64 @f(i64 %x) {\\n  %y = add i64 %x, 0\\n  ret i64 %y\\n}")
    >>> "ret i64 %x" in str(mod)
    True
    """
    tm, _ = target()
    mod = llvm.parse_assembly(_prefer_wide_vectors(llvm_ir))
    mod.verify()
    pto = llvm.create_pipeline_tuning_options(speed_level=3)
    pto.loop_vectorization = True
    pto.slp_vectorization = True
    pto.loop_unrolling = True
    pb = llvm.create_pass_builder(tm, pto)
    pb.getModulePassManager().run(mod, pb)
    return mod


def compile_function(llvm_ir, name, cache=None):
    """Compile ``llvm_ir`` into the process's engine and return the address of function ``name``.

    With ``cache`` (a `cache.KernelCache`), the object code is looked up first and stored after a compile. A function
    already loaded from the same IR is reused; another IR under a loaded name is an error.

    >>> addr = compile_function("define i64 @twice(i64 %x) {\\n  %y = mul i64 %x, 2\\n  ret i64 %y\\n}", "twice")
    >>> ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_int64)(addr)(21)
    42
    """
    tm, engine = target()
    obj = None
    if cache is not None:
        # The lookup comes before the loaded-function check so the counters see every request (and tests can
        # check that a changed key misses even when the function is already in this process).
        obj = cache.get_or_compile(key_parts(llvm_ir, target_info()), lambda: _emit(tm, llvm_ir))
    with _lock:
        loaded = _state["loaded"].get(name)
        if loaded is not None:
            if loaded[0] != llvm_ir:
                raise ValueError(f"function {name!r} is already compiled from different LLVM IR")
            return loaded[1]
        if obj is not None:
            address = load_object(engine, obj, name)
        else:
            engine.add_module(optimize(llvm_ir))
            engine.finalize_object()
            address = engine.get_function_address(name)
        _state["loaded"][name] = (llvm_ir, address)
        return address


def compile_functions(llvm_ir, names, cache=None):
    """`compile_function` for a module that defines several functions: their addresses, in the order of ``names``.

    >>> text = "define i64 @one() {\\n  ret i64 1\\n}\\ndefine i64 @two() {\\n  ret i64 2\\n}"
    >>> [ctypes.CFUNCTYPE(ctypes.c_int64)(a)() for a in compile_functions(text, ["one", "two"])]
    [1, 2]
    """
    first = compile_function(llvm_ir, names[0], cache)
    _, engine = target()
    out = [first]
    with _lock:
        for name in names[1:]:
            loaded = _state["loaded"].get(name)
            if loaded is None:  # defined by the module just loaded: the engine resolves it without a new compile
                loaded = _state["loaded"][name] = (llvm_ir, engine.get_function_address(name))
            elif loaded[0] != llvm_ir:
                raise ValueError(f"function {name!r} is already compiled from different LLVM IR")
            if not loaded[1]:
                raise RuntimeError(f"compile_functions: the module does not define {name!r}")
            out.append(loaded[1])
    return out


def _emit(tm, llvm_ir):
    mod = optimize(llvm_ir)
    # Code generation shares the target machine with the engine; serialize it like the engine's own compiles.
    with _lock:
        return emit_object(tm, mod)


class CompiledKernel:
    """A JIT-compiled IR kernel: ``kernel(start, stop, *buffer_addresses)`` runs dimension 0 over ``[start, stop)``.

    The machine code is size-generic (`ir_params.parametrize`): this kernel's sizes, strides and offsets are
    ``values``, passed on every call, so a kernel that differs only in them reuses the compiled function.

    ``outer`` is the size of that dimension (the range to split across threads); ``kernel.run(arrays)`` is the
    single-threaded convenience that takes flat NumPy arrays, one per IR buffer. The ctypes call releases the GIL.

    >>> import numpy as np
    >>> from jitorch.codegen.ir import Buffer, Kernel, Store, load, op
    >>> k = Kernel((3,), (Buffer("f64", (1,)), Buffer("f64", (1,))), (Store(1, op("neg", load(0, "f64"))),))
    >>> ck = compile_kernel(k)
    >>> out = np.zeros(3); ck.run([np.arange(3.0), out]); out.tolist()
    [-0.0, -1.0, -2.0]
    """

    def __init__(self, kernel, name=None, cache=None):
        self.source = kernel
        template, self.values = parametrize(kernel)
        # ``kernel``: the collapsed template the machine code was built from (its sizes in ``values``).
        self.kernel, self.outer = template, outer_size(template, self.values)
        self.name, self.llvm_ir = _template_ir(template) if name is None else (name, emit_kernel(template, name))
        self.address = compile_function(self.llvm_ir, self.name, cache)
        argtypes = [ctypes.c_int64, ctypes.c_int64] + [ctypes.c_void_p] * len(kernel.buffers) + \
            [_CTYPES[ty] for ty in arguments(template)]
        self._fn = ctypes.CFUNCTYPE(None, *argtypes)(self.address)

    def __call__(self, start, stop, *addresses):
        self._fn(start, stop, *addresses, *self.values)

    def addresses(self, arrays):
        """Base addresses of flat arrays after checking their dtypes against the IR buffers."""
        out = []
        for i, (a, b) in enumerate(zip(arrays, self.source.buffers, strict=True)):
            if a.dtype != NP_TYPES[b.dtype] or not a.flags.c_contiguous:
                raise TypeError(f"buffer {i}: expected a contiguous {b.dtype} array, got {a.dtype}")
            out.append(a.__array_interface__["data"][0])
        return out

    def run(self, arrays):
        self(0, self.outer, *self.addresses(arrays))


def template_address(template, cache=None):
    """The address of the function compiled from a template (`ir_params.parametrize`), compiled on first use:
    ``f(i64 start, i64 stop, ptr buf0, ..., arguments...)``. A native program calls it through this address."""
    name, llvm_ir = _template_ir(template)
    return compile_function(llvm_ir, name, cache)


def compile_kernel(kernel, cache=None):
    """Compile an IR kernel for the host CPU (see `CompiledKernel`); ``cache``: a `cache.KernelCache` for its object.

    The function's name is a hash of its LLVM IR, the same in every process (see the module notes).
    """
    return CompiledKernel(kernel, cache=cache)


_TEMPLATES: dict = {}


def _template_ir(template):
    """(name, LLVM IR) of a template, the name a hash of the IR emitted under a placeholder: equal code, equal symbol.
    Kept per template text: every program and kernel of that structure, at any size, asks for the same one."""
    key = str(template)
    found = _TEMPLATES.get(key)
    if found is None:
        found = _TEMPLATES.setdefault(key, hashed_name(emit_kernel(template, _PLACEHOLDER), _PLACEHOLDER))
    return found


def hashed_name(llvm_ir, placeholder):
    """(name, LLVM IR): the function ``@placeholder`` of ``llvm_ir`` renamed ``placeholder_<hash of the IR>``, so
    equal code has an equal symbol in every process and its cached object loads anywhere (see the module notes).

    >>> name, text = hashed_name("define i64 @k() {\\n  ret i64 7\\n}", "k")
    >>> name.startswith("k_"), len(name), text.startswith(f"define i64 @{name}()")
    (True, 26, True)
    """
    head = f"@{placeholder}("
    if llvm_ir.count(head) != 1:
        raise AssertionError(f"expected one mention of @{placeholder} in the emitted module, got {llvm_ir.count(head)}")
    name = f"{placeholder}_{hashlib.sha256(llvm_ir.encode()).hexdigest()[:24]}"
    return name, llvm_ir.replace(head, f"@{name}(")


def compile_hashed(llvm_ir, placeholder, cache=None):
    """(name, LLVM IR, address): the function ``@placeholder`` of ``llvm_ir`` named by `hashed_name` and compiled
    through `compile_function` (with ``cache``, a `cache.KernelCache`, through the object cache).

    >>> name, _, addr = compile_hashed("define i64 @k() {\\n  ret i64 7\\n}", "k")
    >>> ctypes.CFUNCTYPE(ctypes.c_int64)(addr)()
    7
    """
    name, text = hashed_name(llvm_ir, placeholder)
    return name, text, compile_function(text, name, cache)
