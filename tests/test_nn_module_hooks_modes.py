"""``nn.Module`` forward and backward hooks, train/eval and ``requires_grad_``, ``zero_grad``, dtype conversion, reprs,
pickling and deepcopy, checked against PyTorch 2.13.
"""
from __future__ import annotations

import copy
import pickle

import numpy as np
import pytest
import torch

import jitorch

from nn_module_helpers import J, T, assert_close, define, net_pair, same_error


# -- hooks ----------------------------------------------------------------------------------------------------------
def _record_hooks(model, log):
    handles = []
    for name, mod in model.named_modules():
        handles.append(mod.register_forward_pre_hook(lambda m, args, n=name: log.append(("pre", n))))
        handles.append(mod.register_forward_hook(lambda m, args, out, n=name: log.append(("fwd", n))))
    return handles


def test_forward_hooks_order_and_effects(rng):
    th, jt = net_pair(rng)
    logs = {}
    x = rng.standard_normal((2, 4)).astype(np.float32)
    for lib, model in ((torch, th), (jitorch, jt)):
        log = logs[lib.__name__] = []
        handles = _record_hooks(model, log)
        model(lib.from_numpy(x.copy()))
        for h in handles:
            h.remove()
        model(lib.from_numpy(x.copy()))  # removed hooks are silent
    assert logs["jitorch"] == logs["torch"] and len(logs["torch"]) > 10

    outs = {}
    for lib, model in ((torch, th), (jitorch, jt)):
        h1 = model.body.register_forward_pre_hook(lambda m, args: args[0] * 2)  # a single value is wrapped
        h2 = model.head.register_forward_hook(lambda m, args, out: out + 1)
        h3 = model.head.register_forward_hook(lambda m, args, out: out * 3, prepend=True)
        h4 = model.table.a.register_forward_pre_hook(lambda m, args, kwargs: ((args[0] - 1,), kwargs),
                                                     with_kwargs=True)
        outs[lib.__name__] = model(lib.from_numpy(x.copy()))
        for h in (h1, h2, h3, h4):
            h.remove()
    assert_close(outs["jitorch"], outs["torch"], atol=1e-4)


def test_forward_hook_with_kwargs_and_always_call():
    for lib in (torch, jitorch):
        class Boom(lib.nn.Module):
            def forward(self, x, scale=1.0):
                if scale < 0:
                    raise ValueError("negative scale")
                return x * scale

        seen = []
        m = Boom()
        m.register_forward_hook(lambda mod, args, kwargs, out: seen.append(kwargs["scale"]) or out + 1,
                                with_kwargs=True)
        m.register_forward_hook(lambda mod, args, out: seen.append("always"), always_call=True)
        assert m(lib.ones(1), scale=2.0).item() == 3.0
        with pytest.raises(ValueError):
            m(lib.ones(1), scale=-1.0)
        assert seen == [2.0, "always", "always"], lib.__name__


def test_full_backward_hooks_match_torch(rng):
    th, jt = net_pair(rng)
    x = rng.standard_normal((3, 4)).astype(np.float32)
    results = {}
    for lib, model in ((torch, th), (jitorch, jt)):
        log = []

        def hook(mod, grad_in, grad_out, log=log):
            log.append(("bwd", type(mod).__name__, [None if g is None else g.clone() for g in grad_in],
                        [g.clone() for g in grad_out]))

        def pre_hook(mod, grad_out, log=log):
            log.append(("pre", type(mod).__name__))

        handles = [model.head.register_full_backward_hook(hook), model.body.register_full_backward_hook(hook),
                   model.head.register_full_backward_pre_hook(pre_hook)]
        # Doubling head's grad_input doubles every gradient upstream of it.
        handles.append(model.head.register_full_backward_hook(lambda m, gi, go: tuple(g * 2 for g in gi)))
        inp = lib.from_numpy(x.copy()).requires_grad_()
        model(inp).sum().backward()
        results[lib.__name__] = (log, inp.grad, model.body[0].weight.grad)
        for h in handles:
            h.remove()
    log_j, grad_j, w_j = results["jitorch"]
    log_t, grad_t, w_t = results["torch"]
    assert [e[:2] for e in log_j] == [e[:2] for e in log_t] == [("pre", "Linear"), ("bwd", "Linear"),
                                                                  ("bwd", "Sequential")]
    for ej, et in zip(log_j[1:], log_t[1:]):
        for gj, gt in zip(ej[2] + ej[3], et[2] + et[3]):
            assert_close(gj, gt, atol=1e-4)
    assert_close(grad_j, grad_t, atol=1e-4)
    assert_close(w_j, w_t, atol=1e-4)


def test_full_backward_hook_without_input_grad():
    for lib in (torch, jitorch):
        lin = define(lib).Linear(2, 2)
        lib.nn.init.ones_(lin.weight)
        lib.nn.init.zeros_(lin.bias)
        seen = []
        lin.register_full_backward_hook(lambda m, gi, go: seen.append((gi, go[0].sum().item())))
        with pytest.warns(UserWarning, match="Full backward hook is firing when gradients are computed with respect"):
            (lin(lib.ones(1, 2)) * 3).sum().backward()
        assert seen == [((None,), 6.0)], lib.__name__


# -- modes, gradients, conversions ------------------------------------------------------------------------------
def test_train_eval_and_requires_grad(rng):
    th, jt = net_pair(rng)
    for model in (th, jt):
        assert model.eval() is model
        model.body.train()
    assert [m.training for m in jt.modules()] == [m.training for m in th.modules()]
    assert not jt.training and jt.body[1].training and not jt.head.training
    with pytest.raises(ValueError, match="training mode is expected to be boolean"):
        jt.train("yes")
    jt.head.requires_grad_(False)
    assert [p.requires_grad for p in jt.parameters()] == [not n.startswith("head.") for n, _ in jt.named_parameters()]
    visited = {"torch": [], "jitorch": []}
    for lib, model in ((torch, th), (jitorch, jt)):
        assert model.apply(lambda m, lib=lib: visited[lib.__name__].append(type(m).__name__)) is model
    assert visited["jitorch"] == visited["torch"] and visited["torch"][-1] == "Net"  # children first


def test_zero_grad(rng):
    _, jt = net_pair(rng)
    jt(jitorch.ones(2, 4)).sum().backward()
    jt.zero_grad(set_to_none=False)
    assert all(p.grad is not None and p.grad.abs().sum().item() == 0 for p in jt.parameters())
    jt.zero_grad()
    assert all(p.grad is None for p in jt.parameters())


def test_to_dtype_keeps_parameter_objects(rng):
    _, jt = net_pair(rng)
    jt.register_buffer("ids", jitorch.arange(3))
    jt(jitorch.ones(1, 4)).sum().backward()
    before = list(jt.parameters())
    assert jt.to(jitorch.float64) is jt
    assert list(jt.parameters()) == before and all(p is q for p, q in zip(jt.parameters(), before))
    assert all(p.dtype is jitorch.float64 and p.grad.dtype is jitorch.float64 for p in jt.parameters())
    assert jt.steps.dtype is jitorch.float64 and jt.ids.dtype is jitorch.int64
    assert jt(jitorch.ones(1, 4, dtype=jitorch.float64)).dtype is jitorch.float64
    jt.float()
    assert jt.head.weight.dtype is jitorch.float32 and jt.ids.dtype is jitorch.int64
    jt.half()
    assert jt.head.weight.dtype is jitorch.float16
    jt.to(jitorch.zeros(1, dtype=jitorch.float64))
    assert jt.head.weight.dtype is jitorch.float64
    jt.to("cpu", dtype=jitorch.float32).cpu()
    assert jt.head.weight.dtype is jitorch.float32 and jt.head.weight.device.type == "cpu"
    jt.double()
    assert jt.body[0].bias.dtype is jitorch.float64
    jt_msg, th_msg = same_error(lambda: jt.to(jitorch.int64), lambda: T.Net().to(torch.int64))
    assert jt_msg == th_msg


# -- reprs ----------------------------------------------------------------------------------------------------------
def test_reprs_match_torch(rng):
    th, jt = net_pair(rng)
    assert repr(jt).replace("jitorch.", "torch.") == repr(th)
    assert repr(J.Linear(2, 3)) == "Linear(in_features=2, out_features=3, bias=True)"
    assert repr(jitorch.nn.Sequential(J.Linear(2, 3))) == \
        "Sequential(\n  (0): Linear(in_features=2, out_features=3, bias=True)\n)"
    for build in (lambda c, lib: lib.nn.ModuleList([c.Linear(2, 2)] * 3 + [c.Linear(2, 1), lib.nn.Module()]),
                  lambda c, lib: lib.nn.ModuleList(),
                  lambda c, lib: lib.nn.ModuleDict({"x": lib.nn.Sequential(), "y": c.Linear(1, 1)}),
                  lambda c, lib: lib.nn.ParameterList([lib.zeros(2, 3), lib.zeros(4, dtype=lib.float64)]),
                  lambda c, lib: lib.nn.ParameterDict({"b": lib.zeros(1), "a": lib.nn.Parameter(lib.ones(2, 2))})):
        assert repr(build(J, jitorch)).replace("jitorch.", "torch.") == repr(build(T, torch))
    assert repr(jitorch.nn.Parameter(jitorch.ones(2))) == "Parameter containing:\ntensor([1., 1.], requires_grad=True)"


# -- pickling and copying ---------------------------------------------------------------------------------------
def test_pickle_and_deepcopy_whole_module(rng):
    th, jt = net_pair(rng)
    jt.head.weight.tag = "keep me"
    jt.blocks[1].weight = jt.blocks[0].weight
    x = jitorch.from_numpy(rng.standard_normal((2, 4)).astype(np.float32))
    for clone in (pickle.loads(pickle.dumps(jt)), copy.deepcopy(jt)):
        assert type(clone).__name__ == "Net" and repr(clone) == repr(jt)
        assert all(type(p) is jitorch.nn.Parameter and p.requires_grad for p in clone.parameters())
        assert clone.blocks[1].weight is clone.blocks[0].weight  # tying survives
        assert clone.head.weight is not jt.head.weight
        np.testing.assert_array_equal(clone(x).detach().numpy(), jt(x).detach().numpy())
        assert list(clone.state_dict()) == list(jt.state_dict())
        assert "cache" in clone._non_persistent_buffers_set
    assert pickle.loads(pickle.dumps(jt)).head.weight.tag == "keep me"
