"""Patches installed while a CUDA graph captures, removed however the capture ends.

**Uncapturable operations.** A captured region is recorded, not run: a value read on the host during capture would
read memory the graph has not written yet, and bake that one value into Python control flow. CUDA itself refuses
synchronising calls on a capturing stream, but only by invalidating the capture with an opaque error. So while
capturing, jitorch refuses them first, with an error that names the operation, and ends the capture
(``cudaStreamEndCapture``) so the stream stays usable:

- host reads of a CUDA tensor: ``item``, ``tolist``, ``numpy``, ``bool``/``int``/``float``/``index``, printing;
- copies between host and device: ``.cpu()``, ``.to('cpu')``, ``.cuda()`` of a CPU tensor, ``copy_`` from a CPU
  tensor, ``jitorch.tensor(..., device='cuda')``;
- synchronisation: ``jitorch.cuda.synchronize``, ``Stream``/``Event`` ``synchronize`` and ``query``.

CPU tensors are untouched: CPU work inside the region simply runs once, at capture, as in PyTorch.

**Random numbers.** Inside a capture, a sampler whose draw lands in a CUDA tensor (``rand``, ``randn``, ``randint``,
``randperm``, ``normal``, ``*_like``, and the in-place ``uniform_``, ``normal_``, ``random_``, ``exponential_``,
``log_normal_``, ``geometric_``, ``bernoulli_`` with a number ``p``, hence dropout) gets a static device buffer,
and the capture notes a *draw step*: ``(generator, method, arguments, buffer)``. The graph reads that buffer; before
each launch, ``CUDAGraph.replay`` runs the draw steps eagerly on the replay stream: a fresh draw from the same
generator (looked up again, so ``manual_seed`` between replays is honoured) written into the buffer. So the generator
advances on every replay exactly as the eager code would, and replays after ``manual_seed(s)`` give the numbers the
eager code gives after ``manual_seed(s)``. No random kernel is baked into the graph: the capture-time draw itself runs
on a separate, non-capturing stream (CUDA generators draw on the device with Philox states in device memory; a
captured draw kernel would advance those states behind the generator's back at every replay, and a first draw's
lazy state initialisation would be replayed too). PyTorch instead bakes its Philox kernel in and bumps a device-side
offset per replay; the observable behaviour (new numbers per replay, the generator advanced) is the same.
Draws whose parameters are arrays (``bernoulli(input)``, ``multinomial``, ``poisson``) or whose result is
transformed before it reaches the tensor (``cauchy_`` on the CPU generator) raise ``NotImplementedError``: a replayed
draw could read parameters the graph has not computed yet. The capture is ended.

The predicates are injectable (``is_device``, ``device_empty``) so the CPU test suite checks this logic without a
GPU by treating CPU arrays as device arrays.
"""
from __future__ import annotations

import contextlib
import sys

import numpy as np

from .. import _creation, _random
from .._tensor import Tensor
from ..ops import movement as _movement_ops
from . import streams as _streams

__all__ = ["CaptureGuards", "DrawStep", "HOST_READS"]

# Tensor method -> how the error names it.
HOST_READS = {"item": "item()", "tolist": "tolist()", "numpy": "numpy()", "__bool__": "bool()", "__int__": "int()",
              "__float__": "float()", "__complex__": "complex()", "__index__": "an index conversion (__index__)",
              "__array__": "numpy.asarray()", "__repr__": "print/repr", "__str__": "print/str",
              "__format__": "format()", "_host": "a host read"}
_SAMPLERS = ("rand, randn, randint, randperm, normal, uniform_, normal_, random_, exponential_, log_normal_, "
             "geometric_, bernoulli_ with a number p (dropout)")


def _is_cuda_array(array):
    return type(array) is not np.ndarray and hasattr(array, "device")


def _cuda_empty(shape, dtype, device):
    import cupy

    with cupy.cuda.Device(device.index or 0):
        return cupy.empty(shape, dtype)


_draw_streams: dict = {}


@contextlib.contextmanager
def _outside_capture(generator):
    """Run a device generator's capture-time draw on a non-capturing stream (see the module notes); host draws as is.

    The stream is a blocking one, so later work on the legacy default stream is ordered after the draw; it is
    synchronised anyway (legal in relaxed capture mode) so that a replay on any stream sees the updated states.
    """
    if not getattr(generator, "_on_device", False):
        yield
        return
    import cupy

    device = int(cupy.cuda.runtime.getDevice())
    stream = _draw_streams.get(device)
    if stream is None:
        stream = _draw_streams[device] = cupy.cuda.Stream(non_blocking=False)
    with stream:
        yield
    stream.synchronize()


def _is_array(value):
    return (not isinstance(value, (type, np.generic, np.dtype)) and hasattr(value, "shape")
            and hasattr(value, "dtype"))


class DrawStep:
    """One random draw replayed before each launch: draw on the host, copy into the graph's static buffer."""

    __slots__ = ("generator", "method", "args", "kwargs", "dtype", "buffer")

    def __init__(self, generator, method, args, kwargs, dtype, buffer):
        self.generator, self.method, self.args, self.kwargs = generator, method, args, kwargs
        self.dtype, self.buffer = np.dtype(dtype), buffer

    def __call__(self, stream=None):
        values = getattr(self.generator._rng, self.method)(*self.args, **self.kwargs)
        if _is_array(values) and type(values) is not np.ndarray:
            self.buffer[...] = values  # a device draw (on the current stream): a device copy, cast on the way
            return
        values = np.ascontiguousarray(np.asarray(values).astype(self.dtype, copy=False))
        if type(self.buffer) is np.ndarray:  # the CPU test suite's stand-in for device memory
            np.copyto(self.buffer, values)
        else:
            self.buffer.set(values, stream=stream)

    def __repr__(self):
        return f"draw {self.method}{list(self.buffer.shape)} {self.dtype} from generator {id(self.generator):#x}"


class _DrawProxy:
    """Stands in for a generator's NumPy ``Generator``: draws for real and notes what was drawn."""

    def __init__(self, guards, generator):
        self._guards, self._generator = guards, generator

    def __getattr__(self, method):
        guards, generator = self._guards, self._generator

        def draw(*args, **kwargs):
            if any(_is_array(a) for a in args + tuple(kwargs.values())):
                guards.unsupported(method, "its parameters are arrays, which a replayed draw would read before the "
                                           "graph computes them")
            with guards.draw_context(generator):
                values = getattr(generator._rng, method)(*args, **kwargs)
            guards.pending_draw = (generator, method, args, kwargs, values)
            return values
        return draw


class CaptureGuards:
    """The patches of one capture. ``abort()`` must end the capture; ``draws`` collects the replayable draws.

    >>> import jitorch
    >>> ended = []
    >>> guards = CaptureGuards(lambda: ended.append(True), is_device=lambda a: True)  # CPU arrays act as CUDA ones
    >>> guards.install()
    >>> try:
    ...     jitorch.ones(2).sum().item()
    ... except RuntimeError as e:
    ...     print(str(e)[:60], ended)
    CUDA graph capture: item() is not permitted while capturing: [True]
    >>> guards.installed
    False
    """

    def __init__(self, abort, *, is_device=_is_cuda_array, on_device=lambda dev: dev.type == "cuda",
                 device_empty=_cuda_empty, draw_context=_outside_capture):
        self._abort = abort
        self.is_device = is_device  # array -> bool: does it live on the capturing device
        self.on_device = on_device  # jitorch.device -> bool: is a tensor made there captured
        self.device_empty = device_empty
        self.draw_context = draw_context  # generator -> context in which its capture-time draw runs
        self.draws: list = []
        self.pending_draw = None
        self._saved = None

    @property
    def installed(self):
        return self._saved is not None

    # -- failing ------------------------------------------------------------------------------------------------
    def _end(self):
        """Undo the patches and end the capture (the owner's abort); safe to call more than once."""
        self.uninstall()
        self._abort()

    def refuse(self, what, why):
        self._end()
        raise RuntimeError(f"CUDA graph capture: {what} is not permitted while capturing: {why}. The capture was "
                           "ended and the stream is usable again; move this out of the captured region (before "
                           "capture_begin or after capture_end / the `with jitorch.cuda.graph(g):` block).")

    def unsupported(self, method, why="the draw is transformed before it reaches the tensor"):
        self._end()
        raise NotImplementedError(f"CUDA graph capture: the random sampler drawing with '{method}' cannot be replayed "
                                  f"({why}); supported inside a capture: {_SAMPLERS}. The capture was ended.")

    def _take_draw(self, values):
        """The pending draw if ``values`` is exactly its array; a pending draw used any other way is refused."""
        pending, self.pending_draw = self.pending_draw, None
        if pending is None:
            return None
        if pending[4] is not values:
            self.unsupported(pending[1])
        return pending

    # -- patches ------------------------------------------------------------------------------------------------
    def install(self):
        if self._saved is not None:
            raise RuntimeError("CaptureGuards.install: already installed")
        saved = {"tensor": {name: Tensor.__dict__[name] for name in HOST_READS if name in Tensor.__dict__},
                 "random": {name: getattr(_random, name) for name in ("_rng", "_sample", "_fill_from", "_finish")
                            if hasattr(_random, name)},
                 "move": (_movement_ops.move_array, _creation.move_array),
                 "sync": {"Stream.synchronize": _streams.Stream.synchronize, "Stream.query": _streams.Stream.query,
                          "Event.synchronize": _streams.Event.synchronize, "Event.query": _streams.Event.query}}
        from .. import cuda as _cuda

        saved["cuda.synchronize"] = _cuda.synchronize
        self._saved = saved
        for name, original in saved["tensor"].items():
            setattr(Tensor, name, self._guard_read(name, original))
        move = saved["move"][0]
        _movement_ops.move_array = _creation.move_array = self._guard_move(move)
        for key, original in saved["sync"].items():
            cls, name = key.split(".")
            setattr(getattr(_streams, cls), name, self._guard_sync(f"{key}()"))
        _cuda.synchronize = self._guard_sync("jitorch.cuda.synchronize()")
        self._patch_random(saved["random"])

    def uninstall(self):
        saved, self._saved = self._saved, None
        if saved is None:
            return
        for name, original in saved["tensor"].items():
            setattr(Tensor, name, original)
        _movement_ops.move_array, _creation.move_array = saved["move"]
        for key, original in saved["sync"].items():
            cls, name = key.split(".")
            setattr(getattr(_streams, cls), name, original)
        from .. import cuda as _cuda

        _cuda.synchronize = saved["cuda.synchronize"]
        for name, original in saved["random"].items():
            setattr(_random, name, original)
        self.pending_draw = None

    def _guard_read(self, name, original):
        guards, shown = self, HOST_READS[name]

        def guarded(self, *args, **kwargs):
            if guards.is_device(self._data):
                what = shown
                if name == "_host":  # an internal read: name the function that asked for it
                    what = f"a host read of a CUDA tensor (in {sys._getframe(1).f_code.co_name})"
                guards.refuse(what, "it reads the tensor's value on the host, which needs the device to have run "
                                    "the captured work (replay does not recompute Python-side values)")
            return original(self, *args, **kwargs)
        guarded.__name__ = getattr(original, "__name__", name)
        guarded.__doc__ = getattr(original, "__doc__", None)
        return guarded

    def _guard_move(self, original):
        guards = self

        def move_array(arr, device_type, index=None):
            on_device = guards.is_device(arr)
            if device_type == "cpu" and on_device:
                guards.refuse("a device-to-host copy (.cpu(), .to('cpu'))", "a host copy synchronises with the "
                              "device, which a capture cannot do")
            if device_type != "cpu" and not on_device:
                guards.refuse("a host-to-device copy (.cuda(), .to('cuda'), copy_ from a CPU tensor, "
                              "tensor(..., device='cuda'))", "the host data would be baked into the graph; copy "
                              "new values into a static CUDA tensor before replay instead")
            return original(arr, device_type, index)
        return move_array

    def _guard_sync(self, what):
        guards = self

        def refuse_sync(*args, **kwargs):
            guards.refuse(what, "synchronisation waits for work that capture only records")
        return refuse_sync

    def _patch_random(self, original):
        guards = self

        def rng(generator):
            return _DrawProxy(guards, generator or _random.default_generator)

        def sample(values, dt, device, requires_grad):
            from .._device import device as _device, get_default_device

            dev = get_default_device() if device is None else _device(device)
            pending = guards._take_draw(values)
            if not guards.on_device(dev):
                return original["_sample"](values, dt, device, requires_grad)
            if pending is None:
                guards.refuse("creating a CUDA tensor from host values", "the host data would be baked in")
            buffer = guards.device_empty(np.shape(values), dt.np, dev)
            guards.draws.append(DrawStep(*pending[:4], dt.np, buffer))
            t = Tensor._make(buffer)
            if requires_grad:
                t.requires_grad_(True)
            return t

        def fill_from(self, values):
            pending = guards._take_draw(values)
            if not guards.is_device(self._data):
                return original["_fill_from"](self, values)
            if pending is None:
                guards.refuse("filling a CUDA tensor from host values", "the host data would be baked in")
            from ..autograd.grad_mode import no_grad

            dtype = values.dtype if hasattr(values, "dtype") else np.asarray(values).dtype
            buffer = guards.device_empty(np.shape(values), dtype, self.device)
            guards.draws.append(DrawStep(*pending[:4], buffer.dtype, buffer))
            with no_grad():
                self.copy_(Tensor._make(buffer))
            return self

        def finish(data, *args, **kwargs):
            if guards.pending_draw is not None:  # a draw reaching a tensor any other way cannot be replayed
                guards.unsupported(guards.pending_draw[1])
            return original["_finish"](data, *args, **kwargs)

        patches = {"_rng": rng, "_sample": sample, "_fill_from": fill_from, "_finish": finish}
        for name in original:
            setattr(_random, name, patches[name])
