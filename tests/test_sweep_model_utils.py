"""Model-surgery utilities as research code uses them, written once against ``lib`` and run with torch and jitorch.

Pruning schedules (iterative L1, structured Ln on conv channels, global pruning with importance scores, then
``remove`` and a state-dict round trip), custom parametrizations (``right_inverse``, several originals, ``cached``,
``remove_parametrizations`` both ways), ``orthogonal``/``weight_norm``/``spectral_norm`` parametrizations, an SWA
loop (cosine annealing, then ``SWALR`` and ``AveragedModel``, an EMA of a weight-normed net, ``update_bn``),
``functional_call`` through a parametrization, BatchNorm fusion; and torch's errors where such code goes wrong.
"""
from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
import torch.nn.utils.fusion  # noqa: F401 - torch's submodules are imported by name, as user code does
import torch.nn.utils.parametrizations  # noqa: F401
import torch.nn.utils.parametrize  # noqa: F401
import torch.nn.utils.prune  # noqa: F401
import torch.optim.swa_utils  # noqa: F401

import jitorch
from sweep_helpers import assert_close_tree

X = np.random.default_rng(1).standard_normal((3, 6)).astype(np.float32)
G = np.random.default_rng(2).standard_normal((3, 4)).astype(np.float32)
XC = np.random.default_rng(3).standard_normal((2, 3, 7, 7)).astype(np.float32)


def seeded(lib, module, seed=0):
    """``module`` with standard-normal weights from NumPy ``seed`` (the same in both libraries)."""
    rng = np.random.default_rng(seed)
    with lib.no_grad():
        for p in module.parameters():
            p.copy_(lib.tensor(rng.standard_normal(tuple(p.shape)).astype(np.float32)))
    return module


def linear(lib, i=6, o=4, seed=0):
    return seeded(lib, lib.nn.Linear(i, o), seed)


def both(fn):
    return fn(torch), fn(jitorch)


def pruning_schedule(lib):
    P = lib.nn.utils.prune
    fc, conv = linear(lib), seeded(lib, lib.nn.Conv2d(3, 5, 3), 1)
    P.l1_unstructured(fc, "weight", amount=0.25)
    P.l1_unstructured(fc, "weight", amount=0.25)  # a PruningContainer: only still-unpruned weights count
    P.ln_structured(conv, "weight", amount=2, n=1, dim=1)
    P.ln_structured(conv, "weight", amount=0.4, n=float("inf"), dim=0)
    other = linear(lib, 4, 3, seed=5)
    scores = {(other, "weight"): other.weight.detach().abs() * 2}
    P.global_unstructured([(other, "weight"), (fc, "bias")], pruning_method=P.L1Unstructured,
                          importance_scores=scores, amount=5)
    y = fc(lib.tensor(X))
    y.backward(lib.tensor(G))
    out = {"keys": sorted(fc.state_dict()), "params": [n for n, _ in fc.named_parameters()],
           "hooks": [type(h).__name__ for h in fc._forward_pre_hooks.values()],
           "y": y, "grad_orig": fc.weight_orig.grad, "masks": [fc.weight_mask, conv.weight_mask, other.weight_mask],
           "conv": conv(lib.tensor(XC)), "pruned": P.is_pruned(fc)}
    P.remove(fc, "weight")
    state = {k: v.clone() for k, v in fc.state_dict().items()}
    fresh = linear(lib, seed=9)
    P.identity(fresh, "bias")
    fresh.load_state_dict(state)
    out.update(after_keys=sorted(state), weight=fc.weight, is_param=isinstance(fc.weight, lib.nn.Parameter),
               reloaded=fresh(lib.tensor(X)))
    return out


def test_pruning_schedule_matches_torch():
    th, jt = both(pruning_schedule)
    assert_close_tree(th, jt, rtol=1e-5, atol=1e-6)


def test_failed_structured_pruning_refuses_and_leaves_module_as_it_was():
    for lib in (torch, jitorch):
        P = lib.nn.utils.prune
        fc = linear(lib)
        with pytest.raises(ValueError, match="Structured pruning can only be applied to multidimensional tensors. "
                                             "Found tensor of shape .*Size\\(\\[4\\]\\) with 1 dims"):
            P.ln_structured(fc, "bias", amount=0.5, n=1, dim=0)
        # The parameter is given back under its own name: no bias_orig, no hook, the module still runs.
        assert sorted(fc.state_dict()) == ["bias", "weight"], lib.__name__
        assert [n for n, _ in fc.named_parameters()] == ["weight", "bias"] and not fc._forward_pre_hooks
        with pytest.raises(IndexError, match=r"Invalid index 2 for tensor of size .*Size\(\[4, 6\]\)"):
            P.random_structured(fc, "weight", amount=0.5, dim=2)
        assert sorted(fc.state_dict()) == ["bias", "weight"]


def test_pruning_argument_errors_match_torch():
    for lib in (torch, jitorch):
        P = lib.nn.utils.prune
        fc = linear(lib)
        with pytest.raises(TypeError, match="Invalid type for amount: a. Must be int or float."):
            P.l1_unstructured(fc, "weight", amount="a")
        with pytest.raises(ValueError, match=r"amount=1.5 should either be a float in the range \[0, 1\]"):
            P.l1_unstructured(fc, "weight", amount=1.5)
        with pytest.raises(AssertionError, match=r"importance_scores should have the same shape as parameter weight "
                                                 r"of Linear.*, got .*Size\(\[3, 3\]\) vs .*Size\(\[4, 6\]\)"):
            P.l1_unstructured(fc, "weight", amount=0.5, importance_scores=lib.ones(3, 3))
        assert sorted(fc.state_dict()) == ["bias", "weight"]  # refused before the parameter moved


class _Symmetric:
    @staticmethod
    def make(lib):
        class Symmetric(lib.nn.Module):
            def forward(self, X):
                return X.triu() + X.triu(1).transpose(-1, -2)

            def right_inverse(self, A):
                return A.triu()

        class LowRank(lib.nn.Module):
            def forward(self, A, B):
                return A @ B

            def right_inverse(self, W):
                U, S, Vh = lib.linalg.svd(W, full_matrices=False)
                return U[:, :2] * S[:2], Vh[:2]

        return Symmetric, LowRank


def custom_parametrizations(lib):
    P = lib.nn.utils.parametrize
    Symmetric, LowRank = _Symmetric.make(lib)
    sq = linear(lib, 4, 4)
    P.register_parametrization(sq, "weight", Symmetric())
    y = sq(lib.tensor(X[:, :4]))
    y.backward(lib.tensor(G))
    with P.cached():
        same = sq.weight is sq.weight
    sq.weight = lib.ones(4, 4) * 3 + lib.eye(4)  # through right_inverse
    out = {"keys": sorted(sq.state_dict()), "type": type(sq).__name__, "y": y, "same_in_cache": same,
           "grad": sq.parametrizations.weight.original.grad, "original": sq.parametrizations.weight.original}
    kept = linear(lib, 4, 4)  # not a deepcopy: torch's copy shares the parametrized class, and its property
    P.register_parametrization(kept, "weight", Symmetric())
    kept.weight = sq.weight.detach()
    P.remove_parametrizations(sq, "weight", leave_parametrized=True)
    P.remove_parametrizations(kept, "weight", leave_parametrized=False)
    out.update(kept_value=sq.weight, kept_type=type(sq).__name__, original_value=kept.weight)
    lr = linear(lib, 6, 4)
    P.register_parametrization(lr, "weight", LowRank())
    y2 = lr(lib.tensor(X))
    y2.backward(lib.tensor(G))
    grads = [lr.parametrizations.weight.original0.grad, lr.parametrizations.weight.original1.grad]
    out.update(lr_keys=sorted(lr.state_dict()), lr_y=y2, lr_rank=lib.linalg.matrix_rank(lr.weight.detach()),
               lr_grad_norms=[g.norm() for g in grads])  # the SVD's signs are free; the norms are not
    return out


def test_custom_parametrizations_match_torch():
    th, jt = both(custom_parametrizations)
    assert_close_tree(th, jt, rtol=1e-5, atol=1e-5)


def builtin_parametrizations(lib, bases):
    PZ = lib.nn.utils.parametrizations
    out = {}
    for kind in ("matrix_exp", "cayley", "householder"):
        m = linear(lib, 6, 4)
        PZ.orthogonal(m, "weight", orthogonal_map=kind)
        # A wide weight's base is completed with random columns; both runs take torch's.
        if lib is torch:
            bases[kind] = m.parametrizations.weight[0].base.detach().numpy().copy()
        else:
            with lib.no_grad():
                m.parametrizations.weight[0].base.copy_(lib.tensor(bases[kind]))
        y = m(lib.tensor(X))
        y.backward(lib.tensor(G))
        out[kind] = [y, m.weight @ m.weight.T, m.parametrizations.weight.original.grad, sorted(m.state_dict())]
    wn = linear(lib)
    PZ.weight_norm(wn, dim=0)
    y = wn(lib.tensor(X))
    y.backward(lib.tensor(G))
    o = wn.parametrizations.weight
    out["weight_norm"] = [sorted(wn.state_dict()), y, o.original0, o.original1, o.original0.grad, o.original1.grad]
    lib.manual_seed(0)
    sn = linear(lib)
    PZ.spectral_norm(sn, n_power_iterations=30)
    sn.eval()
    out["spectral_norm"] = [sorted(sn.state_dict()), lib.linalg.matrix_norm(sn.weight.detach(), 2)]
    return out


def test_builtin_parametrizations_match_torch():
    bases = {}
    th = builtin_parametrizations(torch, bases)
    jt = builtin_parametrizations(jitorch, bases)
    assert_close_tree(th, jt, rtol=1e-5, atol=1e-5)


def swa_loop(lib):
    S = lib.optim.swa_utils
    rng = np.random.default_rng(0)
    net = seeded(lib, lib.nn.Sequential(lib.nn.Linear(6, 8), lib.nn.BatchNorm1d(8), lib.nn.ReLU(),
                                        lib.nn.Linear(8, 4)))
    lib.nn.utils.parametrizations.weight_norm(net[3])
    opt = lib.optim.SGD([{"params": net[0].parameters(), "lr": 0.05}, {"params": net[3].parameters()}], lr=0.1,
                        momentum=0.9, weight_decay=1e-4)
    cosine = lib.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=10)
    swa = S.AveragedModel(net, use_buffers=True)
    ema = S.AveragedModel(net, multi_avg_fn=S.get_ema_multi_avg_fn(0.9))
    custom = S.AveragedModel(net, avg_fn=lambda avg, p, n: 0.7 * avg + 0.3 * p)
    swa_lr = S.SWALR(opt, swa_lr=[0.01, 0.02], anneal_epochs=2, anneal_strategy="cos")
    data, target = rng.standard_normal((16, 6)).astype(np.float32), rng.standard_normal((16, 4)).astype(np.float32)
    lrs = []
    for epoch in range(7):
        for i in range(0, 16, 8):
            opt.zero_grad()
            lib.nn.functional.mse_loss(net(lib.tensor(data[i:i + 8])), lib.tensor(target[i:i + 8])).backward()
            opt.step()
        if epoch >= 3:
            for averaged in (swa, ema, custom):
                averaged.update_parameters(net)
            swa_lr.step()
        else:
            cosine.step()
        lrs.append([g["lr"] for g in opt.param_groups])
    loader = lib.utils.data.DataLoader(lib.utils.data.TensorDataset(lib.tensor(data), lib.tensor(target)),
                                       batch_size=4)
    for averaged in (ema, custom):
        S.update_bn(loader, averaged)
    S.update_bn([lib.tensor(data[i:i + 4]) for i in range(0, 16, 4)], swa)
    out = {"lrs": lrs}
    for name, averaged in (("swa", swa), ("ema", ema), ("custom", custom)):
        averaged.eval()
        out[name] = [dict(averaged.state_dict()), averaged(lib.tensor(data))]
    return out


def test_swa_and_ema_loop_matches_torch():
    th, jt = both(swa_loop)
    assert_close_tree(th, jt, rtol=1e-5, atol=1e-5)


def surgery_misc(lib):
    F = lib.nn.utils.fusion
    rng = np.random.default_rng(7)
    conv, bn = seeded(lib, lib.nn.Conv2d(3, 5, 3)), lib.nn.BatchNorm2d(5)
    with lib.no_grad():
        bn.running_mean.copy_(lib.tensor(rng.standard_normal(5).astype(np.float32)))
        bn.running_var.copy_(lib.tensor(rng.uniform(0.5, 2, 5).astype(np.float32)))
        bn.weight.copy_(lib.tensor(rng.standard_normal(5).astype(np.float32)))
    conv.eval(), bn.eval()
    fused = F.fuse_conv_bn_eval(conv, bn)
    fc, bn1 = linear(lib).eval(), lib.nn.BatchNorm1d(4).eval()
    with lib.no_grad():
        bn1.running_var.fill_(2.0)
    wn = linear(lib)
    lib.nn.utils.parametrizations.weight_norm(wn)
    params = {k: v.detach().clone().requires_grad_() for k, v in wn.named_parameters()}
    scaled = dict(params, **{"parametrizations.weight.original0": params["parametrizations.weight.original0"] * 1.5})
    y = lib.func.functional_call(wn, scaled, (lib.tensor(X),))
    y.backward(lib.tensor(G))
    vec = lib.nn.utils.parameters_to_vector(wn.parameters())
    lib.nn.utils.vector_to_parameters(vec * 2, wn.parameters())
    return {"conv": [fused(lib.tensor(XC)), bn(conv(lib.tensor(XC)))],
            "linear": F.fuse_linear_bn_eval(fc, bn1)(lib.tensor(X)), "functional_call": y,
            "grads": [params[k].grad for k in sorted(params)], "vector": vec, "doubled": wn(lib.tensor(X))}


def test_fusion_functional_call_and_vectors_match_torch():
    th, jt = both(surgery_misc)
    assert_close_tree(th, jt, rtol=1e-5, atol=1e-5)


def test_surgery_errors_match_torch():
    for lib in (torch, jitorch):
        F = lib.nn.utils.fusion
        with pytest.raises(AssertionError, match=r"^To fuse, linear.out_features == bn.num_features or "
                                                 r"bn.num_features == 1, got linear.out_features=4 and "
                                                 r"bn.num_features=5$"):
            F.fuse_linear_bn_eval(linear(lib).eval(), lib.nn.BatchNorm1d(5).eval())
        stateless = lib.nn.BatchNorm2d(5, track_running_stats=False).eval()
        with pytest.raises(AssertionError, match="^bn.running_mean and bn.running_var must not be None$"):
            F.fuse_conv_bn_eval(lib.nn.Conv2d(3, 5, 3).eval(), stateless)
        pruned = linear(lib)
        lib.nn.utils.prune.l1_unstructured(pruned, "weight", amount=0.5)
        with pytest.raises(RuntimeError, match=r"^Only Tensors created explicitly by the user \(graph leaves\) "
                                               r"support the deepcopy protocol at the moment.  If you were "
                                               r"attempting to deepcopy a module, this may be because of a "
                                               r"torch.nn.utils.weight_norm usage, see "
                                               r"https://github.com/pytorch/pytorch/pull/103001$"):
            copy.deepcopy(pruned)
