"""Tensor subclasses' ``__torch_function__`` (jitorch/_subclass.py) against torch: the types of results, which calls
reach the handler and in which order, values and gradients, the opt-outs (Parameter, the Disable* blocks) and
declining handlers."""
import copy
import pickle

import numpy as np
import pytest
import torch
import torch.nn.functional as tF

import jitorch
import jitorch.nn.functional as jF
from jitorch import _subclass

LIBS = [(torch, tF), (jitorch, jF)]
IDS = ["torch", "jitorch"]


def _disable_subclass(lib):
    return torch._C.DisableTorchFunctionSubclass() if lib is torch else _subclass.DisableTorchFunctionSubclass()


def _disable_all(lib):
    return torch._C.DisableTorchFunction() if lib is torch else _subclass.DisableTorchFunction()


def make_types(lib):
    """A plain subclass, a logging one (calls its base), one declining everything, and a metadata-carrying one."""
    seen = []

    class Plain(lib.Tensor):
        pass

    class Logged(lib.Tensor):
        @classmethod
        def __torch_function__(cls, func, types, args=(), kwargs=None):
            seen.append((func.__name__, tuple(t.__name__ for t in types)))
            return super().__torch_function__(func, types, args, kwargs or {})

    class Declines(lib.Tensor):
        @classmethod
        def __torch_function__(cls, func, types, args=(), kwargs=None):
            return NotImplemented

    class Tagged(lib.Tensor):
        """The metadata pattern: results carry the tag of the first tagged argument."""

        @classmethod
        def __torch_function__(cls, func, types, args=(), kwargs=None):
            flat = [b for a in list(args) + list((kwargs or {}).values())
                    for b in (a if isinstance(a, (list, tuple)) else [a])]
            tag = next((a.tag for a in flat if isinstance(a, Tagged) and hasattr(a, "tag")), None)
            result = super().__torch_function__(func, types, args, kwargs or {})
            if isinstance(result, Tagged) and tag is not None:
                result.tag = tag
            return result

    return Plain, Logged, Declines, Tagged, seen


def _data(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


def _program(lib, F, x, other):
    """A small model step on a subclass instance: each entry is (label, result)."""
    y = x * 2 + 1
    out = [("mul_add", y), ("radd", 1 + x), ("rsub", 1 - x), ("rdiv", 2 / (x.abs() + 1)), ("neg", -x),
           ("relu", lib.relu(y)), ("F.softmax", F.softmax(y, dim=-1)), ("sum", y.sum(dim=0)), ("view", y.view(-1)),
           ("getitem", y[0]), ("cat", lib.cat([y, other])), ("plain_first", other * x), ("T", y.T),
           ("matmul", y @ other.T), ("clamp_mean", y.clamp(min=0).mean()), ("linear", F.linear(x, other))]
    vals, idx = y.max(dim=1)
    out += [("max.values", vals), ("max.indices", idx), ("split0", y.split(1)[0])]
    z = y.detach().clone()
    z.add_(1)
    z *= 2
    out.append(("inplace", z))
    return out


@pytest.mark.parametrize("kind", ["Plain", "Logged", "Tagged"])
def test_results_are_subclass_instances_with_torchs_values(kind):
    rng = np.random.default_rng(0)
    a, b = _data(rng, 3, 4), _data(rng, 3, 4)
    results = []
    for lib, F in LIBS:
        cls = dict(zip(["Plain", "Logged", "Declines", "Tagged"], make_types(lib)[:4]))[kind]
        x = lib.tensor(a).as_subclass(cls)
        results.append(_program(lib, F, x, lib.tensor(b)))
    for (label, t), (_, j) in zip(*results):
        assert type(j).__name__ == type(t).__name__, label
        np.testing.assert_allclose(j.detach().numpy(), t.detach().numpy(), rtol=1e-5, atol=1e-6, err_msg=label)


@pytest.mark.parametrize("lib,F", LIBS, ids=IDS)
def test_inplace_methods_and_operators_return_self(lib, F):
    Plain = make_types(lib)[0]
    x = lib.zeros(3).as_subclass(Plain)
    assert x.add_(1) is x and type(x) is Plain
    y = x
    y += 1
    y *= 3
    assert y is x and x.tolist() == [6.0, 6.0, 6.0]


def test_the_handler_hears_the_calls_torchs_does_in_order():
    rng = np.random.default_rng(1)
    a, b = _data(rng, 2, 3), _data(rng, 2, 3)
    heard = []
    for lib, F in LIBS:
        _, Logged, _, _, seen = make_types(lib)
        x = lib.tensor(a).as_subclass(Logged)
        seen.clear()
        _program(lib, F, x, lib.tensor(b))
        _ = x.shape, x.dtype, x.data
        len(x)
        float(x[0, 0])
        heard.append(list(seen))
    assert heard[1] == heard[0]
    assert ("add", ("Logged",)) in heard[1] and ("__get__", ("Logged",)) in heard[1]


@pytest.mark.parametrize("lib,F", LIBS, ids=IDS)
def test_types_list_the_overriding_types_subclass_first(lib, F):
    _, Logged, _, _, seen = make_types(lib)

    class Child(Logged):
        pass

    x, c = lib.ones(2).as_subclass(Logged), lib.ones(2).as_subclass(Child)
    seen.clear()
    r1, r2, r3 = x + c, c + x, lib.add(x, c)
    assert [type(r).__name__ for r in (r1, r2, r3)] == ["Child"] * 3
    assert seen[0] == ("add", ("Child", "Logged"))


@pytest.mark.parametrize("lib,F", LIBS, ids=IDS)
def test_unrelated_subclasses_decline_each_other(lib, F):
    Plain, Logged, _, _, _ = make_types(lib)
    p, g = lib.ones(2).as_subclass(Plain), lib.ones(2).as_subclass(Logged)
    with pytest.raises(TypeError, match="unsupported operand"):
        p + g
    with pytest.raises(TypeError, match="Multiple dispatch failed"):
        lib.add(p, g)


@pytest.mark.parametrize("lib,F", LIBS, ids=IDS)
def test_a_declining_handler_is_a_type_error(lib, F):
    Declines = make_types(lib)[2]
    d = lib.ones(2).as_subclass(Declines)
    for call, match in ((lambda: d + 1, "unsupported operand"), (lambda: 1 + d, "unsupported operand"),
                        (lambda: lib.add(d, 1), "Multiple dispatch failed"), (lambda: d.sum(), "Tensor.sum")):
        with pytest.raises(TypeError, match=match):
            call()


@pytest.mark.parametrize("lib,F", LIBS, ids=IDS)
def test_disable_blocks_give_plain_tensors_and_silence_the_handler(lib, F):
    _, Logged, _, _, seen = make_types(lib)
    x = lib.ones(2).as_subclass(Logged)
    seen.clear()
    with _disable_subclass(lib):
        assert type(x + 1) is lib.Tensor and type(lib.relu(x)) is lib.Tensor
        assert not lib.overrides.has_torch_function_unary(x)
    with _disable_all(lib):
        assert type(x.sum()) is lib.Tensor
    assert seen == [] and type(x + 1) is Logged and lib.overrides.has_torch_function_unary(x)


@pytest.mark.parametrize("lib,F", LIBS, ids=IDS)
def test_parameters_opt_out(lib, F):
    p = lib.nn.Parameter(lib.ones(2))
    assert type(p + 1) is lib.Tensor and type(p.sum()) is lib.Tensor
    assert not lib.overrides.has_torch_function_unary(p)

    class MyParam(lib.nn.Parameter):
        pass

    mp = MyParam(lib.ones(2))
    assert type(mp) is MyParam and type(mp * 2) is lib.Tensor and type(lib.relu(mp)) is lib.Tensor


def test_the_metadata_pattern_carries_tags():
    for lib, F in LIBS:
        Tagged = make_types(lib)[3]
        x = lib.arange(6.0).view(2, 3).as_subclass(Tagged)
        x.tag = "meters"
        y = F.relu(x * 2 - 1).sum(dim=1)
        z = lib.stack([y, y])
        assert type(z) is Tagged and z.tag == "meters" and y.tag == "meters", lib.__name__
        assert not hasattr(lib.ones(1) + 1, "tag")


def test_gradients_flow_through_subclass_results():
    rng = np.random.default_rng(2)
    a, g = _data(rng, 3, 4), _data(rng, 3)
    grads, types = [], []
    for lib, F in LIBS:
        Logged = make_types(lib)[1]
        leaf = lib.tensor(a, requires_grad=True)
        x = leaf.as_subclass(Logged)
        y = F.gelu(x * 3).sum(dim=1)
        assert y.grad_fn is not None and type(y) is Logged
        y.backward(lib.tensor(g))
        grads.append(leaf.grad.numpy())
        sub_leaf = Logged._make_subclass(Logged, lib.tensor(a), True)
        assert sub_leaf.is_leaf and sub_leaf.requires_grad and type(sub_leaf) is Logged
        (sub_leaf * 2).sum().backward()
        types.append((type(sub_leaf.grad).__name__, sub_leaf.grad is sub_leaf.grad))
        grads.append(sub_leaf.grad.numpy())
    np.testing.assert_allclose(grads[2], grads[0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(grads[3], grads[1])
    assert types[1] == types[0] == ("Tensor", True)


@pytest.mark.parametrize("lib,F", LIBS, ids=IDS)
def test_default_protocol_is_public(lib, F):
    assert callable(lib.Tensor.__torch_function__)
    nowrap = lib.overrides.get_default_nowrap_functions()
    assert lib.Tensor.grad.__get__ in nowrap
    Plain = make_types(lib)[0]
    x = lib.ones(2)
    r = lib.Tensor.__torch_function__.__func__(Plain, lib.Tensor.add, (Plain,), (x, x))
    assert type(r) is Plain and r.tolist() == [2.0, 2.0]
    assert lib.Tensor.__torch_function__.__func__(Plain, lib.Tensor.add, (int,), (x, x)) is NotImplemented
    assert type(lib.Tensor._make_subclass(Plain, lib.ones(2))) is Plain and type(Plain(lib.ones(2))) is Plain


@pytest.mark.parametrize("lib,F", LIBS, ids=IDS)
def test_pickle_and_deepcopy_keep_type_and_attributes(lib, F):
    Tagged = make_types(lib)[3]
    global _PickledTagged
    _PickledTagged = Tagged
    Tagged.__qualname__ = "_PickledTagged"
    x = lib.arange(3.0).as_subclass(Tagged)
    x.tag = "t"
    back = pickle.loads(pickle.dumps(x))
    assert type(back) is Tagged and back.tag == "t" and back.tolist() == [0.0, 1.0, 2.0]
    if lib is jitorch:  # torch's deepcopy refuses subclasses whose new_empty is plain; jitorch copies them
        c = copy.deepcopy(x)
        assert type(c) is Tagged and c.tag == "t" and c.tolist() == x.tolist()


@pytest.mark.parametrize("lib,F", LIBS, ids=IDS)
def test_modules_run_on_subclass_inputs(lib, F):
    lib.manual_seed(0)
    Logged = make_types(lib)[1]
    layer = lib.nn.Sequential(lib.nn.Linear(4, 3), lib.nn.ReLU(), lib.nn.LayerNorm(3))
    x = lib.ones(2, 4).as_subclass(Logged)
    out = layer(x)
    assert type(out) is Logged and out.shape == (2, 3)
    out.sum().backward()
    assert type(layer[0].weight.grad) is lib.Tensor


def test_repr_names_the_subclass_as_torch():
    reprs = []
    for lib in (torch, jitorch):
        Plain = make_types(lib)[0]
        x = lib.tensor([[1.5, -2.0, 3.25], [0.0, 1.0, 2.0]]).as_subclass(Plain)
        reprs.append((repr(x), repr(lib.tensor([1.0, 2.0]).requires_grad_().as_subclass(Plain))))
    assert reprs[1][0] == reprs[0][0] and reprs[1][0].startswith("Plain([[")
    assert reprs[1][1] == reprs[0][1]
