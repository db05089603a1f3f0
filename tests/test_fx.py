"""jitorch.fx tracing, Graph/Node API, code generation, Interpreter/Transformer and errors, as torch.fx behaves."""
from __future__ import annotations

import builtins
import copy
import inspect
import operator
import pickle
import traceback

import pytest
from test_fx_helpers import assert_close, check_traced

import jitorch
import jitorch.nn.functional as F
from jitorch import fx, nn
from jitorch.fx import Graph, GraphModule, Interpreter, TraceError, Transformer, symbolic_trace
from jitorch.nn.functional import gelu


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.act, self.fc2 = nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x))).softmax(dim=-1)


class CNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2))
        self.head = nn.Linear(4 * 4 * 4, 5)

    def forward(self, x):
        h = self.features(x)
        return self.head(h.view(h.shape[0], -1))


class Affine(nn.Module):
    """A hand-written layer: not a jitorch.nn leaf, so it is traced through."""

    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(jitorch.randn(3, 4))
        self.bias = nn.Parameter(jitorch.randn(3))
        self.register_buffer("scale", jitorch.tensor(2.0))

    def forward(self, x):
        return (x @ self.weight.t() + self.bias) * self.scale


def test_mlp_leaf_modules_become_call_module():
    gm = check_traced(MLP(), jitorch.randn(5, 4))
    assert [n.op for n in gm.graph.nodes] == ["placeholder", "call_module", "call_module", "call_module",
                                              "call_method", "output"]
    assert [n.target for n in gm.graph.nodes if n.op == "call_module"] == ["fc1", "act", "fc2"]
    assert isinstance(gm.fc1, nn.Linear) and gm.fc1.weight is gm.graph.owning_module.fc1.weight


def test_cnn_traces_through_sequential_and_shape_arithmetic():
    gm = check_traced(CNN(), jitorch.randn(2, 3, 8, 8))
    assert [n.target for n in gm.graph.nodes if n.op == "call_module"] == ["features.0", "features.1", "features.2",
                                                                           "head"]
    assert any(n.op == "call_function" and n.target is getattr for n in gm.graph.nodes)  # h.shape


def test_custom_layer_parameters_become_get_attr():
    gm = check_traced(Affine(), jitorch.randn(2, 4))
    assert sorted(n.target for n in gm.graph.nodes if n.op == "get_attr") == ["bias", "scale", "weight"]


def test_custom_is_leaf_module_flips_tracing():
    class Opaque(fx.Tracer):
        def is_leaf_module(self, m, qualname):
            return isinstance(m, Affine) or super().is_leaf_module(m, qualname)

    class Outer(nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = Affine()

        def forward(self, x):
            return self.inner(x).relu()

    outer = Outer()
    graph = Opaque().trace(outer)
    assert [n.op for n in graph.nodes] == ["placeholder", "call_module", "call_method", "output"]
    check_traced(outer, jitorch.randn(2, 4), gm=GraphModule(outer, graph))


def test_functional_operators_methods_and_namespaces():
    const = jitorch.tensor([1.0, -1.0, 0.5])

    def f(x, y):
        a = jitorch.sigmoid(x) * y - 1.5 / (y.abs() + 1)
        b = F.relu(a) + gelu(a) + const  # ``gelu`` was imported by name: the trace still records it
        c = const * b  # a tensor on the left of a Proxy operator
        s = c.sum(dim=1, keepdim=True)
        return jitorch.cat([c, s], dim=1)[:, 1:], -x ** 2, x[0], x.size(1)

    x, y = jitorch.randn(4, 3), jitorch.randn(4, 3)
    gm = check_traced(f, x, y)
    targets = {n.target for n in gm.graph.nodes if n.op == "call_function"}
    assert {jitorch.sigmoid, F.relu, gelu, jitorch.cat, operator.getitem, operator.neg} <= targets
    assert "_tensor_constant0" in {n.target for n in gm.graph.nodes if n.op == "get_attr"}


def test_code_golden_snapshot_and_graph_printout():
    def f(x, w):
        return jitorch.relu(x @ w + 1).sum(-1)

    gm = symbolic_trace(f)
    assert gm.code == (
        "def forward(self, x, w):\n"
        "    matmul = x @ w;  x = w = None\n"
        "    add = matmul + 1;  matmul = None\n"
        "    relu = jitorch.relu(add);  add = None\n"
        "    sum_1 = relu.sum(-1);  relu = None\n"
        "    return sum_1\n")
    assert str(gm.graph).splitlines()[4] == (
        "    %add : [num_users=1] = call_function[target=operator.add](args = (%matmul, 1), kwargs = {})")
    assert "class f(jitorch.nn.Module):" in gm.print_readable(print_output=False)


def test_print_tabular(capsys):
    symbolic_trace(lambda x: x.exp()).graph.print_tabular()
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["opcode", "name", "target", "args", "kwargs"]
    assert out[3].split()[:3] == ["call_method", "exp", "exp"]


def test_concrete_args_specialize_a_branch():
    def f(x, flag):
        return x.relu() if flag else x.neg()

    gm = check_traced(lambda x: f(x, True), jitorch.randn(3))
    gm = symbolic_trace(f, concrete_args={"flag": False})
    gm.graph.lint()
    x = jitorch.randn(3)
    assert_close(gm(x), -x)
    assert_close(Interpreter(gm).run(x), -x)
    assert "neg" in gm.code and "relu" not in gm.code


def test_data_dependent_if_raises_trace_error_with_line():
    def f(x):
        if x.sum() > 0:
            return x
        return -x

    line = inspect.getsourcelines(f)[1] + 1
    with pytest.raises(TraceError) as info:
        symbolic_trace(f)
    message = str(info.value)
    assert "cannot be used as inputs to control flow" in message
    assert f'{__file__}", line {line}' in message and "if x.sum() > 0:" in message
    assert "concrete_args" in message and "jitorch.fx.wrap" in message and "jitorch.compile" in message
    # the trace's patches are gone: eager code works again
    assert_close(f(jitorch.ones(2)), jitorch.ones(2))
    assert not isinstance(jitorch.relu(jitorch.ones(1)), fx.Proxy)


def test_len_raises_and_iteration_follows_torch_fx():
    with pytest.raises(RuntimeError, match=r"'len' is not supported .*wrap\('len'\)"):
        symbolic_trace(lambda x: x * builtins.len(x))  # this file wraps the global name ``len`` below

    def unpack(x):
        a, b = x.chunk(2)  # a statically known count: allowed
        return a * b

    check_traced(unpack, jitorch.randn(4, 3))

    def loop(x):
        return [t for t in x]

    with pytest.raises(TraceError, match="cannot be iterated"):
        symbolic_trace(loop)


def scale_if_positive(x, k):
    # Python control flow on a value: tracing through this would fail, wrapping records it as one call.
    return x * k if k > 0 else x


fx.wrap("scale_if_positive")
fx.wrap("len")


def test_wrap_records_one_opaque_call():
    def f(x):
        return scale_if_positive(x + 1, 3)

    gm = check_traced(f, jitorch.randn(3))
    calls = [n.target for n in gm.graph.nodes if n.op == "call_function"]
    assert calls == [operator.add, scale_if_positive]
    assert scale_if_positive(jitorch.ones(1), 2).item() == 2.0  # unpatched again
    gm = check_traced(lambda x: x * len(x), jitorch.randn(3))
    assert len in [n.target for n in gm.graph.nodes]


def test_graph_module_deepcopy_and_pickle_round_trip():
    m = MLP()
    gm = symbolic_trace(m)
    x = jitorch.randn(2, 4)
    for clone in (copy.deepcopy(gm), pickle.loads(pickle.dumps(gm))):
        clone.graph.lint()
        assert clone.code == gm.code
        assert_close(clone(x), m(x))
        assert clone.fc1.weight is not m.fc1.weight
    gm_fn = symbolic_trace(lambda a: jitorch.tanh(a) + jitorch.ones(2))
    assert_close(pickle.loads(pickle.dumps(gm_fn))(x[:, :2]), gm_fn(x[:, :2]))


def test_traceback_points_into_generated_code():
    gm = symbolic_trace(lambda x, w: (x + 1) @ w)
    with pytest.raises(Exception) as info:
        gm(jitorch.randn(2, 3), jitorch.randn(4, 5))
    frames = traceback.extract_tb(info.value.__traceback__)
    generated = [fr for fr in frames if fr.filename.startswith("<eval_with_key>")]
    assert generated and generated[-1].line == "matmul = add @ w;  add = w = None"


def test_interpreter_override_counts_calls_and_notes_failures():
    class CountAdds(Interpreter):
        adds = 0

        def call_function(self, target, args, kwargs):
            CountAdds.adds += target is operator.add
            return super().call_function(target, args, kwargs)

    gm = symbolic_trace(lambda x: x + 1 + 2 + x)
    out = CountAdds(gm).run(jitorch.ones(2))
    assert CountAdds.adds == 3 and out.tolist() == [5.0, 5.0]
    with pytest.raises(Exception) as info:
        Interpreter(symbolic_trace(lambda x, w: x @ w)).run(jitorch.ones(2, 3), jitorch.ones(2, 3))
    assert any("While executing %matmul" in note for note in info.value.__notes__)


def test_transformer_rewrites_into_a_new_module():
    class ReluToSigmoid(Transformer):
        def call_module(self, target, args, kwargs):
            if isinstance(self.fetch_attr(target), nn.ReLU):
                return self.tracer.create_proxy("call_function", jitorch.sigmoid, args, kwargs)
            return super().call_module(target, args, kwargs)

    m = MLP()
    new = ReluToSigmoid(symbolic_trace(m)).transform()
    new.graph.lint()
    x = jitorch.randn(2, 4)
    assert_close(new(x), m.fc2(jitorch.sigmoid(m.fc1(x))).softmax(-1))
    assert_close(Interpreter(new).run(x), new(x))


def test_graph_builders_surgery_and_recompile():
    gm = symbolic_trace(lambda x: (x + 1).relu())
    g = gm.graph
    add = next(n for n in g.nodes if n.target is operator.add)
    relu = next(n for n in g.nodes if n.op == "call_method")
    assert list(add.users) == [relu] and relu.all_input_nodes == [add]
    with g.inserting_after(add):
        doubled = g.call_function(operator.mul, (add, 2))
    add.replace_all_uses_with(doubled, delete_user_cb=lambda user: user is not doubled)
    with g.inserting_before(relu):
        unused = g.call_method("exp", (doubled,))
    assert [n.name for n in g.nodes] == ["x", "add", "mul", "exp", "relu", "output"]
    assert g.eliminate_dead_code() and unused not in set(g.nodes)
    g.lint()
    gm.recompile()
    x = jitorch.randn(5)
    assert_close(gm(x), ((x + 1) * 2).relu())
    assert_close(Interpreter(gm).run(x), ((x + 1) * 2).relu())
    with pytest.raises(RuntimeError, match="still had 1 users"):
        g.erase_node(add)
    relu.replace_input_with(doubled, add)
    assert relu.args == (add,) and relu not in doubled.users


def test_node_copy_and_graph_copy():
    src = symbolic_trace(lambda x, y: jitorch.maximum(x, y) * 3).graph
    g = Graph()
    a, b = g.placeholder("a"), g.placeholder("b")
    placeholders = [n for n in src.nodes if n.op == "placeholder"]
    out = g.graph_copy(src, {placeholders[0]: a, placeholders[1]: b})
    extra = g.node_copy(out, lambda n: n)  # copy with the same inputs: a second, uniquely named node
    g.output((out, extra))
    g.lint()
    assert extra.name != out.name and extra.args == out.args
    gm = GraphModule(nn.Module(), g)
    x, y = jitorch.randn(3), jitorch.randn(3)
    assert_close(gm(x, y), [jitorch.maximum(x, y) * 3] * 2)
    assert_close(Interpreter(gm).run(x, y), [jitorch.maximum(x, y) * 3] * 2)


def test_lint_names_the_malformed_node():
    g = Graph()
    x = g.placeholder("x")
    a = g.call_method("neg", (x,))
    b = g.call_method("exp", (a,))
    g.output(b)
    g.lint()
    a.args = (b,)  # a cycle: 'a' now reads a value defined after it
    with pytest.raises(RuntimeError, match="Argument 'exp' of Node 'neg'.*used before it has been defined"):
        g.lint()
    a.args = (x,)
    g.lint()
    gm = GraphModule(nn.Module(), g)
    with gm.graph.inserting_before(b):
        gm.graph.get_attr("missing")
    with pytest.raises(RuntimeError, match="Node 'missing'.*nonexistent attribute 'missing'"):
        gm.graph.lint()


def test_to_dot_lists_nodes_and_edges():
    dot = symbolic_trace(lambda x: x.exp() + x).graph.to_dot()
    assert dot.startswith('digraph "graph" {') and dot.rstrip().endswith("}")
    assert '"x" -> "exp";' in dot and '"exp" -> "add";' in dot and '"x" -> "add";' in dot
