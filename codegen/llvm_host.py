"""The host CPU as LLVM sees it: one target machine and one MCJIT engine for the process, and its features.

Kernels are built for the machine they run on (name and features, like numba's JIT codegen), so emitters may ask
what it has: `has_avx512` decides vector widths and instructions that only AVX-512 lowers well (``llvm.ldexp`` is
one ``vscalefps`` there and a scalar ``ldexpf`` call per element elsewhere).
"""
from __future__ import annotations

import threading

import llvmlite.binding as llvm

_init_lock = threading.Lock()
_state: dict = {}


def target():
    """(target machine, engine), made once; llvmlite >= 0.45 must not call ``llvm.initialize()``."""
    if "ready" not in _state:
        with _init_lock:  # threads compiling their first kernels at once must not each make an engine
            if "ready" not in _state:
                _make_target()
    return _state["tm"], _state["engine"]


def _make_target():
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    tgt = llvm.Target.from_default_triple()
    cpu, features = llvm.get_host_cpu_name(), llvm.get_host_cpu_features().flatten()
    # Keep llvm_objcache.OPTIONS in step with these settings: they are part of the object cache key.
    tm = tgt.create_target_machine(cpu=cpu, features=features, opt=3, reloc="static", codemodel="jitdefault",
                                   jit=True)
    engine = llvm.create_mcjit_compiler(llvm.parse_assembly(""), tm)
    _state.update(tm=tm, engine=engine, target={"triple": tm.triple, "cpu": cpu, "features": features},
                  avx512="+avx512f" in features.split(","))
    _state["ready"] = True  # last: a thread that sees it sees the rest


def target_info():
    """The host target the code is built for: ``{"triple", "cpu", "features"}`` (part of every cache key).

    >>> sorted(target_info())
    ['cpu', 'features', 'triple']
    """
    target()
    return dict(_state["target"])


def has_avx512():
    """Whether the host has AVX-512 (32 vector registers of 512 bits).

    >>> has_avx512() in (True, False)
    True
    """
    target()
    return _state["avx512"]


def storage_dtypes():
    """The storage-only IR dtypes (`ir.STORAGE`) kernels built for this host can load and store: bf16 always
    (integer conversions), f16 where the CPU has F16C (LLVM lowers half conversions to ``vcvtph2ps``/``vcvtps2ph``
    there; elsewhere to compiler-rt calls that the JIT cannot resolve).

    >>> "bf16" in storage_dtypes()
    True
    """
    target()
    return ("bf16", "f16") if "+f16c" in _state["target"]["features"].split(",") else ("bf16",)
