"""torch.nn.attention: sdpa_kernel sets the SDPA switches for a block as PyTorch does, and a block that leaves the
CPU no kernel raises PyTorch's error; results inside an allowed block are unchanged."""
import numpy as np
import pytest
import torch

import jitorch
from jitorch.nn.attention import SDPBackend, sdpa_kernel


def _switches(m):
    b = m.backends.cuda
    return (b.flash_sdp_enabled(), b.mem_efficient_sdp_enabled(), b.math_sdp_enabled(), b.cudnn_sdp_enabled())


@pytest.mark.parametrize("names", [["MATH"], ["FLASH_ATTENTION"], ["EFFICIENT_ATTENTION"], ["CUDNN_ATTENTION"],
                                   ["MATH", "EFFICIENT_ATTENTION"], ["FLASH_ATTENTION", "CUDNN_ATTENTION"]])
def test_sdpa_kernel_matches_torch(names):
    q = np.random.default_rng(0).standard_normal((2, 3, 5, 4)).astype(np.float32)
    results = []
    for m in (torch, jitorch):
        backends = [getattr(m.nn.attention.SDPBackend, n) for n in names]
        before = _switches(m)
        with m.nn.attention.sdpa_kernel(backends):
            inside = _switches(m)
            try:
                out = m.nn.functional.scaled_dot_product_attention(m.tensor(q), m.tensor(q), m.tensor(q),
                                                                   is_causal=True).numpy()
            except RuntimeError as e:
                out = str(e)
        results.append((inside, out))
        assert _switches(m) == before
    (t_inside, t_out), (j_inside, j_out) = results
    assert j_inside == t_inside
    if isinstance(t_out, str):
        assert j_out == t_out
    else:
        np.testing.assert_allclose(j_out, t_out, rtol=1e-5, atol=1e-6)


def test_sdpa_kernel_refuses_other_values_and_has_torchs_enum():
    assert {b.name: int(b) for b in SDPBackend} == {name: int(value) for name, value in
                                                   torch.nn.attention.SDPBackend.__members__.items()}
    with pytest.raises(AssertionError, match="Backend must be an instance of SDPBackend"):
        with sdpa_kernel("math"):
            pass
