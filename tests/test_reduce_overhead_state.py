"""mode="reduce-overhead" follows eager jitorch when what the step reaches changes between calls: a global model's
train/eval mode and attributes, a layer unfrozen, an optimizer's state replaced, gradients zeroed (set to None)
outside the captured step (gradient accumulation), and arguments that share memory. Each case trains a compiled step
next to an eager copy and compares parameters, buffers and optimizer state after every call."""
import copy
import warnings

import numpy as np
import pytest

import jitorch

nn, F = jitorch.nn, jitorch.nn.functional


def _batches(count, seed=0):
    rng = np.random.default_rng(seed)
    return [(rng.standard_normal((16, 8)).astype(np.float32), rng.standard_normal((16, 4)).astype(np.float32))
            for _ in range(count)]


def _model():
    jitorch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16), nn.Tanh(), nn.Dropout(0.2), nn.Linear(16, 4))


def _state(model, opt):
    out = [t.detach().numpy().copy() for t in list(model.parameters()) + list(model.buffers())]
    for s in opt.state.values():
        out += [v.detach().numpy().copy() for v in s.values() if hasattr(v, "_data")]
    return out


def _between(case, step, model, opt):
    """What the user's loop does between calls ``step`` and ``step + 1``."""
    if case == "eval then train" and step in (1, 3):
        model.train(step == 3)
    elif case == "attribute" and step == 1:
        model[1].momentum = 0.5
        model[3].p = 0.5
    elif case == "unfreeze" and step in (0, 2):
        model[0].weight.requires_grad_(step == 2)
    elif case == "optimizer state replaced" and step == 2:
        for s in opt.state.values():
            s["momentum_buffer"] = jitorch.zeros_like(s["momentum_buffer"])
    elif case == "buffer replaced" and step == 2:
        model[1].running_mean = jitorch.zeros(16)


@pytest.mark.parametrize("case", ["eval then train", "attribute", "unfreeze", "optimizer state replaced",
                                  "buffer replaced"])
def test_a_captured_step_follows_changes_to_the_model_and_optimizer_it_reaches_by_name(case):
    runs = {}
    for mode in ("eager", "reduce-overhead"):
        model = _model()
        opt = jitorch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)

        def step(x, y):
            opt.zero_grad()
            loss = F.mse_loss(model(x), y)
            loss.backward()
            opt.step()
            return loss.detach()

        run = step if mode == "eager" else jitorch.compile(step, mode="reduce-overhead")
        states = []
        for i, (x, y) in enumerate(_batches(6)):
            jitorch.manual_seed(100 + i)  # the same dropout masks in both runs
            run(jitorch.tensor(x), jitorch.tensor(y))
            states.append(_state(model, opt))
            _between(case, i, model, opt)
        runs[mode] = states
        if mode != "eager":
            assert run.recaptures >= 1 and run.graph is not None
    for i, (want, got) in enumerate(zip(runs["eager"], runs["reduce-overhead"])):
        for a, b in zip(want, got):
            np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-6, err_msg=f"after call {i}")


@pytest.mark.parametrize("accumulate", [1, 2])
def test_gradients_zeroed_outside_the_captured_forward_and_backward_train_like_eager(accumulate):
    # The usual accumulation loop: forward and backward compiled, opt.step() and zero_grad() (set to None) outside.
    runs, initial = {}, nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 4))
    for mode in ("eager", "reduce-overhead"):
        model = copy.deepcopy(initial)
        opt = jitorch.optim.SGD(model.parameters(), lr=0.1)

        def forward_backward(x, y):
            loss = F.mse_loss(model(x), y) / accumulate
            loss.backward()
            return loss.detach()

        run = forward_backward if mode == "eager" else jitorch.compile(forward_backward, mode="reduce-overhead")
        states = []
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # alternating micro-batches capture again (and say so)
            for i, (x, y) in enumerate(_batches(8, seed=1)):
                run(jitorch.tensor(x), jitorch.tensor(y))
                states.append([p.grad.numpy().copy() for p in model.parameters()])
                if i % accumulate == accumulate - 1:
                    opt.step()
                    opt.zero_grad()
                states[-1] += [p.detach().numpy().copy() for p in model.parameters()]
        runs[mode] = states
    for i, (want, got) in enumerate(zip(runs["eager"], runs["reduce-overhead"])):
        for a, b in zip(want, got):
            np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-6, err_msg=f"after call {i}")


def test_arguments_sharing_memory_run_eagerly_with_eager_results():
    def f(a, b):
        a.mul_(2)
        return a + b

    g = jitorch.compile(f, mode="reduce-overhead")
    with pytest.warns(UserWarning, match="share memory"):
        for _ in range(3):
            x, xe = jitorch.ones(4), jitorch.ones(4)
            got, want = g(x, x), f(xe, xe)
            assert got.tolist() == want.tolist() and x.tolist() == xe.tolist()
            buf, bufe = jitorch.zeros(6), jitorch.zeros(6)
            assert g(buf[:4], buf[2:]).tolist() == f(bufe[:4], bufe[2:]).tolist()
