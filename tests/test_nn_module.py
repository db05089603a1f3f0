"""nn.Module machinery against PyTorch: registration, iteration order, state dicts, hooks, modes, reprs, conversions.

The same module code runs on both libraries (``build(lib)``); weights are copied through NumPy.
"""
from __future__ import annotations

import copy
import pickle
import types
from collections import OrderedDict

import numpy as np
import pytest
import torch

import jitorch


def define(lib):
    """Module classes written once against ``lib`` (torch or jitorch), as user code would be."""
    nn = lib.nn

    class Linear(nn.Module):
        def __init__(self, fin, fout, bias=True):
            super().__init__()
            self.in_features, self.out_features = fin, fout
            self.weight = nn.Parameter(lib.empty(fout, fin))
            if bias:
                self.bias = nn.Parameter(lib.empty(fout))
            else:
                self.register_parameter("bias", None)

        def forward(self, x):
            y = (x.unsqueeze(-1) * self.weight.t()).sum(-2)
            return y + self.bias if self.bias is not None else y

        def extra_repr(self):
            return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.body = nn.Sequential(Linear(4, 8), Linear(8, 8))
            self.head = Linear(8, 3)
            self.register_buffer("steps", lib.zeros(()))
            self.register_buffer("cache", lib.zeros(2), persistent=False)
            self.blocks = nn.ModuleList([Linear(3, 3, bias=False) for _ in range(2)])
            self.extra = nn.ParameterList([nn.Parameter(lib.zeros(2))])
            self.table = nn.ModuleDict({"a": Linear(3, 2)})

        def forward(self, x):
            y = self.head(self.body(x))
            for block in self.blocks:
                y = block(y)
            return self.table["a"](y + self.extra[0].sum()) + self.steps

    return types.SimpleNamespace(Linear=Linear, Net=Net)


T, J = define(torch), define(jitorch)
# Module-level names let pickle find the jitorch classes by reference.
JLinear, JNet = J.Linear, J.Net
JLinear.__qualname__, JNet.__qualname__ = "JLinear", "JNet"


def pair(build, rng):
    """(torch module, jitorch module) built by ``build(classes, lib)`` with identical random state."""
    th, jt = build(T, torch), build(J, jitorch)
    arrays = {k: rng.standard_normal(tuple(v.shape)).astype(np.float32) for k, v in th.state_dict().items()}
    th.load_state_dict({k: torch.from_numpy(v.copy()) for k, v in arrays.items()})
    jt.load_state_dict({k: jitorch.from_numpy(v.copy()) for k, v in arrays.items()})
    return th, jt


def net_pair(rng):
    return pair(lambda c, lib: c.Net(), rng)


def same_error(jt_fn, th_fn):
    """Both raise the same exception type; returns (jitorch message, torch message) with library names unified."""
    with pytest.raises(Exception) as th_info:
        th_fn()
    with pytest.raises(type(th_info.value)) as jt_info:
        jt_fn()
    return str(jt_info.value).replace("jitorch.", "torch."), str(th_info.value)


def assert_close(jt, th, atol=1e-5):
    np.testing.assert_allclose(np.asarray(jt.detach()._host(), dtype=np.float64), th.detach().double().numpy(),
                               atol=atol, rtol=1e-5)


# -- iteration and registration -----------------------------------------------------------------------------------
def test_names_and_order_match_torch(rng):
    th, jt = net_pair(rng)
    for method in ("named_parameters", "named_buffers", "named_modules", "named_children"):
        assert [n for n, _ in getattr(jt, method)()] == [n for n, _ in getattr(th, method)()], method
    assert [n for n, _ in jt.named_parameters(prefix="net", recurse=False)] == \
        [n for n, _ in th.named_parameters(prefix="net", recurse=False)]
    assert [n for n, _ in jt.named_buffers(recurse=False)] == ["steps", "cache"]
    assert list(jt.state_dict()) == list(th.state_dict())  # no "cache": it is not persistent
    assert list(jt.state_dict(prefix="m.")) == list(th.state_dict(prefix="m."))
    assert [tuple(p.shape) for p in jt.parameters()] == [tuple(p.shape) for p in th.parameters()]
    assert all(type(p) is jitorch.nn.Parameter for p in jt.parameters())
    assert len(list(jt.modules())) == len(list(th.modules()))
    assert jt.get_submodule("body.1") is jt.body[1]
    assert jt.get_parameter("table.a.bias") is jt.table["a"].bias
    assert jt.get_buffer("steps") is jt.steps
    assert "head" in dir(jt) and "steps" in dir(jt) and "weight" in dir(jt.head)


def test_forward_backward_match_torch(rng):
    th, jt = net_pair(rng)
    x = rng.standard_normal((5, 4)).astype(np.float32)
    out_t, out_j = th(torch.from_numpy(x)), jt(jitorch.from_numpy(x))
    assert_close(out_j, out_t)
    out_t.sum().backward()
    out_j.sum().backward()
    for (name, pj), (_, pt) in zip(jt.named_parameters(), th.named_parameters()):
        assert_close(pj.grad, pt.grad, atol=1e-4)


def test_weight_tying_is_deduplicated(rng):
    def build(c, lib):
        net = lib.nn.Sequential(c.Linear(3, 3), c.Linear(3, 3))
        net[1].weight = net[0].weight
        return net

    th, jt = pair(build, rng)
    assert [n for n, _ in jt.named_parameters()] == [n for n, _ in th.named_parameters()] == \
        ["0.weight", "0.bias", "1.bias"]
    assert [n for n, _ in jt.named_parameters(remove_duplicate=False)] == \
        [n for n, _ in th.named_parameters(remove_duplicate=False)]
    assert list(jt.state_dict()) == list(th.state_dict())
    shared = jt[0]
    twice = jitorch.nn.Sequential(shared, shared)
    assert len(list(twice.modules())) == 2 and len(list(twice.modules(remove_duplicate=False))) == 3
    assert len(list(twice.parameters())) == 2


def test_assignment_and_deletion_rules():
    for lib in (torch, jitorch):
        nn = lib.nn
        m = nn.Module()
        m.p = nn.Parameter(lib.ones(2))
        m.p = None  # a registered parameter may be reset to None
        assert "p" in m._parameters and m.p is None
        m.sub = nn.Module()
        m.sub = None
        assert m._modules["sub"] is None
        m.register_buffer("b", lib.zeros(1))
        m.b = lib.ones(1)  # assigning a tensor to a buffer name replaces the buffer
        assert m._buffers["b"].sum().item() == 1.0
        m.b = nn.Module()  # a module takes the name over from the buffer
        assert "b" not in m._buffers and "b" in m._modules
        m.nb = nn.Buffer(lib.zeros(3), persistent=False)
        assert "nb" in m._buffers and "nb" not in m.state_dict()
        m.plain = lib.zeros(1)  # a plain tensor attribute is not registered
        assert "plain" not in m._buffers
        del m.nb, m.b, m.plain
        assert "nb" not in m._buffers and "b" not in m._modules and not hasattr(m, "plain")


@pytest.mark.parametrize("case", ["tensor_to_param", "module_to_param", "param_bad_type", "dot_name", "empty_name",
                                  "existing_attr", "non_leaf", "buffer_type", "module_type", "tensor_to_module",
                                  "before_init", "missing_attr", "submodule_path", "not_a_param"])
def test_registration_errors_match_torch(case):
    def run(lib):
        nn = lib.nn
        m = nn.Module()
        m.w = nn.Parameter(lib.ones(2))
        m.child = nn.Module()
        if case == "tensor_to_param":
            m.w = lib.ones(2)
        elif case == "module_to_param":
            m.register_parameter("w2", nn.Module())
        elif case == "param_bad_type":
            m.register_parameter("w3", lib.ones(2))
        elif case == "dot_name":
            m.register_buffer("a.b", lib.ones(1))
        elif case == "empty_name":
            m.register_parameter("", None)
        elif case == "existing_attr":
            m.register_buffer("training", lib.ones(1))
        elif case == "non_leaf":
            m.register_parameter("x", nn.Parameter(lib.ones(2)) * 2)
        elif case == "buffer_type":
            m.register_buffer("buf", [1.0])
        elif case == "module_type":
            m.add_module("x", 3)
        elif case == "tensor_to_module":
            m.child = lib.ones(1)
        elif case == "before_init":
            class Early(nn.Module):
                def __init__(self):
                    self.w = nn.Parameter(lib.ones(1))
            Early()
        elif case == "missing_attr":
            m.nothing
        elif case == "submodule_path":
            m.get_submodule("child.grandchild")
        elif case == "not_a_param":
            m.get_parameter("child")
    jt_msg, th_msg = same_error(lambda: run(jitorch), lambda: run(torch))
    if case != "non_leaf":  # torch names its own tensor type there
        assert jt_msg == th_msg


# -- state dicts ----------------------------------------------------------------------------------------------------
def test_state_dict_values_and_roundtrip(rng):
    th, jt = net_pair(rng)
    sd = jt.state_dict()
    assert isinstance(sd, OrderedDict) and hasattr(sd, "_metadata")
    for k, v in th.state_dict().items():
        assert_close(sd[k], v, atol=0)
        assert not sd[k].requires_grad and type(sd[k]) is jitorch.Tensor
    assert all(isinstance(v, jitorch.nn.Parameter) for k, v in jt.state_dict(keep_vars=True).items() if k != "steps")
    fresh = J.Net()
    result = fresh.load_state_dict(sd)
    assert repr(result) == "<All keys matched successfully>" and result.missing_keys == []
    for k, v in fresh.state_dict().items():
        np.testing.assert_array_equal(v.numpy(), sd[k].numpy())
    sd["head.bias"].zero_()  # the state dict aliases the module's tensors, as in PyTorch
    assert jt.head.bias.abs().sum().item() == 0


def test_load_state_dict_errors_match_torch(rng):
    th, jt = net_pair(rng)

    def edit(sd, to_tensor):
        sd = OrderedDict(sd)
        del sd["head.weight"]
        sd["head.extra"] = to_tensor(np.zeros(1, np.float32))
        sd["ghost.weight"] = to_tensor(np.zeros(1, np.float32))
        sd["body.0.bias"] = to_tensor(np.zeros(5, np.float32))
        return sd

    bad_t = edit(th.state_dict(), torch.from_numpy)
    bad_j = edit(jt.state_dict(), jitorch.from_numpy)
    jt_msg, th_msg = same_error(lambda: jt.load_state_dict(bad_j), lambda: th.load_state_dict(bad_t))
    assert jt_msg == th_msg
    assert 'Missing key(s) in state_dict: "head.weight"' in jt_msg
    assert "size mismatch for body.0.bias: copying a param with shape" in jt_msg
    del bad_j["body.0.bias"], bad_t["body.0.bias"]
    res_j, res_t = jt.load_state_dict(bad_j, strict=False), th.load_state_dict(bad_t, strict=False)
    assert res_j.missing_keys == res_t.missing_keys and res_j.unexpected_keys == res_t.unexpected_keys
    assert repr(res_j) == repr(res_t)
    jt_msg, th_msg = same_error(lambda: jt.load_state_dict([1]), lambda: th.load_state_dict([1]))


def test_load_state_dict_assign_and_scalar_compat():
    m = jitorch.nn.Module()
    m.register_buffer("count", jitorch.tensor(0.0))
    m.w = jitorch.nn.Parameter(jitorch.zeros(2))
    m.load_state_dict({"count": jitorch.tensor([3.0]), "w": jitorch.ones(2)})  # (1,) fills a 0-d entry
    assert m.count.item() == 3.0
    new_w = jitorch.full((2,), 7.0)
    m.load_state_dict({"count": jitorch.tensor(1.0), "w": new_w}, assign=True)
    assert isinstance(m.w, jitorch.nn.Parameter) and m.w.requires_grad and m.w.sum().item() == 14.0


def test_extra_state_and_state_dict_hooks_match_torch():
    def run(lib):
        class Counter(lib.nn.Module):
            def __init__(self):
                super().__init__()
                self.w = lib.nn.Parameter(lib.zeros(1))
                self.count = 0

            def get_extra_state(self):
                return {"count": self.count}

            def set_extra_state(self, state):
                self.count = state["count"]

        log = []
        m = lib.nn.Sequential(Counter())
        m[0].count = 7
        m.register_state_dict_pre_hook(lambda mod, prefix, keep_vars: log.append(("pre", prefix)))
        m[0].register_state_dict_post_hook(lambda mod, sd, prefix, meta: log.append(("post", prefix, len(sd))))
        m[0].register_load_state_dict_pre_hook(lambda mod, sd, prefix, *rest: log.append(("load_pre", prefix)))
        m.register_load_state_dict_post_hook(lambda mod, keys: log.append(("load_post", list(keys.missing_keys))))
        sd = m.state_dict()
        fresh = lib.nn.Sequential(Counter())
        fresh.load_state_dict(sd)
        m.load_state_dict({"0.w": lib.zeros(1)}, strict=False)
        return list(sd), sd["0._extra_state"], fresh[0].count, log

    assert run(jitorch) == run(torch)


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
