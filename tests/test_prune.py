"""``nn.utils.prune`` against torch on the same weights: the reparametrization (``weight_orig``, ``weight_mask``, the
forward pre-hook), magnitude and structured pruning, pruning again over what is left, global pruning across layers,
custom masks, gradients through the mask, ``remove`` and ``is_pruned``."""
from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.utils.prune as torch_prune

import jitorch
from jitorch.nn.utils import prune


def _pair():
    rng = np.random.default_rng(0)
    models = [lib.nn.Sequential(lib.nn.Linear(6, 5), lib.nn.ReLU(), lib.nn.Conv1d(5, 4, 1)) for lib in (jitorch, torch)]
    for name, p in models[1].named_parameters():
        value = rng.standard_normal(tuple(p.shape)).astype(np.float32)
        with torch.no_grad():
            p.copy_(torch.from_numpy(value))
        with jitorch.no_grad():
            dict(models[0].named_parameters())[name].copy_(jitorch.tensor(value))
    return models


def _same_state(a, b):
    sa, sb = a.state_dict(), b.state_dict()
    assert list(sa) == list(sb)
    for k in sa:
        np.testing.assert_allclose(sa[k].numpy(), sb[k].numpy(), rtol=1e-6)


STEPS = {
    "l1 fraction": lambda P, m: P.l1_unstructured(m[0], "weight", amount=0.3),
    "l1 count, again": lambda P, m: (P.l1_unstructured(m[0], "weight", amount=5),
                                     P.l1_unstructured(m[0], "weight", amount=0.5)),
    "ln structured rows then columns": lambda P, m: (P.ln_structured(m[0], "weight", amount=2, n=2, dim=0),
                                                     P.ln_structured(m[0], "weight", amount=0.5, n=1, dim=1)),
    "l1 then structured": lambda P, m: (P.l1_unstructured(m[0], "weight", amount=0.2),
                                        P.ln_structured(m[0], "weight", amount=1, n=float("inf"), dim=0)),
    "ln structured on negative dims, again": lambda P, m: (P.ln_structured(m[0], "weight", amount=1, n=2, dim=-1),
                                                           P.ln_structured(m[0], "weight", amount=2, n=1, dim=-2),
                                                           P.ln_structured(m[0], "weight", amount=1, n=2, dim=-1)),
    "bias and conv": lambda P, m: (P.l1_unstructured(m[0], "bias", amount=2),
                                   P.ln_structured(m[2], "weight", amount=0.5, n=2, dim=0)),
    "global": lambda P, m: P.global_unstructured([(m[0], "weight"), (m[2], "weight")],
                                                 pruning_method=P.L1Unstructured, amount=0.4),
    "identity": lambda P, m: P.identity(m[0], "weight"),
}


@pytest.mark.parametrize("case", sorted(STEPS))
def test_pruning_matches_torch(case):
    mine, theirs = _pair()
    STEPS[case](prune, mine)
    STEPS[case](torch_prune, theirs)
    _same_state(mine, theirs)
    x = np.random.default_rng(1).standard_normal((3, 6)).astype(np.float32)
    outs = []
    for lib, m in ((jitorch, mine), (torch, theirs)):
        out = m[2](m[1](m[0](lib.tensor(x))).unsqueeze(-1))
        out.sum().backward()
        outs.append((out.detach().numpy(), m[0].weight_orig.grad.numpy() if hasattr(m[0], "weight_orig") else None))
    np.testing.assert_allclose(outs[0][0], outs[1][0], rtol=1e-5, atol=1e-6)
    if outs[0][1] is not None:
        np.testing.assert_allclose(outs[0][1], outs[1][1], rtol=1e-5, atol=1e-6)
    assert prune.is_pruned(mine) == torch_prune.is_pruned(theirs)


def test_custom_mask_and_remove():
    mine, theirs = _pair()
    mask = np.array([[1, 0, 1, 0, 1, 0]] * 5, dtype=np.float32)
    prune.custom_from_mask(mine[0], "weight", jitorch.tensor(mask))
    torch_prune.custom_from_mask(theirs[0], "weight", torch.tensor(mask))
    _same_state(mine, theirs)
    prune.remove(mine[0], "weight")
    torch_prune.remove(theirs[0], "weight")
    _same_state(mine, theirs)
    assert [n for n, _ in mine.named_parameters()] == [n for n, _ in theirs.named_parameters()]
    assert not prune.is_pruned(mine) and isinstance(mine[0].weight, jitorch.nn.Parameter)
    with pytest.raises(ValueError, match="has to be pruned"):
        prune.remove(mine[0], "weight")


def test_random_pruning_prunes_the_requested_amounts():
    jitorch.manual_seed(0)
    lin = jitorch.nn.Linear(6, 4)
    prune.random_unstructured(lin, "weight", amount=0.5)
    assert lin.weight_mask.sum().item() == 12
    with pytest.raises(ValueError, match="Structured pruning can only be applied to multidimensional tensors"):
        prune.random_structured(lin, "bias", amount=0.5, dim=0)  # torch refuses 1-D tensors too
    conv = jitorch.nn.Conv2d(2, 4, 3)
    prune.random_structured(conv, "weight", amount=1, dim=0)
    assert sorted(conv.weight_mask.sum((1, 2, 3)).tolist()) == [0.0, 18.0, 18.0, 18.0]
