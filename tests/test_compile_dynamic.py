"""Automatic dynamic shapes in jitorch.compile: one specialization stands for every size of the dimensions that
changed, checked against torch (the oracle) and against eager jitorch at each size."""
import contextlib
import copy
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

import jitorch
import jitorch.nn.functional as F
from jitorch._compile import dynamic_shapes
from jitorch._compile.shape_fit import Fit, Signature, rebuild
from jitorch._compile.sym_sizes import recording_sizes
from jitorch._compile.trace import trace
from jitorch.fx import Interpreter

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
from bench_compile_train import block  # noqa: E402 - the benchmark's transformer block, in either library


def _randn(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


@contextlib.contextmanager
def python_runs(fn):
    """The first argument's leading size at each run of ``fn``'s Python, counted by a profile hook: a counter in
    ``fn`` itself would be a side effect, which compiled calls repeat (and run in replay mode for)."""
    runs, previous = [], sys.getprofile()

    def hook(frame, event, arg):
        if event == "call" and frame.f_code is fn.__code__:
            runs.append(frame.f_locals[frame.f_code.co_varnames[0]].shape[0])

    sys.setprofile(hook)
    try:
        yield runs
    finally:
        sys.setprofile(previous)


def test_the_third_size_makes_the_dimension_symbolic_and_each_size_is_traced_once(monkeypatch):
    monkeypatch.setattr(jitorch.compiler.config, "dynamic_eager_calls", 0)  # compile each size at first sight
    rng = np.random.default_rng(0)

    def f(x, w):
        return (x @ w).relu().softmax(-1) * x.shape[0] + x.sum(-1, keepdim=True)

    cf = jitorch.compile(f, options={"recompile_limit": 3})
    w = _randn(rng, 6, 5)
    with warnings.catch_warnings(), python_runs(f) as calls:
        warnings.simplefilter("error")  # no recompile-limit warning
        for step, n in enumerate([4, 7, 3, 9, 12, 25, 2, 7]):
            x = _randn(rng, n, 6)
            got = cf(jitorch.tensor(x), jitorch.tensor(w))
            tx, tw = torch.tensor(x), torch.tensor(w)
            want = (tx @ tw).relu().softmax(-1) * n + tx.sum(-1, keepdim=True)
            np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5, atol=1e-5)
        traced = len(calls)
        for n in [4, 7, 3, 9, 12, 25, 2]:
            cf(jitorch.randn(n, 6), jitorch.tensor(w))
    assert len(calls) == traced  # each size was traced once, when it compiled: its graph runs without the Python
    # 4 and 7 are specialized (one change); 3 is the second change: s0 from there on.
    assert len(cf.entries) == 3 and [e.dynamic is None for e in cf.entries] == [True, True, False]
    spec = cf.entries[2].dynamic
    assert spec.describe() == "arg0.shape[0] -> s0"
    assert sorted(spec._sizes) == [(2,), (3,), (9,), (12,), (25,)]


def test_a_size_runs_eagerly_until_its_second_call():
    def f(x):
        return (x * 2).exp().sum(-1)

    cf = jitorch.compile(f)
    with python_runs(f) as calls:
        for n in (4, 5, 20, 30, 20, 30, 30, 3):
            x = jitorch.randn(n, 3)
            np.testing.assert_allclose(cf(x).numpy(), (x * 2).exp().sum(-1).numpy(), rtol=1e-5)
    spec = cf.entries[2].dynamic
    # 4, 5: static compiles; 20 builds the template (probes at 21, 22 and 23); 30 and 3 run eagerly once, then are
    # traced and compiled on their second call.
    assert [n for n in calls if n in (30, 3)] == [30, 30, 3] and sorted(spec._sizes) == [(20,), (30,)]
    assert spec.mismatches == []
    assert cf.entries[2].kernel_ops == spec.at((30,)).kernel_ops == [["mul", "exp", "sum"]]


def test_sizes_zero_and_one_stay_specialized():
    cf = jitorch.compile(lambda x: (x * 2).sum(0))
    for n in (4, 5, 6, 1, 0, 7):
        x = np.arange(n * 3, dtype=np.float32).reshape(n, 3)
        np.testing.assert_allclose(cf(jitorch.tensor(x)).numpy(), (x * 2).sum(0))
    shapes = [e.guards[0][1] for e in cf.entries]
    assert [e.dynamic is not None for e in cf.entries] == [False, False, True, False, False]
    assert shapes[3:] == [(1, 3), (0, 3)]


def test_a_comparison_on_a_size_guards_the_template():
    def f(x):
        y = x * 2 if x.shape[0] > 16 else x * 3
        return y[: min(x.size(0), 30)]

    cf = jitorch.compile(f)
    for n in (3, 4, 20, 5, 9, 25, 40, 33):
        x = jitorch.arange(n * 2, dtype=jitorch.float32).view(n, 2)
        want = (x * (2 if n > 16 else 3))[: min(n, 30)]
        assert cf(x).tolist() == want.tolist(), n
    dynamic = [e.dynamic for e in cf.entries if e.dynamic is not None]
    # 3, 4: static; 20 makes s0 (probes 21, 22 and 23 compare as 20 does); 5 takes the other branch of `> 16`, 40
    # the other branch of min().
    assert len(dynamic) == 3 and all(d.describe() == "arg0.shape[0] -> s0" for d in dynamic)
    assert [d.fit.holds((9,)) for d in dynamic] == [False, True, False]
    assert [d.fit.holds((25,)) for d in dynamic] == [True, False, False]
    assert [d.fit.holds((33,)) for d in dynamic] == [False, False, True]


@pytest.mark.parametrize("fn, why", [
    (lambda x: x * len(x), "len() of a tensor"),
    (lambda x: x[: x.shape[0] // 2] * 2, "// of a size"),
    (lambda x: x[: int(x.shape[0] / 3)], "int() of a size"),
    (lambda x: jitorch.tensor(list(range(x.shape[0])), dtype=jitorch.float32) * x[:, 0], "differ"),
])
def test_values_no_polynomial_describes_keep_the_sizes_static(fn, why):
    cf = jitorch.compile(fn)
    for n in (6, 8, 10, 12, 14, 16):
        x = jitorch.randn(n, 4)
        np.testing.assert_allclose(cf(x).numpy(), fn(x).numpy(), rtol=1e-6)
    assert len(cf.entries) == 6 and all(e.dynamic is None for e in cf.entries)
    reason = cf.entries[2].dynamic_reason
    assert why in reason and reason.startswith("at sizes (")
    # A failed set of dimensions is tried at 3 sizes, then no more.
    assert [e.dynamic_reason is not None for e in cf.entries] == [False, False, True, True, True, False]


def test_tensors_made_inside_are_made_again_at_each_size(monkeypatch):
    monkeypatch.setattr(jitorch.compiler.config, "dynamic_eager_calls", 0)
    def f(x, lib):
        t = x.shape[1]
        pos = lib.arange(t, dtype=lib.float32)
        causal = lib.ones(t, t).tril()
        return (x @ causal) * pos + lib.full_like(x, 0.5) + lib.zeros(x.shape[0], 1)

    cf = jitorch.compile(lambda x: f(x, jitorch))
    rng = np.random.default_rng(2)
    for t in (4, 5, 9, 13, 2):
        x = _randn(rng, 3, t)
        np.testing.assert_allclose(cf(jitorch.tensor(x)).numpy(), f(torch.tensor(x), torch).numpy(), rtol=1e-5,
                                   atol=1e-5)
    assert [e.dynamic is not None for e in cf.entries] == [False, False, True]
    assert sorted(cf.entries[2].dynamic._sizes) == [(2,), (9,), (13,)]


def test_dynamic_true_drops_the_dimensions_the_function_rejects():
    lin = jitorch.nn.Linear(6, 3)
    cf = jitorch.compile(lambda x: lin(x).tanh(), dynamic=True)
    with jitorch.no_grad():
        for n in (5, 8, 2):
            x = jitorch.randn(n, 6)
            np.testing.assert_allclose(cf(x).numpy(), lin(x).tanh().numpy(), rtol=1e-5, atol=1e-6)
    assert len(cf.entries) == 1 and cf.entries[0].dynamic.describe() == "arg0.shape[0] -> s0"
    text = str(jitorch.compiler.explain(lambda x: lin(x).tanh(), dynamic=True)(jitorch.randn(5, 6)))
    assert "Dynamic sizes: arg0.shape[0] -> s0 (each >= 2)" in text and "arg0.shape == (s0, 6)" in text


def test_dynamic_false_specializes_every_size():
    cf = jitorch.compile(lambda x: x + 1, dynamic=False)
    for n in (2, 3, 4):
        cf(jitorch.ones(n))
    assert len(cf.entries) == 3 and all(e.dynamic is None for e in cf.entries)


def test_equal_sizes_share_a_symbol_and_must_stay_equal():
    cf = jitorch.compile(lambda x, y: x * y)
    for n in (3, 4, 6):
        cf(jitorch.ones(n, 2), jitorch.ones(n, 1))
    assert cf.entries[-1].dynamic is not None
    assert cf.entries[-1].dynamic.describe() == "arg0.shape[0] -> s0, arg1.shape[0] -> s0"
    with pytest.raises(RuntimeError, match="broadcast"):  # not silently the template's: a trace that fails as eager
        cf(jitorch.ones(7, 2), jitorch.ones(5, 1))


def test_strided_inputs_keep_exact_guards():
    cf = jitorch.compile(lambda x: x * 2)
    for n in (3, 4):
        x = jitorch.randn(2, n).t()
        np.testing.assert_allclose(cf(x).numpy(), (x * 2).numpy())
    assert all(e.dynamic is None for e in cf.entries)


def test_attention_scores_fit_and_two_symbols_train_like_eager():
    rng = np.random.default_rng(1)
    torch.manual_seed(0)
    reference = block(torch)
    jitorch.manual_seed(0)
    eager = block(jitorch)
    with jitorch.no_grad():
        for p, q in zip(eager.parameters(), reference.parameters()):
            p.copy_(jitorch.tensor(q.detach().numpy()))
    model = copy.deepcopy(eager)
    compiled = jitorch.compile(model)
    for b, t in [(2, 5), (2, 7), (2, 11), (3, 7), (4, 9), (2, 5)]:
        x, y = _randn(rng, b, t, 128), _randn(rng, b, t, 128)
        grads = []
        for net, owner in ((compiled, model), (eager, eager)):
            owner.zero_grad()
            loss = net(jitorch.tensor(x), jitorch.tensor(y))
            loss.backward()
            grads.append([p.grad.numpy() for p in owner.parameters()])
        reference.zero_grad()
        want = reference(torch.tensor(x), torch.tensor(y))
        want.backward()
        np.testing.assert_allclose(loss.item(), want.item(), rtol=1e-5)
        for gc, ge, p in zip(grads[0], grads[1], reference.parameters()):
            np.testing.assert_allclose(gc, ge, rtol=1e-4, atol=1e-6)
            np.testing.assert_allclose(gc, p.grad.numpy(), rtol=1e-3, atol=1e-5)
    entries = compiled._compiled_call.train_entries
    described = [e.dynamic.describe() for e in entries if e.dynamic is not None]
    # (2, 5) -> (2, 7): the sequence length (t * t scores: degree 2); (3, 7): the batch joins it.
    # (2, 11): the sequence length's second change (t * t scores: degree 2); (3, 7) keeps t symbolic at batch 3;
    # (4, 9): the batch's second change joins it.
    assert described == ["arg0.shape[1] -> s0, arg1.shape[1] -> s0"] * 2 + [
        "arg0.shape[0] -> s0, arg0.shape[1] -> s1, arg1.shape[0] -> s0, arg1.shape[1] -> s1"]
    assert len(entries) == 5


def test_rebuilt_graphs_lint_interpret_and_run_like_eager():
    def f(x):
        b, t, d = x.shape
        scores = (x @ x.transpose(1, 2)).softmax(-1)
        return (scores @ x).reshape(b * t, d).sum(0) / t

    sigs = {}
    for offset in range(4):
        with recording_sizes() as rec:
            gm = trace(f, (jitorch.ones(2, 5 + offset, 3),), {}).gm
        sigs[offset] = Signature(gm, rec)
    fit = Fit((5,), {(k,): sigs[k] for k in range(3)})
    assert fit.check((8,), sigs[3]) is None and fit.terms == [(0,), (1,), (2,)]  # t * t strides: degree 2
    x = jitorch.randn(2, 13, 3)
    gm = rebuild(sigs[0], fit.at((13,)))
    gm.graph.lint()
    want = f(x).numpy()
    np.testing.assert_allclose(Interpreter(gm).run(x).numpy(), want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(gm(x).numpy(), want, rtol=1e-5, atol=1e-6)
    compiled = jitorch.compile(f)
    for t in (5, 6, 13):
        x = jitorch.randn(2, t, 3)
        np.testing.assert_allclose(compiled(x).numpy(), f(x).numpy(), rtol=1e-5, atol=1e-6)
    assert compiled.entries[-1].dynamic is not None


def test_instantiated_sizes_are_bounded_and_only_stale_ones_make_room(monkeypatch):
    monkeypatch.setattr(dynamic_shapes, "MAX_SIZES", 3)
    monkeypatch.setattr(jitorch.compiler.config, "dynamic_eager_calls", 0)
    cf = jitorch.compile(lambda x: F.gelu(x) * 2)

    def call(n):
        x = jitorch.randn(n, 4)
        np.testing.assert_allclose(cf(x).numpy(), (F.gelu(x) * 2).numpy(), rtol=1e-5, atol=1e-6)

    for n in (2, 3, 4, 5, 6, 7, 5, 4, 7, 6):
        call(n)
    spec = cf.entries[2].dynamic
    # Full with sizes in use: a loop cycling through more sizes than kept runs the others eagerly, never rebuilding.
    assert sorted(spec._sizes) == [(4,), (5,), (6,)]
    for _ in range(dynamic_shapes.STALE_LOOKUPS * 3 + 1):
        call(7)
    assert sorted(spec._sizes) == [(4,), (6,), (7,)]  # the longest unused (5) made room once stale


def test_a_size_the_template_mispredicts_runs_its_own_trace():
    fn = lambda x: x.split(4, dim=0)[-1] * 2  # noqa: E731 - the chunk count is a floor inside jitorch's split
    cf = jitorch.compile(fn)
    for n in (9, 10, 13, 18, 18, 14, 14):  # 13..16 all make 4 chunks: the template's last chunk is t - 12 rows
        x = jitorch.randn(n, 3)
        np.testing.assert_allclose(cf(x).numpy(), fn(x).numpy())
    spec = cf.entries[2].dynamic
    assert [s for s, _ in spec.mismatches] == [(18,)] and "differ" in spec.mismatches[0][1]


def test_a_kink_the_probes_cross_is_tried_again_past_it_and_dynamic_true_drops_only_that_dimension():
    def branchy(x):
        return x.exp() if x.shape[1] > 4 else x.sin()

    cf = jitorch.compile(branchy)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no recompile-limit fallback
        for n in list(range(2, 14)) * 2:
            x = jitorch.randn(3, n)
            np.testing.assert_allclose(cf(x).numpy(), branchy(x).numpy(), rtol=1e-6)
    # 4's probes cross the kink (5 takes the other branch); 5's probes are all past it.
    assert [e.dynamic is not None for e in cf.entries] == [False, False, False, True]
    assert "'sin' and 'exp'" in cf.entries[2].dynamic_reason

    def rows(x):
        return x.exp() if x.shape[0] > 4 else x.sin()

    cf = jitorch.compile(rows, dynamic=True)
    for n in (2, 5, 9, 2, 5, 9):
        x = jitorch.randn(3, n)
        np.testing.assert_allclose(cf(x).numpy(), rows(x).numpy(), rtol=1e-6)
    assert len(cf.entries) == 1 and cf.entries[0].dynamic.describe() == "arg0.shape[1] -> s0"


def test_new_sizes_compile_no_machine_code():
    """Kernels and native programs are size-generic (codegen/ir_params.py): once the dynamic entry has run its
    first size through every stage (eager call, compiled kernels, native program), other sizes compile nothing."""
    from jitorch.codegen import llvm_compile

    rng = np.random.default_rng(3)
    jitorch.manual_seed(0)
    model = block(jitorch)
    eager = copy.deepcopy(model)
    compiled = jitorch.compile(model)

    def steps(t):
        x, y = _randn(rng, 2, t, 128), _randn(rng, 2, t, 128)
        for _ in range(3):
            losses = []
            for net in (compiled, eager):
                net.zero_grad()
                loss = net(jitorch.tensor(x), jitorch.tensor(y))
                loss.backward()
                losses.append(loss.item())
            np.testing.assert_allclose(losses[0], losses[1], rtol=1e-5)
            for p, q in zip(model.parameters(), eager.parameters()):
                np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), rtol=1e-4, atol=1e-6)

    # Sizes past 16 and below 90: a product's code is the same kind over them (narrower rows get narrower register
    # chunks, and past t * t * 32 = 64^3 the attention products go to BLAS).
    for t in (17, 19, 23):
        steps(t)
    assert [e.dynamic is not None for e in compiled._compiled_call.train_entries] == [False, False, True]
    def kernels():  # the native pool's loop and trampolines (per signature, made on first split) are no kernels
        return {name for name in llvm_compile._state["loaded"] if not name.startswith("jitorch_pool")}

    # Eager runs generated kernels of its own past a size (a transposing copy of 12288+ elements, once per layout
    # pattern, `ops/native_transpose.py`): an eager step at a larger size first, so only the compiled path counts.
    x, y = _randn(rng, 2, 60, 128), _randn(rng, 2, 60, 128)
    eager(jitorch.tensor(x), jitorch.tensor(y)).backward()
    before = kernels()
    for t in (26, 37, 50):
        steps(t)
    assert kernels() == before, sorted(kernels() - before)


def test_dynamic_true_over_more_sizes_than_symbols_makes_the_changing_one_symbolic():
    def rms_pool(x):
        return (x * (x.pow(2).mean(-1, keepdim=True) + 1e-6).rsqrt()).mean(1)

    cf = jitorch.compile(rms_pool, dynamic=True)
    for t in range(4, 14):
        x = jitorch.randn(2, t, 8)
        np.testing.assert_allclose(cf(x).numpy(), rms_pool(x).numpy(), rtol=1e-5, atol=1e-6)
    assert len(cf.entries) == 2 and cf.entries[1].dynamic is not None and not cf._fell_back


def test_a_graph_broken_training_step_over_many_batch_sizes_stays_compiled():
    jitorch.manual_seed(0)
    model = jitorch.nn.Sequential(jitorch.nn.Linear(6, 8), jitorch.nn.ReLU(), jitorch.nn.Linear(8, 3))
    twin = jitorch.nn.Sequential(jitorch.nn.Linear(6, 8), jitorch.nn.ReLU(), jitorch.nn.Linear(8, 3))
    twin.load_state_dict(model.state_dict())
    opts = [jitorch.optim.SGD(m.parameters(), lr=0.1) for m in (model, twin)]

    def step(m, opt, x, y):
        opt.zero_grad()
        loss = jitorch.nn.functional.cross_entropy(m(x), y)
        loss.backward()  # a graph break
        opt.step()
        return loss.detach()

    compiled = jitorch.compile(lambda x, y: step(model, opts[0], x, y))
    rng = np.random.default_rng(0)
    for b in range(4, 4 + 2 * jitorch.compiler.config.recompile_limit):
        x = jitorch.tensor(rng.standard_normal((b, 6)).astype(np.float32))
        y = jitorch.tensor(rng.integers(0, 3, b))
        np.testing.assert_allclose(compiled(x, y).numpy(), step(twin, opts[1], x, y).numpy(), rtol=1e-5)
    assert not compiled._fell_back
    assert sum(e.size_variant for e in compiled.train_entries) >= jitorch.compiler.config.recompile_limit
    for p, q in zip(model.parameters(), twin.parameters()):
        np.testing.assert_allclose(p.detach().numpy(), q.detach().numpy(), rtol=1e-5, atol=1e-6)
