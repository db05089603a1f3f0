"""jitorch.fx.make_fx: primitives recorded through the dispatcher's mode hook replay like eager code."""
from __future__ import annotations

import pickle

from test_fx_helpers import assert_close

import jitorch
from jitorch import fx, nn
from jitorch._dispatch import MODES
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


def test_python_control_flow_is_resolved_by_the_example():
    def f(x):
        return x.neg() if x.sum() > 0 else x.exp()

    gm = fx.make_fx(f)(jitorch.ones(2))
    assert [n.target.__name__ for n in gm.graph.nodes if n.op == "call_function"] == ["sum", "gt", "neg"]
    assert gm.graph.eliminate_dead_code()  # the condition's ops feed no output: the branch is baked in
    gm.recompile()
    assert [n.target.__name__ for n in gm.graph.nodes if n.op == "call_function"] == ["neg"]
    assert_close(gm(jitorch.full((2,), 3.0)), f(jitorch.full((2,), 3.0)))
