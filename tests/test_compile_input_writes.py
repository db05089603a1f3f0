"""In-place writes into a compiled call's own arguments (``x.add_(1)``, ``o.copy_(y)``, ``out=o``): the graph computes
the written value, fused with the rest, and stores it back into the argument after each run, as a module buffer's
update is; the call must behave exactly as eager (values, the argument's memory, the returned object), and calls it
cannot stand for (arguments sharing memory, views, autograd) must still get eager's answer."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import jitorch


def _pair(*arrays):
    """The same arrays as two independent jitorch tensors each: (eager copies, compiled copies)."""
    return [jitorch.tensor(a.copy()) for a in arrays], [jitorch.tensor(a.copy()) for a in arrays]


def _check_calls(fn, make_args, calls=4, atol=1e-6):
    """Calls ``fn`` eagerly and compiled on equal fresh arguments (the same objects across calls, as a loop
    passes its state): every result and every argument agree after each call; returns the compiled function."""
    rng = np.random.default_rng(0)
    arrays = make_args(rng)
    eager_args, compiled_args = _pair(*arrays)
    compiled = jitorch.compile(fn)
    for _ in range(calls):
        want, got = fn(*eager_args), compiled(*compiled_args)
        np.testing.assert_allclose(got.numpy(), want.numpy(), atol=atol, rtol=1e-6)
        for e, c in zip(eager_args, compiled_args):
            assert c.dtype == e.dtype
            np.testing.assert_allclose(c.numpy(), e.numpy(), atol=atol, rtol=1e-6)
    return compiled


def _floats(*shapes):
    return lambda rng: [rng.standard_normal(s).astype(np.float32) for s in shapes]


def test_a_chain_of_in_place_ops_on_an_argument_is_one_kernel_written_back():
    compiled = _check_calls(lambda x, y: x.mul_(y).add_(1).relu_(), _floats((64, 33), (33,)))
    entry = compiled.entries[0]
    assert entry.breaks == [] and entry.writes_inputs
    assert len(entry.kernel_ops) == 1 and {"mul", "add", "relu"} <= set(entry.kernel_ops[0])


def test_a_returned_argument_is_the_argument_itself_as_in_eager_mode():
    x = jitorch.zeros(3)
    compiled = jitorch.compile(lambda t: t.add_(1))
    for step in range(1, 4):
        assert compiled(x) is x
        assert x.tolist() == [float(step)] * 3


def test_out_argument_is_written_and_returned_as_torch_does():
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((2, 8, 5)).astype(np.float32)
    o_t, o_j = torch.empty(8, 5), jitorch.empty(8, 5)
    compiled = jitorch.compile(lambda p, q, out: jitorch.mul(p, q, out=out) + 1)
    for _ in range(3):
        want = torch.mul(torch.tensor(a), torch.tensor(b), out=o_t) + 1
        got = compiled(jitorch.tensor(a), jitorch.tensor(b), o_j)
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6)
        np.testing.assert_allclose(o_j.numpy(), o_t.numpy(), rtol=1e-6)
    assert compiled.entries[0].breaks == []
    plain = jitorch.compile(lambda p, q, out: jitorch.mul(p, q, out=out))
    assert plain(jitorch.tensor(a), jitorch.tensor(b), o_j) is o_j


def test_reads_after_the_write_see_the_new_values_and_reads_before_see_the_old():
    def f(x, y):
        before = x * 2
        x.copy_(y.exp())
        return before + x.sum(-1, keepdim=True)

    _check_calls(f, _floats((16, 7), (16, 7)))


@pytest.mark.parametrize("dtype", ["int32", "int64", "float16", "float64"])
def test_the_argument_keeps_its_dtype(dtype):
    def f(x):
        x.mul_(3).add_(2)
        return x * 2

    compiled = _check_calls(f, lambda rng: [rng.integers(-5, 5, (4, 6)).astype(dtype)])
    assert compiled.entries[0].writes_inputs


def test_an_argument_passed_twice_reads_its_new_values_through_both_names():
    def f(x, alias):
        x.add_(1)
        return alias * 2

    x_e, x_c = jitorch.zeros(3), jitorch.zeros(3)
    compiled = jitorch.compile(f)
    for _ in range(3):
        np.testing.assert_array_equal(compiled(x_c, x_c).numpy(), f(x_e, x_e).numpy())
        np.testing.assert_array_equal(x_c.numpy(), x_e.numpy())


def test_a_later_call_whose_arguments_share_memory_runs_eagerly():
    def f(x, y):
        x.add_(1)
        return y * 2

    compiled = jitorch.compile(f)
    compiled(jitorch.zeros(4), jitorch.zeros(4))  # compiled for distinct memory
    base_e, base_c = jitorch.zeros(4), jitorch.zeros(4)
    for _ in range(3):
        # another tensor object over the same memory: the guards cannot see it, the runner must
        want, got = f(base_e, base_e.view(2, 2)), compiled(base_c, base_c.view(2, 2))
        np.testing.assert_array_equal(got.numpy(), want.numpy())
        np.testing.assert_array_equal(base_c.numpy(), base_e.numpy())


def test_arguments_sharing_memory_when_traced_keep_the_write_eager():
    def f(x, y):
        x.add_(1)
        return y * 2

    compiled = _check_calls(lambda x: f(x, x.view(-1)), _floats((3, 2)))
    assert compiled.entries[0].breaks  # a view made inside the call is a view of the written argument: breaks
    base_e, base_c = jitorch.zeros(6), jitorch.zeros(6)
    direct = jitorch.compile(f)
    for _ in range(3):
        np.testing.assert_array_equal(direct(base_c, base_c.view(2, 3)).numpy(), f(base_e, base_e.view(2, 3)).numpy())
        np.testing.assert_array_equal(base_c.numpy(), base_e.numpy())
    assert not direct.entries[0].writes_inputs


def test_an_outside_tensor_sharing_the_written_arguments_memory_makes_the_call_eager():
    store = jitorch.zeros(6)
    window = store.view(2, 3)  # read by the function through its closure

    def f(x):
        x.add_(1)
        return window * 2

    compiled = jitorch.compile(f)
    for step in range(1, 4):
        assert compiled(store).tolist() == [[2.0 * step] * 3] * 2
    assert "shares its memory" in compiled.entries[0].break_reason


def test_a_view_argument_written_in_place_still_breaks_and_stays_correct():
    def f(x):
        x.add_(1)
        return x * 2

    base_e, base_c = jitorch.zeros(4, 4), jitorch.zeros(4, 4)
    compiled = jitorch.compile(f)
    for _ in range(3):
        np.testing.assert_array_equal(compiled(base_c[:, 1]).numpy(), f(base_e[:, 1]).numpy())
    np.testing.assert_array_equal(base_c.numpy(), base_e.numpy())


def test_new_sizes_compile_again_without_probing_on_the_callers_arguments():
    def f(x):
        x.mul_(2)
        return x + 1

    compiled = jitorch.compile(f)
    for n in (3, 5, 7, 9, 11):
        x_e, x_c = jitorch.ones(n), jitorch.ones(n)
        np.testing.assert_array_equal(compiled(x_c).numpy(), f(x_e).numpy())
        np.testing.assert_array_equal(x_c.numpy(), x_e.numpy())  # written once per call, probes included
    assert all(e.dynamic is None for e in compiled.entries)


def test_a_graph_break_after_the_write_defers_it_to_the_replay():
    def f(x, y):
        x.mul_(2)
        z = x + y if x.sum() > 0 else x - y
        return z * 3

    compiled = jitorch.compile(f)
    rng = np.random.default_rng(3)
    x_e, x_c = _pair(rng.standard_normal(5).astype(np.float32))
    y = jitorch.ones(5)
    for sign in (1, -1, 1, -1, 1):
        for a, b in ((x_e[0], x_c[0]),):
            a.copy_(sign * a.abs())
            b.copy_(sign * b.abs())
        np.testing.assert_allclose(compiled(x_c[0], y).numpy(), f(x_e[0], y).numpy(), rtol=1e-6)
        np.testing.assert_allclose(x_c[0].numpy(), x_e[0].numpy(), rtol=1e-6)
    assert compiled.entries[0].replay is not None


def test_python_side_effects_with_an_argument_write_stay_exact():
    log_e, log_c = [], []

    def f(x, log):
        x.add_(1)
        log.append(len(log))
        return x * 2

    compiled = jitorch.compile(f)
    x_e, x_c = jitorch.zeros(3), jitorch.zeros(3)
    for _ in range(3):
        np.testing.assert_array_equal(compiled(x_c, log_c).numpy(), f(x_e, log_e).numpy())
        np.testing.assert_array_equal(x_c.numpy(), x_e.numpy())
    assert log_c == log_e


def test_fullgraph_accepts_a_write_into_an_argument():
    compiled = jitorch.compile(lambda x: x.add_(1) * 2, fullgraph=True)
    x = jitorch.zeros(2)
    assert compiled(x).tolist() == [2.0, 2.0] and x.tolist() == [1.0, 1.0]


def test_a_training_call_writing_a_parameter_under_no_grad_matches_eager():
    def sgd(params, grads):
        with jitorch.no_grad():
            for p, g in zip(params, grads):
                p.sub_(0.1 * g)
        return params[0].sum()

    rng = np.random.default_rng(4)
    arrays = [rng.standard_normal(s).astype(np.float32) for s in ((3, 4), (4,))]
    p_e = [jitorch.tensor(a, requires_grad=True) for a in arrays]
    p_c = [jitorch.tensor(a, requires_grad=True) for a in arrays]
    grads = [jitorch.ones_like(p) for p in p_e]
    compiled = jitorch.compile(sgd)
    for _ in range(3):
        np.testing.assert_allclose(compiled(p_c, grads).item(), sgd(p_e, grads).item(), rtol=1e-6)
        for a, b in zip(p_c, p_e):
            np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=1e-6)
            assert a.requires_grad and a.is_leaf


def test_a_compiled_module_clamping_its_input_in_place():
    class Clamp(jitorch.nn.Module):
        def forward(self, x):
            x.clamp_(-0.5, 0.5)
            return x * 2

    module = Clamp()
    compiled = jitorch.compile(module)
    rng = np.random.default_rng(5)
    for _ in range(3):
        a = rng.standard_normal((4, 4)).astype(np.float32)
        x_e, x_c = jitorch.tensor(a), jitorch.tensor(a)
        np.testing.assert_array_equal(compiled(x_c).numpy(), module(x_e).numpy())
        np.testing.assert_array_equal(x_c.numpy(), x_e.numpy())


class _BufferViews(jitorch.nn.Module):
    """Reads its buffer through a view taken before the update (``inner``) or held as an attribute (``outer``)."""

    def __init__(self, outer):
        super().__init__()
        self.register_buffer("count", jitorch.zeros(4))
        self.outer = outer
        self.window = self.count.view(2, 2)

    def forward(self, x):
        view = self.count.view(2, 2)
        self.count.add_(1)
        return (self.window if self.outer else view) * 2 + x


@pytest.mark.parametrize("outer", [False, True])
def test_a_view_of_a_buffer_reads_its_update_as_in_eager_mode(outer):
    eager, module = _BufferViews(outer), _BufferViews(outer)
    compiled = jitorch.compile(module)
    for _ in range(3):
        np.testing.assert_array_equal(compiled(jitorch.ones(2, 2)).numpy(), eager(jitorch.ones(2, 2)).numpy())
        np.testing.assert_array_equal(module.count.numpy(), eager.count.numpy())


# -- memory shared across a write, against torch's eager answers ---------------------------------------------------
def _both_libs(fn_of_lib, calls):
    """``fn_of_lib(lib, compile)`` builds a run for each library (jitorch compiled, torch eager) that returns the
    values to compare per call; both runs' lists must be equal."""
    got = fn_of_lib(jitorch, jitorch.compile)
    want = fn_of_lib(torch, lambda f: f)
    for call in range(calls):
        for g, w in zip(got(call), want(call)):
            np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-6)


def test_an_argument_sharing_a_global_tensors_memory_at_a_later_call():
    def build(lib, compile):
        g = lib.tensor([1.0, 2.0, 3.0])
        f = compile(lambda x: (x.add_(1), g * 2)[1])
        a = lib.zeros(3)
        return lambda call: [f(a).tolist(), f(g).tolist(), f(g[:]).tolist(), g.tolist()]

    _both_libs(build, 3)


def test_an_argument_sharing_a_written_buffers_memory():
    def build(lib, compile):
        class Acc(lib.nn.Module):
            def __init__(self):
                super().__init__()
                self.register_buffer("b", lib.zeros(3))

            def forward(self, x):
                self.b.add_(1)
                return x * 2

        m = Acc()
        f = compile(m)
        return lambda call: [f(lib.ones(3)).tolist(), f(m.b).tolist(), m.b.tolist()]

    with jitorch.no_grad(), torch.no_grad():
        _both_libs(build, 3)


def test_aliased_arguments_of_a_call_with_a_graph_break_after_the_write():
    def build(lib, compile):
        def f(x, y):
            x.add_(1)
            k = y.sum().item()
            return y * 2 + k

        f = compile(f)
        a, b = lib.zeros(3), lib.ones(3)
        return lambda call: [f(a, b).tolist(), f(a, a[:]).tolist(), a.tolist()]

    _both_libs(build, 3)


@pytest.mark.parametrize("make_view", ["view", "index", "t", "detach", "out"])
def test_a_returned_view_of_a_written_argument_aliases_it(make_view):
    def build(lib, compile):
        def f(x):
            x.add_(1)
            if make_view == "out":
                return lib.mul(x, 2, out=x).view(-1)
            return {"view": x.view(-1), "index": x[0], "t": x.t(), "detach": x.detach()}[make_view]

        f = compile(f)
        x = lib.zeros(2, 3)

        def call(i):
            r = f(x)
            r[(0,) * r.dim()] = 100 + i
            return [x.tolist()]
        return call

    _both_libs(build, 3)


def test_a_view_taken_between_two_writes_reads_the_second():
    def build(lib, compile):
        def g(x):
            x.add_(1)
            v = x[1:]
            x.mul_(2)
            return v + 0

        g = compile(g)
        x = lib.zeros(3)
        return lambda call: [g(x).tolist(), x.tolist()]

    _both_libs(build, 3)


def test_an_inference_tensor_written_outside_inference_mode_raises_as_eager():
    compiled = jitorch.compile(lambda x, y: x.add_(y))
    for _ in range(2):
        compiled(jitorch.zeros(3), jitorch.ones(3))
    with jitorch.inference_mode():
        frozen = jitorch.zeros(3)
    with pytest.raises(RuntimeError, match="Inplace update to inference tensor outside InferenceMode"):
        compiled(frozen, jitorch.ones(3))
    assert frozen.tolist() == [0.0, 0.0, 0.0]


def test_version_counters_count_each_in_place_write_as_eager():
    x_t, x_j = torch.tensor([1.0, 2.0]), jitorch.tensor([1.0, 2.0])
    compiled = jitorch.compile(lambda t: t.add_(1).mul_(2))
    for _ in range(3):
        x_t.add_(1).mul_(2)
        compiled(x_j)
        assert x_j._version == x_t._version
