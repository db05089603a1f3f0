"""``torch.random``: the default generator's seeding and state, and ``fork_rng`` (draws inside the block leave the
CPU generator, and the listed CUDA devices' generators, as they were).

>>> import jitorch
>>> _ = jitorch.random.manual_seed(0)
>>> with jitorch.random.fork_rng():
...     inside = jitorch.rand(2)
>>> bool((jitorch.rand(2) == inside).all())
True
"""
from __future__ import annotations

import contextlib

from ._random import Generator, default_generator, get_rng_state, initial_seed, manual_seed, seed, set_rng_state

__all__ = ["Generator", "default_generator", "fork_rng", "get_rng_state", "initial_seed", "manual_seed", "seed",
           "set_rng_state", "thread_safe_generator"]


@contextlib.contextmanager
def fork_rng(devices=None, enabled=True, _caller="fork_rng", _devices_kw="devices", device_type=None):
    """Save the CPU generator's state and the CUDA ones of ``devices`` (all when None), restore them on exit."""
    if device_type == "meta" or not enabled:
        yield
        return
    from . import cuda

    devices = (list(range(cuda.device_count())) if cuda.is_available() else []) if devices is None else list(devices)
    cpu_state = get_rng_state()
    device_states = [cuda.get_rng_state(d) for d in devices]
    try:
        yield
    finally:
        set_rng_state(cpu_state)
        for d, state in zip(devices, device_states):
            cuda.set_rng_state(state, d)


def thread_safe_generator():
    """The generator of the current DataLoader thread worker; None (the default generator) elsewhere."""
    return None
