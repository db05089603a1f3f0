"""``torch.utils.benchmark``: timing a statement (``Timer``) with PyTorch's measurement objects and comparison table.

``Timer(stmt, setup, globals=...)`` compiles the statement once; ``timeit(n)`` times n runs as one measurement,
``blocked_autorange`` repeats blocks sized to ~0.1 ms or more until ``min_run_time`` passes, ``adaptive_autorange``
until the interquartile range is within ``threshold`` of the median. jitorch's thread count is set to
``num_threads`` while timing. CUDA work is synchronized before each block ends.

>>> import jitorch
>>> m = Timer("x + 1", globals={"x": jitorch.ones(3)}, label="add").timeit(10)
>>> m.number_per_run, len(m.times), m.median > 0
(10, 1, True)
"""
from __future__ import annotations

import textwrap
import time
import timeit as _timeit

from ._compare import Compare, Measurement

__all__ = ["Timer", "Measurement", "Compare", "TaskSpec"]


class TaskSpec:
    """What was timed: the statement, its setup and labels (``Measurement.task_spec``)."""

    def __init__(self, stmt, setup, global_setup="", label=None, sub_label=None, description=None, env=None,
                 num_threads=1):
        self.stmt, self.setup, self.global_setup = stmt, setup, global_setup
        self.label, self.sub_label, self.description, self.env = label, sub_label, description, env
        self.num_threads = num_threads

    @property
    def title(self):
        sub = f": {self.sub_label}" if self.sub_label else ""
        if self.label is not None:
            return self.label + sub
        if "\n" not in self.stmt:
            return self.stmt + sub
        return f"stmt:{f' ({self.sub_label})' if self.sub_label else ''}\n{textwrap.indent(self.stmt, '  ')}"

    def setup_str(self):
        if self.setup == "pass" or not self.setup:
            return ""
        return f"setup:\n{textwrap.indent(self.setup, '  ')}" if "\n" in self.setup else f"setup: {self.setup}"

    def summarize(self):
        """The title, description and setup lines of a measurement's repr, as torch's."""
        sections = [self.title, self.description or "", self.setup_str()]
        return "\n".join(f"{s}\n" if "\n" in s else s for s in sections if s)


def _synchronize():
    from ... import cuda

    if cuda.is_available():
        cuda.synchronize()


class Timer:
    """Time ``stmt`` (a string of Python, run with ``globals``) after ``setup``; see the module notes."""

    def __init__(self, stmt="pass", setup="pass", global_setup="", timer=time.perf_counter, globals=None, label=None,
                 sub_label=None, description=None, env=None, num_threads=1, language="python"):
        if str(getattr(language, "name", language)).lower() not in ("python", "language.python"):
            raise ValueError(f"Timer: only Python statements can be timed here, got language={language!r}")
        self._task_spec = TaskSpec(stmt, setup, global_setup, label, sub_label, description, env, num_threads)
        self._timer = _timeit.Timer(stmt=stmt, setup=setup, timer=timer, globals=dict(globals or {}))

    def _run(self, number):
        from ..._misc import get_num_threads, set_num_threads

        before = get_num_threads()
        set_num_threads(self._task_spec.num_threads)
        try:
            elapsed = self._timer.timeit(number)
            _synchronize()
        finally:
            set_num_threads(before)
        return elapsed

    def timeit(self, number=1000000):
        """One measurement of ``number`` runs (after one warm-up run)."""
        self._run(1)
        return Measurement(number, [self._run(number)], self._task_spec)

    def _block_size(self, min_block_s=1e-4):
        number = 1
        while self._run(number) < min_block_s:
            number *= 10
        return number

    def blocked_autorange(self, callback=None, min_run_time=0.2):
        """Blocks of a size that takes at least 0.1 ms, repeated until ``min_run_time`` seconds have passed."""
        number = self._block_size()
        times, total = [], 0.0
        while total < min_run_time or not times:
            t = self._run(number)
            if callback is not None:
                callback(number, t)
            times.append(t)
            total += t
        return Measurement(number, times, self._task_spec)

    def adaptive_autorange(self, threshold=0.1, *, min_run_time=0.01, max_run_time=10.0, callback=None):
        """Blocks until the interquartile range is within ``threshold`` of the median (or ``max_run_time`` passes)."""
        number = self._block_size()
        times, total = [], 0.0
        while True:
            t = self._run(number)
            if callback is not None:
                callback(number, t)
            times.append(t)
            total += t
            if total >= max_run_time:
                break
            if total >= min_run_time and len(times) >= 3:
                m = Measurement(number, times, self._task_spec)
                if m.iqr / m.median <= threshold:
                    break
        return Measurement(number, times, self._task_spec)

    def collect_callgrind(self, *args, **kwargs):
        raise NotImplementedError("Timer.collect_callgrind needs valgrind's Python bindings, which jitorch lacks")

