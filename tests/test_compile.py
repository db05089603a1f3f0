"""jitorch.compile: decorator forms, guards and recompiles, fallbacks, backends, Module wrapping, explain."""
import warnings

import numpy as np
import pytest

import jitorch


def _entries(compiled):
    return compiled._compiled_call.entries if isinstance(compiled, jitorch.nn.Module) else compiled.entries


def gelu(x):
    return 0.5 * x * (1 + jitorch.tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)))


def test_decorator_forms_equal_eager_and_fuse_to_one_kernel():
    f1 = jitorch.compile(gelu)
    f2 = jitorch.compile(fullgraph=True)(gelu)
    x = jitorch.randn(100)
    for f in (f1, f2):
        np.testing.assert_allclose(f(x).numpy(), gelu(x).numpy(), rtol=1e-6, atol=1e-7)
        assert [e.kernel_ops for e in f.entries] == [[["mul", "mul", "mul", "mul", "add", "mul", "tanh", "add",
                                                       "mul"]]]
    assert f1.__name__ == "gelu"


def test_guard_misses_recompile_and_hits_reuse():
    f = jitorch.compile(lambda x, k: x * k + 1)
    f(jitorch.ones(4), 2)
    f(jitorch.ones(4), 2)
    assert len(f.entries) == 1
    out = f(jitorch.ones(5), 2)  # shape
    f(jitorch.ones(5, dtype=jitorch.float64), 2)  # dtype
    f(jitorch.ones(5), 3)  # Python constant
    f(jitorch.ones(10)[::2], 3)  # strides
    assert len(f.entries) == 5 and out.tolist() == [3.0] * 5
    assert f(jitorch.ones(10)[::2], 3).tolist() == [4.0] * 5


def test_recompile_limit_falls_back_with_one_warning():
    # dynamic=False: every size is a specialization (by default the second size makes the dimension symbolic).
    f = jitorch.compile(lambda x: x.exp() * 2, dynamic=False, options={"recompile_limit": 2})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for n in range(1, 6):
            x = jitorch.randn(n)
            np.testing.assert_allclose(f(x).numpy(), (x.exp() * 2).numpy(), rtol=1e-6)
    assert len(f.entries) == 2
    assert len(caught) == 1 and "arg0.shape: expected (2,), got (3,)" in str(caught[0].message)


def test_grad_mode_runs_eagerly_and_keeps_autograd():
    f = jitorch.compile(lambda x: (x * x).sum())
    x = jitorch.randn(3, requires_grad=True)
    f(x).backward()
    np.testing.assert_allclose(x.grad.numpy(), 2 * x.detach().numpy())
    assert f.entries == []


def test_eager_disable_and_callable_backends():
    fn = lambda x: x.sin() + 1  # noqa: E731
    assert jitorch.compile(fn, disable=True) is fn
    eager = jitorch.compile(fn, backend="eager")
    x = jitorch.randn(4)
    assert eager(x).tolist() == fn(x).tolist() and eager.entries == []
    seen = []

    def backend(gm, example_inputs):
        seen.append((gm, example_inputs))
        return gm

    custom = jitorch.compile(fn, backend=backend)
    assert custom(x).tolist() == fn(x).tolist()
    custom(x)
    assert len(seen) == 1 and seen[0][1][0] is x
    assert [n.target.__name__ for n in seen[0][0].graph.nodes if n.op == "call_function"] == ["sin", "add"]


def test_module_wrapping_keeps_state_dict_and_fuses_under_no_grad():
    model = jitorch.nn.Sequential(jitorch.nn.Linear(6, 8), jitorch.nn.Tanh(), jitorch.nn.Linear(8, 3))
    opt = jitorch.compile(model)
    assert list(opt.state_dict()) == list(model.state_dict())
    assert opt.state_dict()["0.weight"] is model.state_dict()["0.weight"] or \
        np.array_equal(opt.state_dict()["0.weight"].numpy(), model.state_dict()["0.weight"].numpy())
    x = jitorch.randn(5, 6)
    with jitorch.no_grad():
        np.testing.assert_allclose(opt(x).numpy(), model(x).numpy(), rtol=1e-6, atol=1e-6)
        assert len(_entries(opt)) == 1 and _entries(opt)[0].kernel_ops
    opt.eval()
    assert not model.training
    with jitorch.no_grad():
        opt(x)
    assert len(_entries(opt)) == 2  # the training flag is guarded


def branchy(x):
    if x.sum() > 0:
        return x * 2
    return x - 1


def test_data_dependent_control_flow_compiles_segments_or_raises_with_fullgraph():
    # More break kinds and the other-branch calls are in test_compile_breaks.py.
    f = jitorch.compile(branchy)
    pos, neg = jitorch.ones(3), -jitorch.ones(3)
    assert f(pos).tolist() == [2.0] * 3 and f(neg).tolist() == [-2.0] * 3
    assert f.entries[0].replay is not None and "data-dependent" in f.entries[0].break_reason
    with pytest.raises(RuntimeError, match="fullgraph=True.*__bool__"):
        jitorch.compile(branchy, fullgraph=True)(pos)
    item = jitorch.compile(lambda x: x * x.max().item())
    assert item(jitorch.tensor([1.0, 3.0])).tolist() == [3.0, 9.0]
    assert item(jitorch.tensor([1.0, 2.0])).tolist() == [2.0, 4.0]


def test_explain_reports_graphs_kernels_guards_and_breaks():
    a, b = jitorch.randn(4, 4), jitorch.randn(4, 4)
    report = jitorch.compiler.explain(lambda a, b: (a @ b).relu() * 2 + b)(a, b)
    assert (report.graph_count, report.graph_break_count, report.kernel_count) == (1, 0, 1)
    assert report.kernels == [["relu", "mul", "add"]] and report.ops_fused == 3
    text = str(report)
    assert "Kernel count: 1 (3 ops fused)" in text and "arg0.shape == (4, 4)" in text and "grad_mode" in text
    broken = jitorch.compiler.explain(branchy)(a)
    assert broken.graph_break_count == 1 and "__bool__" in str(broken)


def test_reset_clears_compiled_entries():
    f = jitorch.compile(lambda x: x + 1)
    f(jitorch.ones(2))
    jitorch.compiler.reset()
    assert f.entries == []
    assert f(jitorch.ones(2)).tolist() == [2.0, 2.0]


def test_bad_arguments_raise():
    with pytest.raises(RuntimeError, match="unknown backend"):
        jitorch.compile(gelu, backend="nope")
    with pytest.raises(RuntimeError, match="mode"):
        jitorch.compile(gelu, mode="fastest")


def test_random_sampling_inside_a_compiled_function_is_not_frozen():
    # A traced draw would become a constant in the graph: each call must still draw new numbers.
    @jitorch.compile
    def noisy(x):
        return x + jitorch.randn(x.shape)

    x = jitorch.zeros(4)
    first, second = noisy(x), noisy(x)
    assert not bool((first == second).all())


def test_is_compiling_is_true_only_while_jitorch_compile_traces():
    seen = []

    def f(x):
        seen.append(jitorch.compiler.is_compiling())
        return x * 2

    compiled = jitorch.compile(f)
    x = jitorch.ones(3)
    for _ in range(3):
        compiled(x)
    f(x)
    g = jitorch.cpu.CPUGraph()
    with jitorch.cpu.graph(g):  # capture is not compilation (as CUDA graph capture in PyTorch)
        f(x)
    assert seen[0] is True and seen[-2:] == [False, False] and not jitorch.compiler.is_compiling()
