"""torch.nn.attention.bias (CausalBias masks) with scaled_dot_product_attention, against torch."""
import warnings

import numpy as np
import pytest
import torch
from torch.nn.attention import bias as torch_bias

import jitorch
from helpers import check_op, make_array
from jitorch.nn.attention import bias as jit_bias


@pytest.mark.parametrize("variant", ["causal_upper_left", "causal_lower_right"])
@pytest.mark.parametrize("q_len,kv_len", [(3, 5), (4, 4), (1, 6), (5, 3)])
@pytest.mark.filterwarnings("ignore:Lower right causal bias")
def test_attention_with_a_causal_bias_matches_torch(variant, q_len, kv_len):
    rng = np.random.default_rng(q_len * 10 + kv_len)
    q, k, v = (make_array(s, "float32", rng) for s in [(2, 2, q_len, 8), (2, 2, kv_len, 8), (2, 2, kv_len, 8)])

    def run(lib, module):
        def attend(q, k, v):
            out = lib.nn.functional.scaled_dot_product_attention(q, k, v,
                                                                 attn_mask=getattr(module, variant)(q_len, kv_len))
            assert type(out) is lib.Tensor
            return out
        return attend
    check_op(run(jitorch, jit_bias), run(torch, torch_bias), [q, k, v], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("variant", ["causal_upper_left", "causal_lower_right"])
def test_masks_attributes_and_the_nan_warning(variant):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ours, theirs = getattr(jit_bias, variant)(5, 3), getattr(torch_bias, variant)(5, 3)
    np.testing.assert_array_equal(ours._materialize().numpy(), theirs._materialize().numpy())
    assert (ours.seq_len_q, ours.seq_len_kv, int(ours.variant)) == (theirs.seq_len_q, theirs.seq_len_kv,
                                                                    int(theirs.variant))
    warned = [str(w.message) for w in caught if "Lower right causal bias" in str(w.message)]
    assert len(warned) == (2 if variant == "causal_lower_right" else 0)
    assert isinstance(ours, jitorch.Tensor) and type(ours & ours) is jitorch.Tensor
    with pytest.raises(ValueError, match=f"{variant} only supports 2D tensors"):
        getattr(jit_bias, variant)(2, 3, 4)


def test_upper_left_is_is_causal():
    q = jitorch.randn(1, 2, 4, 8)
    k = jitorch.randn(1, 2, 4, 8)
    a = jitorch.nn.functional.scaled_dot_product_attention(q, k, k, attn_mask=jit_bias.causal_upper_left(4, 4))
    b = jitorch.nn.functional.scaled_dot_product_attention(q, k, k, is_causal=True)
    np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-6, atol=1e-6)
