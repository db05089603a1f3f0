"""``jitorch.cuda`` seeding: the ``torch.cuda`` RNG functions.

jitorch draws CUDA random numbers from the default generator (then moves them), so ``jitorch.manual_seed`` already
covers CUDA tensors. Seeding CUDA alone is therefore a no-op, as it is in CPU-only PyTorch, where the call is queued
for a CUDA initialisation that never comes.

>>> import jitorch.cuda
>>> jitorch.cuda.manual_seed(0)          # a no-op without CUDA, like torch
>>> jitorch.cuda.manual_seed_all(0)
>>> jitorch.cuda.get_rng_state_all()
[]
"""
from __future__ import annotations

from ._lazy import has_cuda, require_cuda

__all__ = ["manual_seed", "manual_seed_all", "seed", "seed_all", "initial_seed", "get_rng_state", "set_rng_state",
           "get_rng_state_all", "set_rng_state_all"]


def manual_seed(seed) -> None:
    """Seed the current CUDA device's generator; without CUDA nothing happens (torch queues it lazily)."""
    int(seed)  # torch accepts anything int() takes; reject the rest the same way


def manual_seed_all(seed) -> None:
    """Seed every CUDA device's generator; a no-op without CUDA."""
    int(seed)


def seed() -> None:
    """Seed the current CUDA generator with a random number; a no-op without CUDA."""


def seed_all() -> None:
    """Seed every CUDA generator with a random number; a no-op without CUDA."""


def initial_seed() -> int:
    """The current CUDA generator's seed; CPU-only torch raises ``AssertionError`` here."""
    require_cuda()
    from .._random import default_generator

    return default_generator.initial_seed()


def get_rng_state(device="cuda"):
    """The CUDA generator state as a ``uint8`` tensor; raises without CUDA like torch."""
    require_cuda()
    from .._random import get_rng_state as _get

    return _get()


def set_rng_state(new_state, device="cuda") -> None:
    """Restore a state from ``get_rng_state``; queued (a no-op) without CUDA, like torch."""
    if has_cuda():
        from .._random import set_rng_state as _set

        _set(new_state)


def get_rng_state_all() -> list:
    """One state per CUDA device: ``[]`` without CUDA."""
    return [get_rng_state(i) for i in range(_count())]


def set_rng_state_all(new_states) -> None:
    """Restore one state per CUDA device."""
    for i, state in enumerate(new_states):
        set_rng_state(state, i)


def _count() -> int:
    from ..runtime import device_count

    return device_count()
