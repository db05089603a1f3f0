"""In-place writes into views of a compiled call's own tensors, and into tensors it made, stay in one graph (the
other views see the write); writes into inputs stay graph breaks; writes next to graph breaks under autograd keep
eager gradients. Checked against torch (the oracle)."""
import numpy as np
import pytest
import torch

import jitorch
from jitorch.fx import Interpreter
from jitorch._compile.trace import trace


def masked(lib, x):
    h = x * 2
    h[:, -1] = 0
    return h + 1


def made_mask(lib, x):
    m = lib.zeros(x.shape)
    m[:, -1] = 1
    m[0] += 3
    return x + m


def filled_columns(lib, x):
    out = lib.empty(x.shape[0], 3)
    for i in range(3):
        out[:, i] = x.sum(1) * i
    return out


def causal(lib, x):
    t = x.shape[1]
    mask = lib.ones(t, t, dtype=lib.bool).tril()
    scores = x @ x.transpose(0, 1)[:, :t]
    scores.masked_fill_(~mask, float("-inf"))
    return scores.softmax(-1)


def whole_made_tensor(lib, x):
    m = lib.full((x.shape[0], 1), 2.0)
    m.mul_(x[:, :1])
    return x * m


@pytest.mark.parametrize("fn, kernels", [(masked, 2), (made_mask, 3), (filled_columns, 3), (causal, 1),
                                         (whole_made_tensor, 2)])
def test_writes_into_own_and_made_tensors_stay_in_one_graph(fn, kernels):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4, 4)).astype(np.float32)
    want = fn(torch, torch.tensor(x)).numpy()
    traced = trace(lambda a: fn(jitorch, a), (jitorch.tensor(x),), {})
    assert traced.break_reason is None
    traced.gm.graph.lint()
    np.testing.assert_allclose(Interpreter(traced.gm).run(jitorch.tensor(x)).numpy(), want, rtol=1e-5, atol=1e-6)
    cf = jitorch.compile(lambda a: fn(jitorch, a))
    for _ in range(4):  # the Python runner, then the native one: the made tensor's constant is its value before
        np.testing.assert_allclose(cf(jitorch.tensor(x)).numpy(), want, rtol=1e-5, atol=1e-6)
    entry = cf.entries[0]
    assert entry.breaks == [] and entry.run is not None and len(entry.kernel_ops) == kernels


def aliased(lib, x):
    h = x * 2
    v = h[0]
    h[:, 0] = 5  # v sees this write in eager mode
    return v + 1


def into_input(lib, x):
    x[:, 0] = 1
    return x * 2


@pytest.mark.parametrize("fn, breaks", [(aliased, 0), (into_input, 1)])
def test_other_views_see_the_write_and_inputs_stay_graph_breaks(fn, breaks):
    x = np.random.default_rng(1).standard_normal((3, 3)).astype(np.float32)
    want = fn(torch, torch.tensor(x)).numpy()
    report = jitorch.compiler.explain(lambda a: fn(jitorch, a))(jitorch.tensor(x))
    assert report.graph_break_count == breaks
    assert not breaks or "writes into a tensor from outside the graph" in report.break_reasons[0]
    cf = jitorch.compile(lambda a: fn(jitorch, a))
    for _ in range(3):
        np.testing.assert_allclose(cf(jitorch.tensor(x)).numpy(), want, rtol=1e-6)


def test_a_write_autograd_must_follow_keeps_eager_gradients():
    def fn(lib, x):
        h = x * 2
        h[:, 0] = 0
        return (h * h).sum()

    x = np.random.default_rng(2).standard_normal((3, 3)).astype(np.float32)
    tx = torch.tensor(x, requires_grad=True)
    fn(torch, tx).backward()
    cf = jitorch.compile(lambda a: fn(jitorch, a))
    jx = jitorch.tensor(x, requires_grad=True)
    cf(jx).backward()
    np.testing.assert_allclose(jx.grad.numpy(), tx.grad.numpy(), rtol=1e-6)


def test_make_fx_graphs_write_into_clones_of_the_tensors_the_function_made():
    from jitorch.fx.make_fx import make_fx

    outside = jitorch.zeros(2)

    def fn(x):
        m = jitorch.zeros(2, 2)
        m[:, 0] = 1
        m[0] += 2
        m.mul_(x)
        outside.add_(1)  # a tensor from outside: the write is the function's side effect, kept
        return m + outside

    x = jitorch.tensor([[1.0, 2.0], [3.0, 4.0]])
    want = fn(x).tolist()  # outside is 1 now
    gm = make_fx(fn)(x)  # outside is 2
    gm.graph.lint()
    assert "clone" in gm.code
    first, second = gm(x), gm(x)  # outside is 3, then 4: the made tensor starts from zeros each run
    assert first.tolist() == [[6.0, 7.0], [6.0, 3.0]] and second.tolist() == [[7.0, 8.0], [7.0, 4.0]]
    assert want == [[4.0, 5.0], [4.0, 1.0]] and outside.tolist() == [4.0, 4.0]


def _rnn_loop(lib, lin, x):
    b, steps, _ = x.shape
    out = lib.zeros(b, steps, 3)
    h = lib.zeros(b, 3)
    for t in range(steps):
        h = (lin(x[:, t]) + h).tanh()
        out[:, t] = h  # a write autograd follows, into a tensor the call made
    mask = lib.ones(steps, 3)
    mask[0] = 0
    return (out * mask).pow(2).sum()


def test_writes_into_made_tensors_train_compiled_with_torchs_gradients():
    rng = np.random.default_rng(3)
    w, bias = rng.standard_normal((3, 3)).astype(np.float32), rng.standard_normal(3).astype(np.float32)
    xs = [rng.standard_normal((2, 4, 3)).astype(np.float32) for _ in range(3)]
    ref = torch.nn.Linear(3, 3)
    lin = jitorch.nn.Linear(3, 3)
    with torch.no_grad(), jitorch.no_grad():
        ref.weight.copy_(torch.tensor(w)), ref.bias.copy_(torch.tensor(bias))
        lin.weight.copy_(jitorch.tensor(w)), lin.bias.copy_(jitorch.tensor(bias))
    cf = jitorch.compile(lambda x: _rnn_loop(jitorch, lin, x))
    for x in xs:
        lin.zero_grad(), ref.zero_grad()
        loss = cf(jitorch.tensor(x))
        loss.backward()
        want = _rnn_loop(torch, ref, torch.tensor(x))
        want.backward()
        np.testing.assert_allclose(loss.item(), want.item(), rtol=1e-5)
        np.testing.assert_allclose(lin.weight.grad.numpy(), ref.weight.grad.numpy(), rtol=1e-4, atol=1e-6)
        np.testing.assert_allclose(lin.bias.grad.numpy(), ref.bias.grad.numpy(), rtol=1e-4, atol=1e-6)
    entry = cf.train_entries[0]
    assert entry.break_reason is None and entry.plan is not None  # the joint graph, not an eager fallback


def _view_of_view(x):
    h = (x * 2)[:, :2]
    h[:, 0] = 1.0  # h, another view of the same base, sees the write
    return h


def _write_after_break(x):
    h = x * 2
    if h.sum() > -1e9:  # a graph break before the write
        pass
    v = h[:, :2]
    v[:, 0] = 1.0
    return v * 3


def _item_then_write(x):
    h = (x * 2)[:, :2]
    k = h.sum().item()
    h[:, 0] = 1.0
    return h * k


@pytest.mark.parametrize("fn", [_view_of_view, _write_after_break, _item_then_write])
def test_writes_next_to_graph_breaks_keep_eager_gradients_on_every_call(fn):
    cf = jitorch.compile(fn, dynamic=False)
    rng = np.random.default_rng(4)
    for _ in range(4):  # the compiling call, then replays
        x = rng.standard_normal((2, 3)).astype(np.float32)
        jx, tx = jitorch.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
        got, want = cf(jx), fn(tx)
        got.sum().backward()
        want.sum().backward()
        np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy(), rtol=1e-5)
        np.testing.assert_allclose(jx.grad.numpy(), tx.grad.numpy(), rtol=1e-5)
    entry = cf.train_entries[0]
    assert entry.run is not None, entry.break_reason  # replayed segments, not an eager fallback


def _write_into_exp_output(lib, x):
    h = x.exp()
    k = h.sum().item()
    h.add_(1.0)  # eager autograd saved exp's output: its backward raises
    return h * k


def test_a_write_into_a_saved_output_at_a_break_raises_on_every_call_as_eagerly():
    """The compiled segment recomputes exp from x rather than reading its output, but it saves that output as eager
    autograd does, so the write makes every call's backward raise, as torch's."""
    x = np.random.default_rng(9).standard_normal((2, 3)).astype(np.float32)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        _write_into_exp_output(torch, torch.tensor(x, requires_grad=True)).sum().backward()
    cf = jitorch.compile(lambda x: _write_into_exp_output(jitorch, x), dynamic=False)
    for _ in range(3):
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            cf(jitorch.tensor(x, requires_grad=True)).sum().backward()
    # Without the write the same values train: the saved output costs no gradient.
    cg = jitorch.compile(lambda x: (lambda h: h * h.sum().item())(x.exp()), dynamic=False)
    for _ in range(3):
        jx, tx = jitorch.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
        cg(jx).sum().backward()
        (lambda h: h * h.sum().item())(tx.exp()).sum().backward()
        np.testing.assert_allclose(jx.grad.numpy(), tx.grad.numpy(), rtol=1e-5)


def test_a_write_into_a_compiled_output_eager_saved_raises_at_backward():
    """A whole compiled graph (no break): the caller writes into an output eager autograd keeps (exp's, softmax's),
    then calls backward; torch raises, and so does the compiled function, at every call. Outputs eager does not
    keep (a product's) stay writable."""
    fns = {"exp": lambda lib, x: x.exp(), "softmax view": lambda lib, x: lib.softmax(x, -1)[:, :2],
           "product": lambda lib, x: x * 3}
    x = np.random.default_rng(10).standard_normal((2, 3)).astype(np.float32)
    for name, fn in fns.items():
        cf = jitorch.compile(lambda t, fn=fn: fn(jitorch, t), dynamic=False)
        for lib, run in ((torch, lambda t, fn=fn: fn(torch, t)), (jitorch, cf), (jitorch, cf), (jitorch, cf)):
            t = lib.tensor(x, requires_grad=True)
            y = run(t)
            with lib.no_grad():
                y.add_(1)
            if name == "product":
                y.sum().backward()
                np.testing.assert_allclose(t.grad.numpy(), np.full_like(x, 3))
            else:
                with pytest.raises(RuntimeError, match="modified by an inplace operation"):
                    y.sum().backward()


def test_an_inference_write_next_to_a_graph_break_replays_right():
    cf = jitorch.compile(_item_then_write)
    rng = np.random.default_rng(5)
    for _ in range(4):
        x = rng.standard_normal((2, 3)).astype(np.float32)
        np.testing.assert_allclose(cf(jitorch.tensor(x)).numpy(), _item_then_write(torch.tensor(x)).numpy(),
                                   rtol=1e-5)


def test_a_write_that_casts_into_a_made_tensor_stays_in_the_graph():
    def fn(lib, x):
        m = lib.zeros(x.shape[0], 2, dtype=lib.int64)
        m[:, 1] = x.sum(1) * 10  # float into an int64 view: the in-place copy truncates
        return m * 2

    x = np.random.default_rng(6).standard_normal((4, 3)).astype(np.float32)
    want = fn(torch, torch.tensor(x)).numpy()
    cf = jitorch.compile(lambda a: fn(jitorch, a))
    for _ in range(3):
        got = cf(jitorch.tensor(x)).numpy()
        assert got.dtype == want.dtype and (got == want).all()
    assert cf.entries[0].breaks == []


def _write_in_a_branch(lib, x):
    y = x * 2
    h = y[:, 1:3]
    if x.sum() > -1000:  # a graph break; the write below is into a view of the first segment's values
        h[:, 0] = 5
    return y * 1.5


def _alias_outputs(lib, x):
    y = x * 2
    return y, y[:, :2]


def _sibling_view(lib, x):
    y = x * 2
    a = y[:, :4]
    k = a[:, :2]  # taken before the write, through the written view's own parent
    h = a[:, 1:3]
    h[:, 0] = 1
    return k * 3


def test_a_write_into_a_view_of_a_segment_value_keeps_its_gradient_on_replays():
    cf = jitorch.compile(lambda x: _write_in_a_branch(jitorch, x), dynamic=False)
    rng = np.random.default_rng(10)
    for _ in range(4):
        x = rng.standard_normal((3, 4)).astype(np.float32)
        up = rng.standard_normal((3, 4)).astype(np.float32)
        jx, tx = jitorch.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
        cf(jx).backward(jitorch.tensor(up))
        _write_in_a_branch(torch, tx).backward(torch.tensor(up))
        np.testing.assert_allclose(jx.grad.numpy(), tx.grad.numpy(), rtol=1e-6)


def _caller_writes_like_torch(fn, shape, use, calls=4):
    """Compile ``fn`` (two outputs); per call, ``use(a, b)`` writes into the outputs in place and returns a loss;
    values and ``x.grad`` must equal torch's on every call (past the Python runner's first calls)."""
    cf = jitorch.compile(lambda x: fn(jitorch, x), dynamic=False)
    for _ in range(calls):
        results = []
        for lib, f in ((torch, lambda x: fn(torch, x)), (jitorch, cf)):
            x = lib.ones(*shape, requires_grad=True)
            a, b = f(x)
            use(a, b).backward()
            results.append((a.detach().numpy().tolist(), x.grad.numpy().tolist()))
        assert results[0] == results[1]
    return cf


def test_an_output_that_views_another_output_stays_a_view_on_every_call():
    def use(a, b):
        b[:, 0] = 7  # a[:, 0] becomes 7 and x[:, 0] gets no gradient
        return a.sum()
    _caller_writes_like_torch(_alias_outputs, (2, 3), use)


@pytest.mark.parametrize("grad", [False, True])
def test_a_view_beside_the_written_one_sees_the_write(grad):
    x = np.arange(12, dtype=np.float32).reshape(2, 6)
    want = _sibling_view(torch, torch.tensor(x)).numpy()
    cf = jitorch.compile(lambda v: _sibling_view(jitorch, v), dynamic=False)
    for _ in range(2):
        np.testing.assert_array_equal(cf(jitorch.tensor(x, requires_grad=grad)).detach().numpy(), want)


def _two_views(lib, x):
    y = x * 2
    return y[:, :2], y[:, 1:3]


def _tuple_outputs(lib, x):
    return x * 2, x * 3


def test_overlapping_view_outputs_of_one_intermediate_run_eagerly_with_eager_gradients():
    def use(a, b):
        a[:, 1] = 7.0  # b[:, 0] sees it: no gradient reaches x[:, 1] through b
        return a.sum() + (b * 10).sum()
    cf = _caller_writes_like_torch(_two_views, (2, 4), use, calls=3)
    assert "views of one intermediate" in cf.train_entries[0].break_reason


@pytest.mark.parametrize("write", ["setitem", "mul_"])
def test_a_write_into_a_view_of_the_second_output_backpropagates(write):
    """CopySlices on output 1 of a two-output node: its edge must point at slot 0 of the new node."""
    def use(a, b):
        if write == "setitem":
            b[:, 0] = 7.0
        else:
            b[:, :2].mul_(5.0)
        return a.sum() + b.sum()
    _caller_writes_like_torch(_tuple_outputs, (2, 4), use, calls=3)
