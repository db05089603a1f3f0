"""``torch.profiler``: where the time of a block goes, op by op (``aten::<op>`` events from the dispatcher) and by
``record_function`` ranges, with PyTorch's API: ``profile`` (a context manager with ``schedule``, ``step()``,
``on_trace_ready``), ``key_averages().table()``, ``export_chrome_trace``, ``tensorboard_trace_handler``.

The profiler sits on the dispatcher's mode stack while it records, so it sees every eager op, forward and backward.
A compiled function called inside runs as one ``jitorch.compile`` event (its fused kernels are not split out).

>>> import jitorch
>>> from jitorch.profiler import profile, record_function
>>> with profile() as prof:
...     with record_function("step"):
...         y = (jitorch.ones(4, 4) @ jitorch.ones(4, 4)).relu()
>>> [e.key for e in prof.key_averages()][:3]
['step', 'aten::matmul', 'aten::relu']
"""
from __future__ import annotations

import enum
import functools
import gzip
import os
import socket
import sys
import threading
import time
import warnings

from .._dispatch import push_mode, run_below
from ._events import EventList, FunctionEvent, FunctionEventAvg

__all__ = ["profile", "record_function", "ProfilerActivity", "ProfilerAction", "schedule", "tensorboard_trace_handler",
           "EventList", "FunctionEvent", "FunctionEventAvg", "supported_activities", "itt"]


class ProfilerActivity(enum.Enum):
    CPU = 0
    XPU = 1
    MTIA = 2
    CUDA = 3
    HPU = 4
    PrivateUse1 = 5


class ProfilerAction(enum.Enum):
    NONE = 0
    WARMUP = 1
    RECORD = 2
    RECORD_AND_SAVE = 3


def supported_activities():
    return {ProfilerActivity.CPU}


def schedule(*, wait, warmup, active, repeat=0, skip_first=0, skip_first_wait=0):
    """The action for each step: skip ``skip_first`` steps, then cycles of ``wait``, ``warmup`` and ``active`` steps
    (the last active step of a cycle saves the trace), ``repeat`` cycles (0: forever)."""
    if wait < 0 or warmup < 0 or active <= 0 or repeat < 0 or skip_first < 0:
        raise AssertionError("Invalid profiler schedule arguments")
    if warmup == 0:
        warnings.warn("Profiler won't be using warmup, this can skew profiler results", stacklevel=2)

    def action(step):
        if step < skip_first:
            return ProfilerAction.NONE
        step -= skip_first
        cycle = wait + warmup + active
        if repeat > 0 and step // cycle >= repeat:
            return ProfilerAction.NONE
        pos = step % cycle
        if pos < wait:
            return ProfilerAction.NONE
        if pos < wait + warmup:
            return ProfilerAction.WARMUP
        return ProfilerAction.RECORD_AND_SAVE if pos == cycle - 1 else ProfilerAction.RECORD
    return action


_ACTIVE: list = []  # recorders now collecting, innermost last


def _now_us():
    return time.perf_counter_ns() / 1e3


class _Recorder:
    """Collects events of the recording thread: a stack of open events gives each its parent (for self times)."""

    def __init__(self, record_shapes, with_stack=False):
        self.record_shapes = record_shapes
        self.with_stack = with_stack
        self.events = []
        self.stack = []
        self.thread = threading.get_ident()

    def open(self, name, shapes=None, user=False):
        ev = FunctionEvent(name, len(self.events), _now_us(), input_shapes=shapes, is_user_annotation=user,
                           thread=self.thread % 100000)
        if self.with_stack:
            ev.stack = _python_stack()
        if self.stack:
            ev.cpu_parent = self.stack[-1]
            self.stack[-1].cpu_children.append(ev)
        self.stack.append(ev)
        self.events.append(ev)
        return ev

    def close(self, ev):
        ev.end_us = _now_us()
        while self.stack and self.stack.pop() is not ev:
            pass


_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _python_stack():
    """The caller's Python frames outside jitorch, innermost first, as torch writes them: ``file(line): function``."""
    out = []
    frame = sys._getframe(2)
    while frame is not None:
        code = frame.f_code
        if not code.co_filename.startswith(_PACKAGE_DIR):
            out.append(f"{code.co_filename}({frame.f_lineno}): {code.co_name}")
        frame = frame.f_back
    return out


def _shapes(args):
    from .._tensor import Tensor

    return [list(a.shape) if isinstance(a, Tensor) else [] for a in args]


class _ProfilerMode:
    """The dispatcher mode that times each op (it steps out of the stack while the op runs, as autocast does)."""

    transparent = True  # compiled functions keep running compiled under it

    def __init__(self, recorder):
        self.recorder = recorder

    def _run(self, name, args, call):
        rec = self.recorder
        if threading.get_ident() != rec.thread:
            return call()
        ev = rec.open(name, _shapes(args) if rec.record_shapes else None)
        try:
            return run_below(self, call)
        finally:
            rec.close(ev)

    def dispatch(self, op, args, attrs):
        from .._dispatch import apply

        return self._run(f"aten::{op.name}", args, lambda: apply(op, *args, **attrs))

    def dispatch_inplace(self, op, self_tensor, args, attrs):
        from .._dispatch import apply_inplace

        return self._run(f"aten::{op.name}_", (self_tensor, *args), lambda: apply_inplace(op, self_tensor, *args,
                                                                                          **attrs))


class record_function:  # noqa: N801 - torch's name
    """A named range in the profile (a context manager, or a decorator when given a function's name)."""

    def __init__(self, name, args=None):
        self.name, self.args = name, args
        self._event = None

    def __enter__(self):
        if _ACTIVE and threading.get_ident() == _ACTIVE[-1].recorder.thread:
            self._recorder = _ACTIVE[-1].recorder
            self._event = self._recorder.open(self.name, user=True)
        return self

    def __exit__(self, *exc):
        if self._event is not None:
            self._recorder.close(self._event)
            self._event = None
        return False

    def __call__(self, fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with record_function(self.name, self.args):
                return fn(*args, **kwargs)
        return wrapper


class profile:  # noqa: N801 - torch's name
    """Record the ops and ranges run inside the block (or between ``start()`` and ``stop()``), per ``schedule``."""

    def __init__(self, *, activities=None, schedule=None, on_trace_ready=None, record_shapes=False,
                 profile_memory=False, with_stack=False, with_flops=False, with_modules=False,
                 experimental_config=None, execution_trace_observer=None, acc_events=False, use_cuda=None,
                 custom_trace_id_callback=None):
        self.activities = set(activities) if activities else supported_activities()
        self.schedule = schedule
        self.on_trace_ready = on_trace_ready
        self.record_shapes = record_shapes
        self.with_stack = with_stack
        self.step_num = 0
        self.recorder = None
        self._mode = None
        self._events = EventList()
        self._action = schedule(0) if schedule else ProfilerAction.RECORD

    # -- recording ----------------------------------------------------------------------------------------------------
    def _begin(self):
        if self._mode is not None:
            return
        self.recorder = _Recorder(self.record_shapes, self.with_stack)
        self._mode = _ProfilerMode(self.recorder)
        push_mode(self._mode)
        _ACTIVE.append(self)

    def _end(self, keep):
        if self._mode is None:
            return
        from .._dispatch import MODES

        MODES.remove(self._mode)
        _ACTIVE.remove(self)
        self._mode = None
        if keep:
            self._events = EventList(self.recorder.events)

    def _apply(self, action):
        recording = action in (ProfilerAction.RECORD, ProfilerAction.RECORD_AND_SAVE)
        if recording:
            self._begin()
        elif self._mode is not None:
            self._end(keep=False)

    def start(self):
        self._apply(self._action)
        return self

    def stop(self):
        if self._mode is not None:
            self._end(keep=True)
            if self.on_trace_ready is not None:
                self.on_trace_ready(self)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()
        return False

    def step(self):
        """Advance the schedule by one step; at the end of an active cycle the trace is handed to ``on_trace_ready``."""
        previous = self._action
        self.step_num += 1
        self._action = self.schedule(self.step_num) if self.schedule else ProfilerAction.RECORD
        if previous == ProfilerAction.RECORD_AND_SAVE and self._mode is not None:
            self._end(keep=True)
            if self.on_trace_ready is not None:
                self.on_trace_ready(self)
        self._apply(self._action)

    # -- results ------------------------------------------------------------------------------------------------------
    def events(self):
        return self._events

    def key_averages(self, group_by_input_shape=False, group_by_stack_n=0, group_by_overload_name=False):
        return self._events.key_averages(group_by_input_shape, group_by_stack_n)

    def export_chrome_trace(self, path):
        self._events.export_chrome_trace(path)

    def export_stacks(self, path, metric="self_cpu_time_total"):
        """The recorded stacks in flame graph tools' collapsed format (see `EventList.export_stacks`)."""
        if not self.with_stack:
            raise AssertionError("export_stacks() requires with_stack=True")
        self._events.export_stacks(path, metric)

    def table(self, **kwargs):
        return self.key_averages().table(**kwargs)


def tensorboard_trace_handler(dir_name, worker_name=None, use_gzip=False):
    """An ``on_trace_ready`` that writes each trace as ``<worker>.<ms>.pt.trace.json[.gz]`` into ``dir_name``."""
    def handler(prof):
        os.makedirs(dir_name, exist_ok=True)
        worker = worker_name or f"{socket.gethostname()}_{os.getpid()}"
        path = os.path.join(dir_name, f"{worker}.{int(time.time() * 1000)}.pt.trace.json")
        prof.export_chrome_trace(path)
        if use_gzip:
            with open(path, "rb") as src, gzip.open(path + ".gz", "wb") as dst:
                dst.write(src.read())
            os.remove(path)
    return handler


class _Itt:
    """``torch.profiler.itt``: Intel ITT ranges, unavailable here (the calls do nothing)."""

    @staticmethod
    def is_available():
        return False

    @staticmethod
    def range_push(msg):
        return 0

    @staticmethod
    def range_pop():
        return 0

    @staticmethod
    def mark(msg):
        return None


itt = _Itt()
