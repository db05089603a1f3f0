"""``jitorch.cuda`` streams and events: ``Stream``, ``Event``, ``current_stream``, ``stream(...)``.

With CUDA these wrap CuPy's streams and events. Without CUDA they fail the way CPU-only PyTorch does: creating a
``Stream`` or ``Event`` is a ``RuntimeError``, ``current_stream`` an ``AssertionError``, and ``stream(None)`` a no-op.

>>> import jitorch.cuda
>>> with jitorch.cuda.stream(None):   # allowed without CUDA, as in torch
...     pass
>>> jitorch.cuda.Stream()
Traceback (most recent call last):
    ...
RuntimeError: torch.cuda.Stream requires CUDA support
"""
from __future__ import annotations

import numpy as np

from ._lazy import cupy, has_cuda, require_cuda

__all__ = ["Stream", "ExternalStream", "Event", "current_stream", "default_stream", "set_stream", "stream",
           "StreamContext", "record_stream"]


class Stream:
    """A CUDA stream: work queued on it runs in order; different streams may overlap."""

    def __init__(self, device=None, priority=0, **kwargs):
        if not has_cuda():
            raise RuntimeError("torch.cuda.Stream requires CUDA support")
        wrapped = kwargs.get("_wrap")
        if wrapped is None:
            # torch's priority: 0 is the default, negative numbers are higher priorities (clamped to the device's
            # range, as CUDA does).
            from .. import cuda

            with cuda.device(device if device is not None else -1):
                wrapped = cupy().cuda.Stream(non_blocking=True, priority=int(priority) if priority else None)
        self._cp = wrapped
        from ._lazy import device_index

        self.device_index = device_index(device)
        self.priority = int(priority)

    @property
    def device(self):
        from .._device import device as _device

        return _device("cuda", self.device_index)

    @staticmethod
    def priority_range():
        """(lowest, highest) priority numbers of this device's streams, e.g. ``(0, -5)``."""
        require_cuda()
        least, greatest = cupy().cuda.runtime.deviceGetStreamPriorityRange()
        return int(least), int(greatest)

    @property
    def cuda_stream(self) -> int:
        return int(self._cp.ptr)

    def synchronize(self) -> None:
        self._cp.synchronize()

    def query(self) -> bool:
        return bool(self._cp.done)

    def wait_event(self, event) -> None:
        self._cp.wait_event(event._cp)

    def wait_stream(self, stream) -> None:
        self.wait_event(stream.record_event())

    def record_event(self, event=None):
        event = event or Event()
        event.record(self)
        return event

    def __eq__(self, other):
        return isinstance(other, Stream) and self.cuda_stream == other.cuda_stream

    def __hash__(self):
        return hash(self.cuda_stream)

    def __repr__(self):
        return f"<jitorch.cuda.Stream device={self.device} cuda_stream={self.cuda_stream:#x}>"

    def __enter__(self):
        self._context = StreamContext(self)
        return self._context.__enter__()

    def __exit__(self, *exc):
        return self._context.__exit__(*exc)


class ExternalStream(Stream):
    """A stream allocated elsewhere, given by its raw pointer."""

    def __init__(self, stream_ptr, device=None, **kwargs):
        if not has_cuda():
            raise RuntimeError("torch.cuda.Stream requires CUDA support")
        super().__init__(device, _wrap=cupy().cuda.ExternalStream(stream_ptr))


class Event:
    """A CUDA event: a marker in a stream to wait on or time against."""

    def __init__(self, enable_timing=False, blocking=False, interprocess=False, external=False):
        if not has_cuda():
            raise RuntimeError("Tried to instantiate dummy base class Event")
        self.enable_timing = bool(enable_timing)
        self._cp = cupy().cuda.Event(block=blocking, disable_timing=not enable_timing, interprocess=interprocess)

    def record(self, stream=None) -> None:
        self._cp.record((stream or current_stream())._cp)

    def wait(self, stream=None) -> None:
        (stream or current_stream()).wait_event(self)

    def query(self) -> bool:
        return bool(self._cp.done)

    def synchronize(self) -> None:
        self._cp.synchronize()

    def elapsed_time(self, end_event) -> float:
        """Milliseconds between this event and ``end_event`` (both need ``enable_timing=True``)."""
        if not (self.enable_timing and end_event.enable_timing):
            raise RuntimeError("Both events must be created with argument 'enable_timing=True'.")
        return float(cupy().cuda.get_elapsed_time(self._cp, end_event._cp))


def current_stream(device=None) -> Stream:
    """The stream work is currently queued on."""
    require_cuda()
    return Stream(device, _wrap=cupy().cuda.get_current_stream())


def default_stream(device=None) -> Stream:
    """The device's default (legacy null) stream."""
    require_cuda()
    return Stream(device, _wrap=cupy().cuda.Stream.null)


def set_stream(stream) -> None:
    """Make ``stream`` current; ``None`` is ignored, as in torch."""
    if stream is not None:
        stream._cp.use()


class StreamContext:
    """Context manager behind ``stream(...)``: make a stream current, restore the previous one on exit.

    ``None`` (or no CUDA and ``None``) makes it a no-op, which is how scripts write device-agnostic code.
    """

    def __init__(self, stream):
        self.stream = stream
        self._previous = None

    def __enter__(self):
        if self.stream is None:
            return None
        self._previous = cupy().cuda.get_current_stream()
        self.stream._cp.use()
        return self.stream

    def __exit__(self, *exc):
        if self._previous is not None:
            self._previous.use()
            self._previous = None
        return False


def stream(stream) -> StreamContext:
    """``with jitorch.cuda.stream(s): ...`` queues the block's work on ``s``."""
    return StreamContext(stream)


def record_stream(tensor, stream) -> None:
    """``tensor.record_stream(stream)``: ``stream`` uses the tensor's memory too, so once the tensor is freed the
    caching allocator waits for the work queued on ``stream`` so far before reusing it (no synchronisation now).

    Raises ``RuntimeError`` for a CPU tensor. Memory the allocator does not own (imported through DLPack) is left
    alone, as in torch.
    """
    data = tensor._data
    if type(data) is np.ndarray:
        raise RuntimeError("record_stream: expected a CUDA tensor, got a CPU tensor")
    from ..runtime.cuda_memory import installed_hook

    hook = installed_hook()
    if hook is not None:
        handle = stream if isinstance(stream, int) else stream.cuda_stream
        hook.record_stream(data, handle)
