"""Profiler events and their tables: `FunctionEvent` (one op call or ``record_function`` range), `FunctionEventAvg`
(all calls of one name) and `EventList` (``key_averages()``, ``table()``, ``export_chrome_trace()``).

Times are microseconds of wall clock on the calling thread; an event's self time is its total less its children's.

>>> ev = FunctionEvent("aten::add", 0, start_us=0.0, end_us=5.0)
>>> EventList([ev]).key_averages()[0].count, ev.self_cpu_time_total
(1, 5.0)
"""
from __future__ import annotations

import json

__all__ = ["FunctionEvent", "FunctionEventAvg", "EventList"]


def _fmt_time(us):
    if us >= 1e6:
        return f"{us / 1e6:.3f}s"
    if us >= 1e3:
        return f"{us / 1e3:.3f}ms"
    return f"{us:.3f}us"


class FunctionEvent:
    """One recorded call: ``name``, start and end (us), its children, input shapes when recorded."""

    def __init__(self, name, id, start_us, end_us=None, input_shapes=None, is_user_annotation=False, thread=0):
        self.name, self.key, self.id = name, name, id
        self.start_us, self.end_us = start_us, end_us
        self.input_shapes = input_shapes or []
        self.is_user_annotation = is_user_annotation
        self.thread = thread
        self.cpu_children, self.cpu_parent = [], None
        self.count = 1
        self.device_type, self.use_device, self.device_time_total, self.self_device_time_total = "CPU", None, 0.0, 0.0
        self.cpu_memory_usage = self.self_cpu_memory_usage = self.device_memory_usage = 0
        self.self_device_memory_usage = 0
        self.flops, self.stack, self.scope, self.node_id = 0, [], 0, -1
        self.is_async = self.is_remote = self.is_legacy = False
        self.overload_name = ""

    @property
    def cpu_time_total(self):
        return (self.end_us or self.start_us) - self.start_us

    @property
    def self_cpu_time_total(self):
        return self.cpu_time_total - sum(c.cpu_time_total for c in self.cpu_children)

    @property
    def cpu_time(self):
        return self.cpu_time_total

    cuda_time = device_time = property(lambda self: 0.0)
    cpu_time_str = property(lambda self: _fmt_time(self.cpu_time))
    cpu_time_total_str = property(lambda self: _fmt_time(self.cpu_time_total))
    self_cpu_time_total_str = property(lambda self: _fmt_time(self.self_cpu_time_total))

    def __repr__(self):
        return (f"<FunctionEvent id={self.id} name={self.name} cpu_time={self.cpu_time_str} "
                f"self_cpu_time={self.self_cpu_time_total_str} input_shapes={self.input_shapes}>")


class FunctionEventAvg:
    """The calls of one name (and input shapes, when grouped by them), summed."""

    def __init__(self, key, input_shapes=None):
        self.key = self.name = key
        self.input_shapes = input_shapes or []
        self.count = 0
        self.cpu_time_total = self.self_cpu_time_total = 0.0
        self.is_user_annotation = False
        self.device_type, self.device_time_total, self.self_device_time_total = "CPU", 0.0, 0.0
        self.cpu_memory_usage = self.self_cpu_memory_usage = 0
        self.flops, self.node_id, self.is_legacy, self.is_remote, self.is_async = 0, -1, False, False, False
        self.cpu_children, self.cpu_parent, self.stack, self.scope, self.overload_name = [], None, [], 0, ""

    def add(self, other):
        self.count += other.count
        self.cpu_time_total += other.cpu_time_total
        self.self_cpu_time_total += other.self_cpu_time_total
        self.is_user_annotation = self.is_user_annotation or other.is_user_annotation
        return self

    @property
    def cpu_time(self):
        return self.cpu_time_total / max(self.count, 1)

    cuda_time = device_time = property(lambda self: 0.0)
    cpu_time_str = property(lambda self: _fmt_time(self.cpu_time))
    cpu_time_total_str = property(lambda self: _fmt_time(self.cpu_time_total))
    self_cpu_time_total_str = property(lambda self: _fmt_time(self.self_cpu_time_total))

    def __repr__(self):
        return (f"<FunctionEventAvg key={self.key} self_cpu_time={self.self_cpu_time_total_str} "
                f"cpu_time={self.cpu_time_str} input_shapes={self.input_shapes}>")


_SORT_KEYS = {"cpu_time", "cpu_time_total", "self_cpu_time_total", "count", "cuda_time", "cuda_time_total",
              "self_cuda_time_total", "device_time", "device_time_total", "self_device_time_total",
              "cpu_memory_usage", "self_cpu_memory_usage", None}


class EventList(list):
    """A list of events with PyTorch's summaries."""

    def key_averages(self, group_by_input_shape=False, group_by_stack_n=0, group_by_overload_name=False):
        """One `FunctionEventAvg` per name (and per input shapes with ``group_by_input_shape``, per innermost
        ``group_by_stack_n`` stack entries), in first-seen order."""
        groups = {}
        for ev in self:
            key = (ev.key, str(ev.input_shapes) if group_by_input_shape else None,
                   tuple(ev.stack[:group_by_stack_n]) if group_by_stack_n > 0 else None)
            if key not in groups:
                groups[key] = FunctionEventAvg(ev.key, ev.input_shapes if group_by_input_shape else None)
                if group_by_stack_n > 0:
                    groups[key].stack = list(ev.stack[:group_by_stack_n])
            groups[key].add(ev)
        return EventList(groups.values())

    def supported_export_stacks_metrics(self):
        return ["self_cpu_time_total", "self_cuda_time_total", "self_xpu_time_total", "self_privateuse1_time_total"]

    def export_stacks(self, path, metric):
        """Each event's stack, outermost frame first and ``;``-joined, with its ``metric`` in whole microseconds (the
        collapsed format flame graph tools read); events without a stack or a positive value are left out."""
        if metric not in self.supported_export_stacks_metrics():
            raise ValueError("metric should be one of: " + str(self.supported_export_stacks_metrics()))
        attr = metric.replace("cuda", "device").replace("xpu", "device").replace("privateuse1", "device")
        translate = str.maketrans(" ;\t\n", "____")
        with open(path, "w") as f:
            for ev in self:
                value = int(getattr(ev, attr, 0))
                if ev.stack and value > 0:
                    f.write(";".join(e.translate(translate) for e in reversed(ev.stack)) + f" {value}\n")

    def total_average(self):
        total = FunctionEventAvg("Total")
        for ev in self:
            total.add(ev)
        return total

    @property
    def self_cpu_time_total(self):
        return sum(ev.self_cpu_time_total for ev in self)

    def table(self, sort_by=None, row_limit=100, max_src_column_width=75, max_name_column_width=55,
              max_shapes_column_width=80, header=None, top_level_events_only=False, time_unit=None):
        """PyTorch's profiler table: name, self CPU and CPU total (as % of the self total), average, calls."""
        if sort_by not in _SORT_KEYS:
            raise AttributeError(f"sort_by must be one of {sorted(k for k in _SORT_KEYS if k)}, got {sort_by!r}")
        events = list(self)
        if top_level_events_only:
            events = [ev for ev in events if getattr(ev, "cpu_parent", None) is None]
        if sort_by is not None:
            events.sort(key=lambda ev: getattr(ev, sort_by, 0.0), reverse=True)
        events = events[:row_limit] if row_limit is not None and row_limit >= 0 else events
        total = self.self_cpu_time_total or 1.0
        shapes = any(ev.input_shapes for ev in events)
        name_width = min(max(len("Name"), *(len(ev.key) for ev in events)) if events else 4, max_name_column_width)
        cols = ["Self CPU %", "Self CPU", "CPU total %", "CPU total", "CPU time avg", "# of Calls"]
        if shapes:
            cols.append("Input Shapes")
        widths = [name_width + 2] + [12] * 6 + ([min(max_shapes_column_width, 40)] if shapes else [])
        line = "  ".join("-" * w for w in widths)
        heads = ["Name"] + cols
        out = [header] if header else []
        out += [line, "  ".join(h.rjust(w) for h, w in zip(heads, widths)), line]
        for ev in events:
            row = [ev.key[:name_width], f"{100 * ev.self_cpu_time_total / total:.2f}%",
                   _fmt_time(ev.self_cpu_time_total), f"{100 * ev.cpu_time_total / total:.2f}%",
                   _fmt_time(ev.cpu_time_total), _fmt_time(ev.cpu_time), str(ev.count)]
            if shapes:
                row.append(str(ev.input_shapes)[:widths[-1]])
            out.append("  ".join(v.rjust(w) for v, w in zip(row, widths)))
        out += [line, f"Self CPU time total: {_fmt_time(self.self_cpu_time_total)}", ""]
        return "\n".join(out)

    def __str__(self):
        return self.table()

    def export_chrome_trace(self, path):
        """Write the events as a Chrome trace (``chrome://tracing``, Perfetto): complete events in microseconds."""
        trace = {"traceEvents": [
            {"name": ev.name, "ph": "X", "ts": ev.start_us, "dur": ev.cpu_time_total, "pid": 0, "tid": ev.thread,
             "cat": "user_annotation" if ev.is_user_annotation else "cpu_op",
             "args": {"Input Dims": ev.input_shapes} if ev.input_shapes else {}}
            for ev in self if isinstance(ev, FunctionEvent)]}
        with open(path, "w") as f:
            json.dump(trace, f)
