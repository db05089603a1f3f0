"""CPU graphs: PyTorch's CUDA graph API (``CPUGraph``, ``graph``, ``make_graphed_callables``) for CPU tensors.

Inside ``with jitorch.cpu.graph(g):`` ops run eagerly, so the region computes real values, and are recorded against
static buffers. ``g.replay()`` then reruns the recorded kernels in order on those buffers, with no dispatch, autograd
or tensor creation. As with CUDA graphs:

- tensors made before the capture and read inside it are inputs by reference: ``static_x.copy_(new)`` feeds replay;
- tensors made inside the capture are outputs, overwritten in place by every replay (clone to keep a result);
- Python code in the region (prints, appends, counters) runs once, at capture;
- random ops draw new numbers on every replay, advancing the generator;
- Python numbers an optimizer step read (``lr``, ``momentum``...) are baked in: ``replay()`` checks them and raises
  `CaptureInvalidated` when one changed (a scheduler's new lr), instead of silently using the captured value;
- host reads (``item``, ``tolist``, ``numpy``, ``bool``, printing) raise and end the capture.

Replay is native: at the first ``replay()`` the recorded steps are lowered to machine code by the LLVM backend
(`_native`): consecutive elementwise ops fuse into one loop, reductions become loops, matrix products become
generated vector loops or BLAS calls, intermediates no one holds live in one planned arena, and the whole step runs
as ONE call into native code (random draws run first, from Python, so each replay still draws new numbers). A step
the backend cannot lower replays as its recorded Python closure between native segments, never with a different
answer; ``g.native`` says whether the replay is a single native call and ``g.native_report()`` lists what fell back.

>>> import jitorch
>>> x = jitorch.zeros(3)
>>> g = jitorch.cpu.CPUGraph()
>>> with jitorch.cpu.graph(g):
...     y = (x + 1).relu() * 2
>>> _ = x.copy_(jitorch.tensor([1.0, -5.0, 2.0])); g.replay(); y
tensor([4., 0., 6.])
"""
from __future__ import annotations

import itertools
import os

from .. import _dispatch
from ._grad_binds import grad_binds, grad_mismatch, prepare, rebind
from ._hooks import install, uninstall
from ._recorder import CaptureMode

__all__ = ["CPUGraph", "graph", "graph_pool_handle", "CaptureInvalidated"]

_POOL_IDS = itertools.count(1)
# ``JITORCH_CPU_GRAPH_NATIVE=0`` replays every graph step by step from Python (the reference path).
NATIVE = os.environ.get("JITORCH_CPU_GRAPH_NATIVE", "1") != "0"


class CaptureInvalidated(RuntimeError):
    """A Python value the capture baked in (an optimizer hyperparameter) changed since: the replay would be wrong."""


def graph_pool_handle():
    """An opaque pool id that several graphs may share (``jitorch.cuda.graph_pool_handle`` on the CPU).

    CPU graphs keep each captured buffer alive by reference for the graph's lifetime, so eager code never reuses
    them; the handle groups graphs for the buffer planning still to come.

    >>> graph_pool_handle() != graph_pool_handle()
    True
    """
    return ("cpu_graph_pool", next(_POOL_IDS))


class CPUGraph:
    """A captured sequence of CPU ops that ``replay`` reruns on the same buffers.

    >>> import jitorch
    >>> g = CPUGraph(); a = jitorch.ones(2)
    >>> g.capture_begin(); b = a * 2; g.capture_end()
    >>> _ = a.fill_(4.0); g.replay(); b
    tensor([8., 8.])
    """

    def __init__(self):
        self._steps: tuple = ()
        self._records: list = []
        self._visible: set = set()
        self._native = None  # the NativeReplay, built at the first replay
        self._native_error = None
        self._mode = None
        self._saved = None
        self._pool = None
        self._captured = False
        self._guards: list = []
        self._inputs: list = []  # (weakref, array, description) of tensors made outside that the steps read
        self._grads: list = []  # which tensor each parameter's .grad is (`_grad_binds`)

    # -- capture ----------------------------------------------------------------------------------------------
    def capture_begin(self, pool=None):
        if self._mode is not None:
            raise RuntimeError("CPUGraph.capture_begin: this graph is already capturing")
        if self._captured:
            raise RuntimeError("CPUGraph.capture_begin: this graph already holds a capture; call reset() first")
        self._pool = pool if pool is not None else graph_pool_handle()
        mode = CaptureMode(self._abort)
        self._saved = install(mode, self._abort)
        self._mode = mode
        _dispatch.push_mode(mode)

    def capture_end(self):
        mode = self._mode
        if mode is None:
            raise RuntimeError("CPUGraph.capture_end: the graph is not capturing (capture_begin first, or the "
                               "capture already ended on an error)")
        if mode.pending_draw is not None:
            mode.fail(f"CPU graph capture: the random sampler drawing with '{mode.pending_draw[1]}' is not "
                      "supported yet (rand, randn, randint, randperm, normal and the in-place samplers are)")
        self._stop()
        self._records = mode.prologue + mode.records
        self._steps = tuple(r.fn for r in self._records)
        # Tensors still alive now may be read by the user after a replay; every other intermediate is internal.
        self._visible = {id(root) for ref, root in mode.handles if ref() is not None}
        self._guards = list(mode.value_guards)
        self._inputs = list(mode.inputs.values())
        self._grads = grad_binds(self._inputs, mode.cleared, mode.written)
        self._native, self._native_error = None, None
        self._captured = True

    def _stop(self):
        """Pop the mode and remove the patches (idempotent: the abort path and ``__exit__`` may both call it)."""
        mode, self._mode = self._mode, None
        if mode is None:
            return
        if mode in _dispatch.MODES:
            _dispatch.MODES.remove(mode)
        uninstall(self._saved)
        self._saved = None

    def _abort(self):
        self._stop()
        self._forget()

    def _forget(self):
        self._steps, self._records, self._visible, self._captured = (), [], set(), False
        self._native, self._native_error, self._guards, self._inputs, self._grads = None, None, [], [], []

    # -- use ----------------------------------------------------------------------------------------------------
    def replay(self):
        """Rerun the captured ops on the static buffers; outputs from the capture now hold this replay's values."""
        if not self._captured:
            raise RuntimeError("CPUGraph.replay: nothing captured (capture_begin/capture_end, or jitorch.cpu.graph)")
        changed = self.changed_value()
        if changed is not None:
            raise CaptureInvalidated(f"CPUGraph.replay: {changed}; the captured steps would not follow it. Capture "
                                     "again (g.reset(), then capture), or keep it as it was at capture while "
                                     "replaying")
        self.replay_checked()

    def replay_checked(self):
        """`replay` for a caller that has just checked `changed_value` itself (a compiled step checks it with its
        own guards): each check touches every guarded object, which after a large replay are out of cache."""
        prepare(self._grads)
        native = self._build()
        if native is not None:
            native()
        else:
            for step in self._steps:
                step()
        rebind(self._grads)

    def changed_value(self, grads=True):
        """Which baked-in Python value differs from its value at capture (a sentence), or None if none does;
        ``grads=False``: without the gradient bindings (a caller checking them its own way, `grad_mismatch`).

        >>> import jitorch
        >>> w = jitorch.nn.Parameter(jitorch.ones(2)); opt = jitorch.optim.SGD([w], lr=0.5)
        >>> w.grad = jitorch.ones(2); g = CPUGraph()
        >>> with graph(g):
        ...     opt.step()
        >>> opt.param_groups[0]["lr"] = 0.1
        >>> g.changed_value()
        "SGD.param_groups[0]['lr'] is 0.1 but was 0.5 at capture"
        """
        for what, read, value in self._guards:
            now = read()
            if now != value and not (now != now and value != value):  # nan == nan here: an unchanged nan
                return f"{what} is {now!r} but was {value!r} at capture"
        dead = 0
        for ref, array, what in self._inputs:
            t = ref()
            if t is None:
                dead += 1
            elif t._data is not array:
                return (f"the input tensor {what} holds other memory than at capture (resize_, or an assignment to "
                        f"its .data; fill it with copy_ instead)")
        if dead:  # a tensor gone cannot be given other memory: not checked again (an RNN's per-step views)
            self._inputs = [entry for entry in self._inputs if entry[0]() is not None]
        return grad_mismatch(self._grads) if grads else None

    def _build(self):
        """The native replay, lowered and compiled once (None when disabled or when lowering failed)."""
        if self._native is None and self._native_error is None and self._captured:
            if not NATIVE:
                self._native_error = "disabled by JITORCH_CPU_GRAPH_NATIVE=0"
                return None
            from ._native import NativeReplay

            try:
                self._native = NativeReplay(self._records, self._visible)
            except Exception as e:  # noqa: BLE001 - any lowering bug must cost speed, never a wrong answer
                self._native_error = f"{type(e).__name__}: {e}"
        return self._native

    @property
    def native(self):
        """Whether ``replay()`` is ONE native call (plus random draws); lowers the graph if not done yet.

        >>> import jitorch
        >>> g = CPUGraph(); x = jitorch.ones(3)
        >>> with graph(g):
        ...     y = x.exp() * 2
        >>> g.native
        True
        """
        if not self._captured:
            return False
        native = self._build()
        return native is not None and native.native

    def native_report(self):
        """How the replay runs: ``{"native", "calls", "segments", "fallbacks": [(step, reason)], "error"}``.

        ``calls`` counts native calls (a fused group is one), ``segments`` the alternating native and Python parts.
        """
        native = self._build() if self._captured else None
        if native is None:
            return {"native": False, "calls": 0, "segments": len(self._steps), "fallbacks": [],
                    "error": self._native_error}
        return {"native": native.native, "calls": len(native.program_calls), "segments": len(native.segments),
                "fallbacks": list(native.fallbacks), "draws": len(native.draws), "error": None}

    def reset(self):
        """Drop the capture and release its buffers (tensors the user still holds keep their last values)."""
        if self._mode is not None:
            self._abort()
        self._forget()

    def pool(self):
        """The pool handle this graph captured into (pass it to another graph's capture to share)."""
        return self._pool

    def debug_dump(self, debug_path=None):
        """The recorded steps as text, one per line; written to ``debug_path`` when given."""
        text = "\n".join(f"{i:4d}: {r.description}" for i, r in enumerate(self._records)) + "\n"
        if debug_path is not None:
            with open(debug_path, "w") as f:
                f.write(text)
        return text

    def __len__(self):
        return len(self._steps)


class graph:  # noqa: N801 - PyTorch's name for the context manager
    """``with jitorch.cpu.graph(g):`` captures the block into ``g``; an error inside ends the capture cleanly.

    >>> import jitorch
    >>> g = CPUGraph(); w = jitorch.full((2,), 3.0)
    >>> with graph(g):
    ...     out = w * w
    >>> len(g)
    1
    """

    def __init__(self, cpu_graph, pool=None, stream=None):
        self.cpu_graph, self.pool = cpu_graph, pool

    def __enter__(self):
        self.cpu_graph.capture_begin(pool=self.pool)
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is not None:
            self.cpu_graph._abort()
            return False
        self.cpu_graph.capture_end()
        return False
