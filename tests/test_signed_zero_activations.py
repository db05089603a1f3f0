"""relu, relu6, hardtanh, clamp and elu keep -0.0 and nan as ATen's (clamp_min/clamp keep the input on a tie with a
bound; IEEE maximum would give +0.0), eagerly at NumPy sizes and generated-kernel sizes, and compiled."""
import numpy as np
import pytest
import torch

import jitorch

F, TF = jitorch.nn.functional, torch.nn.functional

CASES = {
    "relu": (jitorch.relu, torch.relu),
    "relu6": (F.relu6, TF.relu6),
    "hardtanh(0, 6)": (lambda t: F.hardtanh(t, 0.0, 6.0), lambda t: TF.hardtanh(t, 0.0, 6.0)),
    "hardtanh(-0.5, 0)": (lambda t: F.hardtanh(t, -0.5, 0.0), lambda t: TF.hardtanh(t, -0.5, 0.0)),
    "clamp(min=0)": (lambda t: t.clamp(min=0), lambda t: t.clamp(min=0)),
    "clamp(max=0)": (lambda t: t.clamp(max=0), lambda t: t.clamp(max=0)),
    "clamp(0, 1)": (lambda t: t.clamp(0, 1), lambda t: t.clamp(0, 1)),
    "elu": (F.elu, TF.elu),
}


def _bits(a):
    return np.asarray(a).view(np.uint32 if np.asarray(a).dtype == np.float32 else np.uint64)


@pytest.mark.parametrize("name", CASES)
@pytest.mark.parametrize("n", [6, 100_003])  # NumPy's path, the generated kernels'
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_signed_zeros_and_nan_as_torch(name, n, dtype):
    ours, theirs = CASES[name]
    a = np.random.default_rng(n).standard_normal(n).astype(dtype)
    a[:6] = [-0.0, 0.0, np.nan, -1.0, 7.0, 1.0]
    want = theirs(torch.tensor(a)).numpy()
    got = ours(jitorch.tensor(a)).numpy()
    np.testing.assert_array_equal(_bits(got[:6]), _bits(want[:6]))
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
    compiled = jitorch.compile(lambda t: ours(t) * 1.0)(jitorch.tensor(a)).numpy()
    np.testing.assert_array_equal(_bits(compiled[:6]), _bits(want[:6]))


@pytest.mark.parametrize("n", [6, 100_003])
@pytest.mark.parametrize("bounds", [(float("nan"), 1.0), (0.0, float("nan")), (2.0, 1.0), (None, float("nan")),
                                    (float("nan"), None)])
def test_clamp_nan_and_crossed_bounds_as_torch(n, bounds):
    a = np.random.default_rng(n).standard_normal(n).astype(np.float32)
    a[:3] = [-0.0, np.nan, 0.5]
    want = torch.tensor(a).clamp(*bounds).numpy()
    got = jitorch.tensor(a).clamp(*bounds).numpy()
    np.testing.assert_array_equal(_bits(got), _bits(want))
    if None not in bounds:
        compiled = jitorch.compile(lambda t: t.clamp(*bounds) * 1.0)(jitorch.tensor(a)).numpy()
        np.testing.assert_array_equal(_bits(compiled), _bits(want))
