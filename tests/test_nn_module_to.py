"""``Module.to``'s argument parsing against torch 2.13 (``torch._C._nn._parse_to``'s three overloads): the accepted
forms convert as torch's, every other combination raises torch's TypeError listing the overloads, ``copy`` is
refused, and device strings follow c10::Device's grammar."""
from __future__ import annotations

import pytest
import torch
from helpers import same_error

import jitorch


def _linear(lib):
    lib.manual_seed(0)
    return lib.nn.Linear(2, 3)


ACCEPTED = [
    "m.to(L.float64)", "m.to(dtype=L.float64)", "m.to('cpu')", "m.to(L.device('cpu'), L.float64)",
    "m.to('cpu', L.float64, True)", "m.to('cpu', dtype=L.float64, non_blocking=False)", "m.to(non_blocking=True)",
    "m.to(L.zeros(2, dtype=L.float64))", "m.to(L.zeros(2, dtype=L.float64), non_blocking=True)",
    "m.to(tensor=L.zeros(2, dtype=L.float64))", "m.to(float)", "m.to(None)", "m.to(None, None)",
    "m.to(device=None, dtype=None)", "m.to(memory_format=L.channels_last)", "m.to(L.float64, False)",
    "m.to(L.zeros(2), non_blocking=True, memory_format=L.preserve_format)", "m.to()",
]


@pytest.mark.parametrize("code", ACCEPTED)
def test_accepted_forms_convert_as_torch(code):
    results = []
    for lib in (torch, jitorch):
        m = _linear(lib)
        before = m.bias.detach().double().tolist()
        out = eval(code, {"L": lib, "m": m})
        assert out is m
        assert m.bias.detach().double().tolist() == pytest.approx(before)  # converted, not reinitialized
        results.append((str(m.weight.dtype).split(".")[-1], m.weight.device.type, m.weight.requires_grad))
    assert results[0] == results[1]


REFUSED = [
    "m.to('cpu', 'cpu')", "m.to(foo=1)", "m.to(L.zeros(2), L.float64)", "m.to(memory_format=3)",
    "m.to(L.device('cpu'), non_blocking=1)", "m.to(device=L.zeros(2))", "m.to(L.float32, L.float64)",
    "m.to(L.float64, 'cpu')", "m.to('cpu', None, None)", "m.to(L.zeros(1), None)", "m.to(L.float64, None)",
    "m.to(dtype='float64')", "m.to(L.float64, copy=True)", "m.to(L.float64, True, True)",
    "m.to('cpu', L.float64, False, True)", "m.to(L.int32)", "m.to(int)", "m.to(dtype=L.uint8)",
    "m.to(L.zeros(2, dtype=L.int64))", "m.to('cuda:x')", "m.to('float64')", "m.to('')", "m.to('cuda:01')",
]


@pytest.mark.parametrize("code", REFUSED)
def test_refused_forms_raise_torchs_error(code):
    same_error(lambda lib: eval(code, {"L": lib, "m": _linear(lib)}))


def test_unknown_device_type_is_refused_before_anything_moves():
    m = _linear(jitorch)
    with pytest.raises(RuntimeError, match="device type at start of device string: foo"):
        m.to("foo:1", jitorch.float64)
    assert m.weight.dtype is jitorch.float32
    with pytest.raises(RuntimeError, match="device type at start of device string"):
        torch.nn.Linear(2, 3).to("foo:1")
