"""Tensor methods that spell existing functions (jitorch/_method_extras.py) and the incomplete gamma rows, against
torch: values, in-place identity, gradients, dtypes and errors."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import jitorch

RNG = np.random.default_rng(0)
POS = RNG.uniform(0.5, 4.0, (3, 4))
ANY = RNG.standard_normal((3, 4))
INTS = RNG.integers(-20, 20, (3, 4))

INPLACE = {
    "arccosh_": (POS + 1, ()), "arcsinh_": (ANY, ()), "arctanh_": (ANY * 0.5, ()),
    "arctan2_": (ANY, (ANY[::-1].copy(),)), "lgamma_": (POS, ()), "digamma_": (POS, ()), "i0_": (ANY, ()),
    "mvlgamma_": (POS + 2, (2,)), "polygamma_": (POS, (1,)), "renorm_": (ANY, (2, 0, 1.0)),
    "heaviside_": (ANY.round(), (np.full((3, 4), 0.5),)), "ldexp_": (ANY, (INTS[:, :1] % 5,)),
    "gcd_": (INTS, (INTS[::-1].copy(),)), "lcm_": (INTS % 7, (INTS[::-1].copy() % 5,)),
    "igamma_": (POS, (POS[::-1].copy(),)), "igammac_": (POS, (POS[::-1].copy(),)),
}


@pytest.mark.parametrize("name", list(INPLACE))
def test_inplace_spellings_match_torch(name):
    data, extra = INPLACE[name]
    results = []
    for m in (torch, jitorch):
        x = m.tensor(data.copy())
        args = [m.tensor(a) if isinstance(a, np.ndarray) else a for a in extra]
        out = getattr(x, name)(*args)
        assert out is x
        results.append(x.numpy())
    # polygamma's own series differs from ATen's in the tenth digit
    np.testing.assert_allclose(results[1], results[0], rtol=1e-8 if name == "polygamma_" else 1e-10, atol=1e-12)


@pytest.mark.parametrize("name,args", [("diagflat", (1,)), ("hardshrink", (0.3,)), ("igamma", None),
                                       ("igammac", None), ("unsafe_chunk", (2, 1)), ("unsafe_split", (2,)),
                                       ("unsafe_split_with_sizes", ([1, 2],)), ("dim_order", ())])
def test_method_spellings_match_torch(name, args):
    outs = []
    for m in (torch, jitorch):
        x = m.tensor(POS[:, :3].T.copy() if name != "diagflat" else POS[0])
        call_args = (m.tensor(POS[:3, :3]),) if args is None else args
        out = getattr(x, name)(*call_args)
        outs.append(out)
    if isinstance(outs[0], tuple) and not isinstance(outs[0][0], torch.Tensor):
        assert outs[0] == outs[1]
        return
    for t, j in zip(*(o if isinstance(o, tuple) else (o,) for o in outs)):
        assert tuple(j.shape) == tuple(t.shape)
        np.testing.assert_allclose(j.numpy(), t.numpy(), rtol=1e-6)


def test_prelu_method_and_dim_order_of_permuted_tensors():
    for m in (torch, jitorch):
        assert m.empty(2, 3, 4).permute(2, 0, 1).dim_order() == (1, 2, 0)
    x, w = ANY[None], np.array([0.25])
    np.testing.assert_allclose(jitorch.tensor(x).prelu(jitorch.tensor(w)).numpy(),
                               torch.tensor(x).prelu(torch.tensor(w)).numpy())


def test_incomplete_gamma_matches_torch_with_gradients_and_errors():
    a = np.array([0.0, 0.0, 1.0, 2.0, -1.0, np.inf, 1.0, np.nan, 0.5, 3.0, 2.5])
    x = np.array([0.0, 1.0, 0.0, np.inf, 1.0, 2.0, -1.0, 1.0, 1e-300, 1e300, 1.5])
    for fn in ("igamma", "igammac"):
        np.testing.assert_array_equal(getattr(jitorch, fn)(jitorch.tensor(a), jitorch.tensor(x)).numpy(),
                                      getattr(torch, fn)(torch.tensor(a), torch.tensor(x)).numpy())
        grads = []
        for m in (torch, jitorch):
            xx = m.tensor(POS[0], requires_grad=True)
            getattr(m, fn)(m.tensor(POS[1]), xx).backward(m.tensor(ANY[0]))
            grads.append(xx.grad.numpy())
        np.testing.assert_allclose(grads[1], grads[0], rtol=1e-10)
        with pytest.raises(NotImplementedError, match=f"derivative for '{fn}: input' is not implemented"):
            getattr(jitorch, fn)(jitorch.tensor(POS[0], requires_grad=True), jitorch.tensor(POS[1])).sum().backward()
        with pytest.raises(NotImplementedError, match=f"{fn}_cpu"):
            getattr(jitorch, fn)(jitorch.tensor([1, 2]), jitorch.tensor([1, 2]))
        with pytest.raises(TypeError, match="must be Tensor"):
            getattr(jitorch, fn)(jitorch.tensor([1.0]), 1.0)
    half = jitorch.special.gammainc(jitorch.tensor([2.0], dtype=jitorch.float16), jitorch.tensor([1.0]))
    assert half.dtype is torch_dtype_name_to_jitorch("float32")
    np.testing.assert_allclose(jitorch.special.gammainc(jitorch.tensor([2.0]), jitorch.tensor([1.0])).numpy(),
                               torch.special.gammainc(torch.tensor([2.0]), torch.tensor([1.0])).numpy(), rtol=1e-6)


def torch_dtype_name_to_jitorch(name):
    return getattr(jitorch, name)


def test_python_callable_maps_match_torch():
    outs = []
    for m in (torch, jitorch):
        x = m.tensor(ANY.copy())
        x.apply_(lambda v: v * 2 + 1)
        x.map_(m.tensor(ANY[0]), lambda a, b: a - b)
        x.map2_(m.tensor(ANY[:, :1]), m.tensor(ANY[0]), lambda a, b, c: a * b + c)
        outs.append(x.numpy())
    np.testing.assert_allclose(outs[1], outs[0], rtol=1e-12)


def test_nonzero_static_and_new_empty_strided_match_torch():
    data = np.array([[0, 1, 0], [2, 0, 3]])
    for size in (2, 3, 5):
        got = jitorch.tensor(data).nonzero_static(size=size, fill_value=-7)
        want = torch.tensor(data).nonzero_static(size=size, fill_value=-7)
        assert got.tolist() == want.tolist()
    assert jitorch.empty(2, 3).new_empty_strided((2, 3), (1, 2)).stride() == (1, 2)
    for size, stride in (((2, 3), (1, 2)), ((2, 3), (4, 1)), ((3,), (0,)), ((0, 4), (4, 1)), ((), ())):
        got = jitorch.empty_strided(size, stride).fill_(1.5)
        want = torch.empty_strided(size, stride)
        assert got.stride() == want.stride() and got.shape == want.shape and bool((got == 1.5).all())


def test_histogram_method_to_dense_is_set_to_and_device_flags_match_torch():
    for m in (torch, jitorch):
        x = m.tensor([1.0, 2.0, 1.0, 4.0])
        assert x.histogram(3).hist.tolist() == [2.0, 1.0, 1.0]
        assert x.to_dense() is x and x.to_dense(m.float64).dtype is m.float64
        assert x.is_set_to(x) and not x.is_set_to(x[1:]) and not x.is_set_to(x.view(2, 2))
        assert not x.is_mps and not x.is_xla
