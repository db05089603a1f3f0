"""Optimizer steps captured in CPU graphs: ``capturable=True`` Adam/AdamW (the step count lives in a tensor), SGD,
RMSprop and Adagrad, replayed for ten training steps against eager jitorch and eager torch 2.13 on the same data.

torch refuses ``capturable=True`` for CPU parameters, so the torch reference is its ``capturable=False`` update
(same math; the bias corrections round differently, hence float32 tolerances rather than bit equality).
"""
import copy
import warnings

import numpy as np
import pytest
import torch

import jitorch
from jitorch import _dispatch
from jitorch.cpu import CPUGraph, graph
from training_helpers import small_mlp

REPLAYS = 10
TOL = dict(rtol=2e-5, atol=2e-6)


def _weights(seed):
    gen = np.random.default_rng(seed)
    return [(gen.standard_normal(s) * 0.3).astype(np.float32) for s in ((16, 8), (16,), (4, 16), (4,))]


def _batches(seed, count):
    gen = np.random.default_rng(seed + 1)
    return [(gen.standard_normal((32, 8)).astype(np.float32), gen.standard_normal((32, 4)).astype(np.float32))
            for _ in range(count)]


def _train_step(lib, net, opt, x, y):
    opt.zero_grad(set_to_none=True)
    loss = lib.nn.functional.mse_loss(net(x), y)
    loss.backward()
    opt.step()
    return loss


def _host(t):
    return t.detach().numpy() if isinstance(t, torch.Tensor) else np.asarray(t._data)


def _assert_params(a, b, **tol):
    for p, q in zip(a.parameters(), b.parameters()):
        np.testing.assert_allclose(_host(p), _host(q), **tol)


CAPTURE_CASES = [
    ("Adam", dict(lr=0.01), dict(capturable=True)),
    ("Adam", dict(lr=0.01, amsgrad=True, weight_decay=0.05), dict(capturable=True)),
    ("Adam", dict(lr=0.02, betas=(0.8, 0.99), maximize=True), dict(capturable=True)),
    ("AdamW", dict(lr=0.01, weight_decay=0.1), dict(capturable=True)),
    ("AdamW", dict(lr=0.01, amsgrad=True), dict(capturable=True)),
    ("SGD", dict(lr=0.05, momentum=0.9), {}),
    ("SGD", dict(lr=0.05, momentum=0.9, nesterov=True, weight_decay=0.01), {}),
    ("SGD", dict(lr=0.05, momentum=0.8, dampening=0.2), {}),
    ("RMSprop", dict(lr=0.01, momentum=0.5, centered=True), dict(capturable=True)),
    ("Adagrad", dict(lr=0.05), {}),
]


def _case_id(case):
    name, kwargs, extra = case
    return name + "".join(f"-{k}={v}" for k, v in {**kwargs, **extra}.items())


@pytest.mark.parametrize("case", CAPTURE_CASES, ids=_case_id)
def test_captured_training_step_replays_like_eager_and_torch(case):
    name, kwargs, extra = case
    weights, data = _weights(3), _batches(3, REPLAYS + 2)
    captured, eager, reference = small_mlp(jitorch, weights), small_mlp(jitorch, weights), small_mlp(torch, weights)
    copt = getattr(jitorch.optim, name)(captured.parameters(), **kwargs, **extra)
    eopt = getattr(jitorch.optim, name)(eager.parameters(), **kwargs, **extra)
    ropt = getattr(torch.optim, name)(reference.parameters(), **kwargs)
    # Warm-up outside the capture creates the optimizer state, as CUDA graphs require.
    for lib, net, opt in ((jitorch, captured, copt), (jitorch, eager, eopt), (torch, reference, ropt)):
        _train_step(lib, net, opt, lib.tensor(data[0][0]), lib.tensor(data[0][1]))
    sx, sy = jitorch.tensor(data[1][0]), jitorch.tensor(data[1][1])
    g = CPUGraph()
    with graph(g):
        static_loss = _train_step(jitorch, captured, copt, sx, sy)
    _train_step(jitorch, eager, eopt, jitorch.tensor(data[1][0]), jitorch.tensor(data[1][1]))
    _train_step(torch, reference, ropt, torch.tensor(data[1][0]), torch.tensor(data[1][1]))
    _assert_params(captured, eager, **TOL)  # the capture ran the step eagerly (as tensor ops: rounding may differ)
    for x, y in data[2:]:
        sx.copy_(jitorch.tensor(x))
        sy.copy_(jitorch.tensor(y))
        g.replay()
        want = _train_step(jitorch, eager, eopt, jitorch.tensor(x), jitorch.tensor(y))
        ref_loss = _train_step(torch, reference, ropt, torch.tensor(x), torch.tensor(y))
        np.testing.assert_allclose(_host(static_loss), _host(want), **TOL)
        np.testing.assert_allclose(_host(static_loss), ref_loss.item(), rtol=1e-4)
        _assert_params(captured, eager, **TOL)
        _assert_params(captured, reference, rtol=1e-4, atol=2e-5)
    if "capturable" in extra or name in ("RMSprop", "Adagrad"):
        steps = [float(copt.state[p]["step"]._data) for p in captured.parameters()]
        assert steps == [REPLAYS + 2.0] * 4  # every replay advanced the tensor step count
    report = g.native_report()
    assert set(report) >= {"native", "calls", "segments", "fallbacks", "error"}


@pytest.mark.parametrize("name", ["Adam", "AdamW", "RMSprop", "Adadelta"])
def test_capturable_false_refuses_capture_like_torch(name):
    w = jitorch.nn.Parameter(jitorch.ones(3))
    opt = getattr(jitorch.optim, name)([w], lr=0.1)
    (w * 2).sum().backward()
    opt.step()
    before = w.detach().clone()
    with pytest.raises(RuntimeError, match=f"instance of {name} but param_groups' capturable is False.*"
                                           "capturable=True"):
        with graph(CPUGraph()):
            opt.step()
    assert not _dispatch.MODES and bool((w == before).all())  # refused before any update


def test_refusal_ends_a_manual_capture_too():
    w = jitorch.nn.Parameter(jitorch.ones(3))
    opt = jitorch.optim.Adam([w], lr=0.1)
    (w * 2).sum().backward()
    opt.step()
    g = CPUGraph()
    g.capture_begin()
    with pytest.raises(RuntimeError, match="capturable=True"):
        opt.step()
    assert not _dispatch.MODES
    with pytest.raises(RuntimeError, match="not capturing"):
        g.capture_end()


def test_adagrad_with_lr_decay_refuses_capture():
    w = jitorch.nn.Parameter(jitorch.ones(3))
    opt = jitorch.optim.Adagrad([w], lr=0.1, lr_decay=0.01)
    (w * 2).sum().backward()
    opt.step()
    with pytest.raises(RuntimeError, match="step count is a Python number"):
        with graph(CPUGraph()):
            opt.step()
    assert not _dispatch.MODES


# -- capturable=True eagerly: PyTorch's capturable formula, compared with torch's (CPU-only) capturable=False ------
EAGER_CASES = [
    ("Adam", dict(lr=0.01)),
    ("Adam", dict(lr=0.01, amsgrad=True, weight_decay=0.1, maximize=True)),
    ("Adam", dict(lr=0.01, decoupled_weight_decay=True, weight_decay=0.1)),
    ("AdamW", dict(lr=0.01, weight_decay=0.2, amsgrad=True)),
    ("RMSprop", dict(lr=0.01, centered=True, momentum=0.5)),
    ("Adadelta", dict(lr=0.5, weight_decay=0.1)),
]


@pytest.mark.parametrize("case", EAGER_CASES, ids=lambda c: c[0] + "".join(f"-{k}={v}" for k, v in c[1].items()))
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_capturable_eager_updates_match_torch(case, dtype, rng):
    name, kwargs = case
    shapes = ((4, 3), (3,), ())
    values = [rng.standard_normal(s).astype(dtype) for s in shapes]
    mine = [jitorch.nn.Parameter(jitorch.tensor(v)) for v in values]
    theirs = [torch.nn.Parameter(torch.tensor(v)) for v in values]
    mopt = getattr(jitorch.optim, name)(mine, capturable=True, **kwargs)
    topt = getattr(torch.optim, name)(theirs, capturable=False, **kwargs)
    # The tensor step is float32 (as PyTorch's), so float64 Adam's bias corrections are float32 numbers: early on,
    # 1 - 0.999 ** step loses three digits of float32's seven, a 1e-5 relative error in the step size.
    tol = dict(rtol=5e-5, atol=5e-6) if dtype is np.float32 else dict(rtol=1e-5, atol=5e-7)
    for _ in range(20):
        for m, t, s in zip(mine, theirs, shapes):
            g = rng.standard_normal(s).astype(dtype)
            m.grad, t.grad = jitorch.tensor(g), torch.tensor(g)
        mopt.step()
        topt.step()
        for m, t in zip(mine, theirs):
            np.testing.assert_allclose(_host(m), _host(t), **tol)
    for m in mine:
        step = mopt.state[m]["step"]
        assert step.dtype is jitorch.float32 and step.device.type == "cpu" and float(step._data) == 20.0


def test_torch_refuses_capturable_on_cpu_where_jitorch_accepts():
    # The premise of the comparison above: torch's capturable=True needs an accelerator.
    p = torch.nn.Parameter(torch.ones(2))
    p.grad = torch.ones(2)
    with pytest.raises(AssertionError, match="capturable=True"):
        torch.optim.Adam([p], capturable=True).step()
    q = jitorch.nn.Parameter(jitorch.ones(2))
    q.grad = jitorch.ones(2)
    opt = jitorch.optim.Adam([q], capturable=True)
    opt.step()
    assert float(opt.state[q]["step"]._data) == 1.0


def test_capturable_state_dict_round_trip_keeps_a_tensor_step():
    w = jitorch.nn.Parameter(jitorch.ones(3))
    opt = jitorch.optim.Adam([w], lr=0.1, capturable=True)
    w.grad = jitorch.ones(3)
    opt.step()
    w2 = jitorch.nn.Parameter(w.detach().clone())
    opt2 = jitorch.optim.Adam([w2], lr=0.1, capturable=True)
    opt2.load_state_dict(copy.deepcopy(opt.state_dict()))  # as torch.save/load would hand it over
    step = opt2.state[w2]["step"]
    assert step.dtype is jitorch.float32 and float(step._data) == 1.0
    w.grad, w2.grad = jitorch.full((3,), 0.5), jitorch.full((3,), 0.5)
    opt.step()
    opt2.step()
    assert w.tolist() == w2.tolist()


def test_replay_after_an_lr_change_raises_naming_the_option():
    w = jitorch.nn.Parameter(jitorch.ones(3))
    opt = jitorch.optim.SGD([w], lr=0.5, momentum=0.9)
    w.grad = jitorch.full((3,), 2.0)
    opt.step()
    g = CPUGraph()
    with graph(g):
        opt.step()
    g.replay()  # unchanged options replay
    opt.param_groups[0]["momentum"] = 0.5
    before = w.detach().clone()
    with pytest.raises(jitorch.cpu.CaptureInvalidated, match=r"SGD.param_groups\[0\]\['momentum'\] is 0.5 but was "
                                                             r"0.9 at capture"):
        g.replay()
    assert bool((w == before).all())  # refused before any step ran


@pytest.mark.parametrize("tensor_lr", [False, True], ids=["float-lr", "tensor-lr"])
def test_reduce_overhead_training_step_follows_an_lr_schedule_like_torch(tensor_lr):
    """A whole captured step (zero_grad, forward, backward, SGD) under StepLR: each lr change captures again."""
    weights, data = _weights(5), _batches(5, 8)
    net, ref = small_mlp(jitorch, weights), small_mlp(torch, weights)
    lr0 = 0.05
    opt = jitorch.optim.SGD(net.parameters(), lr=jitorch.tensor(lr0) if tensor_lr else lr0, momentum=0.9)
    ropt = torch.optim.SGD(ref.parameters(), lr=torch.tensor(lr0) if tensor_lr else lr0, momentum=0.9)
    sched = jitorch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
    rsched = torch.optim.lr_scheduler.StepLR(ropt, step_size=2, gamma=0.5)
    step = jitorch.compile(lambda x, y: _train_step(jitorch, net, opt, x, y).detach(), mode="reduce-overhead")
    for x, y in data:
        loss = step(jitorch.tensor(x), jitorch.tensor(y))
        want = _train_step(torch, ref, ropt, torch.tensor(x), torch.tensor(y))
        np.testing.assert_allclose(_host(loss), want.item(), rtol=1e-4)
        _assert_params(net, ref, rtol=1e-4, atol=2e-5)
        sched.step()
        rsched.step()
    # A float lr changed after steps 2, 4 and 6: each change captures again; a tensor lr the scheduler updates in
    # place is read live by the replay.
    assert step.recaptures == (0 if tensor_lr else 3)


@pytest.mark.parametrize("name, kwargs", [("SGD", dict(momentum=0.9)), ("Adam", dict(capturable=True))])
def test_a_tensor_lr_changed_in_place_is_read_live_by_replays(name, kwargs):
    results = {}
    for lib in (torch, jitorch):
        w = lib.nn.Parameter(lib.tensor(np.linspace(-1, 1, 5).astype(np.float32)))
        opt_kwargs = {k: v for k, v in kwargs.items() if lib is jitorch or k != "capturable"}
        opt = getattr(lib.optim, name)([w], lr=lib.tensor(0.1), **opt_kwargs)

        def step():
            opt.zero_grad()
            (w * 3).sin().sum().backward()
            opt.step()
        step()
        run = step
        if lib is jitorch:
            g = CPUGraph()
            with graph(g):
                step()
            run = g.replay
        else:
            step()
        out = []
        for i in range(3):
            opt.param_groups[0]["lr"].fill_(0.1 * 0.5 ** (i + 1))  # as an LR scheduler updates a tensor lr
            run()
            out.append(_host(w).copy())
        results[lib.__name__] = out
    for a, b in zip(results["torch"], results["jitorch"]):
        np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name, kwargs, captured", [
    ("Adam", {}, True), ("AdamW", {}, True), ("RMSprop", {}, True), ("Adadelta", {}, True), ("Rprop", {}, True),
    ("NAdam", {}, True), ("RAdam", {}, True), ("Adamax", {}, True), ("NAdam", {"momentum_decay": 0.01}, True),
    ("RAdam", {"weight_decay": 0.1, "decoupled_weight_decay": True}, True), ("ASGD", {}, True),
    ("ASGD", {"t0": 2.0, "weight_decay": 0.1}, True),
    ("Adagrad", {"lr_decay": 0.01}, False)])
def test_reduce_overhead_step_of_an_optimizer_built_without_capturable_trains_like_torch(name, kwargs, captured):
    """Ordinary code builds ``Adam(params)`` (capturable=False) and compiles its training step with
    mode="reduce-overhead": the capture takes the capturable form, as torch.compile does for CUDA. An optimizer
    whose update reads a Python step count whatever its flags is found in the warm-up: the calls run through the
    default compiled path, with a warning naming it, never a capture stopped half-way."""
    weights, data = _weights(6), _batches(6, 6)
    net, ref = small_mlp(jitorch, weights), small_mlp(torch, weights)
    opt = getattr(jitorch.optim, name)(net.parameters(), lr=0.01, **kwargs)
    ropt = getattr(torch.optim, name)(ref.parameters(), lr=0.01, **kwargs)
    step = jitorch.compile(lambda x, y: _train_step(jitorch, net, opt, x, y).detach(), mode="reduce-overhead")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for x, y in data:
            loss = step(jitorch.tensor(x), jitorch.tensor(y))
            want = _train_step(torch, ref, ropt, torch.tensor(x), torch.tensor(y))
            np.testing.assert_allclose(_host(loss), want.item(), rtol=1e-4)
            _assert_params(net, ref, rtol=1e-4, atol=2e-5)
    notes = [str(w.message) for w in caught if "reduce-overhead" in str(w.message)]
    for (i, mine), theirs in zip(opt.state_dict()["state"].items(), ropt.state_dict()["state"].values()):
        for key, value in theirs.items():  # moments, ASGD's average, eta and mu, NAdam's mu_product, the count
            np.testing.assert_allclose(_host(mine[key]), np.asarray(value), rtol=1e-4, atol=2e-6, err_msg=key)
    if captured:
        assert step.graph is not None and step.fallback_reason is None and step.recaptures == 0 and not notes
        # the capture took the capturable form; the flag is the user's again after it (a state dict torch loads)
        assert not any(g.get("capturable", False) for g in opt.state_dict()["param_groups"])
    else:
        assert step.graph is None and len(notes) == 1 and f"{name}" in notes[0] and "step count" in notes[0]
    # A capture the user makes still refuses a non-capturable optimizer (test_capturable_false_refuses_capture...).


@pytest.mark.parametrize("name", ["Adagrad", "RMSprop", "Adadelta", "SGD", "Adam"])
def test_a_captured_step_of_complex_parameters_squares_each_part_as_torch(name):
    # torch updates complex parameters as (re, im) pairs (view_as_real): a captured update must too, not square the
    # complex gradient.
    rng = np.random.default_rng(11)
    w0 = (rng.standard_normal((4, 3)) + 1j * rng.standard_normal((4, 3))).astype(np.complex64)
    xs = [(rng.standard_normal((5, 4)) + 1j * rng.standard_normal((5, 4))).astype(np.complex64) for _ in range(5)]
    out = {}
    for lib in (torch, jitorch):
        w = lib.nn.Parameter(lib.tensor(w0))
        opt = getattr(lib.optim, name)([w], lr=0.05)

        def step(x):
            opt.zero_grad()
            (x @ w).abs().pow(2).sum().backward()
            opt.step()

        run = jitorch.compile(step, mode="reduce-overhead") if lib is jitorch else step
        for x in xs:
            run(lib.tensor(x))
        out[lib.__name__] = _host(w)
    np.testing.assert_allclose(out["jitorch"], out["torch"], rtol=1e-4, atol=1e-5)
