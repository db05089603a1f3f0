"""torch.fx API that tutorials and tools use: GraphModule submodule surgery and to_folder, Interpreter.boxed_run,
Node.normalized_arguments, split_module, Graph.on_generate_code, torch's import paths and torch._assert."""
from __future__ import annotations

import importlib
import sys

import numpy as np
import pytest
import torch
import torch.fx
import torch.fx.passes.shape_prop
from test_fx_helpers import assert_close, check_traced
from torch.fx.passes.split_module import split_module as torch_split_module

import jitorch
from jitorch import fx, nn
from jitorch.fx.passes.split_module import split_module


def _calls(gm, op="call_function"):
    return [n for n in gm.graph.nodes if n.op == op]  # torch's find_nodes wants a target for call_function


def _seq(lib):
    return lib.fx.symbolic_trace(lib.nn.Sequential(lib.nn.Linear(2, 2), lib.nn.ReLU()))


def test_submodule_surgery_answers_as_torch():
    ours, theirs = _seq(jitorch), _seq(torch)
    for gm, lib in ((ours, jitorch), (theirs, torch)):
        steps = [gm.add_submodule("extra.act", lib.nn.ReLU()), gm.add_submodule("0.x", lib.nn.ReLU()),
                 gm.delete_submodule("extra.act"), gm.delete_submodule("nope.x"), gm.delete_submodule("extra")]
        gm.add_submodule("extra.act", lib.nn.ReLU())
        gm.add_submodule("0.y", lib.nn.ReLU())
        gm.delete_all_unused_submodules()  # the children of a called module stay: it may use them
        gm.steps, gm.names = steps, [n for n, _ in gm.named_modules()]
    assert ours.steps == theirs.steps == [True, True, True, False, True]
    assert ours.names == theirs.names == ["", "0", "0.x", "0.y", "1"]
    check_traced(nn.Sequential(ours.get_submodule("0"), nn.ReLU()), jitorch.randn(3, 2), gm=ours)


def test_to_folder_writes_an_importable_package(tmp_path):
    scale = jitorch.tensor([2.0, 3.0])

    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(2, 2)
            self.register_buffer("shift", jitorch.ones(2))

        def forward(self, x):
            return (self.lin(x) + self.shift) * scale  # a module, a buffer and a tensor constant

    m = M()
    for i, gm in enumerate([fx.symbolic_trace(m), fx.make_fx(m)(jitorch.randn(3, 2))]):  # make_fx: primitives
        gm.to_folder(tmp_path / f"pkg{i}", "Saved")
        sys.path.insert(0, str(tmp_path))
        try:
            saved = importlib.import_module(f"pkg{i}").Saved()
        finally:
            sys.path.remove(str(tmp_path))
        assert (tmp_path / f"pkg{i}" / "state_dict.pt").exists()
        assert "    def forward(self, " in (tmp_path / f"pkg{i}" / "module.py").read_text()
        x = jitorch.randn(3, 2)
        assert_close(saved(x), m(x))
        assert sorted(saved.state_dict()) == sorted(gm.state_dict())


def test_boxed_run_empties_the_list_and_run_takes_torchs_io_switch():
    gm = _seq(jitorch)
    x = jitorch.randn(3, 2)
    args = [x]
    assert_close(fx.Interpreter(gm).boxed_run(args), gm(x))
    assert args == []
    assert_close(fx.Interpreter(gm).run(x, enable_io_processing=False), gm(x))


def test_normalized_arguments_bind_the_signature_as_torch():
    results = []
    for lib in (jitorch, torch):
        gm = lib.fx.symbolic_trace(lambda x: lib.nn.functional.leaky_relu(x, 0.2))
        call = _calls(gm)[0]
        # torch records this call as leaky_relu(x, negative_slope=0.2, inplace=False), jitorch as written.
        pair = call.normalized_arguments(gm, normalize_to_only_use_kwargs=True)
        results.append([pair.args, {k: getattr(v, "name", v) for k, v in pair.kwargs.items()}])
        lin = lib.fx.symbolic_trace(lib.nn.Sequential(lib.nn.Linear(2, 2)))
        results[-1].append(lin.graph.find_nodes(op="call_module")[0].normalized_arguments(lin).args[0].name)
    assert results[0] == results[1]
    assert results[0][1] == {"input": "x", "negative_slope": 0.2, "inplace": False}
    pair = _calls(fx.symbolic_trace(lambda x: jitorch.nn.functional.leaky_relu(x, 0.2)))[0].normalized_arguments(None)
    assert [a.name for a in pair.args[:1]] == ["x"] and pair.args[1:] == (0.2,) and pair.kwargs == {"inplace": False}
    assert fx.symbolic_trace(lambda x: x + 1).graph.find_nodes(op="call_method") == []


def _split_model(lib):
    class M(lib.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = lib.nn.Linear(3, 3)
            self.w = lib.nn.Parameter(lib.ones(3) * 2)

        def forward(self, x, y):
            a = self.lin(x) + y
            b = a.relu() * self.w
            return b + a, a
    return M()


def test_split_module_cuts_into_partitions_like_torch():
    def by_name(node):
        return 0 if node.name in ("lin", "add") else 1

    m = _split_model(jitorch)
    qualnames = {}
    split = split_module(fx.symbolic_trace(m), m, by_name, qualnames)
    t_m = _split_model(torch)
    t_qualnames = {}
    t_split = torch_split_module(torch.fx.symbolic_trace(t_m), t_m, by_name, t_qualnames)
    assert [n for n, _ in split.named_children()] == [n for n, _ in t_split.named_children()] == ["submod_0",
                                                                                                  "submod_1"]
    # torch passes the parameter w from the top module; jitorch copies it into submod_1, and says so.
    assert t_qualnames == {"submod_0.lin": "lin"} and qualnames == {**t_qualnames, "submod_1.w": "w"}
    assert [n.op for n in split.submod_0.graph.nodes] == [n.op for n in t_split.submod_0.graph.nodes]
    x, y = jitorch.randn(4, 3), jitorch.randn(4, 3)
    check_traced(m, x, y, gm=split)
    for sub in (split.submod_0, split.submod_1):
        sub.graph.lint()
    with pytest.raises(RuntimeError, match="a cycle"):
        split_module(fx.symbolic_trace(m), m, lambda n: 0 if n.name in ("lin", "mul") else 1)


def test_on_generate_code_transforms_the_body_and_undoes_itself():
    gm = fx.symbolic_trace(lambda x: x + 1)
    seen = []

    def make(old):
        def transform(lines):
            seen.append(list(lines))
            return ["x = x * 10\n", *lines]
        return transform

    with gm.graph.on_generate_code(make):
        gm.recompile()
        assert_close(gm(jitorch.ones(1)), [11.0])
    assert seen == [["add = x + 1;  x = None\n", "return add\n"]]
    gm.recompile()
    assert_close(gm(jitorch.ones(1)), [2.0])


def test_torchs_import_paths_and_type_names():
    from jitorch.fx._symbolic_trace import PH, Tracer
    from jitorch.fx.experimental.proxy_tensor import make_fx
    from jitorch.fx.node import Argument, Target

    assert make_fx is fx.make_fx and PH is fx.PH and Tracer is fx.Tracer and Argument and Target
    assert fx.Graph(tracer_cls=fx.Tracer)._tracer_cls is fx.Tracer


def _positive(x):
    jitorch._assert(x.sum() > 0, "the sum must be positive")
    return x


def _torch_positive(x):
    torch._assert(x.sum() > 0, "the sum must be positive")
    return x


def test_assert_is_recorded_as_torch_fx_records_torch_assert():
    gm = fx.symbolic_trace(_positive)
    assert [n.target.__name__ for n in _calls(gm)] == \
        [n.target.__name__ for n in _calls(torch.fx.symbolic_trace(_torch_positive))]
    check_traced(_positive, jitorch.ones(2), gm=gm)
    assert gm.graph.eliminate_dead_code() is False  # an assertion is kept
    with pytest.raises(AssertionError, match="the sum must be positive"):
        gm(-jitorch.ones(2))


def _with_constant(lib):
    class M(lib.nn.Module):
        def forward(self, x):
            return x @ lib.tensor([[1.0, 2.0], [3.0, 4.0]])
    return M()


def test_tensor_constants_become_buffers_that_follow_dtype_casts_as_in_torch():
    gm, t_gm = fx.symbolic_trace(_with_constant(jitorch)), torch.fx.symbolic_trace(_with_constant(torch))
    assert list(gm.state_dict()) == list(t_gm.state_dict()) == ["_tensor_constant0"]
    out = gm.double()(jitorch.ones(2, 2, dtype=jitorch.float64))  # the constant was cast with the module
    assert out.dtype == jitorch.float64
    assert_close(out, t_gm.double()(torch.ones(2, 2, dtype=torch.float64)).numpy())


def _spy(lib, seen):
    def f(x):
        seen.append(importlib.import_module(lib.__name__ + ".fx._symbolic_trace").is_fx_symbolic_tracing())
        return x + 1
    return f


def test_is_fx_tracing_and_has_side_effect_as_torch():
    ours, theirs = [], []
    fx.symbolic_trace(_spy(jitorch, ours))
    torch.fx.symbolic_trace(_spy(torch, theirs))
    assert ours == theirs == [True]
    _spy(jitorch, ours)(jitorch.ones(1))
    assert ours == [True, False] and not fx._symbolic_trace.is_fx_tracing()

    def log(x):
        return None
    assert fx.has_side_effect(log) is log and torch.fx.has_side_effect is not None
    g = fx.Graph()
    x = g.placeholder("x")
    g.call_function(log, (x,))
    g.output(x)
    assert g.eliminate_dead_code() is False and len(g.nodes) == 3


def test_output_node_insert_arg_and_proxy_factory_fn():
    gm = fx.symbolic_trace(lambda x: jitorch.add(x, 1))
    assert gm.graph.output_node().op == "output"
    add = _calls(gm)[0]
    add.insert_arg(1, 2.0)  # add(x, 2.0, 1): the old second argument moves right
    add.args = add.args[:2]
    gm.recompile()
    assert_close(gm(jitorch.ones(1)), [3.0])

    class Tagging(fx.Tracer):
        def create_proxy(self, kind, target, args, kwargs, name=None, type_expr=None, proxy_factory_fn=None):
            return super().create_proxy(kind, target, args, kwargs, name, type_expr,
                                        proxy_factory_fn or (lambda n: n.meta.setdefault("tag", kind) and
                                                             fx.Proxy(n, self)))
    assert [n.meta.get("tag") for n in Tagging().trace(lambda x: x * 2).nodes] == \
        ["placeholder", "call_function", None]


def _nested(lib):
    class Inner(lib.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = lib.nn.Linear(2, 2)

        def forward(self, x):
            return self.lin(x).relu()

    class Outer(lib.nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = Inner()

        def forward(self, x):
            return self.inner(self.inner(x)) + 1
    return Outer()


def test_nn_module_stack_meta_as_torch():
    def stacks(gm):
        return [(n.name, [(k, path, cls.__name__) for k, (path, cls) in n.meta.get("nn_module_stack", {}).items()])
                for n in gm.graph.nodes]
    ours = stacks(fx.symbolic_trace(_nested(jitorch)))
    assert ours == stacks(torch.fx.symbolic_trace(_nested(torch)))
    assert ours[3] == ("inner_lin_1", [("inner@1", "inner", "Inner"), ("inner.lin@1", "inner.lin", "Linear")])


def test_graph_module_meta_is_a_dict_that_copies_follow():
    import copy

    gm, t_gm = fx.symbolic_trace(lambda x: x + 1), torch.fx.symbolic_trace(lambda x: x + 1)
    assert gm.meta == t_gm.meta == {}
    gm.meta["tag"] = [1]
    assert copy.deepcopy(gm).meta == {"tag": [1]} and copy.copy(gm).meta is gm.meta


def test_builders_and_printers_take_torchs_keyword_arguments():
    from jitorch.fx.passes.shape_prop import ShapeProp

    for lib, shape_prop in ((jitorch, ShapeProp), (torch, torch.fx.passes.shape_prop.ShapeProp)):
        gm = lib.fx.symbolic_trace(lambda x: x + 1)
        out = gm.graph.output_node()
        with gm.graph.inserting_before(out):
            relu = gm.graph.call_function(lib.relu, (out.args[0],), name="my_relu")
        out.args = (relu,)
        gm.recompile()
        assert [n.name for n in gm.graph.find_nodes(op="call_function", target=lib.relu, sort=False)] == ["my_relu"]
        shape_prop(gm=gm).propagate(lib.ones(2))
        assert "my_relu" in gm.print_readable(print_output=False, include_stride=True, include_device=True)
        assert "my_relu" in gm.graph.python_code("self", verbose=True).src


def _conv_bn_dropout(lib):
    lib.manual_seed(0)
    return lib.nn.Sequential(lib.nn.Conv2d(2, 3, 3), lib.nn.BatchNorm2d(3), lib.nn.Dropout(0.5), lib.nn.ReLU())


def test_experimental_optimization_fuse_and_remove_dropout_as_torch():
    import torch.fx.experimental.optimization as torch_opt

    from jitorch.fx.experimental import optimization

    theirs = _conv_bn_dropout(torch)
    with torch.no_grad():
        theirs[1].running_mean.uniform_(-1, 1)
        theirs[1].running_var.uniform_(0.5, 2)
    theirs.eval()
    ours = _conv_bn_dropout(jitorch)
    ours.load_state_dict({k: jitorch.tensor(v.numpy()) for k, v in theirs.state_dict().items()})
    ours.eval()
    x = np.random.randn(2, 2, 5, 5).astype(np.float32)
    fused, t_fused = optimization.fuse(ours), torch_opt.fuse(theirs)
    assert [n.target for n in fused.graph.nodes] == [n.target for n in t_fused.graph.nodes] and len(ours) == 4
    bare, t_bare = optimization.remove_dropout(fused), torch_opt.remove_dropout(t_fused)
    assert [n.op for n in bare.graph.nodes] == [n.op for n in t_bare.graph.nodes] == \
        ["placeholder", "call_module", "call_module", "output"]
    assert_close(bare(jitorch.tensor(x)), t_bare(torch.tensor(x)).detach().numpy())
    assert isinstance(fx.Interpreter(bare).submodules["0"], nn.Conv2d)  # torch's lookup table of Transformers


def test_print_readable_nests_child_graph_modules_as_torch():
    texts = []
    for lib in (jitorch, torch):
        outer = lib.fx.symbolic_trace(lib.nn.Sequential(lib.nn.ReLU()))
        outer.add_module("inner", lib.fx.symbolic_trace(lambda x: x.neg()))
        texts.append(outer.print_readable(print_output=False))
    class_lines = [[line.rstrip() for line in text.splitlines() if "class " in line] for text in texts]
    assert class_lines[0] == [line.replace("torch", "jitorch") for line in class_lines[1]] == \
        ["class Sequential(jitorch.nn.Module):", "    class inner(jitorch.nn.Module):"]
    assert "            neg = x.neg();  x = None" in texts[0].splitlines()[-3:]
