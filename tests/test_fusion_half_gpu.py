"""float16 and bfloat16 fused kernels on a real GPU (marker ``cuda``; skipped without a device): a compiled half
chain on CUDA tensors runs as one NVRTC kernel and gives eager CPU's bits (each row rounds once, as on the CPU).

Run with ``bash bench/gpu_check.sh``; no torch needed (the oracle is jitorch's eager CPU result).
"""
from __future__ import annotations

import numpy as np
import pytest

import jitorch
from jitorch._compile import lower_cuda

pytestmark = pytest.mark.cuda

CASES = {
    "chain": lambda x, y: (x * y + 1).relu() * 0.5,
    "numbers": lambda x, y: x * 0.1 + y / 0.3 - 0.7,
    "where": lambda x, y: jitorch.where(x > y, x, y * 2),
    "casts": lambda x, y: (x.float() * 3).to(x.dtype) + y,
}


@pytest.mark.parametrize("dtype", [jitorch.float16, jitorch.bfloat16], ids=["f16", "bf16"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_a_compiled_half_chain_on_the_gpu_is_one_kernel_with_eager_cpus_bits(case, dtype):
    fn = CASES[case]
    rng = np.random.default_rng(0)
    x, y = (jitorch.tensor((rng.standard_normal((37, 129)) * 2).astype(np.float32)).to(dtype) for _ in range(2))
    want = fn(x, y)
    before = lower_cuda.cuda_kernel_stats()["launches"]
    got = jitorch.compile(fn)(x.cuda(), y.cuda())
    assert got.device.type == "cuda" and got.dtype == want.dtype
    assert lower_cuda.cuda_kernel_stats()["launches"] - before == 1
    g, w = got.cpu().float().numpy(), want.float().numpy()
    np.testing.assert_array_equal(g.view(np.uint32), w.view(np.uint32))


@pytest.mark.parametrize("dtype", [jitorch.float16, jitorch.bfloat16], ids=["f16", "bf16"])
def test_a_half_row_sum_on_the_gpu_accumulates_in_float32(dtype):
    rng = np.random.default_rng(1)
    x = jitorch.tensor(rng.standard_normal((64, 1000)).astype(np.float32)).to(dtype)
    got = jitorch.compile(lambda t: (t * 2).sum(-1))(x.cuda()).cpu()
    want = (x.double() * 2).sum(-1)
    np.testing.assert_allclose(got.double().numpy(), want.numpy(), rtol=2 ** -7 if dtype is jitorch.bfloat16
                               else 2 ** -10, atol=1e-2)
