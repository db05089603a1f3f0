"""nn.Module machinery against PyTorch: registration, iteration order, state dicts, hooks, modes, reprs, conversions.

The same module code runs on both libraries (``build(lib)``); weights are copied through NumPy.
"""
from __future__ import annotations

from collections import OrderedDict

import numpy as np
import pytest
import torch

import jitorch

from nn_module_helpers import J, assert_close, net_pair, pair, same_error


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
