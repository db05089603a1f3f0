"""``lp_pool3d``/``nn.LPPool3d`` against PyTorch: norms 1, 2 and 3, tuple windows, strides, ceil mode, unbatched."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as TF
from helpers import check_op

import jitorch
import jitorch.nn.functional as F
from nn_oracle import torch_single_thread  # noqa: F401 - an autouse fixture: one oracle thread


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("norm_type", [1.0, 2.0, 3])
@pytest.mark.parametrize("kernel,stride,ceil_mode", [(2, None, False), (3, 2, True), ((2, 3, 1), (1, 2, 1), False)])
def test_lp_pool3d_matches_torch(dtype, norm_type, kernel, stride, ceil_mode, rng):
    x = rng.uniform(-2, 2, (2, 2, 5, 6, 7)).astype(dtype)
    check_op(lambda x: F.lp_pool3d(x, norm_type, kernel, stride, ceil_mode),
             lambda x: TF.lp_pool3d(x, norm_type, kernel, stride, ceil_mode), [x], atol=1e-5, rtol=1e-4)


def test_lp_pool3d_module_and_unbatched(rng):
    x = rng.uniform(0.1, 2, (2, 5, 6, 7)).astype("float32")
    check_op(jitorch.nn.LPPool3d(2, 2), torch.nn.LPPool3d(2, 2), [x], layout="transposed", atol=1e-5, rtol=1e-4)
