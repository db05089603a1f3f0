"""``UniformTape``: torch's 53-bit uniforms drawn ahead in blocks for ATen's serial samplers (Poisson, Binomial),
which take one uniform at a time: a Python call into the stream per uniform costs ~3 us, a read from the tape
~0.1 us. ``close()`` rewinds the stream and advances it past exactly the uniforms used, so what follows draws
what it would in torch."""
from __future__ import annotations

__all__ = ["UniformTape"]


class UniformTape:
    """Callable: the next ``uniform_real_distribution<double>(0, 1)`` draw of ``stream`` (a ``TorchCPUStream``)."""

    def __init__(self, stream, expected=64):
        self._stream = stream
        self._start = stream.state
        self._values = []
        self._used = 0
        self._block = max(64, int(expected))

    def __call__(self):
        if self._used == len(self._values):
            self._values += self._stream._uniform(self._block, True).tolist()
            self._block *= 2
        value = self._values[self._used]
        self._used += 1
        return value

    def close(self):
        """Leave the stream just past the uniforms read (the draws ahead of them undone)."""
        self._stream.state = self._start
        if self._used:
            self._stream._uniform(self._used, True)
