"""Float max/min reductions in generated kernels: blocks of a vectorized ``nnan`` max with a NaN flag beside
(`llvm_body.BodyEmitter._extremum_in_block`). A NaN anywhere in a row gives NaN, wherever it falls (first, last,
any block of a long row), as torch's amax/amin/max do; infinities and rows of -inf/+inf stay exact."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import jitorch
from jitorch.codegen.ir import Buffer, Kernel, Store, load
from jitorch.codegen.llvm_compile import compile_kernel
from jitorch.codegen.llvm_emit import BLOCK


def _rows(width, dtype, rng):
    x = rng.standard_normal((9, width)).astype(dtype)
    x[1, 0] = np.nan
    x[2, -1] = np.nan
    x[3, min(BLOCK + 3, width - 1)] = np.nan  # a later block's NaN
    x[4] = -np.inf
    x[5] = np.inf
    x[6, width // 2] = np.inf
    x[7, width // 3] = -np.inf
    x[8] = np.nan
    return x


@pytest.mark.parametrize("reduce", ["max", "min"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("width", [3, 64, 67, BLOCK + 17, 3 * BLOCK + 1])
def test_kernel_max_min_match_numpy_with_nan_and_inf(reduce, dtype, width):
    rng = np.random.default_rng(width)
    x = _rows(width, dtype, rng)
    ir = {"float32": "f32", "float64": "f64"}[dtype]
    k = Kernel((9, width), (Buffer(ir, (width, 1)), Buffer(ir, (1, 0))), (Store(1, load(0, ir), reduce),), 1)
    out = np.zeros(9, dtype)
    compile_kernel(k).run([x.ravel(), out])
    np.testing.assert_array_equal(out, x.max(1) if reduce == "max" else x.min(1))


@pytest.mark.parametrize("name", ["amax", "amin", "max", "min"])
def test_compiled_extrema_match_torch(name):
    rng = np.random.default_rng(1)
    x = _rows(700, "float32", rng)

    def fn(lib, t):
        out = getattr(t, name)(-1) if name in ("max", "min") else getattr(lib, name)(t, -1)
        return out.values if name in ("max", "min") else out

    got = jitorch.compile(lambda t: fn(jitorch, t) * 1)(jitorch.tensor(x)).numpy()
    np.testing.assert_array_equal(got, fn(torch, torch.tensor(x)).numpy())
    grad_x = jitorch.tensor(np.nan_to_num(x, nan=0.0), requires_grad=True)
    ref_x = torch.tensor(np.nan_to_num(x, nan=0.0), requires_grad=True)
    upstream = rng.standard_normal(9).astype(np.float32)
    jitorch.compile(lambda t: fn(jitorch, t))(grad_x).backward(jitorch.tensor(upstream))
    fn(torch, ref_x).backward(torch.tensor(upstream))
    np.testing.assert_allclose(grad_x.grad.numpy(), ref_x.grad.numpy(), rtol=1e-6)
