"""float16 exact GELU (forward and gradient) against torch's CPU kernels bit for bit (jitorch/ops/half_gelu.py):
ATen's vectorized erf (Abramowitz and Stegun 7.1.26), whose last bits show below x = -3 where ``1 + erf`` cancels;
a correctly rounded erf put 3% of N(0, 3) inputs one float16 step away.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

import jitorch


def _gelu(lib, x, dy, dtype, approximate="none"):
    t = lib.from_numpy(x).to(getattr(lib, dtype)).requires_grad_()
    y = lib.nn.functional.gelu(t, approximate=approximate)
    y.backward(lib.from_numpy(dy).to(getattr(lib, dtype)))
    return y.detach().float().numpy(), t.grad.float().numpy()


def _inputs(shape, seed):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(shape) * 3).astype(np.float32), rng.standard_normal(shape).astype(np.float32)


# whole 64-element blocks, a scalar tail after them, only a tail, a 2-d tensor
@pytest.mark.parametrize("shape", [(64 * 300,), (64 * 300 + 37,), (45,), (96, 128)])
def test_float16_gelu_and_gradient_are_torchs_bits(shape):
    x, dy = _inputs(shape, seed=sum(shape))
    got, want = _gelu(jitorch, x, dy, "float16"), _gelu(torch, x, dy, "float16")
    low = x.astype(np.float16).astype(np.float32) < -3
    for name, g, w in zip(("gelu", "gradient"), got, want):
        off = g != w
        # Sleef's expf is not always correctly rounded: a rare element may still sit one step away
        assert off.sum() <= max(1, off.size // 10000), f"{name}: {off.sum()} of {off.size} differ"
        assert not (off & low).sum() > max(1, low.sum() // 1000), f"{name}: below -3, {(off & low).sum()} differ"


def test_float16_gelu_tail_outside_the_vector_loop_keeps_the_correct_erf():
    # 45 elements: all in ATen's scalar loop (std::erf), which the float32 formula reproduces
    x, dy = _inputs((45,), seed=5)
    got, want = _gelu(jitorch, x, dy, "float16"), _gelu(torch, x, dy, "float16")
    np.testing.assert_array_equal(got[0], want[0])


def test_float16_non_contiguous_and_tanh_gelu_unchanged_paths():
    x, dy = _inputs((64, 70), seed=9)
    for approximate in ("none", "tanh"):
        got = _gelu(jitorch, x.T.copy().T, dy, "float16", approximate)
        want = _gelu(torch, x, dy, "float16", approximate)
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=2 ** -9, atol=1e-5)


@pytest.mark.xfail(strict=True, reason="bfloat16 GELU is torch's float32 GELU rounded (its own float32 erf, which "
                   "jitorch's float32 GELU does not reproduce bit for bit): about 3% one bfloat16 step away")
def test_bfloat16_gelu_is_torchs_bits():
    x, dy = _inputs((64 * 300,), seed=1)
    got, want = _gelu(jitorch, x, dy, "bfloat16"), _gelu(torch, x, dy, "bfloat16")
    np.testing.assert_array_equal(got[0], want[0])
