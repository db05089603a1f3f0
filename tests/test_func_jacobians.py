"""``torch.func.jacrev``/``jacfwd``/``hessian`` over pytrees, against torch: dict and tuple inputs, dict and tuple
outputs, tuple ``argnums``, ``has_aux``; the same structure (containers and block shapes) and values."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import jitorch


def _shape_tree(tree):
    if isinstance(tree, dict):
        return {k: _shape_tree(v) for k, v in tree.items()}
    if isinstance(tree, (tuple, list)):
        return type(tree).__name__, [_shape_tree(v) for v in tree]
    return tuple(tree.shape)


def _values(tree):
    if isinstance(tree, dict):
        return [v for k in sorted(tree) for v in _values(tree[k])]
    if isinstance(tree, (tuple, list)):
        return [v for x in tree for v in _values(x)]
    return [tree.detach().numpy()]


CASES = {
    "dict input": lambda lib: (lib.func.jacrev(lambda p: (p["w"] ** 2).sum() * p["b"].sum()),
                               ({"w": lib.tensor([1.0, 2.0]), "b": lib.tensor([3.0])},)),
    "dict input jacfwd": lambda lib: (lib.func.jacfwd(lambda p: p["w"] * p["b"]),
                                      ({"w": lib.tensor([1.0, 2.0]), "b": lib.tensor([3.0])},)),
    "dict hessian": lambda lib: (lib.func.hessian(lambda p: (p["w"] ** 3).sum() * p["b"].sum()),
                                 ({"w": lib.tensor([1.0, 2.0]), "b": lib.tensor([3.0])},)),
    "dict output, tuple argnums": lambda lib: (
        lib.func.jacrev(lambda x, y: {"a": x * y, "b": (x ** 2).sum()}, argnums=(0, 1)),
        (lib.tensor([1.0, 2.0, 3.0]), lib.tensor([2.0, 0.5, 1.0]))),
    "tuple input": lambda lib: (lib.func.jacrev(lambda t: t[0] * t[1].sum()),
                                ((lib.tensor([1.0, 2.0]), lib.tensor([[3.0, 4.0]])),)),
    "plain": lambda lib: (lib.func.jacrev(lambda x: x.exp()), (lib.tensor([0.5, -1.0]),)),
    "hessian plain": lambda lib: (lib.func.hessian(lambda x: (x ** 3).sum()), (lib.tensor([0.5, -1.0, 2.0]),)),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_jacobian_transforms_over_pytrees_match_torch(case):
    results = []
    for lib in (jitorch, torch):
        fn, args = CASES[case](lib)
        results.append(fn(*args))
    got, want = results
    assert _shape_tree(got) == _shape_tree(want)
    for g, w in zip(_values(got), _values(want)):
        np.testing.assert_allclose(g, w, rtol=1e-6)


def test_has_aux_returns_the_aux_output():
    results = []
    for lib in (jitorch, torch):
        x = lib.tensor([0.3, 1.2])
        jac, aux = lib.func.jacrev(lambda v: (v.sin(), {"c": v.cos().sum()}), has_aux=True)(x)
        jac_f, aux_f = lib.func.jacfwd(lambda v: (v.sin(), v.sum()), has_aux=True)(x)
        results.append((jac.numpy(), aux["c"].item(), jac_f.numpy(), aux_f.item()))
    for g, w in zip(*results):
        np.testing.assert_allclose(g, w, rtol=1e-6)


def test_has_aux_needs_a_pair():
    with pytest.raises(RuntimeError, match=r"\(output, aux\)"):
        jitorch.func.jacrev(lambda v: v.sin(), has_aux=True)(jitorch.ones(2))
