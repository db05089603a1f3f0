"""A :class:`~jitorch.runtime.driver.Driver` backed by CuPy's CUDA runtime bindings.

Raw ``cudaMalloc``/``cudaFree`` (not CuPy's own memory pool: the caching policy is ours), ``cudaMemGetInfo``,
``cupy.cuda.Event`` for cross-stream frees, and ``cudaStreamIsCapturing``. CuPy is imported when a driver is built,
so importing this module costs nothing on CPU-only machines.

Streams may be given as ``cupy.cuda.Stream`` objects or as raw ``cudaStream_t`` integers (``0`` = legacy default).

>>> from jitorch.runtime.cupy_driver import CupyDriver   # doctest: +SKIP
>>> drv = CupyDriver(device=0)                            # doctest: +SKIP
>>> ptr = drv.malloc(1 << 20, stream=0); drv.free(ptr)    # doctest: +SKIP
"""
from __future__ import annotations

from .driver import DeviceOutOfMemory

_CUDA_ERROR_MEMORY_ALLOCATION = 2  # cudaErrorMemoryAllocation


class CupyDriver:
    """Raw CUDA memory, events and capture state for one device, through ``cupy.cuda.runtime``.

    Every call runs with ``device`` current, so one driver per GPU is enough whatever device the caller last used.
    Events are created with timing disabled, the cheapest kind, as the allocator only ever polls them.

    >>> drv = CupyDriver(0)                  # doctest: +SKIP
    >>> free, total = drv.mem_get_info()     # doctest: +SKIP
    """

    def __init__(self, device: int = 0):
        import cupy

        self._cupy = cupy
        self._runtime = cupy.cuda.runtime
        self.device = int(device)
        self._device = cupy.cuda.Device(self.device)

    def _stream(self, stream):
        """A ``cupy.cuda.Stream``-like object for ``stream`` (CuPy stream objects pass through unchanged)."""
        if isinstance(stream, int):
            return self._cupy.cuda.ExternalStream(stream, self.device)
        return stream

    @staticmethod
    def _handle(stream) -> int:
        return stream if isinstance(stream, int) else int(stream.ptr)

    def malloc(self, size: int, stream=0) -> int:
        # cudaMalloc is not stream-ordered; the stream only matters to the allocator's bookkeeping.
        with self._device:
            try:
                return int(self._runtime.malloc(size))
            except self._runtime.CUDARuntimeError as err:
                if getattr(err, "status", None) == _CUDA_ERROR_MEMORY_ALLOCATION:
                    raise DeviceOutOfMemory(str(err)) from err
                raise

    def free(self, ptr: int) -> None:
        with self._device:
            self._runtime.free(ptr)

    def mem_get_info(self) -> tuple[int, int]:
        with self._device:
            free, total = self._runtime.memGetInfo()
        return int(free), int(total)

    def event_create(self):
        with self._device:
            return self._cupy.cuda.Event(block=False, disable_timing=True)

    def event_record(self, event, stream=0) -> None:
        with self._device:
            event.record(self._stream(stream))

    def event_query(self, event) -> bool:
        return bool(event.done)

    def event_synchronize(self, event) -> None:
        event.synchronize()

    def stream_is_capturing(self, stream) -> bool:
        with self._device:
            return bool(self._runtime.streamIsCapturing(self._handle(stream)))
