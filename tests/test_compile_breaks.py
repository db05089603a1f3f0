"""jitorch.compile graph breaks: segments compiled around each break; a later call taking the other path is right."""
import inspect
import warnings

import numpy as np
import pytest
import torch

import jitorch


def _close(a, b, rtol=1e-5, atol=1e-6):
    np.testing.assert_allclose(np.asarray(a.tolist()), np.asarray(b.tolist()), rtol=rtol, atol=atol)


def _entry(f):
    (entry,) = f.entries
    return entry


def branchy(x):
    y = (x * 2).exp()
    if y.sum() > 10:
        return (y + 1).tanh() * x
    return y - x


def test_if_break_compiles_both_sides_and_takes_the_other_branch():
    f = jitorch.compile(branchy)
    rng = np.random.default_rng(0)
    big, small = rng.uniform(1, 2, 8).astype(np.float32), rng.uniform(-2, -1, 8).astype(np.float32)
    for data in (big, small, big, small):
        got = f(jitorch.tensor(data))
        t = torch.tensor(data)
        y = (t * 2).exp()
        want = (y + 1).tanh() * t if y.sum() > 10 else y - t
        _close(got, want)
    entry = _entry(f)
    assert entry.replay is not None and entry.replay.bailed is None and f._branches == 1
    # Three graphs (before the if, each side), fused: mul-exp-sum before the break, add-tanh-mul and sub after.
    assert sorted(f.segment_kernels(entry)) == [["add", "tanh", "mul"], ["mul", "exp", "sum"], ["sub"]]


def test_item_break_guards_the_value_read():
    f = jitorch.compile(lambda x: (x * x.max().item()).sin())
    for values in ([1.0, 3.0], [1.0, 2.0], [1.0, 3.0]):
        _close(f(jitorch.tensor(values)), (torch.tensor(values) * max(values)).sin())
    assert f._branches == 1  # 3.0 then 2.0: two branches; the third call reuses the first


def test_tolist_and_int_breaks_index_with_the_values_read():
    def pick(x):
        k = int(x.argmax())
        first = x.tolist()[0]
        return x[k] * 2 + first

    f = jitorch.compile(pick)
    for values in ([1.0, 5.0, 2.0], [7.0, 5.0, 2.0], [1.0, 5.0, 9.0]):
        assert f(jitorch.tensor(values)).item() == pytest.approx(max(values) * 2 + values[0])


def test_data_dependent_shape_op_runs_eagerly_between_graphs():
    def count_positive(x):
        idx = (x.exp() - 2).relu().nonzero()
        return idx.float().sum() * idx.shape[0] + x[x > 0.5].sum() * 2

    f = jitorch.compile(count_positive)
    for values in ([1.0, 0.0, 2.0], [1.0, 3.0, 2.0], [0.0, 0.0, -1.0]):
        t = torch.tensor(values)
        idx = (t.exp() - 2).relu().nonzero()
        _close(f(jitorch.tensor(values)), idx.float().sum() * idx.shape[0] + t[t > 0.5].sum() * 2)
    reason = _entry(f).break_reason
    assert "nonzero() has a data-dependent output shape" in reason and "index() has a data-dep" in reason


def test_in_place_write_into_an_input_happens_once_per_call():
    @jitorch.compile
    def bump(x):
        x.add_(1)
        return (x * 3).relu()

    x = jitorch.zeros(4)
    for step in range(1, 4):
        assert bump(x).tolist() == [3.0 * step] * 4
        assert x.tolist() == [float(step)] * 4
    # The write is a graph value stored back into x after each run, not a graph break.
    assert _entry(bump).break_reason is None and _entry(bump).writes_inputs


def test_in_place_write_into_a_slice_of_an_input_happens_once_per_call():
    @jitorch.compile
    def bump(x):
        x[1:].add_(1)
        return (x * 3).relu()

    x = jitorch.zeros(4)
    for step in range(1, 4):
        assert bump(x).tolist() == [0.0] + [3.0 * step] * 3
        assert x.tolist() == [0.0] + [float(step)] * 3
    assert "in-place add_()" in _entry(bump).break_reason


def test_python_side_effects_run_once_per_call():
    seen = []

    @jitorch.compile
    def logged(x):
        seen.append(len(seen))
        y = x * 2
        return y + 1 if y.sum() > 0 else y - 1

    for sign in (1, -1, 1):
        logged(sign * jitorch.ones(2))
    assert seen == [0, 1, 2]


def test_python_state_the_guards_do_not_see_is_never_replayed_wrongly():
    class State:  # read through a method: not a value the guards read by name
        scale = True

        def get(self):
            return self.scale

    state = State()

    @jitorch.compile
    def f(x):
        y = x.exp()
        if y.sum() > 0:  # a break, so calls rerun the Python
            pass
        return y * 2 if state.get() else y + 1

    x = jitorch.ones(3)
    f(x)
    f(x)
    state.scale = False  # the recorded ops no longer match: the call finishes eagerly
    _close(f(x), torch.ones(3).exp() + 1)
    assert "record has something else" in _entry(f).replay.bailed


def test_numpy_escape_runs_the_rest_eagerly_in_order():
    @jitorch.compile
    def f(x):
        y = x * 2
        arr = y.numpy()
        z = y + 1
        arr[0] = 100.0  # eager order: z was computed before this write
        return z, y

    for _ in range(2):
        z, y = f(jitorch.ones(3))
        assert z.tolist() == [3.0, 3.0, 3.0] and y.tolist() == [100.0, 2.0, 2.0]


def test_values_read_outside_a_break_are_computed_first():
    @jitorch.compile
    def f(x):
        y = (x * 2).exp()
        if y.sum() > 0:
            pass
        out = jitorch.empty(3)
        jitorch.add(y, 1, out=out)  # out= reads y's array outside the dispatcher
        return out * 2

    for _ in range(3):
        _close(f(jitorch.ones(3)), (torch.ones(3) * 2).exp().add(1) * 2)


def test_branches_beyond_recompile_limit_fall_back_with_one_warning_naming_the_guard():
    f = jitorch.compile(lambda x: x * x.sum().item(), options={"recompile_limit": 2})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for n in range(1, 6):
            x = jitorch.full((2,), float(n))
            assert f(x).tolist() == [2.0 * n * n] * 2
    assert len(caught) == 1
    assert "branch guard at" in str(caught[0].message) and "Tensor.item()" in str(caught[0].message)


def test_fullgraph_raises_naming_the_source_line():
    line = inspect.getsourcelines(branchy)[1] + 2  # the ``if y.sum() > 10:`` line
    with pytest.raises(RuntimeError, match=rf"fullgraph=True.*test_compile_breaks.py:{line}.*__bool__.*if y.sum"):
        jitorch.compile(branchy, fullgraph=True)(jitorch.ones(3))


def test_explain_lists_graphs_breaks_with_lines_guards_and_kernels():
    line = inspect.getsourcelines(branchy)[1] + 2
    report = jitorch.compiler.explain(branchy)(jitorch.ones(4))
    assert (report.graph_count, report.graph_break_count) == (2, 1)
    assert report.break_reasons[0].startswith(f"{__file__}:{line}: Tensor.__bool__() reads a tensor value")
    assert f"{__file__}:{line}: Tensor.__bool__() == True" in report.guards
    assert "arg0.shape == (4,)" in report.guards
    assert report.kernels == [["mul", "exp", "sum"], ["add", "tanh", "mul"]]
    text = str(report)
    assert "Graph break count: 1" in text and f"test_compile_breaks.py:{line}" in text and "Compile time" in text


def test_module_forward_with_a_break_under_no_grad():
    class Gate(jitorch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = jitorch.nn.Linear(4, 4)

        def forward(self, x):
            h = self.lin(x).relu()
            return h * 2 if h.mean() > 0.1 else h.sigmoid()

    jitorch.manual_seed(0)
    model = Gate()
    opt = jitorch.compile(model)
    with jitorch.no_grad():
        for scale in (1.0, -1.0, 1.0, 5.0):
            x = jitorch.randn(3, 4) * scale
            _close(opt(x), model(x))


def test_random_draws_inside_a_replayed_function_stay_random():
    @jitorch.compile
    def noisy(x):
        y = x + jitorch.rand(3)
        return y * 2 if y.sum() > 0 else y

    x = jitorch.zeros(3)
    a, b, c = noisy(x), noisy(x), noisy(x)
    assert not bool((a == b).all()) and not bool((b == c).all())


@pytest.mark.parametrize("case", ["t_", "unsqueeze_", "transpose_", "squeeze_ of a view"])
def test_in_place_shape_changes_run_eagerly_and_reach_the_callers_tensor(case):
    # The array swap of t_() and its kin happens outside every op: the rest of the call runs eagerly (a break the
    # fullgraph mode names), and an input comes back with its new shape on every call, as torch.compile gives.
    fns = {"t_": lambda lib, x: (x.t_(), x * 2 + 1)[1],
           "unsqueeze_": lambda lib, x: x.unsqueeze_(0).exp().sum(-1),
           "transpose_": lambda lib, x: (x * 3).transpose_(0, 1).cumsum(0),
           "squeeze_ of a view": lambda lib, x: x.view(1, 6).squeeze_(0).add_(1)}
    fn = fns[case]
    f = jitorch.compile(lambda x: fn(jitorch, x))
    data = np.arange(6, dtype=np.float32).reshape(2, 3) / 4
    for _ in range(3):
        x, xt = jitorch.tensor(data), torch.tensor(data)
        got, want = f(x), fn(torch, xt)
        assert tuple(x.shape) == tuple(xt.shape) and tuple(got.shape) == tuple(want.shape)
        _close(got, want)
        _close(x, xt)
    with pytest.raises(RuntimeError, match=rf"graph break at .*test_compile_breaks.py.*{case.split()[0]}"):
        jitorch.compile(lambda x: fn(jitorch, x), fullgraph=True)(jitorch.tensor(data))


def test_retain_grad_inside_a_compiled_function_fills_the_grad_on_every_call():
    rng = np.random.default_rng(7)
    wd, xd, gd = (rng.standard_normal(s).astype(np.float32) for s in ((3, 4), (2, 3), (2, 4)))

    def fr(lib, x, w):
        h = (x @ w).tanh()
        h.retain_grad()
        return h, (h * lib.tensor(gd)).sin().sum()

    f = jitorch.compile(lambda x, w: fr(jitorch, x, w))
    for _ in range(3):
        w, wt = jitorch.tensor(wd, requires_grad=True), torch.tensor(wd, requires_grad=True)
        (h, s), (ht, st) = f(jitorch.tensor(xd), w), fr(torch, torch.tensor(xd), wt)
        s.backward()
        st.backward()
        _close(h.grad, ht.grad)
        _close(w.grad, wt.grad)
