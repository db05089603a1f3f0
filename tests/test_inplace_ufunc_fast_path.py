"""In-place pointwise ops written straight into ``self`` by the row's ufunc (`_dispatch_inplace._ufunc_into`), and
relu's generated eager kernel: the same answers as torch on the cases the shortcut takes and the ones it hands
back (other dtypes, operands that do not fit, overlapping operands, views), at sizes past the native thresholds."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import jitorch

_OPS = {
    "add_": lambda t, o: t.add_(o), "sub_": lambda t, o: t.sub_(o), "mul_": lambda t, o: t.mul_(o),
    "div_": lambda t, o: t.div_(o), "maximum": lambda t, o: torch_or_jit(t).maximum(t, o, out=t),
    "iadd": lambda t, o: t.__iadd__(o), "neg_": lambda t, o: t.neg_(), "abs_": lambda t, o: t.abs_(),
    "exp_": lambda t, o: t.exp_(), "log_": lambda t, o: t.log_(), "sqrt_": lambda t, o: t.sqrt_(),
    "tanh_": lambda t, o: t.tanh_(),
}


def torch_or_jit(t):
    return torch if isinstance(t, torch.Tensor) else jitorch


def _both(array):
    return torch.tensor(array), jitorch.tensor(array)


# (torch.maximum takes tensors only)
_CASES = [(name, other) for name in sorted(_OPS) for other in ("same", "row", "scalar", "int", "0d")
          if not (name == "maximum" and other in ("scalar", "int"))]


@pytest.mark.parametrize("name,other", _CASES)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_in_place_ops_match_torch(name, dtype, other):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((40, 33)).astype(dtype)
    x[0, :3] = [np.nan, np.inf, -0.0]
    operand = {"same": rng.standard_normal((40, 33)).astype(dtype), "row": rng.standard_normal(33).astype(dtype),
               "scalar": 1.7, "int": 3, "0d": np.asarray(0.5, dtype)}[other]
    t_x, j_x = _both(x)
    t_o, j_o = _both(operand) if isinstance(operand, np.ndarray) else (operand, operand)
    version = j_x._version
    t_out, j_out = _OPS[name](t_x, t_o), _OPS[name](j_x, j_o)
    assert (j_out is j_x) == (t_out is t_x) and j_x.dtype == getattr(jitorch, dtype)
    np.testing.assert_allclose(j_x.numpy(), t_x.numpy(), rtol=1e-6, atol=0, equal_nan=True)
    assert j_x._version > version


def test_an_operand_overlapping_self_reads_the_old_values():
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    t_x, j_x = _both(x)
    t_x.add_(t_x.flip(1))
    j_x.add_(j_x.flip(1))
    np.testing.assert_array_equal(j_x.numpy(), t_x.numpy())
    # (``x.mul_(x[:, :1])`` is not compared: torch's loop reads the column it has already written, an artifact)


def test_a_write_into_a_view_reaches_its_base():
    x = np.arange(20, dtype=np.float64).reshape(4, 5)
    t_x, j_x = _both(x)
    t_x[:, 1::2].mul_(-2.0)
    j_x[:, 1::2].mul_(-2.0)
    t_x.t().sub_(1)
    j_x.t().sub_(1)
    np.testing.assert_array_equal(j_x.numpy(), t_x.numpy())


def test_an_operand_that_does_not_fit_raises_and_writes_nothing():
    x = jitorch.ones(3)
    with pytest.raises(RuntimeError, match=r"add_: output with shape \[3\] doesn't match the broadcast shape"):
        x.add_(jitorch.ones(2, 3))
    assert x.tolist() == [1.0, 1.0, 1.0]


@pytest.mark.parametrize("case", ["int_self", "half", "mixed"])
def test_cases_the_shortcut_hands_back_keep_torchs_answers(case):
    if case == "int_self":
        t_x, j_x = _both(np.arange(6, dtype=np.int32))
        with pytest.raises(RuntimeError):
            t_x.mul_(0.5)
        with pytest.raises(RuntimeError, match="mul_: result type Float can't be cast"):
            j_x.mul_(0.5)
        t_x.add_(3), j_x.add_(3)
    elif case == "half":
        t_x, j_x = _both(np.linspace(-2, 2, 50).astype(np.float16))
        t_x.mul_(1.1).add_(0.1)
        j_x.mul_(1.1).add_(0.1)
    else:
        t_x, j_x = _both(np.linspace(-2, 2, 50).astype(np.float32))
        t_o, j_o = _both(np.linspace(0, 1, 50))  # float64 operand into float32 self
        t_x.add_(t_o)
        j_x.add_(j_o)
    assert str(j_x.dtype).split(".")[-1] == str(t_x.dtype).split(".")[-1]
    np.testing.assert_array_equal(j_x.numpy(), t_x.numpy())


def test_relu_generated_kernel_matches_torch_with_nan_inf_and_threads():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((300, 257)).astype(np.float32)
    x[0, :4] = [np.nan, np.inf, -np.inf, -0.0]
    t_x, j_x = _both(x)
    for t_y, j_y in ((torch.relu(t_x), jitorch.relu(j_x)), (torch.relu(t_x.t()), jitorch.relu(j_x.t()))):
        assert j_y.shape == tuple(t_y.shape) and j_y.dtype == jitorch.float32
        np.testing.assert_array_equal(j_y.numpy(), t_y.numpy())
    j_x.requires_grad_(True)
    t_x.requires_grad_(True)
    grad = rng.standard_normal(x.shape).astype(np.float32)
    torch.relu(t_x).backward(torch.tensor(grad))
    jitorch.relu(j_x).backward(jitorch.tensor(grad))
    np.testing.assert_array_equal(j_x.grad.numpy(), t_x.grad.numpy())
