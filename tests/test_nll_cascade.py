"""nll_loss and cross_entropy reductions sum as ATen does (`codegen.llvm_cascade`: eight partial sums in the loss's
own dtype, rounded at every addition), so a reduced loss has torch's bits in float32, float64, float16 and bfloat16,
with ignored targets, and its gradient is torch's."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import jitorch
from jitorch.codegen.llvm_cascade import level_power

DTYPES = [(jitorch.float32, torch.float32), (jitorch.float64, torch.float64), (jitorch.float16, torch.float16),
          (jitorch.bfloat16, torch.bfloat16)]


def _bits(t):
    return t.detach().double().numpy() if t.dtype is not torch.float64 else t.detach().numpy()


@pytest.mark.parametrize("dtypes", DTYPES, ids=["f32", "f64", "f16", "bf16"])
@pytest.mark.parametrize("batch", [0, 1, 7, 16, 17, 100, 1000, 5000])
@pytest.mark.parametrize("ignored", [False, True])
@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_nll_loss_reduction_gives_torchs_bits_and_gradient(dtypes, batch, ignored, reduction):
    jd, td = dtypes
    rng = np.random.default_rng(batch)
    x = rng.standard_normal((batch, 10)).astype(np.float32)
    target = rng.integers(0, 10, batch)
    if ignored:
        target = np.where(rng.random(batch) < 0.2, -100, target)
    tlp = torch.from_numpy(x).to(td).log_softmax(1).detach().requires_grad_()
    jlp = jitorch.tensor(tlp.detach().double().numpy()).to(jd).requires_grad_()  # the same log-probabilities
    want = torch.nn.functional.nll_loss(tlp, torch.from_numpy(target), reduction=reduction)
    got = jitorch.nn.functional.nll_loss(jlp, jitorch.tensor(target), reduction=reduction)
    assert got.dtype == jd
    np.testing.assert_array_equal(got.detach().double().numpy(), _bits(want))  # NaN for an empty or all-ignored mean
    g = float(rng.standard_normal())
    want.backward(torch.tensor(g, dtype=td))
    got.backward(jitorch.tensor(g, dtype=jd))
    np.testing.assert_array_equal(jlp.grad.double().numpy(), _bits(tlp.grad))


@pytest.mark.parametrize("dtypes", DTYPES[2:], ids=["f16", "bf16"])
def test_half_cross_entropy_gives_torchs_loss(dtypes):
    jd, td = dtypes
    rng = np.random.default_rng(5)
    for batch in (7, 32, 1000):
        x, t = rng.standard_normal((batch, 10)).astype(np.float32), rng.integers(0, 10, batch)
        want = torch.nn.functional.cross_entropy(torch.from_numpy(x).to(td), torch.from_numpy(t))
        got = jitorch.nn.functional.cross_entropy(jitorch.tensor(x).to(jd), jitorch.tensor(t))
        assert got.item() == want.item()


def test_a_float16_count_past_its_range_divides_as_torch():
    x = np.full((70000, 2), -0.5, np.float32)  # count 70000 is inf in float16: torch's mean is 0
    t = np.zeros(70000, np.int64)
    want = torch.nn.functional.nll_loss(torch.from_numpy(x).half(), torch.from_numpy(t))
    got = jitorch.nn.functional.nll_loss(jitorch.tensor(x).half(), jitorch.tensor(t))
    assert got.item() == want.item()


def test_level_power_is_atens():
    assert [level_power(n) for n in (1, 2, 16, 1 << 32, (1 << 32) + 1, 1 << 40, 1 << 48)] == [4, 4, 4, 4, 4, 5, 6]
