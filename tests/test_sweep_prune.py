"""``nn.utils.prune`` as research code uses it, written once against ``lib`` and run with torch and jitorch from the
same NumPy data.

l1-unstructured, ln-structured (``n=2`` and ``inf``), global, random and custom-mask pruning, iterative pruning (the
masks combined in a ``PruningContainer``), ``remove``, ``identity`` and a pruned state dict loaded back, state-dict
keys included; a pruned model trained by SGD; the pruning errors. Split from ``test_sweep_fno_sparse_prune.py`` (for
size), which holds the Fourier neural operator, complex-network and word2vec sweeps."""
from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.utils.prune  # noqa: F401 - torch's submodules load on import

import jitorch
from sweep_helpers import assert_close_tree

_RNG = np.random.default_rng(0)


# -- pruning ----------------------------------------------------------------------------------------------------------
PR_W = _RNG.standard_normal((6, 4)).astype(np.float32)
PR_B = _RNG.standard_normal(6).astype(np.float32)
PR_CW = _RNG.standard_normal((5, 3, 3, 3)).astype(np.float32)
PR_W2 = (np.arange(12, dtype=np.float32).reshape(2, 6) - 5.5) / 3


def _linear(lib, w=PR_W, b=PR_B):
    m = lib.nn.Linear(w.shape[1], w.shape[0])
    m.weight.data.copy_(lib.tensor(w))
    m.bias.data.copy_(lib.tensor(b[:w.shape[0]]))
    return m


def _conv(lib):
    m = lib.nn.Conv2d(3, 5, 3)
    m.weight.data.copy_(lib.tensor(PR_CW))
    m.bias.data.zero_()
    return m


def _layout(m):
    return [sorted(m.state_dict()), [n for n, _ in m.named_parameters()], [n for n, _ in m.named_buffers()]]


def _pruning(lib):
    P = lib.nn.utils.prune
    m = _linear(lib)
    P.l1_unstructured(m, "weight", amount=0.3)
    out = [_layout(m), m.weight, m.weight_mask, P.is_pruned(m)]
    P.l1_unstructured(m, "weight", amount=2)  # iterative: the masks combine in a PruningContainer
    y = m(lib.ones(2, 4))
    y.sum().backward()
    out += [m.weight_mask, y, m.weight_orig.grad]
    P.remove(m, "weight")
    out += [_layout(m), m.weight, P.is_pruned(m)]
    c = _conv(lib)
    P.ln_structured(c, "weight", amount=0.4, n=2, dim=0)
    P.l1_unstructured(c, "bias", amount=0.0)
    out += [_layout(c), c.weight_mask]
    c = _conv(lib)
    P.ln_structured(c, "weight", amount=2, n=float("inf"), dim=1)
    out += [c.weight_mask]
    a, b = _linear(lib), _conv(lib)
    P.global_unstructured([(a, "weight"), (b, "weight"), (a, "bias")], pruning_method=P.L1Unstructured, amount=0.5)
    out += [a.weight_mask, b.weight_mask, a.bias_mask, _layout(a)]
    d = _linear(lib)
    P.custom_from_mask(d, "weight", mask=lib.tensor(PR_W > 0))
    P.l1_unstructured(d, "bias", amount=0.5, importance_scores=lib.tensor(-PR_B))
    out += [d.weight, d.bias, _layout(d)]
    e = _linear(lib)
    P.random_unstructured(e, "weight", amount=0.5)
    out += [int(e.weight_mask.sum()), e.weight_mask.dtype == lib.float32]
    # A pruned state dict loads into a model pruned with identity (the usual checkpoint round trip).
    f = _linear(lib)
    P.identity(f, "weight")
    P.identity(f, "bias")
    f.load_state_dict(a.state_dict())
    return out + [f.weight, f(lib.ones(1, 4))]


def test_pruning_masks_and_state_dict_keys_match_torch():
    assert_close_tree(_pruning(torch), _pruning(jitorch))


def _pruned_training(lib):
    P = lib.nn.utils.prune
    model = lib.nn.Sequential(_linear(lib), lib.nn.ReLU(), _linear(lib, PR_W2, PR_B))
    for mod in model.modules():
        if isinstance(mod, lib.nn.Linear):
            P.l1_unstructured(mod, name="weight", amount=0.5)
    opt = lib.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(2):
        opt.zero_grad()
        model(lib.ones(3, 4)).pow(2).sum().backward()
        opt.step()
    sparsity = float((model[0].weight == 0).sum()) / model[0].weight.nelement()
    return [sorted(model.state_dict()), model[0].weight, model[2].weight, sparsity]


def test_pruned_model_trains_as_torch():
    assert_close_tree(_pruned_training(torch), _pruned_training(jitorch))


@pytest.mark.parametrize("call", ["fraction", "count", "remove"])
def test_pruning_errors_match_torch(call):
    def run(lib):
        P = lib.nn.utils.prune
        m = _linear(lib)
        {"fraction": lambda: P.l1_unstructured(m, "weight", amount=1.5),
         "count": lambda: P.l1_unstructured(m, "weight", amount=100),
         "remove": lambda: P.remove(m, "weight")}[call]()

    with pytest.raises(ValueError) as expected:
        run(torch)
    with pytest.raises(ValueError) as got:
        run(jitorch)
    assert str(got.value) == str(expected.value)
