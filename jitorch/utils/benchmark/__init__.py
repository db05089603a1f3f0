"""``torch.utils.benchmark``: timing a statement (``Timer``) with PyTorch's measurement objects and comparison table.

``Timer(stmt, setup, globals=...)`` compiles the statement once; ``timeit(n)`` times n runs as one measurement,
``blocked_autorange`` repeats blocks (sized as torch sizes them: the clock's cost under 1e-4 of a block) until
``min_run_time`` passes, ``adaptive_autorange`` until the interquartile range is within ``threshold`` of the median:
torch's algorithms, so the same clock readings give the same measurements. jitorch's thread count is set to
``num_threads`` while timing. The default clock (``timer``) waits for queued CUDA work before reading the time.

>>> import jitorch
>>> m = Timer("x + 1", globals={"x": jitorch.ones(3)}, label="add").timeit(10)
>>> m.number_per_run, len(m.times), m.median > 0
(10, 1, True)
"""
from __future__ import annotations

import contextlib
import statistics
import textwrap
import time
import timeit as _timeit

from ... import cuda as _cuda
from ._compare import Compare, Measurement

__all__ = ["Timer", "Measurement", "Compare", "TaskSpec", "timer"]


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


def timer() -> float:
    """The default clock: ``time.perf_counter`` after the queued CUDA work is done (as torch's, which synchronizes
    the accelerator), so a block's time includes the kernels it launched."""
    if _cuda.is_available():
        _cuda.synchronize()
    return time.perf_counter()


class Timer:
    """Time ``stmt`` (a string of Python, run with ``globals``) after ``setup``; see the module notes. ``timer`` is the
    clock (a callable returning seconds), read at the start and end of each block, as in ``timeit``."""

    def __init__(self, stmt="pass", setup="pass", global_setup="", timer=timer, globals=None, label=None,
                 sub_label=None, description=None, env=None, num_threads=1, language="python"):
        if str(getattr(language, "name", language)).lower() not in ("python", "language.python"):
            raise ValueError(f"Timer: only Python statements can be timed here, got language={language!r}")
        self._task_spec = TaskSpec(stmt, setup, global_setup, label, sub_label, description, env, num_threads)
        self._timer = _timeit.Timer(stmt=stmt, setup=setup, timer=timer, globals=dict(globals or {}))

    @contextlib.contextmanager
    def _threads(self):
        from ..._misc import get_num_threads, set_num_threads

        before = get_num_threads()
        set_num_threads(self._task_spec.num_threads)
        try:
            yield
        finally:
            set_num_threads(before)

    def _timeit(self, number):
        # as torch: no real block takes under a nanosecond (and a zero would divide the overhead estimate)
        return max(self._timer.timeit(number), 1e-9)

    def timeit(self, number=1000000):
        """One measurement of ``number`` runs, after a warm-up block of ``max(number // 100, 2)`` runs."""
        with self._threads():
            self._timeit(max(int(number // 100), 2))
            return Measurement(number, [self._timeit(number)], self._task_spec)

    def _estimate_block_size(self, min_run_time):
        """torch's block size: powers of ten until the clock's own cost (the median of five empty blocks) is at most
        1e-4 of a block and a block takes min_run_time / 1000, or a block alone exceeds min_run_time."""
        with self._threads():
            overhead = statistics.median([self._timeit(0) for _ in range(5)])
            number = 1
            while True:
                time_taken = self._timeit(number)
                if overhead / time_taken <= 1e-4 and time_taken >= min_run_time / 1000:
                    break
                if time_taken > min_run_time or number * 10 > 2147483647:
                    break
                number *= 10
        return number

    def _measurement_loop(self, number, stop, min_run_time, max_run_time=None, callback=None):
        """Blocks of ``number`` runs until ``min_run_time`` has passed and ``stop(times)`` agrees, or the total passes
        ``max_run_time``."""
        total, can_stop, times = 0.0, False, []
        with self._threads():
            while total < min_run_time or not can_stop:
                t = self._timeit(number)
                times.append(t)
                total += t
                if callback:
                    callback(number, t)
                can_stop = stop(times)
                if max_run_time and total > max_run_time:
                    break
        return times

    def blocked_autorange(self, callback=None, min_run_time=0.2):
        """Blocks of torch's estimated size, repeated until ``min_run_time`` seconds have passed."""
        number = self._estimate_block_size(min_run_time)
        times = self._measurement_loop(number, lambda times: True, min_run_time, callback=callback)
        return Measurement(number, times, self._task_spec)

    def adaptive_autorange(self, threshold=0.1, *, min_run_time=0.01, max_run_time=10.0, callback=None):
        """Blocks until, past ``min_run_time`` and with more than three blocks, the interquartile range is under
        ``threshold`` of the median, or the total passes ``max_run_time``."""
        number = self._estimate_block_size(min_run_time=0.05)

        def stop(times):
            return len(times) > 3 and Measurement(number, times, self._task_spec).meets_confidence(threshold)

        times = self._measurement_loop(number, stop, min_run_time, max_run_time, callback=callback)
        return Measurement(number, times, self._task_spec)

    def collect_callgrind(self, *args, **kwargs):
        raise NotImplementedError("Timer.collect_callgrind needs valgrind's Python bindings, which jitorch lacks")

