"""Compare jitorch._printing.format_tensor with real PyTorch's repr."""

import importlib.util
import math
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
import torch

# Load the module by path: jitorch/__init__.py may not exist or import yet.
_PATH = Path(__file__).resolve().parent.parent / "jitorch" / "_printing.py"
_spec = importlib.util.spec_from_file_location("jitorch_printing_under_test", _PATH)
_printing = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_printing)
format_tensor = _printing.format_tensor


def _numpy_of(t: torch.Tensor) -> np.ndarray:
    t = t.detach()
    if t.dtype == torch.bfloat16:
        return t.float().numpy().astype(ml_dtypes.bfloat16)
    return t.numpy()


def _suffixes_of(t: torch.Tensor) -> list:
    if t.grad_fn is not None:
        return [f"grad_fn=<{type(t.grad_fn).__name__}>"]
    if t.requires_grad:
        return ["requires_grad=True"]
    return []


def _check(t: torch.Tensor) -> None:
    expected = repr(t).replace("torch.", "jitorch.")
    dtype_name = str(t.dtype).removeprefix("torch.")
    got = format_tensor(_numpy_of(t), dtype_name=dtype_name, suffixes=_suffixes_of(t))
    assert got == expected, f"\n--- got ---\n{got}\n--- expected ---\n{expected}"


def _grad_tensor():
    leaf = torch.tensor([1.5, -2.0, 3.25], requires_grad=True)
    return leaf * 2


def _handpicked():
    f = torch.float32
    nan, inf = math.nan, math.inf
    return {
        "scalar_float": lambda: torch.tensor(3.5),
        "scalar_int": lambda: torch.tensor(7),
        "scalar_bool": lambda: torch.tensor(True),
        "scalar_sci": lambda: torch.tensor(1e10),
        "scalar_nan": lambda: torch.tensor(nan),
        "scalar_neg_zero": lambda: torch.tensor(-0.0),
        "scalar_float64": lambda: torch.tensor(2.0, dtype=torch.float64),
        "scalar_complex": lambda: torch.tensor(1 - 2j, dtype=torch.complex64),
        "empty_1d": lambda: torch.tensor([]),
        "empty_2d": lambda: torch.empty(0, 3),
        "empty_3d": lambda: torch.empty(2, 0, 4),
        "empty_int": lambda: torch.empty(0, dtype=torch.int64),
        "empty_bool_2d": lambda: torch.empty(3, 0, dtype=torch.bool),
        "empty_float64": lambda: torch.empty(0, dtype=torch.float64),
        "short_1d": lambda: torch.tensor([1.25, -0.5, 3.0]),
        "integral_floats": lambda: torch.tensor([1.0, -2.0, 300.0]),
        "integral_floats_sci": lambda: torch.tensor([1.0, 1e9]),
        "all_zero": lambda: torch.zeros(4),
        "neg_zero_mix": lambda: torch.tensor([-0.0, 0.0, 1.0]),
        "neg_zero_frac": lambda: torch.tensor([-0.0, 0.5]),
        "nan_inf_mix": lambda: torch.tensor([nan, inf, -inf, 1.5, 0.0]),
        "nan_inf_int_mode": lambda: torch.tensor([nan, inf, -inf, 2.0]),
        "only_nonfinite": lambda: torch.tensor([nan, -inf]),
        "ratio_sci": lambda: torch.tensor([0.5, 600.0]),
        "large_sci": lambda: torch.tensor([2e8, 3e8]),
        "small_sci": lambda: torch.tensor([5e-5, 6e-5]),
        "huge_ratio_f64": lambda: torch.tensor([1e308, 1e-300], dtype=torch.float64),
        "bool_1d": lambda: torch.tensor([True, False, True]),
        "bool_2d": lambda: torch.tensor([[True], [False]]),
        "uint8": lambda: torch.tensor([0, 255, 7], dtype=torch.uint8),
        "int8": lambda: torch.tensor([-128, 127, 0], dtype=torch.int8),
        "int16": lambda: torch.tensor([[-300, 2], [5, 30000]], dtype=torch.int16),
        "int32": lambda: torch.arange(12, dtype=torch.int32).reshape(3, 4),
        "int64_neg": lambda: torch.tensor([-5, 10, -1000]),
        "long_1d_summarized": lambda: torch.arange(2000, dtype=f) / 7,
        "long_int_summarized": lambda: torch.arange(5000),
        "summarized_2d": lambda: torch.arange(40 * 40, dtype=f).reshape(40, 40),
        "summarized_3d_hidden_big": lambda: torch.ones(20, 20, 20).index_fill_(0, torch.tensor([10]), 1e9),
        "summarized_narrow": lambda: torch.arange(1001 * 2, dtype=f).reshape(1001, 2) - 5,
        "wide_row_wraps": lambda: torch.linspace(-3, 3, 50),
        "wide_int_row": lambda: torch.arange(100) * 12345,
        "wide_complex_row": lambda: torch.randn(20, dtype=torch.complex64, generator=torch.Generator().manual_seed(1)),
        "wide_2d_wraps": lambda: torch.linspace(0, 1, 60).reshape(2, 30),
        "4d": lambda: torch.arange(24, dtype=f).reshape(1, 2, 3, 4) / 3,
        "float16": lambda: torch.tensor([0.1, 2.5, -7.0], dtype=torch.float16),
        "bfloat16": lambda: torch.tensor([0.1, 2.5, -7.0], dtype=torch.bfloat16),
        "bfloat16_sci": lambda: torch.tensor([1e-6, 3.0e3], dtype=torch.bfloat16),
        "float64_precise": lambda: torch.tensor([1 / 3, 2 / 3], dtype=torch.float64),
        "complex_mix": lambda: torch.tensor([1 + 2j, -0.5 - 0.25j, 3j, -0.0 - 0.0j], dtype=torch.complex64),
        "complex_sci": lambda: torch.tensor([1e9 + 1j, 2 - 3e-6j], dtype=torch.complex64),
        "complex128": lambda: torch.tensor([[1 + 1j, 2]], dtype=torch.complex128),
        "requires_grad": lambda: torch.tensor([1.0, 2.0], requires_grad=True),
        "requires_grad_f64": lambda: torch.ones(2, 2, dtype=torch.float64, requires_grad=True),
        "grad_fn": _grad_tensor,
        "grad_fn_after_wrapped_row":
            lambda: torch.linspace(-1, 1, 11, requires_grad=True).sum(0, keepdim=True) + torch.rand(10),
        "suffix_long_row": lambda: torch.full((8,), 123456.7, dtype=torch.float64, requires_grad=True),
    }


@pytest.mark.parametrize("name", list(_handpicked()))
def test_handpicked(name):
    _check(_handpicked()[name]())


_RANDOM_DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16,
                  torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8,
                  torch.bool, torch.complex64]


def _random_tensor(seed: int) -> torch.Tensor:
    rng = np.random.default_rng(seed)
    ndim = int(rng.integers(0, 5))
    shape = tuple(int(s) for s in rng.integers(1, 6, size=ndim))
    if rng.random() < 0.1:  # occasionally big enough to summarize
        shape = (int(rng.integers(2, 12)), int(rng.integers(100, 300)))
    dtype = _RANDOM_DTYPES[int(rng.integers(len(_RANDOM_DTYPES)))]
    scale = 10.0 ** rng.integers(-6, 10)
    if dtype == torch.bool:
        data = rng.random(shape) < 0.5
    elif dtype.is_floating_point or dtype.is_complex:
        data = rng.standard_normal(shape) * scale
        if rng.random() < 0.3:
            data = np.round(data)
        if dtype.is_complex:
            data = data + 1j * rng.standard_normal(shape) * scale
        if rng.random() < 0.2 and data.size:
            flat = data.reshape(-1)
            flat[rng.integers(0, flat.size, size=2)] = rng.choice([np.nan, np.inf, -np.inf, -0.0])
    else:
        info = np.iinfo(np.dtype(str(dtype).removeprefix("torch.")))
        data = rng.integers(max(info.min, -10**6), min(info.max, 10**6), size=shape)
    t = torch.tensor(data).to(dtype)
    if dtype.is_floating_point and rng.random() < 0.2:
        t.requires_grad_(True)
    return t


@pytest.mark.parametrize("seed", range(80))
def test_random(seed):
    _check(_random_tensor(seed))


def test_device_suffix_precedes_dtype():
    # torch puts device before dtype; this can't be produced on a CPU-only torch.
    got = format_tensor(np.array([1.0]), dtype_name="float64",
                        suffixes=["device='cuda:0'", "requires_grad=True"])
    assert got == "tensor([1.], device='cuda:0', dtype=jitorch.float64, requires_grad=True)"


def test_custom_defaults():
    got = format_tensor(np.array([1.5]), dtype_name="float64", default_float="float64")
    assert got == "tensor([1.5000])"
    got = format_tensor(np.array([1.5], dtype=np.float32), dtype_name="float32",
                        default_float="float64")
    assert got == "tensor([1.5000], dtype=jitorch.float32)"
