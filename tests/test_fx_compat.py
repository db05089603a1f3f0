"""torch.fx behaviours jitorch.fx follows: concrete_args guards and PH leaves, parameter names kept in the generated
signature, the Tracer hooks every node goes through, and GraphModule built from a dict of attributes."""
from __future__ import annotations

import inspect
import operator

import pytest
import torch
import torch.fx
from test_fx_helpers import assert_close, check_traced
from torch.fx._symbolic_trace import PH as TORCH_PH

import jitorch
from jitorch import fx, nn
from jitorch.fx import PH, Interpreter, symbolic_trace


def _scale(x, scale):
    return x * scale


def test_a_specialized_argument_given_another_value_raises_as_in_torch():
    x = jitorch.ones(3)
    gm = symbolic_trace(_scale, concrete_args={"scale": 2})
    gm.graph.lint()
    assert_close(gm(x), _scale(x, 2))
    assert_close(gm(x, 2), _scale(x, 2))
    assert_close(Interpreter(gm).run(x, 2), _scale(x, 2))
    with pytest.raises(AssertionError) as ours:
        gm(x, 5)
    with pytest.raises(AssertionError) as interpreted:
        Interpreter(gm).run(x, 5)
    t_gm = torch.fx.symbolic_trace(_scale, concrete_args={"scale": 2})
    with pytest.raises(AssertionError) as theirs:
        t_gm(torch.ones(3), 5)
    assert str(ours.value) == str(interpreted.value).split("\n")[0] == str(theirs.value)
    assert [n.target for n in gm.graph.nodes if n.op == "call_function"][:2] == [operator.eq, jitorch._assert]


def test_concrete_args_may_be_a_tuple_of_every_parameter_as_in_torch():
    gm = fx.Tracer().trace(_scale, concrete_args=(PH, 2))
    t_gm = torch.fx.Tracer().trace(_scale, concrete_args=(TORCH_PH, 2))
    assert [n.op for n in gm.nodes] == [n.op for n in t_gm.nodes]
    check_traced(lambda x: _scale(x, 2), jitorch.ones(3), gm=fx.GraphModule(nn.Module(), gm))
    with pytest.raises(RuntimeError, match="Tracing expected 2 arguments but got 1 concrete arguments"):
        symbolic_trace(_scale, concrete_args=(2,))


def test_a_specialized_none_is_checked_by_identity():
    def f(x, bias=None):
        return x if bias is None else x + bias

    gm = check_traced(lambda x: f(x), jitorch.ones(2), gm=symbolic_trace(f, concrete_args={"bias": None}))
    with pytest.raises(AssertionError, match="bias has been specialized to have value None"):
        gm(jitorch.ones(2), jitorch.ones(2))


def test_a_specialized_tensor_cannot_be_checked_and_warns():
    def f(x, bias):
        return x + bias

    bias = jitorch.ones(2)
    with pytest.warns(UserWarning, match="cannot check that later calls pass the same bias"):
        gm = symbolic_trace(f, concrete_args={"bias": bias})
    check_traced(f, jitorch.randn(2), bias, gm=gm)  # still a parameter, without default (as in torch)
    assert_close(gm(jitorch.zeros(2), jitorch.zeros(2)), bias)  # the graph holds the traced tensor


def test_placeholder_leaves_inside_a_dict_or_tuple_stay_symbolic():
    def g(d):
        return d["a"] + d["b"]

    x, y = jitorch.randn(3), jitorch.randn(3)
    gm = check_traced(g, {"a": x, "b": y}, gm=symbolic_trace(g, concrete_args={"d": {"a": PH, "b": PH}}))
    t_gm = torch.fx.symbolic_trace(g, concrete_args={"d": {"a": TORCH_PH, "b": TORCH_PH}})
    assert_close(gm({"a": x, "b": y}), t_gm({"a": torch.tensor(x.numpy()), "b": torch.tensor(y.numpy())}).numpy())

    def h(x, t):
        return x + t[0] * t[1]

    gm = symbolic_trace(h, concrete_args={"t": (PH, 3)})
    check_traced(h, x, (y, 3), gm=gm)
    with pytest.raises(AssertionError, match=r"t\[1\] has been specialized to have value 3"):
        gm(x, (y, 4))


class Loss(nn.Module):
    def forward(self, input, target, type, max, id, device):
        return ((input - target) ** 2).mean() * max + id


class TorchLoss(torch.nn.Module):
    forward = Loss.forward


def test_parameters_named_like_builtins_keep_their_names_for_keyword_calls():
    gm = symbolic_trace(Loss(), concrete_args={"type": "mse", "device": "cpu"})
    gm.graph.lint()
    t_gm = torch.fx.symbolic_trace(TorchLoss(), concrete_args={"type": "mse", "device": "cpu"})
    names = list(inspect.signature(gm.forward).parameters)
    assert names == ["input", "target", "type", "max", "id", "device"]
    assert names[:2] + names[3:5] == list(inspect.signature(t_gm.forward).parameters)[:2] + ["max", "id"]
    x, y = jitorch.randn(3), jitorch.randn(3)
    expected = Loss()(x, y, "mse", 2.0, 1.0, "cpu")
    assert_close(gm(input=x, target=y, max=2.0, id=1.0), expected)
    assert_close(Interpreter(gm).run(x, y, "mse", 2.0, 1.0), expected)
    assert "input_1 = input" in gm.code  # the body keeps its own names, as torch's does


def test_a_parameter_shadowing_a_builtin_the_graph_calls_still_reaches_the_builtin():
    g = fx.Graph()
    a, m = g.placeholder("a"), g.placeholder("max")
    g.output(g.call_function(max, (a, m)))
    gm = fx.GraphModule(nn.Module(), g)
    assert "def forward(self, a, max):" in gm.code
    assert gm(1, 3) == 3 and gm(a=5, max=2) == 5


def _with_weight(lib):
    class WithWeight(lib.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = lib.nn.Parameter(lib.ones(3, 4))

        def forward(self, x):
            return x.view(-1, self.w.shape[0]) @ self.w + self.w.dim()
    return WithWeight()


def _hook_tracer(base):
    class Hooks(base):
        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            self.proxy_kinds, self.node_kinds, self.getattrs = [], [], []

        def create_proxy(self, kind, target, args, kwargs, *rest, **kw):
            self.proxy_kinds.append(kind)
            return super().create_proxy(kind, target, args, kwargs, *rest, **kw)

        def create_node(self, kind, *rest, **kw):
            self.node_kinds.append(kind)
            return super().create_node(kind, *rest, **kw)

        def getattr(self, attr, attr_val, parameter_proxy_cache):
            self.getattrs.append(attr)
            return super().getattr(attr, attr_val, parameter_proxy_cache)
    return Hooks


def test_every_node_goes_through_the_tracer_hooks_as_in_torch():
    ours, theirs = _hook_tracer(fx.Tracer)(), _hook_tracer(torch.fx.Tracer)()
    m = _with_weight(jitorch)
    graph = ours.trace(m)
    theirs.trace(_with_weight(torch))
    assert ours.proxy_kinds[:3] == ["placeholder", "get_attr", "call_function"]
    assert (ours.proxy_kinds, ours.node_kinds, ours.getattrs) == (theirs.proxy_kinds, theirs.node_kinds,
                                                                   theirs.getattrs)
    assert graph._tracer_cls is type(ours)
    check_traced(m, jitorch.randn(4, 3), gm=fx.GraphModule(m, graph))


def test_param_shapes_constant_reads_parameter_shapes_as_constants():
    m = _with_weight(jitorch)
    for constant in (False, True):
        graph = fx.Tracer(param_shapes_constant=constant).trace(m)
        t_graph = torch.fx.Tracer(param_shapes_constant=constant).trace(_with_weight(torch))
        calls = [(n.op, n.target if isinstance(n.target, str) else n.target.__name__) for n in graph.nodes]
        assert calls == [(n.op, n.target if isinstance(n.target, str) else n.target.__name__) for n in t_graph.nodes]
        assert (("call_method", "dim") in calls) is not constant
        check_traced(m, jitorch.randn(4, 3), gm=fx.GraphModule(m, graph))


def test_graph_module_from_a_dict_takes_tensors_parameters_and_dotted_module_paths():
    x = jitorch.ones(4)
    for key, value in [("w", jitorch.full((4,), 3.0)), ("w", nn.Parameter(jitorch.full((4,), 3.0))),
                       ("sub.scale", jitorch.full((4,), 2.0)), ("sub.lin", nn.Identity())]:
        g = fx.Graph()
        a = g.placeholder("a")
        if isinstance(value, nn.Module):
            out = g.call_module(key, (a,))
        else:
            out = g.call_function(operator.mul, (a, g.get_attr(key)))
        g.output(out)
        gm = fx.GraphModule({key: value}, g)
        gm.graph.lint()
        expected = value(x) if isinstance(value, nn.Module) else x * value
        assert_close(gm(x), expected)
        assert_close(Interpreter(gm).run(x), expected)
        assert gm.get_submodule(key) is value if isinstance(value, nn.Module) else True
        assert (dict(gm.named_parameters()) == {key: value}) == isinstance(value, nn.Parameter)
    with pytest.raises(RuntimeError, match="'missing' .*missing from the dict"):
        g = fx.Graph()
        g.output(g.get_attr("missing"))
        fx.GraphModule({}, g)
