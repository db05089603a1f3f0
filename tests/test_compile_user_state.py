"""Compiled code and the user's state around it: values read from lists (a global, a dict entry, a module
attribute) changed between calls are read again, and gradient hooks on parameters and inputs run once per backward
(the joint trace must not bake them into the compiled backward, where the engine would apply them again)."""
from __future__ import annotations

import numpy as np

import jitorch

LOSS_WEIGHTS = [1.0, 0.5]
CONFIG = {"weights": [1.0, 2.0]}


def test_list_entries_read_inside_compiled_code_are_guarded():
    @jitorch.compile
    def weighted(a, b):
        return a * LOSS_WEIGHTS[0] + b * LOSS_WEIGHTS[1]

    @jitorch.compile
    def scaled(a):
        return a * CONFIG["weights"][0]

    got = []
    for w in (1.0, 2.0, 3.0):
        LOSS_WEIGHTS[0] = CONFIG["weights"][0] = w
        got.append((weighted(jitorch.ones(1), jitorch.ones(1)).item(), scaled(jitorch.ones(1)).item()))
    assert got == [(1.5, 1.0), (2.5, 2.0), (3.5, 3.0)]


def test_module_list_attribute_is_guarded_for_inference_and_training():
    class Scaled(jitorch.nn.Module):
        def __init__(self):
            super().__init__()
            self.scales = [1.0]
            self.lin = jitorch.nn.Linear(2, 2)

        def forward(self, x):
            return self.lin(x) * self.scales[0]

    model = Scaled()
    compiled = jitorch.compile(model)
    x = jitorch.ones(1, 2)
    for grad_mode in (jitorch.enable_grad, jitorch.no_grad):
        with grad_mode():
            model.scales[0] = 1.0
            first = compiled(x).sum().item()
            model.scales[0] = 2.0
            assert abs(compiled(x).sum().item() - 2 * first) < 1e-5


def test_hooks_on_parameters_and_inputs_run_once_per_backward():
    jitorch.manual_seed(0)
    model = jitorch.nn.Linear(3, 2)
    calls = []
    model.bias.register_hook(lambda g: (calls.append("bias"), g * 3)[1])
    model.weight.register_hook(lambda g: g * 0.5)
    compiled = jitorch.compile(model)
    x = jitorch.ones(4, 3, requires_grad=True)
    x.register_hook(lambda g: g * 2)
    grads = []
    for run in (model, compiled, compiled, compiled):
        model.zero_grad()
        x.grad = None
        calls.clear()
        run(x).sum().backward()
        assert calls == ["bias"]
        grads.append((model.bias.grad.tolist(), model.weight.grad.tolist(), x.grad.tolist()))
    assert grads[0][0] == [12.0, 12.0]
    for got in grads[1:]:
        np.testing.assert_allclose(np.array(got[1]), np.array(grads[0][1]), rtol=1e-6)
        np.testing.assert_allclose(np.array(got[2]), np.array(grads[0][2]), rtol=1e-6)
        assert got[0] == grads[0][0]


def test_a_list_the_function_appends_to_is_guarded_by_identity():
    import warnings

    calls = []

    def f(x):
        calls.append(x.shape[0])
        return (x * 2).sum()

    compiled = jitorch.compile(f)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no recompile-limit warning
        for _ in range(12):
            assert compiled(jitorch.ones(3)).item() == 6.0
    assert len(compiled.entries) == 1


def test_logging_a_loss_with_item_inside_a_compiled_step_does_not_recompile_per_value():
    import warnings

    jitorch.manual_seed(0)
    model = jitorch.nn.Sequential(jitorch.nn.Linear(8, 16), jitorch.nn.ReLU(), jitorch.nn.Linear(16, 1))
    reference = jitorch.nn.Sequential(jitorch.nn.Linear(8, 16), jitorch.nn.ReLU(), jitorch.nn.Linear(16, 1))
    reference.load_state_dict(model.state_dict())
    history, expected = [], []

    @jitorch.compile
    def step(x, y):
        loss = jitorch.nn.functional.mse_loss(model(x), y)
        history.append(loss.item())
        loss.backward()
        return loss

    rng = np.random.default_rng(0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no recompile-limit warning
        for _ in range(12):
            x = jitorch.tensor(rng.standard_normal((4, 8)).astype(np.float32))
            y = jitorch.tensor(rng.standard_normal((4, 1)).astype(np.float32))
            model.zero_grad()
            step(x, y)
            reference.zero_grad()
            ref_loss = jitorch.nn.functional.mse_loss(reference(x), y)
            ref_loss.backward()
            expected.append(ref_loss.item())
            for p, q in zip(model.parameters(), reference.parameters()):
                np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(history, expected, rtol=1e-6)
    assert step._branches <= 2  # two recorded values showed the same continuation: later values follow it


def test_shapes_returned_by_compiled_code_stay_sizes():
    @jitorch.compile
    def f(x):
        return x.shape, x * 2, {"tail": x.shape[1:]}

    for _ in range(3):
        shape, _, extra = f(jitorch.ones(2, 3))
        assert type(shape) is jitorch.Size and shape.numel() == 6 and type(extra["tail"]) is jitorch.Size


def test_a_counter_bumped_in_forward_counts_each_call_once():
    class Counting(jitorch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = jitorch.nn.Linear(3, 3)
            self.calls = 0

        def forward(self, x):
            self.calls += 1
            return self.lin(x) * self.calls

    model = Counting()
    compiled = jitorch.compile(model)
    x = jitorch.ones(2, 3)
    for i in range(1, 5):
        out = compiled(x)  # training mode with grad: the joint trace runs forward's Python a second time
        assert model.calls == i
        np.testing.assert_allclose(out.detach().numpy(), model.lin(x).detach().numpy() * i, rtol=1e-6)
