"""jitorch.optim.lr_scheduler against torch.optim.lr_scheduler 2.13: the same learning-rate (and momentum)
sequences step for step, state dict round trips, and PyTorch's errors and warnings.

Schedulers are pure Python arithmetic on the same floats, so rates are compared exactly.
"""
import warnings

import numpy as np
import pytest
import torch

import jitorch

STEPS = 40


def _optimizer(lib, name="SGD", tensor_lr=False):
    """Two parameter groups with different learning rates (schedulers handle each group)."""
    kwargs = {"SGD": dict(momentum=0.9), "Adam": dict(betas=(0.9, 0.999))}[name]
    lr0 = lib.tensor(0.1) if tensor_lr else 0.1
    groups = [{"params": [lib.zeros(2, requires_grad=True)], "lr": lr0},
              {"params": [lib.zeros(3, requires_grad=True)], "lr": 0.05}]
    return getattr(lib.optim, name)(groups, **kwargs)


def _sequential(m, opt):
    return m.SequentialLR(opt, [m.LinearLR(opt, start_factor=0.1, total_iters=5), m.CosineAnnealingLR(opt, T_max=20)],
                          milestones=[5])


def _sequential3(m, opt):
    scheds = [m.ConstantLR(opt, factor=0.5, total_iters=3), m.ExponentialLR(opt, gamma=0.9),
              m.StepLR(opt, step_size=4, gamma=0.5)]
    return m.SequentialLR(opt, scheds, milestones=[6, 15])


def _chained(m, opt):
    return m.ChainedScheduler([m.ConstantLR(opt, factor=0.5, total_iters=4), m.ExponentialLR(opt, gamma=0.9)])


class _Warmup:
    """A callable object lr_lambda: its ``__dict__`` goes into the state dict."""

    def __init__(self, steps):
        self.steps = steps

    def __call__(self, epoch):
        return min(1.0, (epoch + 1) / self.steps)


CASES = {
    "StepLR": ("SGD", lambda m, opt: m.StepLR(opt, step_size=3, gamma=0.5)),
    "MultiStepLR": ("SGD", lambda m, opt: m.MultiStepLR(opt, milestones=[2, 5, 5, 9], gamma=0.3)),
    "ExponentialLR": ("SGD", lambda m, opt: m.ExponentialLR(opt, gamma=0.9)),
    "CosineAnnealingLR": ("SGD", lambda m, opt: m.CosineAnnealingLR(opt, T_max=10, eta_min=0.001)),
    "LambdaLR": ("SGD", lambda m, opt: m.LambdaLR(opt, lambda epoch: 0.95 ** epoch)),
    "LambdaLR-per-group": ("SGD", lambda m, opt: m.LambdaLR(opt, [_Warmup(6), lambda epoch: 1.0 / (epoch + 1)])),
    "MultiplicativeLR": ("SGD", lambda m, opt: m.MultiplicativeLR(opt, lambda epoch: 0.97)),
    "LinearLR": ("SGD", lambda m, opt: m.LinearLR(opt, start_factor=0.25, end_factor=0.9, total_iters=8)),
    "ConstantLR": ("SGD", lambda m, opt: m.ConstantLR(opt, factor=0.5, total_iters=4)),
    "PolynomialLR": ("SGD", lambda m, opt: m.PolynomialLR(opt, total_iters=20, power=2.0)),
    "OneCycleLR-cos": ("SGD", lambda m, opt: m.OneCycleLR(opt, max_lr=[0.1, 0.2], total_steps=STEPS)),
    "OneCycleLR-linear-three-phase": ("SGD", lambda m, opt: m.OneCycleLR(
        opt, max_lr=0.3, epochs=4, steps_per_epoch=10, anneal_strategy="linear", three_phase=True, pct_start=0.25)),
    "OneCycleLR-adam-betas": ("Adam", lambda m, opt: m.OneCycleLR(opt, max_lr=0.01, total_steps=STEPS,
                                                                 base_momentum=0.8, max_momentum=0.9)),
    "OneCycleLR-no-momentum": ("Adam", lambda m, opt: m.OneCycleLR(opt, max_lr=0.01, total_steps=STEPS + 5,
                                                                  cycle_momentum=False, div_factor=10.0)),
    "CosineAnnealingWarmRestarts": ("SGD", lambda m, opt: m.CosineAnnealingWarmRestarts(opt, T_0=5, T_mult=2,
                                                                                         eta_min=1e-4)),
    "CosineAnnealingWarmRestarts-T_mult=1": ("SGD", lambda m, opt: m.CosineAnnealingWarmRestarts(opt, T_0=7)),
    "CyclicLR-triangular2": ("SGD", lambda m, opt: m.CyclicLR(opt, base_lr=0.01, max_lr=0.1, step_size_up=4,
                                                              mode="triangular2")),
    "CyclicLR-exp_range-adam": ("Adam", lambda m, opt: m.CyclicLR(opt, base_lr=[0.001, 0.002], max_lr=0.01,
                                                                  step_size_up=3, step_size_down=5,
                                                                  mode="exp_range", gamma=0.97)),
    "SequentialLR": ("SGD", _sequential),
    "SequentialLR-three": ("SGD", _sequential3),
    "ChainedScheduler": ("SGD", _chained),
}


def _momenta(opt):
    return [g["betas"][0] if "betas" in g else g.get("momentum") for g in opt.param_groups]


def _run(lib, case, steps=STEPS, resume_at=None):
    """The per-step (lrs, momenta) of a scheduler; with ``resume_at``, rebuilt from state dicts at that step."""
    opt_name, build = CASES[case]
    opt = _optimizer(lib, opt_name)
    sched = build(lib.optim.lr_scheduler, opt)
    trace = [(sched.get_last_lr(), _momenta(opt))]
    for step in range(steps):
        if step == resume_at:
            sched_state, opt_state = sched.state_dict(), opt.state_dict()
            opt = _optimizer(lib, opt_name)
            sched = build(lib.optim.lr_scheduler, opt)
            sched.load_state_dict(sched_state)
            opt.load_state_dict(opt_state)
        opt.step()
        sched.step()
        trace.append((sched.get_last_lr(), _momenta(opt)))
    return trace, sched


@pytest.mark.parametrize("case", sorted(CASES))
def test_lr_sequence_matches_torch(case):
    (jtrace, jsched), (ttrace, tsched) = _run(jitorch, case), _run(torch, case)
    for step, (j, t) in enumerate(zip(jtrace, ttrace)):
        assert j == t, f"step {step}: (lrs, momenta) {j} != torch {t}"
    assert getattr(jsched, "last_epoch", None) == getattr(tsched, "last_epoch", None)


@pytest.mark.parametrize("case", sorted(CASES))
def test_state_dict_round_trip_matches_torch(case):
    (jtrace, jsched), (ttrace, tsched) = _run(jitorch, case, resume_at=15), _run(torch, case, resume_at=15)
    assert jtrace == ttrace
    assert jtrace == _run(torch, case)[0], "resuming from state dicts continues the uninterrupted sequence"
    jstate, tstate = jsched.state_dict(), tsched.state_dict()
    assert sorted(jstate) == sorted(tstate)
    for key, value in tstate.items():
        if isinstance(value, (int, float, str, list)) and key not in ("_schedulers", "lr_lambdas"):
            assert jstate[key] == value, key


METRICS = [1.0, 0.9, 0.9, 0.91, 0.9, 0.95, 0.95, 0.8, 0.8, 0.8, 0.81, 0.8, 0.79, 0.79, 0.79, 0.79, 0.7, 0.7, 0.71,
           0.7, 0.7, 0.7, 0.7, 0.69, 0.69, 0.69, 0.69, 0.69, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5]
PLATEAU_CASES = [dict(), dict(patience=2, factor=0.5), dict(mode="max", patience=1),
                 dict(patience=1, threshold=0.05, threshold_mode="abs", cooldown=2),
                 dict(patience=0, factor=0.3, min_lr=[0.01, 0.02], eps=1e-3)]


@pytest.mark.parametrize("kwargs", PLATEAU_CASES, ids=str)
def test_reduce_lr_on_plateau_matches_torch(kwargs):
    traces = []
    for lib in (jitorch, torch):
        opt = _optimizer(lib)
        sched = lib.optim.lr_scheduler.ReduceLROnPlateau(opt, **kwargs)
        trace = []
        for step, metric in enumerate(METRICS):
            if step == 20:  # resume from the state dict midway
                state = sched.state_dict()
                sched = lib.optim.lr_scheduler.ReduceLROnPlateau(opt, **kwargs)
                sched.load_state_dict(state)
            opt.step()
            sched.step(lib.tensor(metric) if step % 2 else metric)
            trace.append((sched.get_last_lr(), sched.num_bad_epochs, sched.cooldown_counter, sched.best))
        traces.append(trace)
    assert traces[0] == traces[1]


def test_tensor_lr_is_updated_in_place():
    traces = []
    for lib in (jitorch, torch):
        opt = _optimizer(lib, "SGD", tensor_lr=True)
        lr_tensor = opt.param_groups[0]["lr"]
        sched = lib.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
        for _ in range(6):
            opt.step()
            sched.step()
        assert opt.param_groups[0]["lr"] is lr_tensor
        last = sched.get_last_lr()
        assert isinstance(last[0], lib.Tensor) and last[0] is not lr_tensor
        traces.append([float(v) for v in last])
    assert traces[0] == traces[1]


def test_step_with_epoch_uses_the_closed_form_and_warns():
    lrs = []
    for lib in (jitorch, torch):
        opt = _optimizer(lib)
        sched = lib.optim.lr_scheduler.StepLR(opt, step_size=3, gamma=0.5)
        opt.step()
        with pytest.warns(UserWarning, match="The epoch parameter in `scheduler.step\\(\\)` was not necessary"):
            sched.step(7)
        lrs.append(sched.get_last_lr())
    assert lrs[0] == lrs[1] == [0.1 * 0.25, 0.05 * 0.25]


def test_warnings_match_torch():
    for lib in (jitorch, torch):
        opt = _optimizer(lib)
        sched = lib.optim.lr_scheduler.ExponentialLR(opt, gamma=0.5)
        with pytest.warns(UserWarning, match="Detected call of `lr_scheduler.step\\(\\)` before `optimizer.step"):
            sched.step()
        with pytest.warns(UserWarning, match="please use `get_last_lr\\(\\)`"):
            sched.get_lr()
        opt.step()
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            sched.step()


ERROR_CASES = [
    lambda m, opt: m.StepLR(object(), step_size=1),
    lambda m, opt: m.ConstantLR(opt, factor=1.5),
    lambda m, opt: m.LinearLR(opt, start_factor=0.0),
    lambda m, opt: m.LinearLR(opt, end_factor=2.0),
    lambda m, opt: m.LambdaLR(opt, [lambda e: 1.0]),
    lambda m, opt: m.MultiplicativeLR(opt, 0.5),
    lambda m, opt: m.StepLR(opt, step_size=1, last_epoch=3),
    lambda m, opt: m.OneCycleLR(opt, max_lr=0.1),
    lambda m, opt: m.OneCycleLR(opt, max_lr=0.1, total_steps=0),
    lambda m, opt: m.OneCycleLR(opt, max_lr=0.1, total_steps=10, anneal_strategy="exp"),
    lambda m, opt: m.OneCycleLR(opt, max_lr=[0.1], total_steps=10),
    lambda m, opt: m.OneCycleLR(opt, max_lr=0.1, total_steps=10, pct_start=1.5),
    lambda m, opt: m.CosineAnnealingWarmRestarts(opt, T_0=0),
    lambda m, opt: m.CosineAnnealingWarmRestarts(opt, T_0=2, T_mult=0),
    lambda m, opt: m.CyclicLR(opt, base_lr=0.1, max_lr=1.0, mode="sawtooth"),
    lambda m, opt: m.SequentialLR(opt, [m.StepLR(opt, 2)], milestones=[3]),
    lambda m, opt: m.SequentialLR(opt, [], milestones=[]),
    lambda m, opt: m.ChainedScheduler([m.ReduceLROnPlateau(opt)]),
    lambda m, opt: m.ReduceLROnPlateau(opt, factor=1.0),
    lambda m, opt: m.ReduceLROnPlateau(opt, mode="median"),
    lambda m, opt: m.ReduceLROnPlateau(opt, threshold_mode="pct"),
    lambda m, opt: m.ReduceLROnPlateau(opt, min_lr=[0.1]),
]


@pytest.mark.parametrize("index", range(len(ERROR_CASES)))
def test_invalid_arguments_raise_torchs_errors(index):
    build = ERROR_CASES[index]
    with pytest.raises(Exception) as terr:
        build(torch.optim.lr_scheduler, _optimizer(torch))
    with pytest.raises(type(terr.value)) as jerr:
        build(jitorch.optim.lr_scheduler, _optimizer(jitorch))
    assert str(jerr.value) == str(terr.value)


def test_one_cycle_raises_past_total_steps():
    opt = _optimizer(jitorch)
    sched = jitorch.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.1, total_steps=3)
    for _ in range(3):
        opt.step()
        sched.step()
    with pytest.raises(ValueError, match="Tried to step 4 times. The specified number of total steps is 3"):
        sched.step()


def test_cosine_warm_restarts_with_fractional_epochs():
    lrs = []
    for lib in (jitorch, torch):
        opt = _optimizer(lib)
        sched = lib.optim.lr_scheduler.CosineAnnealingWarmRestarts(opt, T_0=3, T_mult=2)
        trace = []
        for epoch in range(8):
            for i in range(4):
                opt.step()
                sched.step(epoch + i / 4)
                trace.append(sched.get_last_lr())
        lrs.append(trace)
    np.testing.assert_array_equal(np.array(lrs[0]), np.array(lrs[1]))
