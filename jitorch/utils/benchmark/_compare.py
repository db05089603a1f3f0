"""`Measurement` (seconds per run of a timed block) and `Compare` (a table of measurements by label, row and
column, in PyTorch's layout).

>>> m = Measurement(10, [1e-5, 2e-5, 3e-5], None)
>>> round(m.median * 1e6, 3), round(m.mean * 1e6, 3)
(2.0, 2.0)
"""
from __future__ import annotations

import statistics

__all__ = ["Measurement", "Compare"]


def _unit(seconds):
    for scale, name in ((1.0, "s"), (1e-3, "ms"), (1e-6, "us"), (1e-9, "ns")):
        if seconds >= scale:
            return scale, name
    return 1e-9, "ns"


class Measurement:
    """``number_per_run`` runs per block, ``raw_times`` seconds per block; ``times`` per run."""

    def __init__(self, number_per_run, raw_times, task_spec, metadata=None):
        self.number_per_run, self.raw_times, self.task_spec = number_per_run, list(raw_times), task_spec
        self.metadata = metadata

    @property
    def times(self):
        return [t / self.number_per_run for t in self.raw_times]

    @property
    def median(self):
        return statistics.median(self.times)

    @property
    def mean(self):
        return statistics.fmean(self.times)

    @property
    def iqr(self):
        times = sorted(self.times)
        if len(times) < 2:
            return 0.0
        q = statistics.quantiles(times, n=4, method="inclusive")
        return q[2] - q[0]

    @property
    def has_warnings(self):
        return not self.meets_confidence(0.1)

    significant_figures = property(lambda self: 3 if not self.has_warnings else 2)
    title = property(lambda self: getattr(self.task_spec, "title", ""))
    label = property(lambda self: getattr(self.task_spec, "label", None))
    sub_label = property(lambda self: getattr(self.task_spec, "sub_label", None))
    description = property(lambda self: getattr(self.task_spec, "description", None))
    env = property(lambda self: getattr(self.task_spec, "env", None))
    num_threads = property(lambda self: getattr(self.task_spec, "num_threads", 1))
    as_row_name = property(lambda self: self.sub_label or getattr(self.task_spec, "stmt", "") or "[Unknown]")

    def meets_confidence(self, threshold=0.1):
        return self.iqr / self.median < threshold if self.median else False

    @staticmethod
    def merge(measurements):
        """Measurements of one task merged into one (their blocks together)."""
        out = {}
        for m in measurements:
            key = (getattr(m.task_spec, "stmt", None), m.label, m.sub_label, m.description, m.num_threads)
            if key in out:
                out[key].raw_times += [t * out[key].number_per_run / m.number_per_run for t in m.raw_times]
            else:
                out[key] = Measurement(m.number_per_run, m.raw_times, m.task_spec, m.metadata)
        return list(out.values())

    def __repr__(self):
        # torch's layout: title/description/setup, the median, the IQR from 4 blocks on, the counts, a warning
        # when the IQR is 10% of the median or more
        scale, unit = _unit(self.median)
        n = len(self.times)
        lines = [f"<jitorch.utils.benchmark.Measurement object at {hex(id(self))}>"]
        if self.task_spec is not None:
            lines.append(self.task_spec.summarize())
        lines.append(f"  {'Median: ' if n > 1 else ''}{self.median / scale:.2f} {unit}")
        if n >= 4:
            p25, _, p75 = statistics.quantiles(self.times, n=4, method="inclusive")
            lines.append(f"  IQR:    {self.iqr / scale:.2f} {unit} ({p25 / scale:.2f} to {p75 / scale:.2f})")
        lines.append(f"  {n} measurement{'s' if n > 1 else ''}, {self.number_per_run} runs "
                     f"{'per measurement,' if n > 1 else ','} {self.num_threads} thread"
                     f"{'s' if self.num_threads > 1 else ''}")
        if self.has_warnings:
            why = ("This suggests significant environmental influence." if not self.meets_confidence(0.25)
                   else "This could indicate system fluctuation.")
            lines.append(f"  WARNING: Interquartile range is {self.iqr / self.median * 100:.1f}% of the median "
                         f"measurement.\n           {why}")
        return "\n".join(lines)


class Compare:
    """Measurements as tables: one per label, rows by sub_label (or statement), columns by description."""

    def __init__(self, results):
        self._results = list(results)

    def extend_results(self, results):
        self._results.extend(results)

    # PyTorch's display options; this table prints plain text at full precision, so they change nothing.
    def trim_significant_figures(self):
        pass

    def colorize(self, rowwise=False):
        pass

    def highlight_warnings(self):
        pass

    def __str__(self):
        out = []
        by_label = {}
        for m in Measurement.merge(self._results):
            by_label.setdefault(m.label or "", []).append(m)
        for label, group in by_label.items():
            scale, unit = _unit(min(m.median for m in group))
            columns = list(dict.fromkeys(m.description or "" for m in group))
            rows = list(dict.fromkeys((m.num_threads, m.as_row_name) for m in group))
            cells = {(m.num_threads, m.as_row_name, m.description or ""): m for m in group}
            width = max(len(r[1]) for r in rows) + 2
            col_w = max([len(c) for c in columns] + [8])
            out.append(f"[{'-' * 2} {label} {'-' * 2}]")
            out.append(" " * width + " | " + " | ".join(c.rjust(col_w) for c in columns))
            threads = None
            for n, row in rows:
                if n != threads:
                    threads = n
                    out.append(f"{n} threads: " + "-" * (width + (col_w + 3) * len(columns) - 10))
                vals = [cells.get((n, row, c)) for c in columns]
                out.append(row.rjust(width) + " | " + " | ".join(
                    (f"{v.median / scale:.1f}" if v is not None else "").rjust(col_w) for v in vals))
            names = dict(s="seconds", ms="milliseconds", us="microseconds", ns="nanoseconds")
            out.append(f"\nTimes are in {names[unit]} ({unit}).\n")
        return "\n".join(out)

    def print(self):
        print(str(self))
