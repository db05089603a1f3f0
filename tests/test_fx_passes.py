"""jitorch.fx passes: ShapeProp, subgraph rewriting, CSE and constant folding keep results and shrink graphs."""
from __future__ import annotations

import operator

import numpy as np
import pytest
import torch
import torch.fx
import torch.fx.passes.shape_prop
from test_fx_helpers import assert_close, check_traced

import jitorch
from jitorch import fx, nn
from jitorch.fx import Interpreter, replace_pattern, symbolic_trace
from jitorch.fx.passes import CSEPass, ShapeProp, fold_constants


def _body(x, y):
    # written with methods only, so the same code runs on torch tensors (the oracle for strides)
    t = x.t()
    s = t + y
    return s.sum(0), s.transpose(0, 1).to(dtype=y.dtype) > 0


def test_shape_prop_matches_eager_shapes_dtypes_strides():
    x = np.random.randn(4, 3).astype(np.float32)
    y = np.random.randn(3, 1).astype(np.float64)
    gm = check_traced(_body, jitorch.tensor(x), jitorch.tensor(y))
    ShapeProp(gm).propagate(jitorch.tensor(x), jitorch.tensor(y))

    env = {}
    for node in gm.graph.nodes:  # the same values, computed by torch node by node
        args = fx.map_arg(node.args, env.__getitem__)
        if node.op == "placeholder":
            env[node] = torch.tensor(x if node.name == "x" else y)
        elif node.op == "call_method":
            env[node] = getattr(args[0], node.target)(*args[1:], **fx.map_arg(node.kwargs, env.__getitem__))
        elif node.op == "call_function":
            env[node] = node.target(*args)
        else:
            continue
        expected = env[node]
        if not isinstance(expected, torch.Tensor):
            assert "tensor_meta" not in node.meta and node.meta["type"] is not jitorch.Tensor
            continue
        meta = node.meta["tensor_meta"]
        assert tuple(meta.shape) == tuple(expected.shape), node
        assert tuple(meta.stride) == tuple(expected.stride()), node
        assert str(meta.dtype).split(".")[-1] == str(expected.dtype).split(".")[-1], node
        assert meta.requires_grad is False
    t_node = next(n for n in gm.graph.nodes if n.target == "t")
    assert tuple(t_node.meta["tensor_meta"].stride) == (1, 3)


def test_shape_prop_on_modules_and_requires_grad():
    m = nn.Sequential(nn.Linear(4, 6), nn.ReLU())
    gm = check_traced(m, jitorch.randn(2, 4))
    ShapeProp(gm).propagate(jitorch.randn(2, 4))
    meta = [n.meta["tensor_meta"] for n in gm.graph.nodes if n.op == "call_module"]
    assert [tuple(t.shape) for t in meta] == [(2, 6), (2, 6)]
    assert meta[0].requires_grad and meta[0].dtype == jitorch.float32
    assert "(2, 6)" in gm.graph.to_dot()


def _layouts(lib):
    return lambda x: (x.permute(0, 2, 3, 1), x.contiguous(memory_format=lib.channels_last), x.sum(-1))


def test_shape_prop_reports_memory_format_as_torch():
    x = np.random.randn(2, 3, 4, 5).astype(np.float32)
    formats = []
    for lib, shape_prop in ((jitorch, ShapeProp), (torch, torch.fx.passes.shape_prop.ShapeProp)):
        gm = lib.fx.symbolic_trace(_layouts(lib))
        shape_prop(gm).propagate(lib.tensor(x))
        formats.append([str(n.meta["tensor_meta"].memory_format).split(".")[-1]
                        for n in gm.graph.nodes if n.op != "output"])
    assert formats[0] == formats[1] == ["contiguous_format", "None", "channels_last", "contiguous_format"]


def test_replace_pattern_finds_each_occurrence():
    def f(x, y):
        return (x * 2 + 1) - (y * 2 + 1).relu()

    def pattern(a):
        return a * 2 + 1

    def replacement(a):
        return jitorch.addcmul(jitorch.ones_like(a), a, jitorch.full_like(a, 2.0))

    gm = symbolic_trace(f)
    matches = replace_pattern(gm, pattern, replacement)
    assert len(matches) == 2
    assert [m.anchor.target for m in matches] == [operator.add] * 2
    assert [m.nodes_map[next(iter(m.nodes_map))].name for m in matches] == ["add", "add_1"]
    assert not any(n.target in (operator.mul, operator.add) for n in gm.graph.nodes)
    check_traced(f, jitorch.randn(3), jitorch.randn(3), gm=gm)


def test_replace_pattern_skips_overlaps_and_escaping_values():
    def chain(x):
        return x.neg().neg().neg()

    gm = symbolic_trace(chain)
    matches = replace_pattern(gm, lambda a: a.neg().neg(), lambda a: a)
    assert len(matches) == 1  # the second candidate overlaps the first
    check_traced(chain, jitorch.randn(3), gm=gm)

    def escaping(x):
        m = x * 2
        return m + 1, m  # 'm' is used outside the candidate match

    gm = symbolic_trace(escaping)
    assert replace_pattern(gm, lambda a: a * 2 + 1, lambda a: a) == []
    check_traced(escaping, jitorch.randn(3), gm=gm)

    def literal(x):
        return x * 3 + 1

    gm = symbolic_trace(literal)
    assert replace_pattern(gm, lambda a: a * 2 + 1, lambda a: a) == []  # literals must be equal


def _halves_relu(lib):
    def f(x, y):
        a, b = x.chunk(2, dim=-1)
        c, d = y.chunk(2, dim=-1)
        return a.relu() + b.relu() * (c.relu() - d.relu())

    def pattern(x):
        a, b = x.chunk(2, dim=-1)
        return a.relu(), b.relu()

    def replacement(x):
        a, b = x.relu().chunk(2, dim=-1)
        return a, b
    return f, pattern, replacement


def test_replace_pattern_with_several_outputs_as_torch_fx():
    f, pattern, replacement = _halves_relu(jitorch)
    gm = symbolic_trace(f)
    matches = replace_pattern(gm, pattern, replacement)
    t_gm = torch.fx.symbolic_trace(f)
    assert len(matches) == len(torch.fx.subgraph_rewriter.replace_pattern(t_gm, pattern, replacement)) == 2
    x, y = jitorch.randn(3, 4), jitorch.randn(3, 4)
    check_traced(f, x, y, gm=gm)
    assert [n.target for n in gm.graph.nodes if n.op == "call_method"].count("relu") == 2  # one per input now
    alive = set(gm.graph.nodes)
    assert not [n for m in matches for p, n in m.nodes_map.items() if p.op != "placeholder" and n in alive]


def test_replace_pattern_wants_as_many_replacement_outputs():
    f, pattern, _ = _halves_relu(jitorch)
    with pytest.raises(ValueError, match="the pattern returns 2 values but the replacement returns 1"):
        replace_pattern(symbolic_trace(f), pattern, lambda x: x.relu())


def _chained_relu(lib):
    return (lambda x, y: lib.relu(lib.relu(x + y) + y) * 2, lambda a, b: lib.relu(a + b),
            lambda a, b: lib.sigmoid(a - b))


def test_replace_pattern_where_a_match_reads_an_earlier_matchs_output():
    f, pattern, replacement = _chained_relu(jitorch)
    gm = symbolic_trace(f)
    assert len(replace_pattern(gm, pattern, replacement)) == 2  # the second reads the first's output
    t_f, t_pattern, t_replacement = _chained_relu(torch)
    t_gm = torch.fx.symbolic_trace(t_f)
    assert len(torch.fx.replace_pattern(t_gm, t_pattern, t_replacement)) == 2
    gm.graph.lint()
    x, y = np.random.randn(3).astype(np.float32), np.random.randn(3).astype(np.float32)
    assert_close(gm(jitorch.tensor(x), jitorch.tensor(y)), t_gm(torch.tensor(x), torch.tensor(y)).numpy())


def _adds(lib):
    return lambda x: lib.add(x, 1) * lib.add(x, 2), lambda a: lib.add(a, 1), lambda a: lib.sub(a, 1)


def test_replace_pattern_with_filters_takes_torchs_arguments_and_results():
    seen = []

    def keep(match, graph, pattern_graph):
        seen.append(([n.name for n in match.placeholder_nodes], [n.name for n in match.returning_nodes]))
        return len(match.anchors) == 1

    results = []
    for lib, rewrite in ((jitorch, fx.subgraph_rewriter), (torch, torch.fx.subgraph_rewriter)):
        f, pattern, replacement = _adds(lib)
        gm = lib.fx.symbolic_trace(f)
        replaced = rewrite.replace_pattern_with_filters(gm, pattern, replacement, [keep], ignore_literals=True)
        results.append([(type(r).__name__, [n.target.__name__ for n in r.replacements]) for r in replaced])
        assert gm(lib.ones(2)).tolist() == [0.0, 0.0]  # (x - 1) * (x - 1): both adds were replaced
        gm = lib.fx.symbolic_trace(f)
        assert len(rewrite.replace_pattern_with_filters(gm, pattern, replacement, None)) == 1  # the literal 2 differs
    assert results[0] == results[1] == [("ReplacedPatterns", ["sub"])] * 2
    assert seen[:2] == seen[2:] == [(["x"], ["add"]), (["x"], ["add_1"])]


def test_cse_merges_duplicates_and_keeps_results():
    def f(x):
        a = jitorch.exp(x) + jitorch.exp(x)
        b = x.sum(dim=0) * x.sum(dim=0)
        return a * b, x.sum(dim=1)

    gm = symbolic_trace(f)
    before = len(gm.graph.nodes)
    result = CSEPass()(gm)
    assert result.modified and len(gm.graph.nodes) == before - 2
    check_traced(f, jitorch.randn(3, 3), gm=gm)
    assert CSEPass()(gm).modified is False


def test_cse_keeps_random_and_inplace_calls():
    def f(x):
        return jitorch.rand_like(x) + jitorch.rand_like(x), x.clone().add_(1) + x.clone().add_(1)

    gm = symbolic_trace(f)
    before = len(gm.graph.nodes)
    CSEPass()(gm)
    # each random draw and each in-place update is kept; the clones are written in place, so they stay two
    assert len(gm.graph.nodes) == before
    assert sum(n.target is jitorch.rand_like for n in gm.graph.nodes) == 2
    gm.graph.lint()
    assert_close(gm(jitorch.zeros(2))[1], [2.0, 2.0])


def _mutations(x):
    a, b = x.clone(), x.clone()
    a.view(-1).add_(1)  # writes a through a view: b must stay a separate clone
    c = x.exp()
    x.mul_(2)
    return a + b, c + x.exp() + x.sin() * x.sin()  # the second exp reads the doubled x; the two sins may merge


def test_cse_respects_in_place_writes_and_merges_the_rest():
    gm = symbolic_trace(_mutations)
    before = len(gm.graph.nodes)
    assert CSEPass()(gm).modified and len(gm.graph.nodes) == before - 1
    x = np.random.randn(3).astype(np.float32)
    assert_close(gm(jitorch.tensor(x)), [t.numpy() for t in _mutations(torch.tensor(x))])


class Folded(nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(jitorch.randn(4, 3))
        self.register_buffer("mask", jitorch.tensor([1.0, 0.0, 1.0, 1.0]))

    def forward(self, x):
        w = (self.weight * self.mask[:, None]).t()  # depends only on attributes: foldable
        return x @ w + jitorch.ones(4).exp().sum()


def test_constant_folding_shrinks_graph_and_keeps_results():
    m = Folded()
    gm = symbolic_trace(m)
    before = len(gm.graph.nodes)
    assert fold_constants(gm) == 1
    gm.graph.lint()
    assert len(gm.graph.nodes) < before
    assert [n.op for n in gm.graph.nodes].count("get_attr") == 2  # the folded weight and the tensor constant
    x = jitorch.randn(2, 3)
    assert_close(gm(x), m(x))
    assert_close(Interpreter(gm).run(x), m(x))
    assert fold_constants(gm) == 0
    assert gm.double()(x.double()).dtype == jitorch.float64  # folded values are buffers, cast with the module


class Counted(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("count", jitorch.zeros(1))

    def forward(self, x):
        y = x + self.count.exp()
        self.count.add_(1)  # written by every call: what reads it is no constant
        return y


def test_constant_folding_leaves_attributes_written_in_place():
    m, gm = Counted(), symbolic_trace(Counted())
    assert fold_constants(gm) == 0
    for _ in range(2):
        assert_close(gm(jitorch.zeros(1)), m(jitorch.zeros(1)))


def test_surgery_insert_replace_dce_recompile_keeps_results():
    m = nn.Sequential(nn.Linear(3, 3), nn.ReLU(), nn.Linear(3, 2))
    gm = symbolic_trace(m)
    relu = next(n for n in gm.graph.nodes if n.target == "1")
    with gm.graph.inserting_after(relu):
        clamped = gm.graph.call_function(jitorch.clamp, (relu,), {"max": 1e9})
    relu.replace_all_uses_with(clamped, delete_user_cb=lambda u: u is not clamped)
    with gm.graph.inserting_after(clamped):
        gm.graph.call_method("exp", (clamped,))  # dead
    assert gm.graph.eliminate_dead_code()
    gm.graph.lint()
    gm.recompile()
    assert "jitorch.clamp(" in gm.code and "exp" not in gm.code
    x = jitorch.randn(4, 3)
    assert_close(gm(x), m(x))
    assert_close(Interpreter(gm).run(x), m(x))


def _written_in_place(x):
    y = x * 2
    jitorch.relu_(y)
    nn.functional.leaky_relu(y, 0.1, True)  # inplace=True by position
    jitorch.clamp_(y, max=1.5)
    return y


def test_dead_code_elimination_keeps_in_place_functions():
    gm = symbolic_trace(_written_in_place)
    assert gm.graph.eliminate_dead_code() is False
    x = jitorch.tensor([-1.0, 0.5, 2.0])
    assert_close(gm(x.clone()), _written_in_place(x.clone()))


@pytest.mark.parametrize("case", ["literal input", "one node for two inputs", "two nodes"])
def test_replace_pattern_binds_inputs_as_torch_does(case):
    # torch's matcher: a pattern input may match a literal; two pattern inputs never match one graph node.
    fns = {"literal input": lambda lib, x, y: lib.add(y, 2.0) * 3,
           "one node for two inputs": lambda lib, x, y: lib.add(x, x) * 3,
           "two nodes": lambda lib, x, y: lib.add(x, y) * lib.add(y, 2.0) + lib.add(x, x)}
    results = []
    for lib, fx_lib in ((torch, torch.fx), (jitorch, fx)):
        gm = fx_lib.symbolic_trace(lambda x, y: fns[case](lib, x, y))
        count = len(fx_lib.replace_pattern(gm, lambda a, b: lib.add(a, b), lambda a, b: lib.sub(a, b)))
        gm.graph.lint()
        results.append((count, gm(lib.tensor([1.0, -2.0]), lib.tensor([3.0, 0.5])).tolist()))
    assert results[1] == results[0]
