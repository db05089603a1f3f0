"""The small device interface the caching allocator is written against, and a deterministic fake for tests.

The allocator needs only raw device memory, free/total queries, events and the capture state of a stream. Keeping
that surface tiny lets every allocation rule be tested on a CPU-only machine with :class:`FakeDriver`, and lets the
CUDA build swap in :class:`jitorch.runtime.cupy_driver.CupyDriver` without touching the policy code.

Streams are opaque hashable handles (the fake uses ints; ``0`` is the default stream). Events are opaque objects
created by the driver.

>>> d = FakeDriver(capacity=4 << 20, alignment=512, base=0x1000)
>>> p = d.malloc(1 << 20, stream=0)
>>> hex(p), d.mem_get_info()
('0x1000', (3145728, 4194304))
>>> ev = d.event_create(); d.event_record(ev, stream=1); d.event_query(ev)
False
>>> d.complete(ev); d.event_query(ev)
True
"""
from __future__ import annotations

from typing import Any, Hashable, Protocol, runtime_checkable


class DeviceOutOfMemory(MemoryError):
    """The driver could not satisfy a raw device allocation (``cudaErrorMemoryAllocation``).

    The allocator catches this, runs its out-of-memory ladder, and only then raises its own ``OutOfMemoryError``.
    """


@runtime_checkable
class Driver(Protocol):
    """What a device backend must provide to the caching allocator.

    ``malloc`` returns an integer device address or raises :class:`DeviceOutOfMemory`; ``free`` returns memory to
    the device. ``event_record`` marks the point in ``stream``'s work queue that ``event_query`` later reports as
    reached; ``event_synchronize`` waits for it. ``stream_is_capturing`` reports whether a stream is recording a
    graph (no event polling or synchronisation is allowed then).

    >>> isinstance(FakeDriver(), Driver)
    True
    """

    device: int

    def malloc(self, size: int, stream: Hashable) -> int: ...

    def free(self, ptr: int) -> None: ...

    def mem_get_info(self) -> tuple[int, int]: ...

    def event_create(self) -> Any: ...

    def event_record(self, event: Any, stream: Hashable) -> None: ...

    def event_query(self, event: Any) -> bool: ...

    def event_synchronize(self, event: Any) -> None: ...

    def stream_is_capturing(self, stream: Hashable) -> bool: ...


class FakeEvent:
    """An event of :class:`FakeDriver`; it completes only when the test calls ``driver.complete(event)``."""

    __slots__ = ("id", "stream", "recorded", "done")

    def __init__(self, ident):
        self.id = ident
        self.stream = None
        self.recorded = False
        self.done = False

    def __repr__(self):
        return f"FakeEvent({self.id}, stream={self.stream}, done={self.done})"


class FakeDriver:
    """A deterministic in-memory device: bump-pointer addresses, a capacity cap, manual events, call counters.

    Addresses grow from ``base`` in steps rounded up to ``alignment``; freed ranges are never reused, so every
    address the allocator ever obtains is distinct and a test can predict them exactly. ``capacity`` bounds the sum of
    live allocations (what ``mem_get_info`` reports as used); exceeding it raises :class:`DeviceOutOfMemory`.
    ``other_process_bytes`` simulates memory used by someone else on the same device.

    Events never complete on their own: ``complete(event)`` decides when the "GPU" has
    reached them, so tests can hold a block in the pending-free state as long as they like. ``event_synchronize``
    models a blocking wait, which on a real device always ends with the event complete.

    >>> d = FakeDriver(capacity=1 << 20)
    >>> a = d.malloc(1000, 0); b = d.malloc(1000, 0)
    >>> b - a, d.calls["malloc"]
    (1024, 2)
    >>> try:
    ...     d.malloc(2 << 20, 0)
    ... except DeviceOutOfMemory:
    ...     print("oom")
    oom
    """

    def __init__(self, capacity: int = 1 << 30, alignment: int = 512, base: int = 0x7F0000000000, device: int = 0,
                 other_process_bytes: int = 0):
        if alignment <= 0 or alignment & (alignment - 1):
            raise ValueError(f"alignment must be a positive power of two, got {alignment}")
        self.device = device
        self.capacity = capacity
        self.alignment = alignment
        self.other_process_bytes = other_process_bytes
        self.live: dict[int, int] = {}  # address -> size of every allocation not yet freed
        self.used = 0
        self._next = base
        self._next_event = 0
        self._capturing: set = set()
        self._invalidated: dict = {}  # capturing stream -> why its capture can no longer end in a graph
        self._graphs = 0
        self.calls = {"malloc": 0, "free": 0, "malloc_failed": 0, "event_create": 0, "event_record": 0,
                      "event_query": 0, "event_synchronize": 0}

    # -- memory -------------------------------------------------------------------------------------------------
    def malloc(self, size: int, stream=0) -> int:
        self.calls["malloc"] += 1
        if size <= 0:
            raise ValueError(f"FakeDriver.malloc: size must be positive, got {size}")
        if self.used + self.other_process_bytes + size > self.capacity:
            self.calls["malloc_failed"] += 1
            raise DeviceOutOfMemory(f"FakeDriver: cannot allocate {size} bytes ({self.used} of {self.capacity} used)")
        ptr = self._next
        self._next += -(-size // self.alignment) * self.alignment
        self.live[ptr] = size
        self.used += size
        return ptr

    def free(self, ptr: int) -> None:
        self.calls["free"] += 1
        size = self.live.pop(ptr, None)
        if size is None:
            raise ValueError(f"FakeDriver.free: {ptr:#x} is not a live allocation")
        self.used -= size

    def mem_get_info(self) -> tuple[int, int]:
        return self.capacity - self.used - self.other_process_bytes, self.capacity

    # -- events -------------------------------------------------------------------------------------------------
    def event_create(self) -> FakeEvent:
        self.calls["event_create"] += 1
        self._next_event += 1
        return FakeEvent(self._next_event)

    def event_record(self, event: FakeEvent, stream=0) -> None:
        self.calls["event_record"] += 1
        if stream in self._capturing:
            # Legal in CUDA, but the event would become a node of the graph and never be "reached" eagerly:
            # the allocator must defer cross-stream frees instead, so the fake refuses loudly.
            self.invalidate_capture(stream, "event_record")
            raise RuntimeError(f"FakeDriver.event_record: stream {stream} is capturing; the allocator must not "
                               "record its events during a capture")
        event.stream, event.recorded, event.done = stream, True, False

    def event_query(self, event: FakeEvent) -> bool:
        self.calls["event_query"] += 1
        return event.done or not event.recorded

    def event_synchronize(self, event: FakeEvent) -> None:
        self.calls["event_synchronize"] += 1
        event.done = True

    def complete(self, event: FakeEvent) -> None:
        """Pretend the device has reached ``event``."""
        event.done = True

    # -- stream capture -----------------------------------------------------------------------------------------
    def begin_capture(self, stream) -> None:
        """Mark ``stream`` as capturing (what ``cudaStreamBeginCapture`` would do).

        As with CUDA, the legacy default stream ``0`` cannot capture and a stream cannot capture twice at once.
        """
        if stream == 0:
            raise RuntimeError("FakeDriver.begin_capture: cannot capture on the default (legacy) stream")
        if stream in self._capturing:
            raise RuntimeError(f"FakeDriver.begin_capture: stream {stream} is already capturing")
        self._capturing.add(stream)

    def end_capture(self, stream) -> "FakeGraph":
        """End the capture of ``stream`` and return its graph; an invalidated capture ends too, but raises.

        Like ``cudaStreamEndCapture``, the stream is no longer capturing afterwards whatever the outcome.
        """
        if stream not in self._capturing:
            raise RuntimeError(f"FakeDriver.end_capture: stream {stream} is not capturing")
        self._capturing.discard(stream)
        if self._invalidated.pop(stream, None) is not None:
            raise RuntimeError(f"FakeDriver.end_capture: the capture on stream {stream} was invalidated "
                               "(cudaErrorStreamCaptureInvalidated)")
        self._graphs += 1
        return FakeGraph(self._graphs, stream)

    def invalidate_capture(self, stream, reason="an operation not permitted when the stream is capturing") -> None:
        """Model an uncapturable call on a capturing ``stream``: the capture stays open but ``end_capture`` fails."""
        if stream in self._capturing:
            self._invalidated[stream] = reason

    def stream_is_capturing(self, stream) -> bool:
        return stream in self._capturing


class FakeGraph:
    """The graph :meth:`FakeDriver.end_capture` returns: counts its launches (nothing runs on a fake device).

    >>> d = FakeDriver(); d.begin_capture(7); g = d.end_capture(7); g.launch(0); g.launches
    1
    """

    __slots__ = ("id", "stream", "launches")

    def __init__(self, ident, stream):
        self.id, self.stream, self.launches = ident, stream, 0

    def launch(self, stream=0) -> None:
        self.launches += 1

    def __repr__(self):
        return f"FakeGraph({self.id}, captured on stream {self.stream}, launches={self.launches})"
