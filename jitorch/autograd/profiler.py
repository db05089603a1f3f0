"""``torch.autograd.profiler``: the older spelling of the profiler (``profile(enabled=...)``, ``record_function``,
``emit_nvtx``), over `jitorch.profiler`'s recorder.

>>> import jitorch
>>> with profile() as prof:
...     _ = jitorch.ones(3) + 1
>>> prof.key_averages()[0].key
'aten::add'
"""
from __future__ import annotations

import contextlib

from .. import profiler as _profiler
from ..profiler import EventList, FunctionEvent, FunctionEventAvg, record_function

__all__ = ["profile", "record_function", "emit_nvtx", "emit_itt", "EventList", "FunctionEvent", "FunctionEventAvg"]


class profile:  # noqa: N801 - torch's name
    """``with profile(enabled=True, record_shapes=False, ...) as prof:``; ``prof.key_averages().table(...)``."""

    def __init__(self, enabled=True, *, use_cuda=False, use_device=None, record_shapes=False, with_flops=False,
                 profile_memory=False, with_stack=False, with_modules=False, use_kineto=False, use_cpu=True,
                 experimental_config=None, acc_events=False, custom_trace_id_callback=None):
        self.enabled = enabled
        self._inner = _profiler.profile(record_shapes=record_shapes)

    def __enter__(self):
        if self.enabled:
            self._inner.start()
        return self

    def __exit__(self, *exc):
        if self.enabled:
            self._inner.stop()
        return False

    @property
    def function_events(self):
        return self._inner.events()

    def events(self):
        return self._inner.events()

    def key_averages(self, group_by_input_shape=False, group_by_stack_n=0, group_by_overload_name=False):
        return self._inner.key_averages(group_by_input_shape, group_by_stack_n)

    def table(self, sort_by=None, row_limit=100, **kwargs):
        return self.key_averages().table(sort_by=sort_by, row_limit=row_limit, **kwargs)

    def total_average(self):
        return self.function_events.total_average()

    @property
    def self_cpu_time_total(self):
        return self.function_events.self_cpu_time_total

    def export_chrome_trace(self, path):
        self._inner.export_chrome_trace(path)

    def __str__(self):
        return self.table()


@contextlib.contextmanager
def emit_nvtx(enabled=True, record_shapes=False):
    """NVTX ranges for nvprof/Nsight: no NVTX here, so the block runs unannotated."""
    yield


@contextlib.contextmanager
def emit_itt(enabled=True, record_shapes=False):
    """Intel ITT ranges: unavailable here, so the block runs unannotated."""
    yield
