"""``jitorch.mps``: Apple's Metal device, which jitorch does not have; answers as PyTorch without MPS does.

>>> import jitorch
>>> jitorch.mps.is_available(), jitorch.mps.device_count()
(False, 0)
>>> jitorch.mps.manual_seed(0)   # a no-op without the device, as in torch
"""
from __future__ import annotations

__all__ = ["is_available", "device_count", "synchronize", "manual_seed", "seed", "get_rng_state", "set_rng_state",
           "empty_cache", "current_allocated_memory", "driver_allocated_memory", "recommended_max_memory",
           "set_per_process_memory_fraction"]


def _missing(what):
    def call(*args, **kwargs):
        raise RuntimeError(f"Cannot execute {what}() without MPS backend.")
    call.__name__ = what
    call.__doc__ = f"Raises torch's RuntimeError: there is no MPS device ({what})."
    return call


def is_available() -> bool:
    return False


def device_count() -> int:
    return 0


def manual_seed(seed) -> None:
    """Nothing to seed without the device (torch ignores it too)."""


synchronize = _missing("deviceSynchronize")
empty_cache = _missing("emptyCache")
current_allocated_memory = _missing("getCurrentAllocatedMemory")
driver_allocated_memory = _missing("getDriverAllocatedMemory")
recommended_max_memory = _missing("getRecommendedMaxMemory")
set_per_process_memory_fraction = _missing("setMemoryFraction")
seed = _missing("getDefaultGenerator")
get_rng_state = _missing("getDefaultGenerator")
set_rng_state = _missing("getDefaultGenerator")
