"""Python's protocols on a tensor as torch answers them: ``in``, comparisons with operands no op takes, the
inference flag of tensors made under ``inference_mode``, and the warning of ``float()`` of a tensor that requires
grad."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import jitorch


def _outcome(fn):
    try:
        r = fn()
    except Exception as e:  # noqa: BLE001 - the type and text are what is compared
        return type(e).__name__, str(e).replace("jitorch", "torch")
    if isinstance(r, (jitorch.Tensor, torch.Tensor)):
        return "tensor", r.tolist()
    return type(r).__name__, r


@pytest.mark.parametrize("code", [
    "2.0 in x", "7 in x", "x[0] in x", "True in x > 3", "np.float64(4.0) in x", "'a' in x", "[1.0] in x",
    "2.0 in x[0, 0]",
    "x == None", "x != None", "None == x", "'none' if x == None else 'not none'", "x == [1, 2]", "x != [1, 2]",
    "x == 'a'", "x == (1, 2)", "x == {1: 2}", "x < None", "x >= [1, 2]", "x == 2.0", "x != np.float64(2.0)",
    "x > 2", "x[0] == x[1] - 2",
])
def test_protocol_matches_torch(code):
    mine = _outcome(lambda: eval(code, {"np": np, "x": jitorch.tensor([[1.0, 2.0], [3.0, 4.0]])}))
    theirs = _outcome(lambda: eval(code, {"np": np, "x": torch.tensor([[1.0, 2.0], [3.0, 4.0]])}))
    assert mine == theirs


@pytest.mark.parametrize("make", [lambda m, x: x * 2, lambda m, x: x.sum(), lambda m, x: m.zeros(2),
                                  lambda m, x: x[0], lambda m, x: x.exp(), lambda m, x: m.tensor([1.0]),
                                  lambda m, x: x.view(4), lambda m, x: (x * 2)[0], lambda m, x: x == 1])
def test_inference_flag_matches_torch(make):
    """Tensors made under inference_mode are inference tensors (they all said False); views follow their base."""
    def flags(m):
        x = m.ones(2, 2, requires_grad=True)
        with m.inference_mode():
            inside = make(m, x)
            inside_view = inside.view(-1)
        with m.inference_mode(False):
            disabled = make(m, x)
        with m.no_grad():
            no_grad = make(m, x)
        return (inside.is_inference(), inside_view.is_inference(), inside_view[:1].is_inference(),
                disabled.is_inference(), no_grad.is_inference(), make(m, x).is_inference(), x.is_inference())

    assert flags(jitorch) == flags(torch)


_SCALAR_SCRIPT = """
import warnings
import {lib} as torch
a = torch.ones((), requires_grad=True)


def no_grad_float():
    with torch.no_grad():
        return float(a)


for name, call in [("int", lambda: int(a)), ("item", a.item), ("bool", lambda: bool(a)),
                   ("no_grad", no_grad_float), ("detached", lambda: float(a.detach())),
                   ("float", lambda: float(a * 2)), ("again", lambda: float(a)), ("complex", lambda: complex(a))]:
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        call()
    print(name, [str(w.message).split(" (Triggered")[0] for w in seen])
"""


def test_float_of_a_tensor_that_requires_grad_warns_once_as_torch():
    """torch 2.13's ``float()``/``complex()`` warning (TORCH_WARN_ONCE: once per process, hence a fresh process per
    library; ``int``, ``item`` and ``bool`` stay silent, as does grad mode off)."""
    import subprocess
    import sys

    outs = [subprocess.run([sys.executable, "-c", _SCALAR_SCRIPT.format(lib=lib)], capture_output=True, text=True,
                           check=True).stdout for lib in ("torch", "jitorch")]
    assert outs[1] == outs[0]
    assert "float ['Converting a tensor with requires_grad=True to a scalar" in outs[0]
