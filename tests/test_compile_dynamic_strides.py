"""Dynamic strides in jitorch.compile: an input that keeps its shape but changes its strides (a growing buffer's
``seqs[:, -1]``) recompiles once and then runs compiled at any strides, as torch.compile's automatic dynamic strides
(``dynamic=None``); ``dynamic=False`` keeps strides static, as torch's. Values and gradients against torch 2.13."""
import warnings

import numpy as np
import pytest
import torch

import jitorch
from helpers import assert_same, tol_for


def _column(lib, rows, length, dtype):
    """The last column of a ``rows x length`` buffer: shape ``(rows,)`` whatever ``length``, stride ``length``."""
    values = np.arange(rows * length, dtype=np.float64).reshape(rows, length) / length - 1.0
    return lib.tensor(values.astype(dtype))[:, -1]


@pytest.fixture
def no_limit_warning():
    """Reaching ``recompile_limit`` (its warning) fails the test."""
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*recompile_limit.*")
        yield


def test_growing_buffer_slices_compile_at_most_twice_and_match_torch(no_limit_warning):
    f = jitorch.compile(lambda t: t * 2 + 1)
    for length in range(2, 14):
        got = f(_column(jitorch, 3, length, np.float32))
        assert_same(got, _column(torch, 3, length, np.float32) * 2 + 1, atol=1e-6, rtol=1e-6)
    assert f._compiles() <= 2 and not f._fell_back
    assert f.entries[-1].relayout == ("arg0",) and f.entries[-1].run is not None


def test_the_original_example_runs_compiled_not_eagerly(no_limit_warning):
    f = jitorch.compile(lambda t: t * 2 + 1)
    outs = [f(jitorch.arange(3 * n).view(3, n).float()[:, -1]) for n in range(2, 12)]
    for n, out in zip(range(2, 12), outs):
        assert_same(out, torch.arange(3 * n).view(3, n).float()[:, -1] * 2 + 1)
    assert len(f.entries) == 2 and not f._fell_back


def test_float64_inputs_strided_in_several_dims_and_a_keyword_match_torch(no_limit_warning):
    rng = np.random.default_rng(3)

    def fn(x, w, *, bias):
        return (x * w).tanh().sum(-1) + bias

    f = jitorch.compile(fn)
    w = rng.standard_normal((4, 5))
    atol, rtol = tol_for("float64")
    for pad in range(1, 9):
        base = rng.standard_normal((4 + pad, 2 * (5 + pad), 3))
        bias = rng.standard_normal(4 * (pad + 1))
        # (4, 5) views of a padded 3-d buffer (a row range, every other column, one channel: both strides change),
        # and a bias taking every (pad + 1)-th value
        x = (lambda lib, b: lib.tensor(b)[pad:, ::2][:, :5, pad % 3])
        b = (lambda lib, b: lib.tensor(b)[::pad + 1])
        got = f(x(jitorch, base), jitorch.tensor(w), bias=b(jitorch, bias))
        want = fn(x(torch, base), torch.tensor(w), bias=b(torch, bias))
        assert_same(got, want, atol=atol, rtol=rtol)
    assert f._compiles() <= 2
    assert f.entries[-1].relayout == ("arg0", "bias")


def test_gradients_through_a_strided_input_reach_the_buffer_as_torch(no_limit_warning):
    rng = np.random.default_rng(0)
    f = jitorch.compile(lambda t, w: (t * w).sin() * t)
    w = rng.standard_normal(3).astype(np.float32)
    for length in range(2, 12):
        buf = rng.standard_normal((3, length)).astype(np.float32)
        up = rng.standard_normal(3).astype(np.float32)
        jb, jw = jitorch.tensor(buf, requires_grad=True), jitorch.tensor(w, requires_grad=True)
        tb, tw = torch.tensor(buf, requires_grad=True), torch.tensor(w, requires_grad=True)
        jy, ty = f(jb[:, -1], jw), (tb[:, -1] * tw).sin() * tb[:, -1]
        assert_same(jy, ty, atol=1e-6, rtol=1e-5)
        jy.backward(jitorch.tensor(up))
        ty.backward(torch.tensor(up))
        assert_same(jb.grad, tb.grad, atol=1e-6, rtol=1e-5, what="buffer grad")
        assert_same(jw.grad, tw.grad, atol=1e-6, rtol=1e-5, what="weight grad")
    assert len(f.train_entries) <= 2 and not f._fell_back
    assert f.train_entries[-1].relayout == ("arg0",)


def test_a_function_writing_into_its_strided_input_updates_it_as_eager():
    def step(lib):
        def fn(t, out):
            t.mul_(2)  # in place on the argument: a copy would lose this write
            lib.add(t, 1, out=out)
            return out * t
        return fn

    f = jitorch.compile(step(jitorch))
    for length in range(2, 14):
        values = np.arange(3.0 * length, dtype=np.float32).reshape(3, length)
        jbuf, tbuf = jitorch.tensor(values), torch.tensor(values)
        jout, tout = jitorch.zeros(3, length + 1), torch.zeros(3, length + 1)
        got, want = f(jbuf[:, -1], jout[:, 0]), step(torch)(tbuf[:, -1], tout[:, 0])
        assert_same(got, want)
        assert_same(jbuf, tbuf, what="written input")
        assert_same(jout, tout, what="out= buffer")
    assert not any(e.relayout for e in f.entries)


def test_dynamic_false_keeps_strides_static_and_reaches_the_limit_naming_them():
    # torch.compile(dynamic=False) recompiles on every new stride until recompile_limit, then runs eagerly
    f = jitorch.compile(lambda t: t * 2 + 1, dynamic=False, options={"recompile_limit": 3})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for length in range(2, 8):
            assert_same(f(_column(jitorch, 3, length, np.float32)), _column(torch, 3, length, np.float32) * 2 + 1)
    messages = [str(w.message) for w in caught if "recompile_limit" in str(w.message)]
    assert len(messages) == 1 and f._fell_back and not any(e.relayout for e in f.entries)
    assert "arg0.stride: expected strides (4,), got (5,) (only the strides changed" in messages[0]
    assert "dynamic=False keeps strides static" in messages[0]


def test_a_function_reading_its_strides_keeps_them_exact_and_right():
    f = jitorch.compile(lambda t: t * t.stride(0) + t.is_contiguous(), options={"recompile_limit": 4})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for length in range(2, 9):
            t = _column(torch, 3, length, np.float32)
            assert_same(f(_column(jitorch, 3, length, np.float32)), t * t.stride(0) + t.is_contiguous())
    assert not any(e.relayout for e in f.entries) and f._fell_back
    assert "strides stay static for this function: the function's graph depends on its inputs' strides" in \
        str(next(w.message for w in caught if "recompile_limit" in str(w.message)))


def test_an_output_viewing_the_input_stays_a_view_of_it():
    f = jitorch.compile(lambda t: t[1:], options={"recompile_limit": 4})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for length in range(2, 9):
            values = np.arange(3.0 * length, dtype=np.float32).reshape(3, length)
            jbuf, tbuf = jitorch.tensor(values), torch.tensor(values)
            jout, tout = f(jbuf[:, -1]), tbuf[:, -1][1:]
            jout.add_(100)  # through the view, as eager: the buffer sees it
            tout.add_(100)
            assert_same(jbuf, tbuf, what="buffer written through the output")
    assert not any(e.relayout for e in f.entries)


def test_an_argument_passed_twice_stays_one_tensor():
    f = jitorch.compile(lambda a, b: a * b + a)
    for length in range(2, 10):
        x, t = _column(jitorch, 3, length, np.float32), _column(torch, 3, length, np.float32)
        assert_same(f(x, x), t * t + t, atol=1e-6, rtol=1e-6)
    assert len(f.entries) == 2 and f.entries[-1].relayout == ("arg0", "arg1")
    assert ("aliases", (0, 0)) in f.entries[-1].guards


def test_reduce_overhead_replays_at_any_strides_and_trains_through_them():
    rng = np.random.default_rng(1)
    f = jitorch.compile(lambda t: (t * 3).exp() - t, mode="reduce-overhead")
    for length in range(2, 12):
        got = f(_column(jitorch, 3, length, np.float32))
        t = _column(torch, 3, length, np.float32)
        assert_same(got, (t * 3).exp() - t, atol=1e-5, rtol=1e-5)
    assert f.graph is not None and f.recaptures == 0 and f.fallback_reason is None
    # Inputs requiring grad run through the default compiled path: the same dynamic strides, gradients to the buffer.
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*recompile_limit.*")
        for length in range(2, 12):
            buf = rng.standard_normal((4, length)).astype(np.float32)
            up = rng.standard_normal(4).astype(np.float32)
            jb, tb = jitorch.tensor(buf, requires_grad=True), torch.tensor(buf, requires_grad=True)
            jy, ty = f(jb[:, -1]), (tb[:, -1] * 3).exp() - tb[:, -1]
            assert_same(jy, ty, atol=1e-5, rtol=1e-5)
            jy.backward(jitorch.tensor(up))
            ty.backward(torch.tensor(up))
            assert_same(jb.grad, tb.grad, atol=1e-5, rtol=1e-5, what="buffer grad")
    assert len(f._default.train_entries) <= 2 and f._default.train_entries[-1].relayout == ("arg0",)


def test_reduce_overhead_writes_into_a_strided_input_as_eager():
    def step(t):
        t.mul_(2)
        return t + 1

    f = jitorch.compile(step, mode="reduce-overhead")
    for length in range(2, 10):
        values = np.arange(3.0 * length, dtype=np.float32).reshape(3, length)
        jbuf, tbuf = jitorch.tensor(values), torch.tensor(values)
        assert_same(f(jbuf[:, -1]), step(tbuf[:, -1]))
        assert_same(jbuf, tbuf, what="written input")


def test_explain_and_guards_name_strides_in_elements():
    report = jitorch.compiler.explain(lambda t: t * 2)(jitorch.ones(3, 4).t())
    assert "arg0.stride == (1, 4)" in report.guards
    f = jitorch.compile(lambda t: t * 2)
    for length in (2, 3):
        f(_column(jitorch, 3, length, np.float32))
    assert repr(f.entries[-1].guards[3][1]) == "strides of memory order (0,) (copied to (1,))"


def test_a_compiled_module_trains_on_strided_inputs_as_torch(no_limit_warning):
    rng = np.random.default_rng(5)
    w, b = rng.standard_normal((3, 5)).astype(np.float32), rng.standard_normal(3).astype(np.float32)
    jm, tm = jitorch.nn.Linear(5, 3), torch.nn.Linear(5, 3)
    with jitorch.no_grad(), torch.no_grad():
        jm.weight.copy_(jitorch.tensor(w)), jm.bias.copy_(jitorch.tensor(b))
        tm.weight.copy_(torch.tensor(w)), tm.bias.copy_(torch.tensor(b))
    cm = jitorch.compile(jm)
    for length in range(2, 10):
        buf = rng.standard_normal((4, 5, length)).astype(np.float32)
        up = rng.standard_normal((4, 3)).astype(np.float32)
        jb, tb = jitorch.tensor(buf, requires_grad=True), torch.tensor(buf, requires_grad=True)
        jy, ty = cm(jb[..., -1]).tanh(), tm(tb[..., -1]).tanh()
        assert_same(jy, ty, atol=1e-5, rtol=1e-5)
        jy.backward(jitorch.tensor(up))
        ty.backward(torch.tensor(up))
        assert_same(jb.grad, tb.grad, atol=1e-5, rtol=1e-5, what="input grad")
    assert_same(jm.weight.grad, tm.weight.grad, atol=1e-4, rtol=1e-5, what="weight grad")
    assert_same(jm.bias.grad, tm.bias.grad, atol=1e-4, rtol=1e-5, what="bias grad")
    entries = cm._compiled_call.train_entries
    assert len(entries) <= 2 and entries[-1].relayout == ("arg0",)


def test_the_recompile_warning_says_how_to_make_a_strided_arguments_sizes_dynamic():
    # Slices x[:, :t] of one tensor keep their strides while their sizes change: those sizes stay static (a copy
    # could not stand for the view in every graph), and the warning at the limit names the way out.
    f = jitorch.compile(lambda x: (x * 2).sum(-1))
    base = jitorch.arange(64.0).reshape(2, 32)
    with pytest.warns(RuntimeWarning, match=r"recompile_limit.*non-contiguous argument.*\.contiguous\(\)"):
        for t in range(2, 14):
            assert_same(f(base[:, :t]), (torch.arange(64.0).reshape(2, 32)[:, :t] * 2).sum(-1))
