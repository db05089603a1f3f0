"""``jitorch.signal.windows`` against ``torch.signal.windows``: values, dtypes, autograd flags and errors."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import torch
from helpers import assert_same, same_error

import jitorch

NAMES = ["bartlett", "blackman", "cosine", "exponential", "gaussian", "general_cosine", "general_hamming", "hamming",
         "hann", "kaiser", "nuttall"]
# Each window's own parameter at a non-default value (general_cosine has no default for ``a``).
PARAMS = {"exponential": {"tau": 2.5}, "gaussian": {"std": 1.7}, "kaiser": {"beta": 5.0},
          "general_cosine": {"a": [0.46, 0.23, 0.31]}, "general_hamming": {"alpha": 0.6}}


def _both(name, M, **kw):
    """``name(M, **kw)`` from torch and from jitorch; a ``dtype``/``layout`` given by name resolves in each library."""
    out = []
    for lib in (torch, jitorch):
        lib_kw = {k: getattr(lib, v) if k in ("dtype", "layout") and isinstance(v, str) else v for k, v in kw.items()}
        out.append(getattr(lib.signal.windows, name)(M, **lib_kw))
    return out


def _tol(dtype):
    # float32: ATen's SLEEF sin/cos/exp and jitorch's NumPy ones may differ in the last bit or two
    return dict(atol=3e-7, rtol=1e-6) if dtype in (None, "float32") else dict(atol=1e-14, rtol=1e-13)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("M", [0, 1, 2, 7, 10])
@pytest.mark.parametrize("sym", [True, False])
@pytest.mark.parametrize("dtype", [None, "float32", "float64"])
def test_window_values_match_torch(name, M, sym, dtype):
    th, jt = _both(name, M, sym=sym, dtype=dtype, **PARAMS.get(name, {}))
    assert_same(jt, th, **_tol(dtype))
    assert jt.device.type == "cpu" and jt.is_contiguous() and not jt.requires_grad


@pytest.mark.parametrize("name", NAMES)
def test_default_parameters_match_torch(name):
    kw = {"a": [0.5, 0.3, 0.2]} if name == "general_cosine" else {}
    for M in (5, 16):
        th, jt = _both(name, M, **kw)
        assert_same(jt, th, **_tol(None))


def test_default_dtype_float64_is_followed():
    previous = (torch.get_default_dtype(), jitorch.get_default_dtype())
    torch.set_default_dtype(torch.float64)
    jitorch.set_default_dtype(jitorch.float64)
    try:
        for name in NAMES:
            th, jt = _both(name, 9, sym=False, **PARAMS.get(name, {}))
            assert jt.dtype == jitorch.float64
            assert_same(jt, th, **_tol("float64"))
    finally:
        torch.set_default_dtype(previous[0])
        jitorch.set_default_dtype(previous[1])


@pytest.mark.parametrize("kw", [{"center": 1.0, "sym": False}, {"center": 7.5, "tau": 0.5, "sym": False},
                                {"tau": 100.0}])
def test_exponential_center_and_tau(kw):
    th, jt = _both("exponential", 10, **kw)
    assert_same(jt, th, **_tol(None))


@pytest.mark.parametrize("beta", [0.0, 1e-3, 40.0])
def test_kaiser_beta_extremes(beta):
    # beta = 0 is the rectangular window; large beta stresses i0's range (ratio of two huge values)
    for dtype in ("float32", "float64"):
        th, jt = _both("kaiser", 11, beta=beta, dtype=dtype)
        assert_same(jt, th, **_tol(dtype))


def test_general_cosine_accepts_any_iterable_of_coefficients():
    th, jt = _both("general_cosine", 8, a=(0.4, 0.5, 0.1))
    assert_same(jt, th, **_tol(None))
    # M 0 and 1 return before the coefficients are looked at, as in torch
    for M in (0, 1):
        th, jt = _both("general_cosine", M, a=[])
        assert_same(jt, th)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("M", [0, 1, 6])
def test_requires_grad_gives_torch_autograd_flags(name, M):
    th, jt = _both(name, M, requires_grad=True, **PARAMS.get(name, {}))
    assert (jt.requires_grad, jt.is_leaf) == (th.requires_grad, th.is_leaf)
    assert_same(jt.detach(), th.detach(), **_tol(None))


@pytest.mark.parametrize("call", [
    lambda W, lib: W.hann(-1),
    lambda W, lib: W.nuttall(-3),
    lambda W, lib: W.blackman(-2),
    lambda W, lib: W.bartlett(-1),
    lambda W, lib: W.gaussian(-1, std=-1.0),  # M is checked first
    lambda W, lib: W.kaiser(5, dtype=lib.int64),
    lambda W, lib: W.cosine(4, dtype=lib.complex64),
    lambda W, lib: W.hamming(5, dtype=lib.float16),
    lambda W, lib: W.general_hamming(5, dtype=lib.bfloat16),
    lambda W, lib: W.bartlett(5, layout=lib.sparse_coo),
    lambda W, lib: W.gaussian(5, std=0.0),
    lambda W, lib: W.gaussian(5, std=-1.0),
    lambda W, lib: W.exponential(5, tau=0.0),
    lambda W, lib: W.exponential(5, center=1.0),
    lambda W, lib: W.exponential(0, center=1.0),
    lambda W, lib: W.kaiser(5, beta=-1.0),
    lambda W, lib: W.general_cosine(5, a=3),
    lambda W, lib: W.general_cosine(5, a=[]),
])
def test_bad_arguments_raise_torchs_errors(call):
    same_error(lambda lib: call(lib.signal.windows, lib))


def test_signature_is_torchs():
    import inspect
    for name in NAMES:
        jt = inspect.signature(getattr(jitorch.signal.windows, name)).parameters
        th = inspect.signature(getattr(torch.signal.windows, name)).parameters
        assert list(jt) == list(th), name
        assert [p.kind for p in jt.values()] == [p.kind for p in th.values()], name
        for p in th.values():
            if p.default is not inspect.Parameter.empty and not isinstance(p.default, torch.layout):
                assert jt[p.name].default == p.default, (name, p.name)
        assert jt["layout"].default is jitorch.strided


def test_namespace_is_torchs():
    assert jitorch.signal.__all__ == torch.signal.__all__
    assert sorted(jitorch.signal.windows.__all__) == sorted(torch.signal.windows.__all__)


def test_import_jitorch_exposes_signal_as_torch_does():
    code = ("import {m}; print(hasattr({m}, 'signal') and hasattr({m}.signal, 'windows'), "
            "{m}.signal.windows.hann(5).tolist())")
    outs = [subprocess.run([sys.executable, "-c", code.format(m=m)], capture_output=True, text=True, check=True).stdout
            for m in ("torch", "jitorch")]
    assert outs[0].startswith("True ") and outs[1] == outs[0]


@pytest.mark.cuda
@pytest.mark.parametrize("name", NAMES)
def test_windows_are_made_on_cuda(name):
    for dtype in ("float32", "float64"):
        th, _ = _both(name, 10, sym=False, dtype=dtype, **PARAMS.get(name, {}))
        jt = getattr(jitorch.signal.windows, name)(10, sym=False, dtype=getattr(jitorch, dtype), device="cuda",
                                                   **PARAMS.get(name, {}))
        assert jt.device.type == "cuda"
        np.testing.assert_allclose(jt.cpu().numpy(), th.numpy(), **_tol(dtype))
    assert getattr(jitorch.signal.windows, name)(0, device="cuda", **PARAMS.get(name, {})).device.type == "cuda"
