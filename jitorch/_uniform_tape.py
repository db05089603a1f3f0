"""torch's 53-bit uniforms drawn ahead in blocks for ATen's serial samplers (Poisson, Binomial, gamma), which take
one uniform at a time, as many as their rejection rounds need.

- ``UniformTape``: for the Python replays, a uniform a call (~0.1 us, against ~3 us for a Python call into the
  stream). ``close()`` rewinds the stream and advances it past exactly the uniforms used, so what follows draws
  what it would in torch.
- ``run_sampler``: for the generated samplers (`codegen.llvm_samplers`), blocks handed to the kernel and refilled
  where it stops short, the stream left the same way.
"""
from __future__ import annotations

import numpy as np

from .runtime.host_pointer import data_address

__all__ = ["UniformTape", "run_sampler"]


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


_MAX_BLOCK = 1 << 15  # uniforms drawn ahead at most at once: bounds those redrawn to leave the stream in place


def run_sampler(stream, kernel, first, second, out, expected, max_block=_MAX_BLOCK):
    """Fill ``out`` (contiguous) with ``kernel``'s draws (a `codegen.llvm_samplers.sampler`) over the contiguous
    ``first``/``second`` inputs (``second`` may be ``first``), reading torch's 53-bit uniforms from ``stream`` in
    blocks (the first of about ``expected`` uniforms, the next ones doubling up to ``max_block``). Where a block runs
    out inside a draw, the kernel stops before that draw; its unread uniforms carry into the next block. After the
    last draw the stream stands just past the uniforms read, with the normal the kernel cached (as ATen's generator)."""
    count = out.size
    if not count:
        return out
    state = np.zeros(3, np.int64)  # buffer position, whether a normal is cached, its bits
    if stream._next_normal is not None:
        state[1], state[2:].view(np.float64)[0] = 1, stream._next_normal
    max_block = max(1, int(max_block))
    block = int(min(max(expected, 16), max_block))
    engine = stream._engine
    before = engine.key.copy(), int(engine.pos[0])  # where the buffer's fresh uniforms begin
    uniforms = stream._uniform(block, True)
    carried = index = 0
    addresses = (data_address(first), data_address(second), data_address(out), data_address(state))
    while True:
        index = kernel(addresses[0], addresses[1], addresses[2], index, count, data_address(uniforms), uniforms.size,
                       addresses[3])
        if index == count:
            break
        rest = uniforms[int(state[0]):]
        block = min(2 * block, max_block)
        before = engine.key.copy(), int(engine.pos[0])
        uniforms = np.concatenate([rest, stream._uniform(block, True)])
        carried, state[0] = rest.size, 0
    engine.key[:], engine.pos[0] = before  # (in place: the engine's generated code holds their addresses)
    stream._uniform(int(state[0]) - carried, True)  # the uniforms read from the last fresh block
    stream._next_normal = float(state[2:].view(np.float64)[0]) if state[1] else None
    return out
