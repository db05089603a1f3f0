"""symbolic_trace details that follow torch.fx: star parameters, keyword-only parameters, autowrapped math functions,
Proxy iteration/len, and the Graphviz rendering of a graph."""
from __future__ import annotations

import inspect
import math
import operator
import os
import stat
import sys
from math import sqrt

import pytest
import torch
import torch.fx
from test_fx_helpers import assert_close, check_traced

import jitorch
from jitorch import fx
from jitorch.fx import Interpreter, TraceError, Tracer, symbolic_trace


def _placeholders(gm):
    return [n.target for n in gm.graph.nodes if n.op == "placeholder"]


def test_star_args_and_kwargs_become_one_placeholder_each():
    def f(x, *args, **kwargs):
        return x + args[0] * kwargs["k"]

    gm = symbolic_trace(f)
    gm.graph.lint()
    assert _placeholders(gm) == ["x", "*args", "**kwargs"]
    assert _placeholders(torch.fx.symbolic_trace(f)) == ["x", "*args", "**kwargs"]  # the same targets as torch.fx
    assert gm.code.startswith("def forward(self, x, *args, **kwargs):\n")
    x, y, k = jitorch.randn(3), jitorch.randn(3), jitorch.randn(3)
    assert_close(gm(x, y, k=k), f(x, y, k=k))
    assert [n.target for n in gm.graph.nodes if n.op == "call_function"][:2] == [operator.getitem] * 2


def test_star_args_only_runs_in_interpreter_and_transformer():
    def f(*args):
        return args[0] + args[1]

    gm = check_traced(f, jitorch.randn(2), jitorch.randn(2))  # the Interpreter hands *args every remaining value
    assert gm.code.startswith("def forward(self, *args):")
    new = fx.Transformer(gm).transform()
    new.graph.lint()
    a, b = jitorch.randn(2), jitorch.randn(2)
    assert_close(new(a, b), a + b)


def test_keyword_only_parameters_keep_their_defaults_and_kinds():
    def g(x, *, k=2):
        return x * k

    gm = symbolic_trace(g)
    x = jitorch.randn(3)
    assert_close(gm(x, k=5), g(x, k=5))
    assert_close(gm(x), g(x))

    def h(x, y=3, *args, z, w=4, **kw):
        return x * y + z * w + args[1]

    gm = symbolic_trace(h)
    gm.graph.lint()
    assert gm.code.startswith("def forward(self, x, y = 3, *args, z, w = 4, **kw):")
    assert _placeholders(gm) == ["x", "y", "*args", "z", "w", "**kw"]
    z = jitorch.randn(3)
    assert_close(gm(x, 2, 0, jitorch.ones(3), z=z), h(x, 2, 0, jitorch.ones(3), z=z))

    def required_after_default(x, y=3, *, z):
        return x * y + z

    gm = symbolic_trace(required_after_default)
    assert gm.code.startswith("def forward(self, x, y = 3, *, z):")  # still valid Python, still keyword-only
    assert_close(gm(x, z=z), required_after_default(x, z=z))
    with pytest.raises(TypeError):
        gm(x, 3, z)


def test_concrete_args_bind_keyword_only_parameters_but_not_star_ones():
    def f(x, *, scale, negate=False):
        return -x * scale if negate else x * scale

    gm = symbolic_trace(f, concrete_args={"negate": True})
    x = jitorch.randn(3)
    assert_close(gm(x, scale=2.0), f(x, scale=2.0, negate=True))
    with pytest.raises(TraceError, match=r"cannot specialize \*args"):
        symbolic_trace(lambda x, *args: x, concrete_args={"args": ()})


def test_math_functions_of_traced_sizes_are_recorded_like_torch_fx():
    def scale(x):
        return x / math.sqrt(x.size(-1)) + math.log(x.shape[0]) + sqrt(x.size(0))

    gm = check_traced(scale, jitorch.randn(4, 9))
    calls = [n.target for n in gm.graph.nodes if n.op == "call_function"]
    assert math.sqrt in calls and math.log in calls and calls.count(math.sqrt) == 2
    assert "math.sqrt(size)" in gm.code
    assert math.sqrt(4.0) == 2.0 and sqrt is math.sqrt and not hasattr(math.sqrt, "__fx_original__")  # restored
    tgm = torch.fx.symbolic_trace(lambda x: x / math.sqrt(x.size(-1)))
    assert [n.name for n in tgm.graph.nodes] == [n.name for n in symbolic_trace(
        lambda x: x / math.sqrt(x.size(-1))).graph.nodes]

    # Without autowrapping, math.sqrt needs float(proxy): a TraceError naming the line.
    with pytest.raises(TraceError, match=r"float\(\) of a traced value.*test_fx_tracing.py"):
        Tracer(autowrap_modules=()).trace(scale)


def _halve_if_big(x, n):
    return x / 2 if n > 3 else x


def test_autowrap_functions_are_recorded_as_one_call():
    def f(x):
        return _halve_if_big(x, x.size(0))

    with pytest.raises(TraceError):
        symbolic_trace(f)
    tracer = Tracer(autowrap_functions=(_halve_if_big,))
    graph = tracer.trace(f)
    gm = fx.GraphModule(tracer.root, graph)
    gm.graph.lint()
    assert _halve_if_big in [n.target for n in gm.graph.nodes]
    x = jitorch.randn(5)
    assert_close(gm(x), x / 2)
    assert_close(Interpreter(gm).run(x), x / 2)
    assert_close(gm(x[:2]), x[:2])  # decided at run time, not at trace time


def test_len_and_iteration_of_proxies_as_torch_fx():
    with pytest.raises(RuntimeError, match="'len' is not supported in symbolic tracing by default"):
        symbolic_trace(_uses_len)

    def unpack(x):
        b, c = x.shape  # unpacking a fixed count: getitem nodes
        first, second = x.chunk(2)
        return first * b + second * c

    gm = check_traced(unpack, jitorch.randn(4, 3))
    assert [n.args[1] for n in gm.graph.nodes if n.target is operator.getitem][:2] == [0, 1]

    line = inspect.getsourcelines(_loops)[1] + 1
    with pytest.raises(TraceError, match=f"cannot be iterated.*line {line}"):
        symbolic_trace(_loops)
    with pytest.raises(TraceError, match="cannot be iterated"):
        symbolic_trace(lambda x: jitorch.stack(list(x)))
    with pytest.raises(TraceError, match="cannot be iterated"):
        symbolic_trace(lambda x, *args: jitorch.cat([*args]))  # torch.fx fails here in the same way
    gm = symbolic_trace(lambda x, *args: jitorch.cat(args))  # the tuple itself is an argument: recorded
    a, b = jitorch.randn(2), jitorch.randn(3)
    assert_close(gm(a, a, b), jitorch.cat([a, b]))


def _uses_len(x):
    return x * len(x)


def _loops(x):
    return [t * 2 for t in x]


# -- Graphviz ------------------------------------------------------------------------------------------------------

_FAKE_DOT = """#!{python}
import sys
text = sys.stdin.read()
if sys.argv[1:] != ["-Tsvg"]:
    sys.stderr.write("fake dot: unexpected arguments %r" % sys.argv[1:])
    sys.exit(2)
if "broken" in text:
    sys.stderr.write("Error: <stdin>: syntax error in line 1")
    sys.exit(1)
sys.stdout.write("<svg xmlns='http://www.w3.org/2000/svg'><!--" + text + "--></svg>")
"""


def _install_fake_dot(directory, monkeypatch):
    exe = directory / "dot"
    exe.write_text(_FAKE_DOT.format(python=sys.executable))
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", str(directory))


def test_to_svg_passes_the_dot_text_through_graphviz(tmp_path, monkeypatch):
    graph = symbolic_trace(lambda x: x.exp() + x).graph
    _install_fake_dot(tmp_path, monkeypatch)
    svg = graph.to_svg()
    assert svg.startswith("<svg") and svg.endswith("</svg>")
    assert graph.to_dot() in svg  # exactly the DOT text reached ``dot -Tsvg`` on its standard input
    assert graph.to_svg(name="mine").count('digraph "mine"') == 1


def test_to_svg_errors_name_what_to_do(tmp_path, monkeypatch):
    graph = symbolic_trace(lambda x: x.exp()).graph
    monkeypatch.setenv("PATH", str(tmp_path))  # an empty directory: no ``dot``
    with pytest.raises(RuntimeError, match=r"Graphviz's 'dot' program.*Graph.to_dot\(\)"):
        graph.to_svg()
    _install_fake_dot(tmp_path, monkeypatch)
    with pytest.raises(RuntimeError, match="dot failed with exit code 1: Error: <stdin>: syntax error"):
        graph.to_svg(name="broken")
    assert os.environ["PATH"] == str(tmp_path)


# -- node metadata through copies, DCE hooks ------------------------------------------------------------------------

def test_deepcopy_keeps_node_meta_and_pickle_keeps_behaviour():
    import copy
    import pickle

    from jitorch.fx.passes import ShapeProp

    m = jitorch.nn.Sequential(jitorch.nn.Linear(3, 4), jitorch.nn.ReLU())
    gm = symbolic_trace(m)
    ShapeProp(gm).propagate(jitorch.randn(2, 3))
    clone = copy.deepcopy(gm)
    clone.graph.lint()
    assert type(clone).__name__ == "Sequential" and clone.code == gm.code
    assert [n.meta["tensor_meta"].shape for n in clone.graph.nodes] == [n.meta["tensor_meta"].shape
                                                                          for n in gm.graph.nodes]
    assert not set(clone.graph.nodes) & set(gm.graph.nodes)
    assert clone.get_submodule("0").weight is not m[0].weight
    x = jitorch.randn(2, 3)
    assert_close(clone(x), m(x))
    assert_close(pickle.loads(pickle.dumps(gm))(x), m(x))


def test_stack_trace_and_custom_impurity_in_dce():
    def f(x):
        unused = x.exp()  # noqa: F841 - dead on purpose
        return x + 1

    gm = symbolic_trace(f)
    exp = next(n for n in gm.graph.nodes if n.target == "exp")
    line = inspect.getsourcelines(f)[1] + 1
    assert exp.stack_trace == f'File "{__file__}", line {line}' and not exp.is_impure()
    assert not gm.graph.eliminate_dead_code(is_impure_node=lambda n: n.op != "call_function")
    assert gm.graph.eliminate_dead_code() and exp not in set(gm.graph.nodes)


def test_make_fx_names_the_tracing_modes_it_lacks():
    with pytest.raises(NotImplementedError, match="tracing_mode='fake'"):  # fake mode exists (test_fx_fake.py)
        fx.make_fx(lambda x: x * 2, tracing_mode="symbolic")
