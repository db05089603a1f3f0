"""Helpers of the optimizer tests: the optimizer cases, parameters and gradients fed to both libraries, comparisons."""
import copy

import numpy as np
import torch

import jitorch

STEPS = 20
SHAPES = ((4, 3), (3,), (2, 2, 2), ())
TOL = {np.float32: dict(rtol=2e-5, atol=2e-6), np.float64: dict(rtol=1e-12, atol=1e-13)}

CASES = [
    ("SGD", dict(lr=0.1)),
    ("SGD", dict(lr=0.1, momentum=0.9)),
    ("SGD", dict(lr=0.05, momentum=0.9, dampening=0.3)),
    ("SGD", dict(lr=0.05, momentum=0.9, nesterov=True)),
    ("SGD", dict(lr=0.1, weight_decay=0.1)),
    ("SGD", dict(lr=0.05, momentum=0.8, nesterov=True, weight_decay=0.05, maximize=True)),
    ("SGD", dict(lr=0.1, foreach=True)),
    ("Adam", dict()),
    ("Adam", dict(lr=0.01)),
    ("Adam", dict(lr=0.01, amsgrad=True)),
    ("Adam", dict(lr=0.01, weight_decay=0.1)),
    ("Adam", dict(lr=0.01, maximize=True)),
    ("Adam", dict(lr=0.02, betas=(0.8, 0.99), eps=1e-6, amsgrad=True, weight_decay=0.05, maximize=True)),
    ("Adam", dict(lr=0.01, decoupled_weight_decay=True, weight_decay=0.1)),
    ("Adam", dict(lr=0.01, foreach=False, capturable=False)),
    ("Adam", dict(lr=0.01, fused=True)),
    ("AdamW", dict(lr=0.01)),
    ("AdamW", dict(lr=0.01, weight_decay=0.2, amsgrad=True)),
    ("AdamW", dict(lr=0.01, betas=(0.5, 0.9), maximize=True)),
    ("RMSprop", dict()),
    ("RMSprop", dict(lr=0.01, alpha=0.9)),
    ("RMSprop", dict(lr=0.01, centered=True)),
    ("RMSprop", dict(lr=0.01, momentum=0.9)),
    ("RMSprop", dict(lr=0.01, centered=True, momentum=0.5, weight_decay=0.1, maximize=True, eps=1e-6)),
    ("Adagrad", dict()),
    ("Adagrad", dict(lr=0.1, lr_decay=0.01)),
    ("Adagrad", dict(lr=0.1, initial_accumulator_value=0.1)),
    ("Adagrad", dict(lr=0.1, weight_decay=0.1, maximize=True, eps=1e-6)),
    ("Adadelta", dict()),
    ("Adadelta", dict(lr=0.5, rho=0.95)),
    ("Adadelta", dict(weight_decay=0.1, maximize=True, eps=1e-5)),
]


def _case_id(case):
    name, kwargs = case
    return name + "".join(f"-{k}={v}" for k, v in kwargs.items())


def _params(rng, dtype=np.float32, shapes=SHAPES):
    """The same leaves in both frameworks (plain tensors: optimizers take any tensors)."""
    arrays = [np.asarray(rng.standard_normal(s)).astype(dtype) for s in shapes]
    return ([jitorch.tensor(a.copy(), requires_grad=True) for a in arrays],
            [torch.tensor(a.copy(), requires_grad=True) for a in arrays])


def _feed_grads(jps, tps, rng, step):
    """Random gradients for both; the second parameter gets none every third step (it must be skipped)."""
    for i, (jp, tp) in enumerate(zip(jps, tps)):
        if i == 1 and step % 3 == 2:
            jp.grad = tp.grad = None
            continue
        g = np.asarray(rng.standard_normal(tuple(tp.shape))).astype(tp.detach().numpy().dtype)
        jp.grad = jitorch.tensor(g.copy())
        tp.grad = torch.tensor(g.copy())


def _np(t):
    return np.asarray(t.detach().numpy())


def _assert_close(j, t, tol, what):
    if isinstance(t, torch.Tensor):
        assert isinstance(j, jitorch.Tensor), f"{what}: not a tensor"
        assert str(j.dtype).split(".")[-1] == str(t.dtype).split(".")[-1], f"{what}: {j.dtype} != {t.dtype}"
        assert tuple(j.shape) == tuple(t.shape), what
        np.testing.assert_allclose(_np(j), _np(t), err_msg=what, **tol)
    else:
        assert j == t, f"{what}: {j!r} != {t!r}"


def _assert_same(jopt, topt, jps, tps, tol, when=""):
    for i, (jp, tp) in enumerate(zip(jps, tps)):
        _assert_close(jp, tp, tol, f"param {i} {when}")
        jstate, tstate = jopt.state.get(jp, {}), topt.state.get(tp, {})
        assert sorted(jstate) == sorted(tstate), f"state keys of param {i} {when}: {sorted(jstate)}"
        for key in tstate:
            _assert_close(jstate[key], tstate[key], tol, f"state[{key!r}] of param {i} {when}")


def _train(jopt, topt, jps, tps, rng, steps, tol):
    for step in range(steps):
        _feed_grads(jps, tps, rng, step)
        jopt.step()
        topt.step()
        _assert_same(jopt, topt, jps, tps, tol, f"after step {step + 1}")


def _strip_tensors(sd):
    """A state dict with tensors replaced by (dtype name, shape): comparable across frameworks."""
    if isinstance(sd, (jitorch.Tensor, torch.Tensor)):
        return (str(sd.dtype).split(".")[-1], tuple(sd.shape))
    if isinstance(sd, dict):
        return {k: _strip_tensors(v) for k, v in sd.items()}
    if isinstance(sd, (list, tuple)):
        return type(sd)(_strip_tensors(v) for v in sd)
    return sd


def _pair(name, jps, tps, **kwargs):
    """The optimizer ``name`` of each library over its parameters, with the same options."""
    return getattr(jitorch.optim, name)(jps, **kwargs), getattr(torch.optim, name)(tps, **kwargs)


def _train_case(name, kwargs, dtype=np.float32, seed=0, steps=STEPS, shapes=SHAPES):
    """Optimizer ``name`` with ``kwargs`` in both libraries, trained ``steps`` steps on the same seeded parameters and
    gradients, compared after each."""
    rng = np.random.default_rng(seed)
    jps, tps = _params(rng, dtype, shapes)
    _train(*_pair(name, jps, tps, **kwargs), jps, tps, rng, steps, TOL[dtype])


def _reload(jopt, topt, jps, tps, make, tol):
    """Both optimizers' state dicts (equal but for their tensors' values) loaded into fresh optimizers ``make(jps2,
    tps2)`` over copies of the weights, compared right after loading; ``(jopt2, topt2, jps2, tps2, jsd, tsd)``."""
    jsd, tsd = copy.deepcopy(jopt.state_dict()), copy.deepcopy(topt.state_dict())
    assert _strip_tensors(jsd) == _strip_tensors(tsd)
    jps2 = [jitorch.tensor(_np(p).copy(), requires_grad=True) for p in jps]
    tps2 = [torch.tensor(_np(p).copy(), requires_grad=True) for p in tps]
    jopt2, topt2 = make(jps2, tps2)
    jopt2.load_state_dict(jsd)
    topt2.load_state_dict(tsd)
    _assert_same(jopt2, topt2, jps2, tps2, tol, "after loading")
    return jopt2, topt2, jps2, tps2, jsd, tsd
