"""Random numbers drawn where the tensor lives: ``DeviceStream``, NumPy's ``Generator`` methods over CuPy's.

A CUDA ``jitorch.Generator`` holds a ``DeviceStream``: a ``cupy.random.Generator`` over a ``Philox4x3210`` bit
generator whose state (one cuRAND Philox state per thread) lives in device memory. Every draw is a kernel writing
a device array: no host round trip and no synchronisation, which is what PyTorch's CUDA generator gives. The
samplers in ``jitorch._random`` call it with the names and arguments of ``numpy.random.Generator`` (``random``,
``standard_normal``, ``integers``, ``permutation``...), so the same sampler code serves both devices; this module
writes each of them with CuPy's smaller Generator API (``random``, ``standard_normal``, ``integers``, ``geometric``,
``poisson``) plus array arithmetic of the array module ``xp``. Nothing here imports CuPy: ``xp`` is handed in
(``cupy``, or in tests a NumPy stand-in restricted to CuPy's API).

The seed is applied lazily (seeding is cheap and never touches the device; the Philox states are built by the first
draw). ``get_state`` is the seed followed by the raw Philox states: an explicit device-to-host copy, as
``torch.cuda.get_rng_state`` returns a CPU tensor.

Validation that would read device values on the host (probabilities within [0, 1], a multinomial row with enough
non-zero weights) is not done on the device, since it would synchronise: a probability above 1 acts as 1, below 0
as 0, and a multinomial row with negative weights samples garbage indices (PyTorch reports these with an
asynchronous device-side assert).

>>> import numpy as np
>>> DeviceStream.STATE_HEADER
8
"""
from __future__ import annotations

import contextlib

import numpy as np

__all__ = ["DeviceStream"]


class DeviceStream:
    """NumPy-Generator-shaped sampling on the device of array module ``xp`` (CUDA device ``index``)."""

    STATE_HEADER = 8  # bytes of the seed in front of the raw Philox states in ``get_state``

    def __init__(self, xp, seed, index=None):
        self.xp, self.index = xp, index
        self._seed = int(seed)
        self._gen = None

    # -- seeding and state ------------------------------------------------------------------------------------------
    def _on_device(self):
        cuda = getattr(self.xp, "cuda", None)
        return cuda.Device(self.index) if cuda is not None and self.index is not None else contextlib.nullcontext()

    def _generator(self):
        if self._gen is None:
            with self._on_device():
                random = self.xp.random
                self._gen = random.Generator(random.Philox4x3210(self._seed))
        return self._gen

    def reseed(self, seed):
        """Start over from ``seed`` (nothing runs on the device until the next draw)."""
        self._seed, self._gen = int(seed), None

    def _raw_state(self):
        state = getattr(self._generator().bit_generator, "_state", None)
        if state is None:
            raise RuntimeError("get_rng_state/set_rng_state on CUDA: this CuPy version keeps its Philox states where "
                               "jitorch cannot read them (cupy.random.Philox4x3210._state)")
        return state

    def get_state(self):
        """The seed (8 bytes, little-endian) followed by the Philox states, as a host ``uint8`` array."""
        from .runtime import move_array

        raw = move_array(self._raw_state(), "cpu").view(np.uint8).reshape(-1)
        return np.concatenate([np.array([self._seed], dtype="<u8").view(np.uint8), raw])

    def set_state(self, data):
        """Restore a ``get_state`` result (a host ``uint8`` array)."""
        data = np.ascontiguousarray(data, dtype=np.uint8).reshape(-1)
        if data.size <= self.STATE_HEADER:
            raise RuntimeError(f"set_rng_state: a CUDA generator state has more than {self.STATE_HEADER} bytes, "
                               f"got {data.size}; pass a tensor from get_rng_state()")
        self.reseed(int(data[:self.STATE_HEADER].view("<u8")[0]))
        raw = self._raw_state()
        body = data[self.STATE_HEADER:]
        if body.size != raw.nbytes:
            raise RuntimeError(f"set_rng_state: RNG state is wrong size: expected {raw.nbytes + self.STATE_HEADER} "
                               f"bytes for this device's generator, got {data.size}")
        with self._on_device():
            raw[...] = self.xp.asarray(body.view(raw.dtype))

    # -- numpy.random.Generator's methods, as the samplers call them ------------------------------------------------
    @staticmethod
    def _float(dtype):
        return np.float64 if np.dtype(dtype) == np.float64 else np.float32

    def random(self, size=None, dtype=np.float64):
        """Uniform floats in [0, 1) (float32 or float64)."""
        with self._on_device():
            return self._generator().random(size, dtype=self._float(dtype))

    def standard_normal(self, size=None, dtype=np.float64):
        with self._on_device():
            return self._generator().standard_normal(size, dtype=self._float(dtype))

    def integers(self, low, high=None, size=None, endpoint=False):
        """Integers in ``[low, high)`` (``endpoint``: ``[low, high]``, so every int64 can be drawn) as int64."""
        with self._on_device():
            return self._generator().integers(low, high, size, dtype=np.int64, endpoint=endpoint)

    def uniform(self, low=0.0, high=1.0, size=None, dtype=np.float64):
        u = self.random(size, dtype)
        with self._on_device():
            return u * (high - low) + low

    def normal(self, loc=0.0, scale=1.0, size=None, dtype=np.float64):
        z = self.standard_normal(size, dtype)
        with self._on_device():
            return z * scale + loc

    def exponential(self, scale=1.0, size=None, dtype=np.float64):
        # Inversion: -log(1 - u) is finite for u in [0, 1).
        u = self.random(size, dtype)
        with self._on_device():
            return -self.xp.log1p(-u) * scale

    def lognormal(self, mean=0.0, sigma=1.0, size=None, dtype=np.float64):
        z = self.normal(mean, sigma, size, dtype)
        with self._on_device():
            return self.xp.exp(z)

    def standard_cauchy(self, size=None, dtype=np.float64):
        u = self.random(size, dtype)
        with self._on_device():
            return self.xp.tan(np.pi * (u - 0.5))

    def geometric(self, p, size=None):
        with self._on_device():
            return self._generator().geometric(p, size)

    def poisson(self, lam=1.0, size=None):
        with self._on_device():
            if hasattr(lam, "astype"):
                lam = lam.astype(np.float64)  # rates of any float dtype; the kernel reads doubles
            return self._generator().poisson(lam, size)

    def permutation(self, n):
        """A random permutation of ``range(n)``: the order that sorts ``n`` uniform keys (as CUDA randperm does)."""
        keys = self.random((int(n),), np.float64)
        with self._on_device():
            return self.xp.argsort(keys).astype(np.int64)

    def bernoulli(self, p, size, dtype):
        """0/1 draws of ``dtype`` with probability ``p`` (a number or an array broadcasting to ``size``)."""
        u = self.random(size, np.float64 if np.dtype(dtype) == np.float64 else np.float32)
        with self._on_device():
            return (u < p).astype(dtype)

    def multinomial(self, rows, num_samples, replacement):
        """``num_samples`` category indices per row of the ``(R, K)`` weights ``rows`` (int64, shape ``(R, S)``).

        With replacement: inverse CDF, every row searched at once by shifting row ``r``'s normalised CDF by ``r``.
        Without: the ``S`` largest Gumbel-perturbed log weights of each row (Gumbel top-k).
        """
        xp = self.xp
        nrows, k = rows.shape
        u = self.random((nrows, num_samples if replacement else k), np.float64)
        with self._on_device():
            w = rows.astype(np.float64)
            offsets = xp.arange(nrows, dtype=np.float64)[:, None]
            if replacement:
                cdf = xp.cumsum(w, axis=1)
                flat = (cdf / cdf[:, -1:] + offsets).reshape(-1)
                pos = xp.searchsorted(flat, (u + offsets).reshape(-1), side="right").reshape(nrows, num_samples)
                return xp.clip(pos - (offsets * k).astype(np.int64), 0, k - 1).astype(np.int64)
            with np.errstate(divide="ignore"):  # u == 0 gives a key of -inf: never picked, as a zero weight
                keys = xp.where(w > 0, xp.log(xp.where(w > 0, w, 1.0)) - xp.log(-xp.log(u)), -np.inf)
            return xp.argsort(-keys, axis=1)[:, :num_samples].astype(np.int64)
