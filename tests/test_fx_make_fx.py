"""jitorch.fx.make_fx: primitives recorded through the dispatcher's mode hook replay like eager code."""
from __future__ import annotations

import inspect
import pickle

import pytest
import torch
from test_fx_helpers import assert_close, check_traced
from torch.fx.experimental.proxy_tensor import make_fx

import jitorch
from jitorch import fx, nn
from jitorch._dispatch import MODES
from jitorch.fx import DataDependentOutputException
from jitorch.fx.make_fx import Primitive


def _check(fn, *inputs, fresh_inputs):
    gm = fx.make_fx(fn)(*inputs)
    gm.graph.lint()
    assert not MODES  # the recording mode is popped
    expected = fn(*fresh_inputs)
    assert_close(fx.Interpreter(gm).run(*fresh_inputs), expected)
    assert_close(gm(*fresh_inputs), expected)
    return gm


def test_composites_are_recorded_as_primitives():
    m = nn.Sequential(nn.Linear(3, 4), nn.ReLU())

    def f(x):
        return m(x).softmax(-1) * 2

    gm = _check(f, jitorch.randn(2, 3), fresh_inputs=(jitorch.randn(2, 3),))
    calls = [n for n in gm.graph.nodes if n.op == "call_function"]
    assert all(isinstance(n.target, Primitive) for n in calls)
    names = [n.target.__name__ for n in calls]
    # nn.Linear is the fused ``linear`` row and softmax its own row; the module and functional wrappers never appear.
    assert {"linear", "relu", "softmax", "mul"} <= set(names)
    assert not any(name.startswith("Linear") or name == "Sequential" for name in names)


def test_inplace_ops_multi_outputs_and_pickle():
    def f(x):
        y = x.exp()
        y.add_(1)
        return jitorch.max(y, dim=1), y

    gm = _check(f, jitorch.randn(3, 2), fresh_inputs=(jitorch.randn(3, 2),))
    assert any(n.target == Primitive(jitorch.ops.table.OPS["add"], inplace=True) for n in gm.graph.nodes)
    x = jitorch.randn(3, 2)
    assert_close(pickle.loads(pickle.dumps(gm))(x), f(x))


def test_python_control_flow_on_input_values_raises_as_in_torch_unless_asked_to_specialize():
    def f(x):
        return x.neg() if x.sum() > 0 else x.exp()

    line = f.__code__.co_firstlineno + 1
    with pytest.raises(DataDependentOutputException, match=f"bool\\(\\) reads the value .*test_fx_make_fx.py:{line}"):
        fx.make_fx(f)(jitorch.ones(2))
    with pytest.raises(RuntimeError, match="get value out of a tracing tensor"):
        make_fx(lambda x: x.neg() if x.sum() > 0 else x.exp())(torch.ones(2))
    gm = fx.make_fx(f, _error_on_data_dependent_ops=False)(jitorch.ones(2))
    assert [n.target.__name__ for n in gm.graph.nodes if n.op == "call_function"] == ["sum", "gt", "neg"]
    assert gm.graph.eliminate_dead_code()  # the condition's ops feed no output: the branch is baked in
    gm.recompile()
    assert [n.target.__name__ for n in gm.graph.nodes if n.op == "call_function"] == ["neg"]
    assert_close(gm(jitorch.full((2,), 3.0)), f(jitorch.full((2,), 3.0)))


@pytest.mark.parametrize("structure", ["list", "tuple", "dict", "nested"])
def test_containers_of_tensors_are_inputs_not_constants(structure):
    pack = {"list": lambda a, b: [a, b], "tuple": lambda a, b: (a, b), "dict": lambda a, b: {"a": a, "b": b},
            "nested": lambda a, b: {"a": [a, 3], "b": (b,)}}[structure]
    get = {"list": lambda p: (p[0], p[1]), "tuple": lambda p: (p[0], p[1]), "dict": lambda p: (p["a"], p["b"]),
           "nested": lambda p: (p["a"][0] * p["a"][1], p["b"][0])}[structure]

    def f(p):
        a, b = get(p)
        return a * 2 + b

    gm = _check(f, pack(jitorch.zeros(3), jitorch.zeros(3)), fresh_inputs=(pack(jitorch.randn(3), jitorch.randn(3)),))
    assert not [n for n in gm.graph.nodes if n.op == "get_attr"]  # torch flattens such inputs too
    t_gm = make_fx(lambda p: f(p))(pack(torch.zeros(3), torch.zeros(3)))
    x, y = jitorch.randn(3), jitorch.randn(3)
    expected = t_gm(pack(torch.tensor(x.numpy()), torch.tensor(y.numpy()))).numpy()
    assert_close(gm(pack(x, y)), expected)


def test_the_signature_is_torchs_and_joint_is_keyword_only():
    ours, theirs = inspect.signature(fx.make_fx).parameters, inspect.signature(make_fx).parameters
    assert list(ours)[:4] == list(theirs)[:4] == ["f", "decomposition_table", "tracing_mode", "_allow_non_fake_inputs"]
    assert set(theirs) - {"_disable_torch_fn_metadata_mode"} <= set(ours)
    assert ours["joint"].kind is inspect.Parameter.KEYWORD_ONLY
    x = jitorch.randn(3)
    for gm in (fx.make_fx(jitorch.sin, {"unused_row": None})(x), fx.make_fx(jitorch.sin, decomposition_table={})(x)):
        assert_close(gm(x), jitorch.sin(x))  # a table positionally no longer turns joint recording on


def test_a_decomposition_table_replaces_a_row_by_recorded_ops():
    def gelu_tanh(x, approximate="none"):
        return x * jitorch.sigmoid(1.702 * x)

    x = jitorch.randn(5)
    gm = fx.make_fx(lambda t: jitorch.nn.functional.gelu(t), decomposition_table={"gelu": gelu_tanh})(x)
    gm.graph.lint()
    names = [n.target.__name__ for n in gm.graph.nodes if n.op == "call_function"]
    assert "gelu" not in names and "sigmoid" in names
    assert_close(gm(x), gelu_tanh(x))
    assert_close(fx.Interpreter(gm).run(x), gelu_tanh(x))


def test_reading_values_is_refused_only_for_values_of_the_inputs():
    x = jitorch.ones(3)
    gm = fx.make_fx(lambda t: t * jitorch.tensor(2.0).item() + t.shape[0])(x)  # a constant's value, a shape
    assert_close(gm(jitorch.full((3,), 2.0)), [7.0, 7.0, 7.0])
    line = inspect.currentframe().f_lineno + 2
    with pytest.raises(DataDependentOutputException, match=rf"Tensor\.item\(\) reads .*'amax'.*make_fx.py:{line};"):
        fx.make_fx(lambda t: t * t.max().item())(x)
    with pytest.raises(RuntimeError, match="get value out of a tracing tensor"):
        make_fx(lambda t: t * t.max().item())(torch.ones(3))
    assert jitorch.Tensor.__dict__["item"].__module__ == "jitorch._tensor"  # the read guards are removed


def test_module_parameters_stay_parameters_and_the_graph_retraces():
    lin = nn.Linear(4, 2)
    gm = fx.make_fx(lin)(jitorch.randn(3, 4))
    t_gm = make_fx(torch.nn.Linear(4, 2))(torch.randn(3, 4))
    assert list(gm.state_dict()) == list(t_gm.state_dict()) == ["_param_constant0", "_param_constant1"]
    assert [p for p in gm.parameters()] == [lin.weight, lin.bias]
    x = jitorch.randn(3, 4)
    assert_close(gm(x), lin(x))
    retraced = check_traced(gm, x)  # symbolic_trace of primitives records them again
    assert [n.target for n in retraced.graph.nodes if n.op == "call_function"] == \
        [n.target for n in gm.graph.nodes if n.op == "call_function"]
    bn = nn.BatchNorm1d(2).eval()
    assert sorted(n for n, _ in fx.make_fx(bn)(jitorch.randn(3, 2)).named_buffers()) == ["_tensor_constant0",
                                                                                        "_tensor_constant1"]


def test_in_place_view_ops_are_followed():
    # t_/unsqueeze_ swap the tensor's array for the view an op made: the graph reads that op's node.
    def f(x):
        h = x * 2
        h.t_()
        g = h + 1
        g.unsqueeze_(0)
        return g * 3
    x = jitorch.randn(2, 3)
    gm = fx.make_fx(f)(x)
    gm.graph.lint()
    y = jitorch.randn(2, 3)
    assert jitorch.equal(gm(y), f(y)) and gm(y).shape == (1, 3, 2)
