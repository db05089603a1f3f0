"""``jitorch.backends.cuda``: CUDA math switches (TF32 matmul, reduced-precision reductions, SDPA kernels).

Stored with torch's defaults and read back; jitorch's CUDA kernels compute in full precision regardless.

>>> import jitorch.backends
>>> jitorch.backends.cuda.matmul.allow_tf32 = True
>>> jitorch.backends.cuda.matmul.allow_tf32
True
>>> jitorch.backends.cuda.matmul.allow_tf32 = False
>>> jitorch.backends.cuda.flash_sdp_enabled()
True
"""
from __future__ import annotations

import contextlib

__all__ = ["is_built", "matmul", "cufft_plan_cache", "preferred_linalg_library", "preferred_blas_library",
           "flash_sdp_enabled", "enable_flash_sdp", "mem_efficient_sdp_enabled", "enable_mem_efficient_sdp",
           "math_sdp_enabled", "enable_math_sdp", "cudnn_sdp_enabled", "enable_cudnn_sdp", "sdp_kernel",
           "is_flash_attention_available", "SDPAParams"]


def is_built() -> bool:
    """Whether jitorch can use CUDA here (torch: compiled with CUDA); False on a machine without a GPU."""
    from ..runtime import cuda_available

    return cuda_available()


class _MatmulFlags:
    """``backends.cuda.matmul``: an object with settable attributes, and nothing else (a typo is an error)."""

    _names = ("allow_tf32", "allow_fp16_reduced_precision_reduction", "allow_bf16_reduced_precision_reduction",
              "allow_fp16_accumulation", "fp32_precision")

    def __init__(self):
        object.__setattr__(self, "allow_tf32", False)
        object.__setattr__(self, "allow_fp16_reduced_precision_reduction", True)
        object.__setattr__(self, "allow_bf16_reduced_precision_reduction", True)
        object.__setattr__(self, "allow_fp16_accumulation", False)
        object.__setattr__(self, "fp32_precision", "none")

    def __setattr__(self, name, value):
        if name not in self._names:
            raise AttributeError("Unknown attribute " + name)
        object.__setattr__(self, name, value)


class _PlanCache:
    """``cufft_plan_cache``: jitorch keeps no cuFFT plans; size 0, settable max size."""

    size = 0
    max_size = 4096

    def clear(self):
        pass

    def __getitem__(self, device):
        return self


matmul = _MatmulFlags()
cufft_plan_cache = _PlanCache()
_sdp = {"flash": True, "mem_efficient": True, "math": True, "cudnn": True}
_linalg = {"library": "default"}
_blas = {"library": "cublas"}


def flash_sdp_enabled() -> bool:
    return _sdp["flash"]


def enable_flash_sdp(enabled: bool) -> None:
    _sdp["flash"] = bool(enabled)


def mem_efficient_sdp_enabled() -> bool:
    return _sdp["mem_efficient"]


def enable_mem_efficient_sdp(enabled: bool) -> None:
    _sdp["mem_efficient"] = bool(enabled)


def math_sdp_enabled() -> bool:
    return _sdp["math"]


def enable_math_sdp(enabled: bool) -> None:
    _sdp["math"] = bool(enabled)


def cudnn_sdp_enabled() -> bool:
    return _sdp["cudnn"]


def enable_cudnn_sdp(enabled: bool) -> None:
    _sdp["cudnn"] = bool(enabled)


def is_flash_attention_available() -> bool:
    return False


@contextlib.contextmanager
def sdp_kernel(enable_flash=True, enable_math=True, enable_mem_efficient=True, enable_cudnn=True):
    """Deprecated torch context manager: set the SDPA kernel switches for a block."""
    saved = dict(_sdp)
    _sdp.update(flash=bool(enable_flash), math=bool(enable_math), mem_efficient=bool(enable_mem_efficient),
                cudnn=bool(enable_cudnn))
    try:
        yield
    finally:
        _sdp.update(saved)


def preferred_linalg_library(backend=None):
    """Get (no argument) or set the preferred CUDA linear-algebra library name."""
    if backend is not None:
        _linalg["library"] = str(backend).lower()
    return _linalg["library"]


def preferred_blas_library(backend=None):
    if backend is not None:
        _blas["library"] = str(backend).lower()
    return _blas["library"]


class SDPAParams:
    """Placeholder for torch's SDPA parameter record (accepted, unused)."""

    def __init__(self, *args):
        self.args = args
