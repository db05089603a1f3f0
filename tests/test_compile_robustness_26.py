"""`jitorch.compile` on code as users write it, each checked against eager jitorch:

- random draws made outside the graph's ops (``multinomial``, ``randperm``, ``manual_seed`` in the function) keep
  eager's order of numbers next to the graph's deferred draws, and a moved draw keeps the arguments' order;
- reduce-overhead outputs that view an argument view the caller's tensor in its own layout;
- plain attributes kept private behind a property are guarded; ``OrderedDict``/``defaultdict`` results keep
  their kind; constants and buffers returned as they are come back as new tensors each call (no crash in training);
- gradients read a module buffer as it was before the forward (or a segment after a graph break) updated it.
"""
import numpy as np
import pytest

import jitorch
import jitorch.nn.functional as F


def _same(a, b):
    return a.shape == b.shape and a.dtype == b.dtype and np.array_equal(a.numpy(), b.numpy())


def _seeded_calls(fn, x, calls=3):
    """``fn(x)`` after ``manual_seed(1)``, ``calls`` times, each with the next number the generator gives."""
    outs = []
    for _ in range(calls):
        jitorch.manual_seed(1)
        out = fn(x)
        outs.append((out, jitorch.rand(1)))
    return outs


def _rand_then_multinomial(x):
    return x + jitorch.rand(3) + jitorch.multinomial(jitorch.ones(4), 3).float()


def _dropout_then_randperm(x):
    return F.dropout(x, 0.5)[jitorch.randperm(x.shape[0])]


def _dead_rand_then_multinomial(x):
    jitorch.rand(2)  # drawn and dropped: eager's generator still moved
    return x + jitorch.multinomial(jitorch.ones(4), 3).float()


def _multinomial_then_rand(x):
    return x + jitorch.multinomial(jitorch.ones(4), 3).float() + jitorch.randint(0, 5, (3,))


@pytest.mark.parametrize("fn", [_rand_then_multinomial, _dropout_then_randperm, _dead_rand_then_multinomial,
                                _multinomial_then_rand])
def test_draws_outside_the_graph_keep_eagers_order_on_every_call(fn):
    x = jitorch.ones(3, 3) if fn is _dropout_then_randperm else jitorch.zeros(3)
    (expected, after), = _seeded_calls(fn, x, calls=1)
    compiled = jitorch.compile(fn)
    for out, next_draw in _seeded_calls(compiled, x):  # the first call records, later ones replay
        assert _same(out, expected)
        assert _same(next_draw, after)


def test_training_step_with_dropout_and_multinomial_matches_eager():
    def build():
        jitorch.manual_seed(0)
        return jitorch.nn.Linear(4, 4)

    def step(model, x):
        h = F.dropout(model(x), 0.3) + jitorch.rand(4)
        pick = jitorch.multinomial(h.detach().abs().sum(0) + 0.1, 2)
        return (h[:, pick] ** 2).mean()

    eager_model, compiled_model = build(), build()
    compiled_step = jitorch.compile(step)
    for i in range(3):
        x = jitorch.randn(5, 4)
        jitorch.manual_seed(10 + i)
        expected = step(eager_model, x)
        expected.backward()
        jitorch.manual_seed(10 + i)
        got = compiled_step(compiled_model, x)
        got.backward()
        assert _same(got.detach(), expected.detach())
        assert _same(compiled_model.weight.grad, eager_model.weight.grad)


def _ro_views(x):
    return x[1:], x * 2


def _ro_identity_and_transpose(x):
    return x, x.t() * 2


def _ro_writes_then_views(x):
    return x.add_(1)[0], x.mul_(2)


@pytest.mark.parametrize("fn", [_ro_views, _ro_identity_and_transpose, _ro_writes_then_views])
@pytest.mark.parametrize("layout", ["contiguous", "transposed", "strided"])
def test_reduce_overhead_outputs_viewing_an_argument_view_the_callers_tensor(fn, layout):
    make = {"contiguous": lambda: jitorch.zeros(3, 2), "transposed": lambda: jitorch.zeros(2, 3).t(),
            "strided": lambda: jitorch.zeros(3, 4)[:, ::2]}[layout]
    compiled = jitorch.compile(fn, mode="reduce-overhead")
    for i in range(4):  # warm-up, capture, replays
        x, y = make(), make()
        got, expected = compiled(x), fn(y)
        x.add_(i + 1)  # the caller writes its tensor: a view of it sees the write, as eager's does
        y.add_(i + 1)
        for g, e in zip(got, expected):
            assert _same(g, e) and g.stride() == e.stride()
        assert (got[1] is x) == (expected[1] is y)


def test_reduce_overhead_view_outputs_of_earlier_calls_keep_their_values():
    compiled = jitorch.compile(lambda x: x[1:], mode="reduce-overhead")
    inputs = [jitorch.full((3,), float(i)) for i in range(4)]
    outs = [compiled(x) for x in inputs]
    assert [o.tolist() for o in outs] == [[float(i)] * 2 for i in range(4)]


def test_reduce_overhead_capture_raises_eagers_error_for_a_view_of_a_transposed_argument():
    compiled = jitorch.compile(lambda x: x.view(-1) * 2, mode="reduce-overhead")
    for _ in range(3):  # the capture runs on a copy laid out as the argument: no contiguous copy to view
        with pytest.raises(RuntimeError, match="view size is not compatible"):
            compiled(jitorch.zeros(2, 3).t())


def test_reduce_overhead_views_of_a_column_of_a_large_matrix_are_right_values():
    big = jitorch.arange(3 * 5000.0).view(3, 5000)
    compiled = jitorch.compile(lambda x: (x[1:], x * 2), mode="reduce-overhead")
    for i in range(4):
        col = big[:, i]
        view, doubled = compiled(col)
        assert view.tolist() == col[1:].tolist()
        assert _same(doubled, col * 2)


def test_a_draw_reading_a_placeholder_bound_mid_segment_keeps_the_arguments_order():
    # After the break, the segment binds ``m`` at ``m.float()`` and the draw's operand later: moving the draw ahead
    # must not reorder the placeholders (each would read another argument's memory).
    def fn(x, m):
        scale = x.sum().item()
        return x * scale + m.float() + jitorch.randint(0, 5, (3,))

    x, m = jitorch.ones(3), jitorch.tensor([1, 2, 3])
    jitorch.manual_seed(1)
    expected = fn(x, m)
    report = jitorch.compiler.explain(fn)(x, m)
    assert (report.graph_count, report.graph_break_count) == (2, 1)
    compiled = jitorch.compile(fn)
    for _ in range(3):
        jitorch.manual_seed(1)
        assert _same(compiled(x, m), expected)


class _Tempered(jitorch.nn.Module):
    """A plain attribute kept private behind a property, as users write them."""

    def __init__(self):
        super().__init__()
        self.proj = jitorch.nn.Linear(2, 2)
        self._temperature = 1.0

    @property
    def temperature(self):
        return self._temperature

    def forward(self, x):
        return self.proj(x) / self.temperature


@pytest.mark.parametrize("mode", [None, "reduce-overhead"])
def test_a_private_plain_attribute_read_through_a_property_is_guarded(mode):
    jitorch.manual_seed(0)
    model, x = _Tempered(), jitorch.randn(3, 2)
    compiled = jitorch.compile(model, mode=mode)
    with jitorch.no_grad():
        for temperature in (1.0, 1.0, 1.0, 4.0, 4.0, 0.5):
            model._temperature = temperature
            assert _same(compiled(x), model(x))


def test_mapping_kinds_of_the_result_are_eagers():
    from collections import OrderedDict, defaultdict

    def fn(x, scale):
        ordered = OrderedDict((k, v * 2) for k, v in x.items())
        grouped = defaultdict(list, doubled=[t * scale for t in x.values()])
        return ordered, grouped

    x = OrderedDict(b=jitorch.ones(2), a=jitorch.zeros(2))
    compiled = jitorch.compile(fn)
    for _ in range(2):
        ordered, grouped = compiled(x, 3.0)
        assert type(ordered) is OrderedDict and list(ordered) == ["b", "a"]
        assert type(grouped) is defaultdict and grouped.default_factory is list
        assert _same(ordered["b"], x["b"] * 2) and _same(grouped["doubled"][1], x["a"] * 3.0)


@pytest.mark.parametrize("mode", [None, "reduce-overhead"])
def test_manual_seed_inside_the_function_seeds_its_draws_on_every_call(mode):
    def fn(x):
        before = x + jitorch.rand(2)
        jitorch.manual_seed(3)
        return before + jitorch.rand(2) + F.dropout(jitorch.ones(4), 0.5).sum()

    x = jitorch.zeros(2)
    (expected, after), = _seeded_calls(fn, x, calls=1)
    compiled = jitorch.compile(fn, mode=mode)
    if mode is None:
        calls = _seeded_calls(compiled, x, calls=4)
    else:  # not captured: a replay would not reseed
        with pytest.warns(UserWarning, match="reseeds a random generator"):
            calls = _seeded_calls(compiled, x, calls=4)
    for out, next_draw in calls:
        assert _same(out, expected)
        assert _same(next_draw, after)


class _ReturnsState(jitorch.nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = jitorch.nn.Linear(2, 2)
        self.register_buffer("scale", jitorch.ones(2))

    def forward(self, x):
        return self.proj(x).sum(), self.scale, jitorch.zeros(2)  # a buffer and a fresh state, as RNN code returns


@pytest.mark.parametrize("grad", [True, False])
def test_returned_buffers_and_fresh_constants_are_new_tensors_each_call(grad):
    jitorch.manual_seed(0)
    model = _ReturnsState()
    compiled = jitorch.compile(model)
    for i in range(3):
        with jitorch.set_grad_enabled(grad):
            loss, scale, state = compiled(jitorch.ones(2))
        state.add_(5)  # the caller updates the state it got: the next call's zeros stay zeros
        assert state.tolist() == [5.0, 5.0] and scale.tolist() == [1.0, 1.0]
        assert model.scale.tolist() == [1.0, 1.0]
        if grad:
            loss.backward()
            assert model.proj.weight.grad.sum().item() == pytest.approx(4.0 * (i + 1))


def test_a_fresh_constant_returned_from_a_function_is_not_shared_between_calls():
    compiled = jitorch.compile(lambda x: (x * 2, jitorch.ones(2)))
    firsts = []
    for _ in range(3):
        doubled, ones = compiled(jitorch.ones(2))
        ones.add_(5)
        firsts.append(ones[0].item())
    assert firsts == [6.0, 6.0, 6.0]


class _ReadsThenUpdatesABuffer(jitorch.nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = jitorch.nn.Linear(3, 3)
        self.register_buffer("shift", jitorch.ones(3))

    def forward(self, x):
        y = self.proj(x + self.shift)  # the weight's gradient reads x + shift at the old shift
        self.shift.copy_(y.detach().mean(0))
        return y


@pytest.mark.parametrize("batches", [(2, 2, 2, 2), (2, 3, 4, 5)])
def test_gradients_read_a_buffer_as_it_was_before_the_forward_updated_it(batches):
    jitorch.manual_seed(0)
    eager, compiled_model = _ReadsThenUpdatesABuffer(), _ReadsThenUpdatesABuffer()
    compiled_model.load_state_dict(eager.state_dict())
    compiled = jitorch.compile(compiled_model)
    opts = [jitorch.optim.SGD(m.parameters(), lr=0.05) for m in (eager, compiled_model)]
    for n in batches:
        x = jitorch.randn(n, 3)
        for run, opt in zip((eager, compiled), opts):
            run(x).pow(2).mean().backward()
            opt.step()
            opt.zero_grad()
        assert np.allclose(compiled_model.proj.weight.detach().numpy(), eager.proj.weight.detach().numpy(),
                           rtol=1e-5, atol=1e-6)
        assert np.allclose(compiled_model.shift.numpy(), eager.shift.numpy(), rtol=1e-5, atol=1e-6)


def test_a_buffer_updated_around_a_graph_break_is_read_by_the_backward_as_it_was():
    class Accumulates(jitorch.nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = jitorch.nn.Linear(3, 3)
            self.register_buffer("acc", jitorch.zeros(3))

        def forward(self, x):
            y = self.proj(x + self.acc)
            self.acc.add_(0.1)
            if y.sum().item() > 1e9:  # a graph break: the segments before and after it train separately
                y = y * 0
            self.acc.mul_(0.9)
            return (y * self.acc).sum()

    jitorch.manual_seed(0)
    eager, compiled_model = Accumulates(), Accumulates()
    compiled_model.load_state_dict(eager.state_dict())
    compiled = jitorch.compile(compiled_model)
    for _ in range(3):
        x = jitorch.randn(2, 3)
        expected, got = eager(x), compiled(x)
        expected.backward()
        got.backward()
        assert np.allclose(got.item(), expected.item(), rtol=1e-6)
        assert _same(compiled_model.acc, eager.acc)
        assert np.allclose(compiled_model.proj.weight.grad.numpy(), eager.proj.weight.grad.numpy(), rtol=1e-5,
                           atol=1e-6)


def test_a_parameter_returned_from_a_training_graph_is_the_parameter():
    class ReturnsWeight(jitorch.nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = jitorch.nn.Linear(2, 2)

        def forward(self, x):
            return self.proj(x).sum(), self.proj.weight  # tied weights for a loss term, as users return them

    jitorch.manual_seed(0)
    eager, compiled_model = ReturnsWeight(), ReturnsWeight()
    compiled_model.load_state_dict(eager.state_dict())
    compiled = jitorch.compile(compiled_model)
    x = jitorch.randn(3, 2)
    for _ in range(2):
        (loss, weight), (eager_loss, eager_weight) = compiled(x), eager(x)
        assert weight is compiled_model.proj.weight and weight.is_leaf
        (loss + (weight ** 2).sum()).backward()
        (eager_loss + (eager_weight ** 2).sum()).backward()
        assert _same(compiled_model.proj.weight.grad, eager.proj.weight.grad)
        assert _same(compiled_model.proj.bias.grad, eager.proj.bias.grad)
