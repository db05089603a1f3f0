"""``Generator``: one random stream on one device, and its state as bytes (``get_state``/``set_state``).

A CPU generator wraps a ``TorchCPUStream`` (``jitorch._torch_rng``: PyTorch's mt19937 stream, so the same seed gives
torch's numbers); a CUDA one a ``DeviceStream`` (``jitorch._random_device``) drawing on its device. The default
generators and the samplers are in ``jitorch._random``, which re-exports ``Generator``.

>>> g = Generator().manual_seed(7); state = g.get_state(); first = g._rng.random()
>>> _ = g.set_state(state); g._rng.random() == first
True
"""
from __future__ import annotations

import operator

import numpy as np

from . import _dtype
from ._device import device as _device
from ._random_device import DeviceStream
from ._tensor import Tensor
from ._torch_rng import STATE_BYTES, TorchCPUStream

__all__ = ["Generator"]

_DEFAULT_SEED = 67280421310721  # PyTorch's default seed value


class Generator:
    """A random stream on one device: ``Generator().manual_seed(42)``, ``Generator(device="cuda")``.

    A CUDA generator draws on its device (no host copies); creating one without CUDA raises ``RuntimeError``, as
    CPU-only PyTorch does.

    >>> g = Generator().manual_seed(42)
    >>> g.initial_seed(), g.device.type
    (42, 'cpu')
    """

    def __init__(self, device="cpu"):
        from .runtime import array_module_for, is_cupy

        dev = _device(device)
        self._seed = _DEFAULT_SEED
        xp = array_module_for(dev.type)
        if is_cupy(xp):
            index = dev.index if dev.index is not None else int(xp.cuda.runtime.getDevice())
            dev = _device(f"{dev.type}:{index}")
            self._rng = DeviceStream(xp, self._seed, index)
        else:
            self._rng = TorchCPUStream(self._seed)
        self.device = dev

    @classmethod
    def _over(cls, stream, device="cpu"):
        """A generator drawing from ``stream`` (a ``DeviceStream``) for tensors on ``device`` (tests use this to run
        the device path with a stand-in array module)."""
        g = cls.__new__(cls)
        g.device, g._seed, g._rng = _device(device), stream._seed, stream
        return g

    @property
    def _on_device(self):
        return isinstance(self._rng, DeviceStream)

    def manual_seed(self, seed):
        if isinstance(seed, float) or not hasattr(seed, "__index__"):
            raise RuntimeError(f"manual_seed expected a long, but got {type(seed).__name__}")
        seed = operator.index(seed)
        # torch reads the seed as an int64 or a uint64: any other value overflows, never wraps.
        if not -(1 << 63) <= seed < 1 << 64:
            raise ValueError(f"manual_seed: seed {seed} is outside [-2**63, 2**64) (Overflow when unpacking long long)")
        if seed < 0:
            seed += 1 << 64
        self._seed = seed
        if self._on_device:
            self._rng.reseed(seed)
        else:
            # A new stream object (CPU graph replay looks ``_rng`` up at each draw for this reason).
            self._rng = TorchCPUStream(seed)
        return self

    def seed(self):
        s = int(np.random.SeedSequence().entropy) % (1 << 63)
        self.manual_seed(s)
        return s

    def initial_seed(self):
        return self._seed

    def get_state(self):
        """The stream's state as a CPU ``uint8`` tensor: for the CPU, torch's 5056-byte layout (so a state from
        ``torch.get_rng_state()`` can be set here and the other way round); for CUDA, a copy of the device state.

        >>> g = Generator().manual_seed(3); state = g.get_state(); a = g._rng.random()
        >>> _ = g.set_state(state); g._rng.random() == a, state.shape
        (True, jitorch.Size([5056]))
        """
        from . import _random  # its ``_finish``: graph captures patch it there

        if self._on_device:
            return _random._finish(self._rng.get_state(), device="cpu")
        return _random._finish(self._rng.to_bytes(), device="cpu")

    def set_state(self, new_state):
        if not isinstance(new_state, Tensor):
            raise TypeError(f"set_state: expected a torch.ByteTensor, but got {type(new_state).__name__}")
        if new_state.dtype is not _dtype.uint8:
            raise TypeError(f"set_state: RNG state must be a torch.ByteTensor, got a tensor of {new_state.dtype}")
        if self._on_device:
            self._rng.set_state(new_state._host())
            self._seed = self._rng._seed
            return self
        raw = np.asarray(new_state._host(), dtype=np.uint8).tobytes()
        if len(raw) != STATE_BYTES:
            raise RuntimeError(f"set_rng_state: expected a CPU generator state of {STATE_BYTES} bytes (from "
                               f"get_rng_state, torch's layout), got {len(raw)} bytes (states saved by jitorch "
                               f"before its streams became torch's mt19937 cannot be restored)")
        try:
            state = TorchCPUStream.from_bytes(raw).state
        except ValueError as err:
            raise RuntimeError(f"set_rng_state: not a CPU generator state: {err}") from None
        self._rng.state = state  # in place: captures and compiled graphs hold this stream object
        self._seed = state["seed"]
        return self

    def clone_state(self):
        g = Generator(self.device) if not self._on_device else Generator._over(
            DeviceStream(self._rng.xp, self._seed, self._rng.index), self.device)
        g._seed = self._seed
        g.set_state(self.get_state())
        return g
