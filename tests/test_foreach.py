"""``torch._foreach_*`` against torch: every name exists, and each overload (scalar, scalar list, tensor, tensor
list, alpha) gives torch's values, in place or not, with gradients through the out-of-place forms."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import jitorch
from jitorch import _foreach

SHAPES = [(3,), (2, 4), ()]


def _lists(lib, seed, positive=False):
    rng = np.random.default_rng(seed)
    arrays = [rng.uniform(0.2, 0.9, s) if positive else rng.standard_normal(s) for s in SHAPES]
    return [lib.tensor(a.astype(np.float32)) for a in arrays]


def _same(got, want, rtol=1e-5):
    got, want = list(got), list(want)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert tuple(g.shape) == tuple(w.shape)
        np.testing.assert_allclose(g.detach().numpy(), w.detach().numpy(), rtol=rtol, atol=1e-6, equal_nan=True)


def test_every_torch_foreach_function_exists():
    names = {n for n in dir(torch) if n.startswith("_foreach_")}
    assert len(names) >= 91 and names <= set(dir(jitorch))


@pytest.mark.parametrize("op", _foreach.UNARY)
@pytest.mark.parametrize("inplace", [False, True])
def test_unary(op, inplace):
    name = f"_foreach_{op}{'_' if inplace else ''}"
    outs = []
    for lib in (jitorch, torch):
        xs = _lists(lib, 0, positive=op in ("acos", "asin", "log", "log10", "log2", "sqrt", "rsqrt", "lgamma"))
        result = getattr(lib, name)(xs)
        outs.append(xs if inplace else result)
        if inplace:
            assert result is xs
    _same(*outs)


OTHERS = {"scalar": lambda lib: 1.5, "scalar list": lambda lib: [0.5, 2.0, -1.0],
          "tensor list": lambda lib: _lists(lib, 1, positive=True), "one tensor": lambda lib: lib.tensor(0.75)}


@pytest.mark.parametrize("op", _foreach.BINARY)
@pytest.mark.parametrize("other", sorted(OTHERS))
@pytest.mark.parametrize("inplace", [False, True])
def test_binary(op, other, inplace):
    name = f"_foreach_{op}{'_' if inplace else ''}"
    outs = []
    for lib in (jitorch, torch):
        xs = _lists(lib, 0, positive=op == "pow")
        result = getattr(lib, name)(xs, OTHERS[other](lib))
        outs.append(xs if inplace else result)
    _same(*outs)


def test_single_tensor_with_alpha():
    _same(jitorch._foreach_add(_lists(jitorch, 0), jitorch.tensor(2.0), alpha=3),
          torch._foreach_add(_lists(torch, 0), torch.tensor(2.0), alpha=3))


def test_alpha_pow_of_scalar_and_reductions():
    j, t = _lists(jitorch, 0), _lists(torch, 0)
    _same(jitorch._foreach_sub(j, _lists(jitorch, 1), alpha=2), torch._foreach_sub(t, _lists(torch, 1), alpha=2))
    _same(jitorch._foreach_pow(2.0, j), torch._foreach_pow(2.0, t))
    for ord_ in (1, 2, float("inf")):
        _same(jitorch._foreach_norm(j, ord_), torch._foreach_norm(t, ord_))
    _same(jitorch._foreach_max(j), torch._foreach_max(t))
    _same(jitorch._foreach_powsum(j, 3), torch._foreach_powsum(t, 3))
    _same(jitorch._foreach_clone(j), torch._foreach_clone(t))
    mats = [np.random.default_rng(2).standard_normal((2, 3)).astype(np.float32)]
    others = [np.random.default_rng(3).standard_normal((3, 2)).astype(np.float32)]
    _same(jitorch._foreach_mm([jitorch.tensor(m) for m in mats], [jitorch.tensor(o) for o in others]),
          torch._foreach_mm([torch.tensor(m) for m in mats], [torch.tensor(o) for o in others]))


@pytest.mark.parametrize("op", ["addcmul", "addcdiv"])
@pytest.mark.parametrize("value", ["default", "scalar", "scalar list", "tensor"])
@pytest.mark.parametrize("inplace", [False, True])
def test_addcmul_addcdiv(op, value, inplace):
    name = f"_foreach_{op}{'_' if inplace else ''}"
    outs = []
    for lib in (jitorch, torch):
        xs, a, b = _lists(lib, 0), _lists(lib, 1), _lists(lib, 2, positive=True)
        args = {"default": (), "scalar": (0.5,), "scalar list": ([0.5, 2.0, -1.0],),
                "tensor": (lib.tensor([0.5, 2.0, -1.0]),)}[value]
        result = getattr(lib, name)(xs, a, b, *args)
        outs.append(xs if inplace else result)
    _same(*outs)


@pytest.mark.parametrize("weight", ["scalar", "scalar list", "tensor list"])
@pytest.mark.parametrize("inplace", [False, True])
def test_lerp(weight, inplace):
    name = f"_foreach_lerp{'_' if inplace else ''}"
    outs = []
    for lib in (jitorch, torch):
        xs, ends = _lists(lib, 0), _lists(lib, 1)
        w = {"scalar": 0.25, "scalar list": [0.1, 0.5, 0.9], "tensor list": _lists(lib, 2, positive=True)}[weight]
        result = getattr(lib, name)(xs, ends, w)
        outs.append(xs if inplace else result)
    _same(*outs)


def test_zero_copy_and_length_mismatch():
    xs = _lists(jitorch, 0)
    assert jitorch._foreach_copy_(xs, _lists(jitorch, 1)) is xs
    _same(xs, _lists(jitorch, 1))
    jitorch._foreach_zero_(xs)
    assert all(not t.any() for t in xs)
    with pytest.raises(RuntimeError, match="same number of tensors, got 3 and 2"):
        jitorch._foreach_add(xs, xs[:2])


def test_out_of_place_forms_carry_gradients():
    grads = []
    for lib in (jitorch, torch):
        xs = [t.requires_grad_() for t in _lists(lib, 0)]
        ys = lib._foreach_mul(lib._foreach_exp(xs), [2.0, 3.0, 4.0])
        sum(y.sum() for y in lib._foreach_addcmul(ys, xs, xs, 0.5)).backward()
        grads.append([x.grad for x in xs])
    _same(*grads)
