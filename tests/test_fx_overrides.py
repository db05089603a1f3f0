"""A Proxy handed to any jitorch function or Tensor method records it (``__jitorch_function__``, torch.fx's
``__torch_function__``), however the function was reached: stored on a module, in a dict, in a closure, as a built-in
layer's class attribute, or through a parent layer's forward. Proxies made outside a trace append to their graph."""
from __future__ import annotations

import copy
import gc

import pytest
import torch
import torch.fx
from test_fx_helpers import assert_close, check_traced

import jitorch
import jitorch.nn.functional as F
from jitorch import _overrides, fx, nn


def _calls(gm):
    """(op, target name) of the nodes that compute, for comparing jitorch's graphs with torch.fx's."""
    return [(n.op, n.target if isinstance(n.target, str) else n.target.__name__)
            for n in gm.graph.nodes if n.op not in ("placeholder", "output")]


class Block(nn.Module):
    def __init__(self, act=F.gelu):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.act = act

    def forward(self, x):
        return self.act(self.lin(x))


ACT2FN = {"silu": F.silu, "relu": jitorch.relu}


def _make_closure(act):
    def f(x):
        return act(x) + 1
    return f


@pytest.mark.parametrize("case", ["stored_on_module", "registry_dict", "closure", "special_namespace"])
def test_functions_reached_other_than_by_module_names_are_recorded(case):
    x = jitorch.randn(2, 4)
    root = {"stored_on_module": lambda: Block(),
            "registry_dict": lambda: (lambda x: ACT2FN["silu"](x)),
            "closure": lambda: _make_closure(jitorch.tanh),
            "special_namespace": lambda: (lambda x: jitorch.special.expit(x))}[case]()
    gm = check_traced(root, x)
    targets = [n.target for n in gm.graph.nodes if n.op == "call_function"]
    expected = {"stored_on_module": F.gelu, "registry_dict": F.silu, "closure": jitorch.tanh,
                "special_namespace": jitorch.special.expit}[case]
    assert expected in targets  # the public function itself is the target, as torch.fx records torch's


def test_the_recorded_function_is_the_public_one_and_generated_code_names_it():
    gm = check_traced(lambda x: F.gelu(x) + jitorch.special.expit(x), jitorch.randn(3))
    assert "jitorch.nn.functional.gelu(x)" in gm.code and "jitorch.sigmoid(x)" in gm.code
    t_gm = torch.fx.symbolic_trace(lambda x: torch.nn.functional.gelu(x) + torch.special.expit(x))
    assert [op for op, _ in _calls(gm)] == [op for op, _ in _calls(t_gm)]


class ScaledConv(nn.Conv2d):
    def forward(self, x):
        return super().forward(x) * 0.5


class StdConv(nn.Conv2d):  # timm-style weight standardisation through the parent's _conv_forward
    def forward(self, x):
        w = self.weight
        w = (w - w.mean(dim=(1, 2, 3), keepdim=True)) / (w.var(dim=(1, 2, 3), keepdim=True) + 1e-5).sqrt()
        return self._conv_forward(x, w, self.bias)


class MyPool(nn.MaxPool2d):
    def forward(self, x):
        return super().forward(x) + 1


class Holder(nn.Module):
    def __init__(self, layer):
        super().__init__()
        self.layer = layer

    def forward(self, x):
        return self.layer(x)


@pytest.mark.parametrize("make", [lambda: ScaledConv(3, 4, 3), lambda: StdConv(3, 4, 3), lambda: MyPool(2)],
                         ids=["ScaledConv", "StdConv", "MyPool"])
def test_subclasses_of_built_in_layers_trace_through_the_parent_forward(make):
    gm = check_traced(Holder(make()), jitorch.randn(1, 3, 6, 6))
    assert not any(n.op == "call_module" for n in gm.graph.nodes)  # user classes are traced through, as in torch


class NoLeaves(fx.Tracer):
    def is_leaf_module(self, m, qualname):
        return False


class TorchNoLeaves(torch.fx.Tracer):
    def is_leaf_module(self, m, qualname):
        return False


LAYERS = [("ReLU", (), (2, 3)), ("Conv2d", (3, 3, 3), (1, 3, 5, 5)), ("MaxPool2d", (2,), (1, 3, 4, 4)),
          ("AdaptiveAvgPool2d", (1,), (1, 3, 4, 4)), ("Linear", (4, 2), (3, 4)), ("GELU", (), (2, 3))]


@pytest.mark.parametrize("name,args,shape", LAYERS)
def test_tracing_into_built_in_layers_records_the_same_calls_as_torch_fx(name, args, shape):
    mod = getattr(nn, name)(*args)
    gm = fx.GraphModule(mod, NoLeaves().trace(mod))
    check_traced(mod, jitorch.randn(*shape), gm=gm)
    t_mod = getattr(torch.nn, name)(*args)
    assert _calls(gm) == _calls(torch.fx.GraphModule(t_mod, TorchNoLeaves().trace(t_mod)))


def test_batch_norm_checks_its_input_rank_on_the_proxy_as_torch_does():
    with pytest.raises(fx.TraceError, match="control flow"):
        NoLeaves().trace(nn.BatchNorm2d(3))
    with pytest.raises(torch.fx.proxy.TraceError, match="control flow"):
        TorchNoLeaves().trace(torch.nn.BatchNorm2d(3))


SCALE, TABLE = jitorch.tensor([2.0, 3.0, 4.0, 5.0]), jitorch.arange(12.0).reshape(3, 4)
T_SCALE, T_TABLE = torch.tensor([2.0, 3.0, 4.0, 5.0]), torch.arange(12.0).reshape(3, 4)
METHOD_CASES = {
    "mul": (lambda x, i: SCALE.mul(x), lambda x, i: T_SCALE.mul(x)),
    "expand_as": (lambda x, i: SCALE.expand_as(x) + x, lambda x, i: T_SCALE.expand_as(x) + x),
    "getitem": (lambda x, i: TABLE[i] + x, lambda x, i: T_TABLE[i] + x),
    "unbound": (lambda x, i: jitorch.Tensor.add(SCALE, x), lambda x, i: torch.Tensor.add(T_SCALE, x)),
    "cat": (lambda x, i: jitorch.cat([x, SCALE]), lambda x, i: torch.cat([x, T_SCALE])),
}


@pytest.mark.parametrize("case", list(METHOD_CASES))
def test_methods_of_plain_tensors_record_a_call_method_when_given_a_proxy(case):
    f, t_f = METHOD_CASES[case]
    gm = check_traced(f, jitorch.ones(4), jitorch.tensor([0, 2]))
    assert _calls(gm) == _calls(torch.fx.symbolic_trace(t_f))  # e.g. get_attr, call_method '__getitem__', add


def test_an_operator_of_a_plain_tensor_defers_to_the_proxy():
    gm = check_traced(lambda x: SCALE * x - SCALE, jitorch.ones(4))
    assert "_tensor_constant0 * x" in gm.code


def test_eager_code_is_untouched_once_the_proxies_are_gone():
    gc.collect()  # proxies an earlier test left for the collector would have the wrappers installed still
    # (an instance of a user's Tensor subclass, made by an earlier test, keeps the wrappers on for good)
    before = _overrides._live
    original = jitorch.Tensor.__dict__["mul"]
    gm = fx.symbolic_trace(lambda x: SCALE.mul(x))
    gc.collect()
    assert _overrides._live == before and jitorch.Tensor.__dict__["mul"] is original  # the proxies' wrappers go
    assert_close(jitorch.ones(2).mul(3), [3.0, 3.0])
    assert jitorch.relu.__jitorch_original__ is not jitorch.relu and gm(jitorch.ones(4)).shape == (4,)


def test_copies_of_proxies_do_not_unbalance_the_count_of_live_ones():
    gc.collect()
    before = _overrides._live
    g = fx.Graph()
    p = fx.Proxy(g.placeholder("x"))
    copies = [copy.copy(p), copy.copy(p)]
    assert _overrides._live == before + 1
    del p, copies
    gc.collect()
    assert _overrides._live == before


def test_type_inspecting_functions_answer_for_the_proxy_itself():
    seen = []

    def f(x):
        seen.append((jitorch.is_tensor(x), jitorch.is_tensor(SCALE)))
        return x

    fx.symbolic_trace(f)
    torch.fx.symbolic_trace(lambda x: seen.append((torch.is_tensor(x), torch.is_tensor(T_SCALE))) or x)
    assert seen == [(False, True), (False, True)]


def test_transformer_overrides_may_call_jitorch_functions_on_proxies():
    class NegSigmSwap(fx.Transformer):  # the torch.fx documentation's example
        def call_function(self, target, args, kwargs):
            if target == jitorch.sigmoid:
                return jitorch.neg(*args, **kwargs)
            return super().call_function(target, args, kwargs)

    gm = NegSigmSwap(fx.symbolic_trace(lambda x: jitorch.sigmoid(x).relu())).transform()
    x = jitorch.randn(3, 4)
    check_traced(lambda x: (-x).relu(), x, gm=gm)


def test_proxy_of_a_node_outside_a_trace_appends_to_its_graph():
    # torch.fx's "Proxy/Retracing" recipe: decompose relu by running Python on Proxy(node).
    def relu_decomposition(x):
        return (x > 0) * x

    class M(nn.Module):
        def forward(self, x):
            return F.relu(x) + 1

    graph, new_graph, env = fx.Tracer().trace(M()), fx.Graph(), {}
    for node in graph.nodes:
        if node.op == "call_function" and node.target == F.relu:
            proxy_args = [fx.Proxy(env[a.name]) if isinstance(a, fx.Node) else a for a in node.args]
            env[node.name] = relu_decomposition(*proxy_args).node
        else:
            env[node.name] = new_graph.node_copy(node, lambda a: env[a.name])
    gm = fx.GraphModule(M(), new_graph)
    check_traced(M(), jitorch.randn(3, 4), gm=gm)
    assert F.relu not in [n.target for n in new_graph.nodes]

    g = fx.Graph()
    a, b = fx.Proxy(g.placeholder("a")), fx.Proxy(g.placeholder("b"))
    assert type(a.tracer) is fx.proxy.GraphAppendingTracer and a.tracer is b.tracer  # one per graph
    g.output(jitorch.maximum(F.relu(a), b).node)
    x, y = jitorch.randn(5), jitorch.randn(5)
    check_traced(lambda a, b: jitorch.maximum(F.relu(a), b), x, y, gm=fx.GraphModule(nn.Module(), g))


def test_proxy_outside_a_trace_cannot_capture_a_tensor_and_says_so():
    g = fx.Graph()
    p = fx.Proxy(g.placeholder("x"))
    with pytest.raises(fx.TraceError, match="no root module to keep it on"):
        jitorch.add(p, jitorch.ones(2))


def test_proxies_of_two_traces_cannot_meet_in_one_call():
    g1, g2 = fx.Graph(), fx.Graph()
    a, b = fx.Proxy(g1.placeholder("a")), fx.Proxy(g2.placeholder("b"))
    with pytest.raises(RuntimeError, match="2 different tracers"):
        jitorch.add(a, b)
