"""``jitorch.nn.parallel``: ``DataParallel``, ``DistributedDataParallel`` and ``data_parallel`` on one device.

jitorch runs on a single device per process, so these wrappers call the wrapped module unchanged. They keep torch's
shape of things, so checkpoints match: the model is at ``.module`` and state-dict keys start with ``"module."``.

>>> import jitorch
>>> from jitorch import nn
>>> net = nn.parallel.DataParallel(nn.Linear(2, 3))
>>> net(jitorch.ones(4, 2)).shape
jitorch.Size([4, 3])
>>> sorted(net.state_dict())
['module.bias', 'module.weight']
"""
from __future__ import annotations

import contextlib

from ..modules import Module

__all__ = ["DataParallel", "DistributedDataParallel", "data_parallel"]


class DataParallel(Module):
    """``DataParallel(module, device_ids=None, output_device=None, dim=0)``: runs ``module`` on its one device."""

    def __init__(self, module, device_ids=None, output_device=None, dim=0):
        super().__init__()
        self.module = module
        self.device_ids = list(device_ids) if device_ids is not None else []
        self.output_device = output_device
        self.dim = dim

    def forward(self, *inputs, **kwargs):
        return self.module(*inputs, **kwargs)


class DistributedDataParallel(Module):
    """``DistributedDataParallel(module, device_ids=None, ...)``: one process, so no gradient all-reduce is needed.

    ``no_sync()`` is accepted (gradient accumulation code uses it) and changes nothing.
    """

    def __init__(self, module, device_ids=None, output_device=None, dim=0, broadcast_buffers=True,
                 process_group=None, bucket_cap_mb=None, find_unused_parameters=False, check_reduction=False,
                 gradient_as_bucket_view=False, static_graph=False, **kwargs):
        super().__init__()
        self.module = module
        self.device_ids = list(device_ids) if device_ids is not None else None
        self.output_device = output_device
        self.dim = dim
        self.broadcast_buffers = broadcast_buffers
        self.find_unused_parameters = find_unused_parameters

    def forward(self, *inputs, **kwargs):
        return self.module(*inputs, **kwargs)

    @contextlib.contextmanager
    def no_sync(self):
        yield

    def join(self, *args, **kwargs):
        return contextlib.nullcontext()


def data_parallel(module, inputs, device_ids=None, output_device=None, dim=0, module_kwargs=None):
    """Functional ``DataParallel``: ``module(*inputs, **module_kwargs)`` on the one device."""
    if not isinstance(inputs, tuple):
        inputs = (inputs,) if inputs is not None else ()
    return module(*inputs, **(module_kwargs or {}))
