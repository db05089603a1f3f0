"""torch.optim.Muon against torch 2.13 step for step (its Newton-Schulz iteration in bfloat16, the weights in
float32/float64), and the ``torch.optim.optimizer`` names that optimizers written outside PyTorch import."""
from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from optim_helpers import TOL, _np, _strip_tensors

import jitorch

SHAPES = ((4, 3), (3, 5), (6, 6))


def _muon_pair(dtype, **kwargs):
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal(s).astype(dtype) for s in SHAPES]
    jps = [jitorch.tensor(a.copy(), requires_grad=True) for a in arrays]
    tps = [torch.tensor(a.copy(), requires_grad=True) for a in arrays]
    return jitorch.optim.Muon(jps, **kwargs), torch.optim.Muon(tps, **kwargs), jps, tps, rng


def _train_muon(jopt, topt, jps, tps, rng, steps, tol):
    for step in range(steps):
        for i, (jp, tp) in enumerate(zip(jps, tps)):
            if i == 1 and step % 3 == 2:  # no gradient this step: the parameter and its buffer stay
                jp.grad = tp.grad = None
                continue
            g = rng.standard_normal(tuple(tp.shape)).astype(_np(tp).dtype)
            jp.grad, tp.grad = jitorch.tensor(g.copy()), torch.tensor(g.copy())
        jopt.step()
        topt.step()
        for i, (jp, tp) in enumerate(zip(jps, tps)):
            np.testing.assert_allclose(_np(jp), _np(tp), err_msg=f"param {i} after step {step + 1}", **tol)
            np.testing.assert_allclose(_np(jopt.state[jp]["momentum_buffer"]), _np(topt.state[tp]["momentum_buffer"]),
                                       err_msg=f"buffer {i} after step {step + 1}", **tol)


@pytest.mark.parametrize("kwargs", [
    dict(), dict(lr=0.02), dict(lr=0.02, nesterov=False, weight_decay=0.0),
    dict(lr=0.05, momentum=0.9, adjust_lr_fn="match_rms_adamw"),
    dict(lr=0.05, ns_steps=3, ns_coefficients=(3.0, -3.2, 1.2), eps=1e-5, adjust_lr_fn="original"),
])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_muon_matches_torch_step_for_step(kwargs, dtype):
    jopt, topt, jps, tps, rng = _muon_pair(dtype, **kwargs)
    _train_muon(jopt, topt, jps, tps, rng, 6, TOL[dtype])
    assert repr(jopt) == repr(topt)


def test_muon_tensor_lr_and_state_dict_round_trip():
    jopt, topt, jps, tps, rng = _muon_pair(np.float32, lr=0.02)
    _train_muon(jopt, topt, jps, tps, rng, 3, TOL[np.float32])
    jsd, tsd = copy.deepcopy(jopt.state_dict()), copy.deepcopy(topt.state_dict())
    assert _strip_tensors(jsd) == _strip_tensors(tsd)
    jopt2 = jitorch.optim.Muon(jps, lr=jitorch.tensor(0.5))
    topt2 = torch.optim.Muon(tps, lr=torch.tensor(0.5))
    jopt2.load_state_dict(jsd)
    topt2.load_state_dict(tsd)
    for group in (*jopt2.param_groups, *topt2.param_groups):
        group["lr"] = 0.03
    _train_muon(jopt2, topt2, jps, tps, rng, 3, TOL[np.float32])


def test_muon_newton_schulz_equals_torchs_bfloat16_iteration():
    from torch.optim._muon import _zeropower_via_newtonschulz as torch_ns

    from jitorch.optim.muon import _zeropower_via_newtonschulz as jit_ns

    rng = np.random.default_rng(3)
    for shape in ((8, 4), (4, 8), (5, 5)):
        g = rng.standard_normal(shape).astype(np.float32)
        j, t = jit_ns(jitorch.tensor(g), (3.4445, -4.775, 2.0315), 5, 1e-7), torch_ns(torch.tensor(g),
                                                                                     (3.4445, -4.775, 2.0315), 5, 1e-7)
        assert str(j.dtype) == "jitorch.bfloat16"
        np.testing.assert_array_equal(_np(j.float()), _np(t.float()))


@pytest.mark.parametrize("kwargs,message", [
    (dict(lr=-1.0), "Learning rate should be >= 0 but is: -1.0"), (dict(momentum=-0.5), "momentum should be"),
    (dict(weight_decay=-1.0), "weight decay should be"), (dict(adjust_lr_fn="foo"), "Adjust learning rate function"),
])
def test_muon_hyperparameter_errors_match_torch(kwargs, message):
    with pytest.raises(ValueError, match=message):
        torch.optim.Muon([torch.zeros(2, 2, requires_grad=True)], **kwargs)
    with pytest.raises(ValueError, match=message):
        jitorch.optim.Muon([jitorch.zeros(2, 2, requires_grad=True)], **kwargs)


def test_muon_refuses_non_matrix_parameters_as_torch():
    with pytest.raises(ValueError, match=r"only supports 2D parameters .* size: torch.Size\(\[3\]\)"):
        torch.optim.Muon([torch.zeros(3, requires_grad=True)])
    with pytest.raises(ValueError, match=r"only supports 2D parameters .* size: jitorch.Size\(\[3\]\)"):
        jitorch.optim.Muon([jitorch.zeros(3, requires_grad=True)])


def test_optimizer_module_has_the_names_outside_optimizers_import():
    import torch.optim.optimizer as torch_opt

    import jitorch.optim.optimizer as jit_opt

    for name in ("ParamsT", "StateDict", "Args", "Kwargs", "_params_doc", "_foreach_doc", "_maximize_doc",
                 "_default_to_fused_or_foreach", "_view_as_real", "_disable_dynamo_if_unsupported",
                 "_get_capturable_supported_devices", "_stack_if_compiling"):
        assert hasattr(torch_opt, name) and hasattr(jit_opt, name), name
    params = [jitorch.nn.Parameter(jitorch.ones(2)), None]
    tparams = [torch.nn.Parameter(torch.ones(2)), None]
    for flags in (dict(differentiable=False), dict(differentiable=False, use_fused=True),
                  dict(differentiable=True, use_fused=True)):
        assert jit_opt._default_to_fused_or_foreach(params, **flags) == torch_opt._default_to_fused_or_foreach(
            tparams, **flags)
    z, tz = [jitorch.ones(2, dtype=jitorch.complex64)], [torch.ones(2, dtype=torch.complex64)]
    g, tg = [jitorch.ones(2, dtype=jitorch.complex64)], [torch.ones(2, dtype=torch.complex64)]
    jit_opt._view_as_real(z, g)
    torch_opt._view_as_real(tz, tg)
    assert tuple(z[0].shape) == tuple(tz[0].shape) and tuple(g[0].shape) == tuple(tg[0].shape)
    grouped = jitorch.optim.Optimizer._group_tensors_by_device_and_dtype(
        [[jitorch.ones(2), jitorch.ones(1, dtype=jitorch.float64), jitorch.zeros(3)], [None, None, jitorch.ones(3)]],
        with_indices=True)
    assert {str(k[1]): (len(v[0][0]), v[1]) for k, v in grouped.items()} == {"jitorch.float32": (2, [0, 2]),
                                                                             "jitorch.float64": (1, [1])}
