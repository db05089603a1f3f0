"""A Python number meeting a float16 or bfloat16 tensor, eager and compiled, as ATen converts it: to float32, then
to the tensor's dtype (every row but mul and div, which take it as float32), computed in float32 and rounded once.
Values against torch bit for bit."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import jitorch

CASES = {
    "ge": lambda L, x: (x * 1.0) >= 0.1,
    "where": lambda L, x: L.where(x * 2 > 0.2, x, 0.0),
    "remainder": lambda L, x: L.remainder(x * 1.0, 0.3),
    "remainder negative": lambda L, x: L.remainder(x * 1.0, -0.7),
    "fmod": lambda L, x: L.fmod(x * 1.0, 0.3),
    "pow": lambda L, x: (x * 1.0).abs() ** 1.3,
    "tie after float32": lambda L, x: x * 0 + (1 + 2 ** -11 + 2 ** -40),
    "sub": lambda L, x: x - 0.1,
    "mul": lambda L, x: x * 0.1,
    "div": lambda L, x: x / 0.3,
    "clamp": lambda L, x: (x * 1.0).clamp(-0.3, 0.7),
    "huge int": lambda L, x: (x + 10 ** 19) * 1.0,
    "add alpha": lambda L, x: L.add(x, x.flip(0), alpha=0.3),
    "sub alpha": lambda L, x: L.sub(x * 1.0, x.flip(0), alpha=1.7),
    "add_ alpha": lambda L, x: (x * 1.0).add_(x.flip(0), alpha=-0.7),
    "add number alpha": lambda L, x: L.add(x, 0.1, alpha=0.3),
}
DTYPES = [(jitorch.float16, torch.float16), (jitorch.bfloat16, torch.bfloat16)]


def _same(got, want):
    g, w = got.float().numpy(), want.float().numpy()
    assert got.dtype.is_floating_point == want.dtype.is_floating_point and g.shape == w.shape
    np.testing.assert_array_equal(np.where(np.isnan(g), 0, g), np.where(np.isnan(w), 0, w))
    np.testing.assert_array_equal(np.isnan(g), np.isnan(w))


@pytest.mark.parametrize("dtypes", DTYPES, ids=["f16", "bf16"])
@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_a_number_with_a_half_tensor_gives_torchs_bits(dtypes, case, compiled):
    jd, td = dtypes
    a = (np.random.default_rng(0).standard_normal(2048) * 3).astype(np.float32)
    fn = CASES[case]
    want = fn(torch, torch.from_numpy(a).to(td))
    run = jitorch.compile(lambda x: fn(jitorch, x)) if compiled else (lambda x: fn(jitorch, x))
    _same(run(jitorch.tensor(a).to(jd)), want)
