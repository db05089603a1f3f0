"""``torch.gradient`` against PyTorch: dims, scalar / per-dim / coordinate spacing, edge orders, dtypes, layouts,
backward (random upstream gradients) and errors."""
import numpy as np
import pytest
import torch
from helpers import check_op

import jitorch

RNG = np.random.default_rng(0)
F = RNG.standard_normal((5, 6)).astype(np.float32)
COORDS = np.cumsum(RNG.uniform(0.2, 1.5, 6)).astype(np.float32)


def run(fn, *inputs, **kw):
    kw = {"atol": 1e-5, "rtol": 1e-4, **kw}
    return check_op(lambda *a: fn(jitorch, *a), lambda *a: fn(torch, *a), inputs, **kw)


@pytest.mark.parametrize("edge_order", [1, 2])
@pytest.mark.parametrize("layout", ["contiguous", "transposed", "sliced"])
def test_uniform_spacing(edge_order, layout):
    run(lambda lib, t: lib.gradient(t, edge_order=edge_order), F, layout=layout)
    run(lambda lib, t: lib.gradient(t, spacing=2.5, dim=0, edge_order=edge_order), F, layout=layout)
    run(lambda lib, t: lib.gradient(t, spacing=[0.5, 3.0], dim=(1, -2), edge_order=edge_order), F, layout=layout)
    run(lambda lib, t: lib.gradient(t, spacing=[2.0], edge_order=edge_order), F, layout=layout)  # an error


@pytest.mark.parametrize("edge_order", [1, 2])
def test_coordinate_spacing(edge_order):
    run(lambda lib, t, x: lib.gradient(t, spacing=(x,), dim=1, edge_order=edge_order), F, COORDS)
    run(lambda lib, t, x, y: lib.gradient(t, spacing=(y, x), edge_order=edge_order), F, COORDS,
        np.arange(5, dtype=np.float32) ** 1.5)


def test_dtypes_and_shapes():
    run(lambda lib, t: lib.gradient(t), RNG.integers(-5, 5, (3, 4)))
    run(lambda lib, t: lib.gradient(t, spacing=2, dim=-1), F.astype(np.float64))
    run(lambda lib, t: lib.gradient(t, dim=[1]), F.astype(np.float16), atol=1e-2, rtol=1e-2)
    run(lambda lib, t: lib.gradient(t), F[0])
    run(lambda lib, t: lib.gradient(t), F[:2, :2])
    run(lambda lib, t: lib.gradient(t), np.array(1.0, np.float32))


def test_errors():
    run(lambda lib, t: lib.gradient(t, edge_order=3), F)
    run(lambda lib, t: lib.gradient(t, edge_order=2), F[:2])
    run(lambda lib, t: lib.gradient(t, spacing=[1.0, 2.0], dim=0), F)
