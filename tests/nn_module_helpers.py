"""Helpers of the ``nn.Module`` tests: the same small modules defined for jitorch and for torch, and comparisons."""
from __future__ import annotations

import types

import numpy as np
import pytest
import torch

import jitorch


def define(lib):
    """Module classes written once against ``lib`` (torch or jitorch), as user code would be."""
    nn = lib.nn

    class Linear(nn.Module):
        def __init__(self, fin, fout, bias=True):
            super().__init__()
            self.in_features, self.out_features = fin, fout
            self.weight = nn.Parameter(lib.empty(fout, fin))
            if bias:
                self.bias = nn.Parameter(lib.empty(fout))
            else:
                self.register_parameter("bias", None)

        def forward(self, x):
            y = (x.unsqueeze(-1) * self.weight.t()).sum(-2)
            return y + self.bias if self.bias is not None else y

        def extra_repr(self):
            return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.body = nn.Sequential(Linear(4, 8), Linear(8, 8))
            self.head = Linear(8, 3)
            self.register_buffer("steps", lib.zeros(()))
            self.register_buffer("cache", lib.zeros(2), persistent=False)
            self.blocks = nn.ModuleList([Linear(3, 3, bias=False) for _ in range(2)])
            self.extra = nn.ParameterList([nn.Parameter(lib.zeros(2))])
            self.table = nn.ModuleDict({"a": Linear(3, 2)})

        def forward(self, x):
            y = self.head(self.body(x))
            for block in self.blocks:
                y = block(y)
            return self.table["a"](y + self.extra[0].sum()) + self.steps

    return types.SimpleNamespace(Linear=Linear, Net=Net)


T, J = define(torch), define(jitorch)
# Module-level names let pickle find the jitorch classes by reference.
JLinear, JNet = J.Linear, J.Net
JLinear.__qualname__, JNet.__qualname__ = "JLinear", "JNet"


def pair(build, rng):
    """(torch module, jitorch module) built by ``build(classes, lib)`` with identical random state."""
    th, jt = build(T, torch), build(J, jitorch)
    arrays = {k: rng.standard_normal(tuple(v.shape)).astype(np.float32) for k, v in th.state_dict().items()}
    th.load_state_dict({k: torch.from_numpy(v.copy()) for k, v in arrays.items()})
    jt.load_state_dict({k: jitorch.from_numpy(v.copy()) for k, v in arrays.items()})
    return th, jt


def net_pair(rng):
    return pair(lambda c, lib: c.Net(), rng)


def same_error(jt_fn, th_fn):
    """Both raise the same exception type; returns (jitorch message, torch message) with library names unified."""
    with pytest.raises(Exception) as th_info:
        th_fn()
    with pytest.raises(type(th_info.value)) as jt_info:
        jt_fn()
    return str(jt_info.value).replace("jitorch.", "torch."), str(th_info.value)


def assert_close(jt, th, atol=1e-5):
    np.testing.assert_allclose(np.asarray(jt.detach()._host(), dtype=np.float64), th.detach().double().numpy(),
                               atol=atol, rtol=1e-5)
