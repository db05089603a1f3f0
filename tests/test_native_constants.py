"""Eager generated kernels whose expressions read scalar parameters (`native_eager.pointwise_constants`): the
constants are run-time arguments of one compiled template, so a value that changes every call (a scheduled clip
range, a slope) gives torch's answer each time; literal constants LLVM folds (0, 1, -0.0) get their own template;
an integer parameter converts to float32 as ATen's cast does."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import jitorch
from jitorch.ops import native_eager

_X = np.random.default_rng(0).standard_normal(5000).astype(np.float32) * 3


@pytest.mark.parametrize("name", ["clamp", "leaky_relu", "hardtanh", "threshold", "nan_to_num"])
def test_changing_constants_match_torch_on_every_call(name):
    x = _X.copy()
    x[:3] = (np.nan, np.inf, -0.0)
    calls = {
        "clamp": lambda lib, t, i: t.clamp(-0.5 - i * 1e-3, 0.5 + i * 1e-3),
        "leaky_relu": lambda lib, t, i: lib.nn.functional.leaky_relu(t, 0.01 + i * 1e-3),
        "hardtanh": lambda lib, t, i: lib.nn.functional.hardtanh(t, -1.0 - i * 0.1, 1.0 + i * 0.1),
        "threshold": lambda lib, t, i: lib.nn.functional.threshold(t, 0.1 * i, -3.0 * i),
        "nan_to_num": lambda lib, t, i: t.nan_to_num(0.25 * i, 10.0 + i, -10.0 - i),
    }[name]
    jt, tt = jitorch.tensor(x), torch.tensor(x)
    for i in range(12):  # includes values LLVM folds (i = 0: 0.0, 1.0...) and plain run-time ones
        np.testing.assert_array_equal(calls(jitorch, jt, i).numpy(), calls(torch, tt, i).numpy())
    compiled = [k for k in native_eager._constant_templates.values() if k is not None]
    assert compiled, "the template path was not taken"


def test_a_full_constant_table_starts_over_and_stays_right(monkeypatch):
    monkeypatch.setattr(native_eager, "_CONSTANT_KERNELS_MAX", 4)
    jt, tt = jitorch.tensor(_X), torch.tensor(_X)
    for i in range(10):
        np.testing.assert_array_equal(jt.clamp(max=0.1 * i + 0.05).numpy(), tt.clamp(max=0.1 * i + 0.05).numpy())


def test_a_large_integer_parameter_converts_to_float32_directly():
    value = 2 ** 60 + 2 ** 36 + 1  # through a double it rounds twice
    x = np.zeros(1000, np.float32)
    got = jitorch.nn.functional.threshold(jitorch.tensor(x), 1.0, value).numpy()
    want = torch.nn.functional.threshold(torch.tensor(x), 1.0, value).numpy()
    np.testing.assert_array_equal(got, want)
