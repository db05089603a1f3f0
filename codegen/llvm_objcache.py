"""LLVM object code in the `cache.KernelCache`: the key of a kernel's machine code, and emitting and loading objects.

A cache hit must skip the whole LLVM pipeline (parse, O3, instruction selection), which is most of a cold compile;
so what is cached is the relocatable object the target machine emits, and a hit hands those bytes straight to the
MCJIT engine (its dynamic linker applies the relocations and resolves calls into the process, e.g. libm).

The key covers everything the bytes depend on: the LLVM IR text (it holds the kernel's canonical form and the
function's name), the backend, jitorch's version (with the cache's own ``CODEGEN_VERSION``), llvmlite's and LLVM's
versions, the target triple, CPU name and CPU features, and the code generation options. Code built for another
CPU's features could fault with an illegal instruction, so a changed feature flag must miss.

>>> parts = key_parts("define void @k() {\\n  ret void\\n}", {"triple": "x86_64-unknown-linux-gnu",
...                   "cpu": "znver4", "features": "+avx2,+avx512f"})
>>> parts["backend"], parts["target"]
('llvm', 'x86_64-unknown-linux-gnu znver4 +avx2,+avx512f')
"""
from __future__ import annotations

import threading

import llvmlite
import llvmlite.binding as llvm

from .._version import __version__
from .cache import KernelCache, default_directory

__all__ = ["OPTIONS", "compiler_version", "default_cache", "emit_object", "jitorch_version", "key_parts",
           "load_object"]

# The settings llvm_compile builds the target machine and pipeline with; they change the bytes, so they key them.
OPTIONS = "O3 loop+slp vectorize unroll, reloc=static, codemodel=jitdefault, prefer-vector-width=512 with AVX-512"

_lock = threading.Lock()
_DEFAULT_CACHES: dict[str, KernelCache] = {}


def jitorch_version() -> str:
    """jitorch's version, from its leaf ``_version`` module (package metadata costs ~5 ms of email parsing on a
    process's first compile; codegen must not import jitorch's upper layers, and this module is none).

    >>> isinstance(jitorch_version(), str)
    True
    """
    return __version__


def compiler_version() -> str:
    """llvmlite's and LLVM's versions, e.g. ``'llvmlite 0.45.0, LLVM 20.1.8'``.

    >>> compiler_version().startswith("llvmlite ")
    True
    """
    return f"llvmlite {llvmlite.__version__}, LLVM {'.'.join(map(str, llvm.llvm_version_info))}"


def key_parts(llvm_ir: str, target: dict) -> dict:
    """The `KernelCache` key parts of the machine code for ``llvm_ir`` on ``target`` (triple, cpu, features)."""
    return {"source": llvm_ir, "backend": "llvm", "compiler": compiler_version(), "jitorch": jitorch_version(),
            "target": f"{target['triple']} {target['cpu']} {target['features']}", "options": OPTIONS}


def emit_object(target_machine, module) -> bytes:
    """The relocatable object file (ELF, Mach-O or COFF bytes) of an already optimized module."""
    return bytes(target_machine.emit_object(module))


def load_object(engine, data: bytes, name: str) -> int:
    """Add an object file to ``engine``, link it and return the address of function ``name``.

    The caller holds the engine's lock: MCJIT's linker state is shared by every module and object in the engine.
    """
    engine.add_object_file(llvm.ObjectFileRef.from_data(data))
    engine.finalize_object()
    address = engine.get_function_address(name)
    if not address:
        raise RuntimeError(f"the cached object does not define {name!r}")
    return address


def default_cache() -> KernelCache:
    """The process's disk-backed cache in `cache.default_directory` (``$JITORCH_CACHE_DIR`` or ~/.cache/jitorch).

    One cache per directory: the variable is read on every call, so a program (or a test) that points it elsewhere
    gets a cache there. An unwritable or unsafe directory leaves a memory-only cache (``KernelCache`` warns once).
    """
    directory = str(default_directory())
    with _lock:
        cache = _DEFAULT_CACHES.get(directory)
        if cache is None:
            cache = _DEFAULT_CACHES[directory] = KernelCache(directory)
        return cache
