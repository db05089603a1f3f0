"""A small ctypes binding to NVRTC: CUDA C source in, cubin out, without touching a GPU.

NVRTC compiles for an explicit ``--gpu-architecture=sm_XX``, so the whole CUDA code path can be compile-checked on a
machine with no device and no driver. The library comes from the pip wheel ``nvidia-cuda-nvrtc`` (site-packages
``nvidia/*/lib``), ``$JITORCH_NVRTC_LIBRARY``, ``$CUDA_HOME`` or the system loader, in that order.

>>> from jitorch.codegen import nvrtc
>>> src = 'extern "C" __global__ void k(float* out) { out[threadIdx.x] = 1.0f; }'
>>> cubin = nvrtc.compile_cubin(src, "k", arch="sm_80")
>>> cubin[:4] == b"\\x7fELF" and "k" in nvrtc.cubin_function_symbols(cubin)
True
"""
from __future__ import annotations

import ctypes
import ctypes.util
import functools
import glob
import os
import re
import struct
import sys
import time
from dataclasses import dataclass

from . import debug

__all__ = ["CompileError", "NvrtcUnavailable", "CompiledCubin", "load_library", "version", "supported_archs",
           "normalize_arch", "compile", "compile_cubin", "cubin_function_symbols", "number_lines", "key_parts"]

_COMPILATION_FAILED = 6  # NVRTC_ERROR_COMPILATION: the source is wrong, so the log is what the user needs


class NvrtcUnavailable(RuntimeError):
    """libnvrtc could not be found or loaded (install the ``nvidia-cuda-nvrtc`` wheel)."""


class CompileError(RuntimeError):
    """NVRTC rejected a generated source; carries the source, the log and the options used.

    The message shows the offending lines with their numbers, NVRTC's log and the full numbered source, so a
    failure in generated code can be read without re-running anything.
    """

    def __init__(self, name: str, source: str, log: str, options: tuple[str, ...]):
        self.name, self.source, self.log, self.options = name, source, log, options
        super().__init__(_format_error(name, source, log, options))


@dataclass(frozen=True)
class CompiledCubin:
    """The result of one compile: the cubin bytes, NVRTC's log (warnings; empty when clean) and the options."""

    cubin: bytes
    log: str
    name: str
    arch: str
    options: tuple[str, ...]


def number_lines(source: str) -> str:
    """Prefix each line with its 1-based number, the way NVRTC's log refers to it.

    >>> print(number_lines("int a;\\nint b;"))
       1 | int a;
       2 | int b;
    """
    return "\n".join(f"{i:4d} | {line}" for i, line in enumerate(source.splitlines(), start=1))


def _format_error(name: str, source: str, log: str, options: tuple[str, ...]) -> str:
    lines = source.splitlines()
    # NVRTC reports "<program name>(LINE): error: ..."; quote those lines first because the full listing can be long.
    cited = sorted({int(m) for m in re.findall(r"\((\d+)\): (?:error|warning)", log)})
    quoted = [f"{n:4d} | {lines[n - 1]}" for n in cited if 0 < n <= len(lines)]
    parts = [f"NVRTC failed to compile kernel {name!r} with options {' '.join(options)}"]
    if quoted:
        parts += ["offending lines:", *quoted]
    parts += ["NVRTC log:", log.strip() or "(empty)", "generated source:", number_lines(source)]
    return "\n".join(parts)


def _candidate_paths() -> list[str]:
    found = []
    explicit = os.environ.get("JITORCH_NVRTC_LIBRARY")
    if explicit:
        found.append(explicit)
    for entry in sys.path:
        # The wheels lay out nvidia/cu13/lib (13.x) or nvidia/cuda_nvrtc/lib (12.x); newest soname first.
        pattern = os.path.join(entry, "nvidia", "*", "lib", "libnvrtc.so*")
        found += sorted((p for p in glob.glob(pattern) if "builtins" not in p), reverse=True)
    cuda_home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    if cuda_home:
        found += sorted(glob.glob(os.path.join(cuda_home, "lib64", "libnvrtc.so*")), reverse=True)
    system = ctypes.util.find_library("nvrtc")
    if system:
        found.append(system)
    return found


@functools.lru_cache(maxsize=None)
def load_library() -> ctypes.CDLL:
    """Load libnvrtc once and declare the entry points used here; raises `NvrtcUnavailable` if there is none.

    >>> load_library() is load_library()
    True
    """
    errors = []
    for path in _candidate_paths():
        try:
            lib = ctypes.CDLL(path)
        except OSError as exc:
            errors.append(f"{path}: {exc}")
            continue
        _declare(lib)
        return lib
    tried = "\n  ".join(errors) or "no candidate found"
    raise NvrtcUnavailable("libnvrtc not found (pip install nvidia-cuda-nvrtc, or set JITORCH_NVRTC_LIBRARY):\n  "
                           + tried)


def _declare(lib: ctypes.CDLL) -> None:
    prog, prog_p, size_p = ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_size_t)
    int_p, strs = ctypes.POINTER(ctypes.c_int), ctypes.POINTER(ctypes.c_char_p)
    signatures = {
        "nvrtcVersion": [int_p, int_p],
        "nvrtcGetNumSupportedArchs": [int_p],
        "nvrtcGetSupportedArchs": [int_p],
        "nvrtcCreateProgram": [prog_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_int, strs, strs],
        "nvrtcCompileProgram": [prog, ctypes.c_int, strs],
        "nvrtcDestroyProgram": [prog_p],
        "nvrtcGetProgramLogSize": [prog, size_p],
        "nvrtcGetProgramLog": [prog, ctypes.c_char_p],
        "nvrtcGetCUBINSize": [prog, size_p],
        "nvrtcGetCUBIN": [prog, ctypes.c_char_p],
        "nvrtcGetPTXSize": [prog, size_p],
        "nvrtcGetPTX": [prog, ctypes.c_char_p],
    }
    for fname, argtypes in signatures.items():
        fn = getattr(lib, fname)
        fn.argtypes, fn.restype = argtypes, ctypes.c_int
    lib.nvrtcGetErrorString.argtypes, lib.nvrtcGetErrorString.restype = [ctypes.c_int], ctypes.c_char_p


def _check(status: int, what: str) -> None:
    if status != 0:
        message = load_library().nvrtcGetErrorString(status).decode()
        raise RuntimeError(f"{what} failed: NVRTC error {status} ({message})")


@functools.lru_cache(maxsize=None)
def version() -> tuple[int, int]:
    """NVRTC's (major, minor) version; part of every cache key because a new compiler may emit different code.

    >>> version() >= (12, 0)
    True
    """
    major, minor = ctypes.c_int(), ctypes.c_int()
    _check(load_library().nvrtcVersion(ctypes.byref(major), ctypes.byref(minor)), "nvrtcVersion")
    return major.value, minor.value


@functools.lru_cache(maxsize=None)
def supported_archs() -> tuple[int, ...]:
    """The SM versions this NVRTC can target, e.g. ``(75, 80, 86, ..., 90, ...)``.

    >>> 80 in supported_archs() and 90 in supported_archs()
    True
    """
    lib, count = load_library(), ctypes.c_int()
    _check(lib.nvrtcGetNumSupportedArchs(ctypes.byref(count)), "nvrtcGetNumSupportedArchs")
    archs = (ctypes.c_int * count.value)()
    _check(lib.nvrtcGetSupportedArchs(archs), "nvrtcGetSupportedArchs")
    return tuple(archs)


def normalize_arch(arch: str | int) -> str:
    """Accept ``80``, ``"80"``, ``"sm_80"`` or ``"compute_80"`` and return ``"sm_80"`` (a real arch, so a cubin).

    >>> normalize_arch(90), normalize_arch("sm_80")
    ('sm_90', 'sm_80')
    """
    match = re.fullmatch(r"(?:sm_|compute_)?(\d+)([af]?)", str(arch))
    if not match:
        raise ValueError(f"arch={arch!r} is not an SM architecture such as 'sm_80' or 90")
    return f"sm_{match.group(1)}{match.group(2)}"


def key_parts(source: str, arch: str | int, options: tuple[str, ...] = ()) -> dict:
    """The compile-cache key of an NVRTC compile (see `jitorch.codegen.cache.KernelCache`).

    >>> key_parts("k", "sm_90")["target"]
    'sm_90'
    """
    major, minor = version()
    return {"source": source, "backend": "cuda-nvrtc", "compiler": f"nvrtc-{major}.{minor}",
            "target": normalize_arch(arch), "options": list(options)}


def _read(getter_size, getter, program) -> bytes:
    size = ctypes.c_size_t()
    _check(getter_size(program, ctypes.byref(size)), getter_size.__name__)
    buffer = ctypes.create_string_buffer(size.value)
    _check(getter(program, buffer), getter.__name__)
    return buffer.raw


def compile(source: str, name: str, arch: str | int = "sm_80", options: tuple[str, ...] = ()) -> CompiledCubin:
    """Compile CUDA C to a cubin for ``arch`` and check that the entry ``name`` is defined in it.

    ``name`` must be an ``extern "C"`` kernel so its symbol is not mangled. Raises `CompileError` with the numbered
    source and NVRTC's log when the source is rejected.

    >>> result = compile('extern "C" __global__ void k(int* p) { *p = 1; }', "k", arch=90)
    >>> result.arch, result.log
    ('sm_90', '')
    """
    lib, arch = load_library(), normalize_arch(arch)
    all_options = (f"--gpu-architecture={arch}", *options)
    program = ctypes.c_void_p()
    _check(lib.nvrtcCreateProgram(ctypes.byref(program), source.encode(), f"{name}.cu".encode(), 0, None, None),
           "nvrtcCreateProgram")
    try:
        encoded = (ctypes.c_char_p * len(all_options))(*(o.encode() for o in all_options))
        debug.log_source(name, source)
        start = time.perf_counter()
        status = lib.nvrtcCompileProgram(program, len(all_options), encoded)
        debug.log_compile("nvrtc", f"{name} [{arch}]", time.perf_counter() - start)
        log = _read(lib.nvrtcGetProgramLogSize, lib.nvrtcGetProgramLog, program).rstrip(b"\0").decode(errors="replace")
        if status == _COMPILATION_FAILED:
            raise CompileError(name, source, log, all_options)
        _check(status, "nvrtcCompileProgram")
        cubin = _read(lib.nvrtcGetCUBINSize, lib.nvrtcGetCUBIN, program)
    finally:
        lib.nvrtcDestroyProgram(ctypes.byref(program))
    if name not in cubin_function_symbols(cubin):
        raise CompileError(name, source, f"entry symbol {name!r} is not defined in the cubin (missing extern \"C\"?)",
                           all_options)
    return CompiledCubin(cubin=cubin, log=log.strip(), name=name, arch=arch, options=all_options)


def compile_cubin(source: str, name: str, arch: str | int = "sm_80", options: tuple[str, ...] = ()) -> bytes:
    """`compile`, returning only the cubin bytes (what the cache stores and the launcher loads).

    >>> len(compile_cubin('extern "C" __global__ void k() {}', "k")) > 0
    True
    """
    return compile(source, name, arch, options).cubin


def cubin_function_symbols(cubin: bytes) -> set[str]:
    """Names of the function symbols in an ELF64 little-endian cubin (kernels and device functions).

    Reading the symbol table, rather than searching the bytes for the name, proves the kernel is defined and not
    just mentioned in a string.

    >>> cubin_function_symbols(compile_cubin('extern "C" __global__ void k() {}', "k"))
    {'k'}
    """
    if cubin[:4] != b"\x7fELF" or cubin[4] != 2 or cubin[5] != 1:
        raise ValueError("not an ELF64 little-endian image")
    shoff, = struct.unpack_from("<Q", cubin, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", cubin, 0x3A)
    sections = [struct.unpack_from("<IIQQQQIIQQ", cubin, shoff + i * shentsize) for i in range(shnum)]
    names = set()
    for _, sh_type, _, _, offset, size, link, _, _, entsize in sections:
        if sh_type != 2:  # SHT_SYMTAB
            continue
        str_offset = sections[link][4]
        for pos in range(offset, offset + size, entsize or 24):
            st_name, st_info = struct.unpack_from("<IB", cubin, pos)
            if st_info & 0xF == 2:  # STT_FUNC
                end = cubin.index(b"\0", str_offset + st_name)
                names.add(cubin[str_offset + st_name:end].decode())
    return names
