"""CUDA graphs with PyTorch's API: ``CUDAGraph``, ``graph``, ``graph_pool_handle`` (``make_graphed_callables`` is in
``_graphed_callables``), over CuPy's stream capture and the caching allocator's private pools.

Inside ``with jitorch.cuda.graph(g):`` the block's CUDA work is *recorded*, not run, on a side stream
(``cudaStreamBeginCapture`` in relaxed mode: the allocator may need ``cudaMalloc`` for a new segment). ``g.replay()``
launches the recorded kernels on the current stream. As with PyTorch:

- tensors made before the capture and read inside it are inputs by address: ``static_x.copy_(new)`` feeds replay
  (keep them alive while the graph lives);
- tensors made inside the capture live in the graph's private memory pool and are overwritten by every replay (clone
  to keep a result); their values are undefined until the first replay;
- Python code in the region (prints, appends, counters) runs once, at capture;
- random ops draw new numbers on every replay, advancing the generator (see ``_graph_hooks``);
- host reads (``item``, ``tolist``, ``numpy``, printing), host/device copies and synchronisation raise a clear error
  and end the capture, so the stream is usable again.

**Memory.** Allocations on the capturing stream come from a private pool of jitorch's caching allocator
(``runtime/_allocator_capture.py``): eager allocations never get that memory while the graph lives. Passing
``pool=other_graph.pool()`` or a ``graph_pool_handle()`` shares one pool between graphs, which is safe when they replay
in the order they were captured and never run concurrently. ``reset()`` gives the graph's use of the pool back.

>>> import jitorch                                      # doctest: +SKIP
>>> x = jitorch.zeros(4, device="cuda")                  # doctest: +SKIP
>>> g = jitorch.cuda.CUDAGraph()                         # doctest: +SKIP
>>> with jitorch.cuda.graph(g):                          # doctest: +SKIP
...     y = (x + 1).relu() * 2
>>> _ = x.copy_(jitorch.arange(4.0, device="cuda")); g.replay(); y      # doctest: +SKIP
tensor([2., 4., 6., 8.], device='cuda:0')
"""
from __future__ import annotations

import gc

from ._graph_hooks import CaptureGuards
from ._lazy import cupy, has_cuda

__all__ = ["CUDAGraph", "graph", "graph_pool_handle", "is_current_stream_capturing"]

_ERROR_MODES = ("global", "thread_local", "relaxed")


def _hook():
    from ..runtime.cuda_memory import installed_hook

    hook = installed_hook()
    if hook is None:
        raise RuntimeError("CUDA graphs need jitorch's caching allocator for their private memory pools, and CuPy "
                           "allocates through its own pool here (JITORCH_ALLOC_CONF has backend:cupy); unset it")
    return hook


def graph_pool_handle():
    """An opaque id of a memory pool that several graphs may share: pass it as ``pool=`` to each capture.

    >>> h = jitorch.cuda.graph_pool_handle()                # doctest: +SKIP
    >>> with jitorch.cuda.graph(g1, pool=h): ...            # doctest: +SKIP
    >>> with jitorch.cuda.graph(g2, pool=h): ...            # doctest: +SKIP
    """
    if not has_cuda():
        raise RuntimeError("Tried to instantiate dummy base class _graph_pool_handle")
    return _hook().allocator().create_pool_id()


def is_current_stream_capturing() -> bool:
    """Whether the current CUDA stream is capturing a graph (raises without CUDA, as CPU-only torch does)."""
    if not has_cuda():
        raise RuntimeError("Tried to instantiate dummy base class _cuda_isCurrentStreamCapturing")
    return bool(cupy().cuda.get_current_stream().is_capturing())


class _CupyCapture:
    """CuPy's stream capture behind the ``begin_capture``/``end_capture`` interface of ``PoolCapture``."""

    def __init__(self, stream):
        self.stream = stream

    def begin_capture(self, handle):
        self.stream.begin_capture(mode=cupy().cuda.runtime.streamCaptureModeRelaxed)

    def end_capture(self, handle):
        return self.stream.end_capture()


class CUDAGraph:
    """A captured sequence of CUDA work that ``replay`` launches again on the same memory.

    ``capture_begin`` captures the *current* stream, which must not be the legacy default stream (``graph`` switches to
    a side stream for you). ``capture_error_mode`` is accepted for PyTorch compatibility; jitorch always captures in
    relaxed mode and refuses unsafe operations itself.

    >>> g = jitorch.cuda.CUDAGraph(); s = jitorch.cuda.Stream()   # doctest: +SKIP
    >>> with jitorch.cuda.stream(s):                               # doctest: +SKIP
    ...     g.capture_begin(); y = x * 2; g.capture_end()
    >>> g.replay()                                                 # doctest: +SKIP
    """

    def __new__(cls, keep_graph=False):
        if not has_cuda():
            raise RuntimeError("Tried to instantiate dummy base class CUDAGraph")
        return super().__new__(cls)

    def __init__(self, keep_graph=False):
        self._capture = None  # runtime PoolCapture: the private pool and the device capture
        self._device = None
        self._guards = None
        self._exec = None  # the instantiated cupy.cuda.Graph
        self._draws = ()
        self._debug = False

    # -- capture ------------------------------------------------------------------------------------------------
    def capture_begin(self, pool=None, capture_error_mode="global"):
        """Start capturing the current stream into this graph; ``pool``: share another graph's memory pool."""
        if capture_error_mode not in _ERROR_MODES:
            raise RuntimeError(f"Unknown capture error mode. Expected `global`, `thread_local`, or `relaxed`, got "
                               f"{capture_error_mode}")
        cp = cupy()
        stream = cp.cuda.get_current_stream()
        if int(stream.ptr) in (0, 1):
            raise RuntimeError("CUDA graphs must be captured on a non-default stream. (However, after capture, it's "
                               "ok to replay them on the default stream.)")
        hook = _hook()
        device = int(cp.cuda.runtime.getDevice())
        if self._capture is not None and (self._capture.capturing or self._exec is not None):
            raise RuntimeError("CUDAGraph.capture_begin: this graph already holds a capture; call reset() first")
        if self._capture is None or self._device != device:
            if self._capture is not None:
                self._capture.reset()
            self._capture, self._device = hook.pool_capture(_CupyCapture(stream), device), device
        self._capture.capturer = _CupyCapture(stream)
        self._capture.begin(int(stream.ptr), pool)
        self._guards = CaptureGuards(self._abort)
        self._guards.install()

    def capture_end(self):
        """End the capture; the graph is instantiated and ready to ``replay``."""
        capture = self._capture
        if capture is None or not capture.capturing:
            raise RuntimeError("CUDAGraph.capture_end: the graph is not capturing (capture_begin first, or the "
                               "capture already ended on an error)")
        guards = self._guards
        if guards.pending_draw is not None:
            guards.unsupported(guards.pending_draw[1])
        guards.uninstall()
        try:
            self._exec = capture.end()
        except Exception as err:  # CuPy's CUDARuntimeError (cudaErrorStreamCaptureInvalidated) and the like
            raise RuntimeError(f"CUDAGraph.capture_end: CUDA invalidated the capture ({err}): an operation in the "
                               "captured region cannot be captured (a synchronising call or a host copy made "
                               "outside jitorch's checks). The capture has ended; the stream is usable.") from err
        self._draws = tuple(guards.draws)

    def _abort(self):
        """End a capture under way and keep nothing (the guards call this before raising)."""
        if self._guards is not None:
            self._guards.uninstall()
        if self._capture is not None:
            self._capture.abort()
        self._exec, self._draws = None, ()

    # -- use ----------------------------------------------------------------------------------------------------
    def replay(self):
        """Launch the captured work on the current stream (after refreshing the random draws, if any)."""
        if self._exec is None:
            raise RuntimeError("CUDAGraph.replay: called without a preceding successful capture (capture_begin and "
                               "capture_end, or `with jitorch.cuda.graph(g):`)")
        stream = cupy().cuda.get_current_stream()
        for draw in self._draws:
            draw(stream)
        self._exec.launch(stream)

    def reset(self):
        """Drop the captured graph and this graph's use of its memory pool (tensors still held stay valid)."""
        self._abort()

    def pool(self):
        """The id of the memory pool this graph captured into; pass it as ``pool=`` to share it."""
        if self._capture is None or self._capture.pool_id is None:
            raise RuntimeError("CUDAGraph.pool: called before capture_begin")
        return self._capture.pool_id

    def enable_debug_mode(self):
        """Accepted for PyTorch compatibility: ``debug_dump`` always works in jitorch."""
        self._debug = True

    def debug_dump(self, debug_path=None):
        """The captured graph as DOT text (``cudaGraphDebugDotPrint``), after a header naming the pool and the
        random draws replayed before each launch; written to ``debug_path`` when given."""
        if self._exec is None:
            raise RuntimeError("CUDAGraph.debug_dump: nothing captured")
        try:
            dot = self._exec.debug_dot_str()
        except Exception as err:  # noqa: BLE001 - an older CuPy or a driver without DOT support
            dot = f"// DOT of the graph unavailable: {type(err).__name__}: {err}\n"
        if isinstance(dot, bytes):
            dot = dot.decode()
        header = [f"// jitorch CUDAGraph: pool {self.pool()}, device {self._device}, "
                  f"{len(self._draws)} random draw(s) replayed before each launch"]
        header += [f"//   {draw!r}" for draw in self._draws]
        text = "\n".join(header) + "\n" + dot
        if debug_path is not None:
            with open(debug_path, "w") as f:
                f.write(text)
        return text

    def __del__(self):
        try:
            self._abort()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass


class graph:  # noqa: N801 - PyTorch's name for the context manager
    """``with jitorch.cuda.graph(g, pool=None, stream=None):`` captures the block into ``g`` on a side stream.

    Entering synchronises the device and collects garbage (so no earlier work or pending free lands in the capture);
    an exception inside the block ends the capture and propagates; the previous stream is current again afterwards.

    >>> g = jitorch.cuda.CUDAGraph()                       # doctest: +SKIP
    >>> with jitorch.cuda.graph(g):                        # doctest: +SKIP
    ...     out = static_in @ w
    """

    default_capture_stream = None  # shared by graphs so that graphs sharing a pool also share its free lists

    def __init__(self, cuda_graph, pool=None, stream=None, capture_error_mode="global"):
        from .streams import Stream

        if stream is None and self.__class__.default_capture_stream is None:
            self.__class__.default_capture_stream = Stream()
        self.pool = () if pool is None else (pool,)
        self.capture_stream = stream if stream is not None else self.__class__.default_capture_stream
        self.cuda_graph = cuda_graph
        self.capture_error_mode = capture_error_mode
        self._previous = None

    def __enter__(self):
        cp = cupy()
        cp.cuda.Device().synchronize()
        gc.collect()
        self._previous = cp.cuda.get_current_stream()
        self.capture_stream._cp.use()
        try:
            self.cuda_graph.capture_begin(*self.pool, capture_error_mode=self.capture_error_mode)
        except BaseException:
            self._previous.use()
            raise
        return self

    def __exit__(self, exc_type, exc, tb):
        try:
            if exc_type is not None:
                self.cuda_graph._abort()
                if isinstance(exc, cupy().cuda.runtime.CUDARuntimeError) and hasattr(exc, "add_note"):
                    exc.add_note("jitorch.cuda.graph: CUDA refused this operation while capturing; the capture was "
                                 "ended and the stream is usable again.")
            else:
                self.cuda_graph.capture_end()
        finally:
            self._previous.use()
        return False
