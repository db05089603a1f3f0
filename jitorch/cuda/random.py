"""``jitorch.cuda`` seeding: the ``torch.cuda`` RNG functions, over one device generator per CUDA device.

Each CUDA device has a default ``jitorch.Generator`` that draws on the device (``jitorch._random_device``);
``jitorch.manual_seed`` seeds them all. Without CUDA, seeding is a no-op as in CPU-only PyTorch, where the call is
queued for a CUDA initialisation that never comes, and reading a state raises PyTorch's ``AssertionError``.

>>> import jitorch.cuda
>>> jitorch.cuda.manual_seed(0)          # a no-op without CUDA, like torch
>>> jitorch.cuda.manual_seed_all(0)
>>> jitorch.cuda.get_rng_state_all() == [] or jitorch.cuda.is_available()
True
"""
from __future__ import annotations

from ._lazy import device_index, has_cuda, require_cuda

__all__ = ["manual_seed", "manual_seed_all", "seed", "seed_all", "initial_seed", "get_rng_state", "set_rng_state",
           "get_rng_state_all", "set_rng_state_all"]


def _generator(device=None):
    from .._random import cuda_generator

    return cuda_generator(None if device is None else device_index(device))


def manual_seed(seed) -> None:
    """Seed the current CUDA device's generator; without CUDA nothing happens (torch queues it lazily)."""
    seed = int(seed)  # torch accepts anything int() takes; reject the rest the same way
    if has_cuda():
        _generator().manual_seed(seed)


def manual_seed_all(seed) -> None:
    """Seed every CUDA device's generator; a no-op without CUDA."""
    seed = int(seed)
    for i in range(_count()):
        _generator(i).manual_seed(seed)


def seed() -> None:
    """Seed the current CUDA generator with a random number; a no-op without CUDA."""
    if has_cuda():
        _generator().seed()


def seed_all() -> None:
    """Seed every CUDA generator with one random number; a no-op without CUDA."""
    if has_cuda():
        manual_seed_all(_generator().seed())


def initial_seed() -> int:
    """The current CUDA generator's seed; CPU-only torch raises ``AssertionError`` here."""
    require_cuda()
    return _generator().initial_seed()


def get_rng_state(device="cuda"):
    """The CUDA generator's state as a CPU ``uint8`` tensor (its seed, then the device's Philox states).

    Raises without CUDA, like torch. The state is larger than PyTorch's 16 bytes; it round-trips through
    ``set_rng_state`` on the same kind of device.
    """
    require_cuda()
    return _generator(device).get_state()


def set_rng_state(new_state, device="cuda") -> None:
    """Restore a state from ``get_rng_state``; queued (a no-op) without CUDA, like torch."""
    if has_cuda():
        _generator(device).set_state(new_state)


def get_rng_state_all() -> list:
    """One state per CUDA device: ``[]`` without CUDA."""
    return [get_rng_state(i) for i in range(_count())]


def set_rng_state_all(new_states) -> None:
    """Restore one state per CUDA device."""
    for i, state in enumerate(new_states):
        set_rng_state(state, i)


def _count() -> int:
    from ..runtime import device_count

    return device_count() if has_cuda() else 0
