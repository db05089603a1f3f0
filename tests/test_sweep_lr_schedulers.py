"""A breadth sweep of jitorch.optim.lr_scheduler against torch 2.13: every scheduler and mode with SGD (momentum)
and Adam (betas), compared exactly step by step (`get_last_lr()`, the groups' lr and momentum/betas), then the
state dict, `last_epoch` and every warning; fractional epochs, ReduceLROnPlateau's modes, resumes, the removed
``verbose`` argument, state dicts carried from one library into the other, and torch's errors.

`test_lr_scheduler.py` covers each scheduler's sequence on its defaults; this file crosses the options.
Schedulers are Python float arithmetic, so everything is compared with ``==``.
"""
import warnings

import pytest
import torch

import jitorch


def _optimizer(lib, name):
    groups = [{"params": [lib.zeros(2, requires_grad=True)], "lr": 0.1},
              {"params": [lib.zeros(3, requires_grad=True)], "lr": 0.05}]
    return lib.optim.SGD(groups, momentum=0.9) if name == "SGD" else getattr(lib.optim, name)(groups)


def _plain(value):
    """A state dict with callables and tensors replaced by comparable stand-ins."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_plain(v) for v in value)
    if isinstance(value, (torch.Tensor, jitorch.Tensor)):
        return ("tensor", value.item())
    return "<callable>" if callable(value) else value


def _trace(lib, build, optimizer="SGD", steps=30, arguments=None, optimizer_steps=True):
    """Everything observable of a scheduler over ``steps`` steps, or the error it raised, and its warnings."""
    seen = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            opt = _optimizer(lib, optimizer)
            sched = build(lib.optim.lr_scheduler, opt)
            momentum = [g.get("momentum", g.get("betas")) for g in opt.param_groups]
            seen.append((getattr(sched, "_last_lr", None), momentum))
            for i in range(steps):
                if optimizer_steps:
                    opt.step()
                sched.step(*([] if arguments is None else [arguments[i]]))
                seen.append((sched.get_last_lr(), [g["lr"] for g in opt.param_groups],
                             [g.get("momentum", g.get("betas")) for g in opt.param_groups]))
            seen.append((_plain(sched.state_dict()), sched.last_epoch))
        except Exception as error:  # noqa: BLE001 - the error is part of what is compared
            seen.append((type(error).__name__, str(error)))
    seen.append([(w.category.__name__, str(w.message)) for w in caught])
    return seen


def _assert_same_trace(build, **kwargs):
    jt, th = _trace(jitorch, build, **kwargs), _trace(torch, build, **kwargs)
    for i, (a, b) in enumerate(zip(jt, th)):
        assert a == b, f"entry {i}: jitorch {a!r} != torch {b!r}"
    assert len(jt) == len(th)


SCHEDULERS = {
    "StepLR": lambda m, o: m.StepLR(o, 4, 0.5),
    "MultiStepLR-repeated": lambda m, o: m.MultiStepLR(o, [3, 7, 7], 0.3),
    "ConstantLR": lambda m, o: m.ConstantLR(o, 0.3, 5),
    "LinearLR": lambda m, o: m.LinearLR(o, 0.2, 0.8, 10),
    "ExponentialLR": lambda m, o: m.ExponentialLR(o, 0.93),
    "PolynomialLR": lambda m, o: m.PolynomialLR(o, 12, 2.0),
    "PolynomialLR-sqrt": lambda m, o: m.PolynomialLR(o, total_iters=7, power=0.5),
    "CosineAnnealingLR": lambda m, o: m.CosineAnnealingLR(o, 7, 0.01),
    "CosineAnnealingWarmRestarts": lambda m, o: m.CosineAnnealingWarmRestarts(o, 5, 2, 0.001),
    "CyclicLR-triangular": lambda m, o: m.CyclicLR(o, 0.01, 0.1, step_size_up=4),
    "CyclicLR-triangular2": lambda m, o: m.CyclicLR(o, [0.01, 0.02], [0.1, 0.2], step_size_up=3, step_size_down=5,
                                                    mode="triangular2", base_momentum=[0.7, 0.75]),
    "CyclicLR-exp_range": lambda m, o: m.CyclicLR(o, 0.01, 0.1, step_size_up=3, mode="exp_range", gamma=0.97),
    "CyclicLR-scale_fn": lambda m, o: m.CyclicLR(o, 0.01, 0.1, step_size_up=3, scale_fn=lambda x: 0.9 ** x,
                                                 scale_mode="iterations"),
    "CyclicLR-no-momentum": lambda m, o: m.CyclicLR(o, 0.01, 0.1, step_size_up=3, cycle_momentum=False),
    "OneCycleLR": lambda m, o: m.OneCycleLR(o, 0.5, total_steps=30),
    "OneCycleLR-three-phase-linear": lambda m, o: m.OneCycleLR(o, [0.5, 0.3], total_steps=30, three_phase=True,
                                                               anneal_strategy="linear"),
    "OneCycleLR-epochs": lambda m, o: m.OneCycleLR(o, 0.5, epochs=3, steps_per_epoch=10, pct_start=0.4,
                                                   div_factor=10, final_div_factor=100),
    "OneCycleLR-no-momentum": lambda m, o: m.OneCycleLR(o, 0.5, total_steps=30, cycle_momentum=False),
    "LambdaLR": lambda m, o: m.LambdaLR(o, lambda epoch: 1 / (1 + epoch)),
    "MultiplicativeLR-per-group": lambda m, o: m.MultiplicativeLR(o, [lambda e: 0.9, lambda e: 0.95]),
    "SequentialLR": lambda m, o: m.SequentialLR(o, [m.LinearLR(o, 0.1, total_iters=4), m.ExponentialLR(o, 0.9)], [4]),
    "ChainedScheduler": lambda m, o: m.ChainedScheduler([m.ConstantLR(o, 0.5, 4), m.ExponentialLR(o, 0.9)]),
    "ChainedScheduler-optimizer": lambda m, o: m.ChainedScheduler([m.StepLR(o, 3), m.LinearLR(o, 0.5, total_iters=5)],
                                                                  optimizer=o),
}
CYCLING = [name for name in SCHEDULERS if name.startswith(("CyclicLR", "OneCycleLR"))]


@pytest.mark.parametrize("name", list(SCHEDULERS))
def test_schedule_state_dict_and_warnings_match_torch(name):
    _assert_same_trace(SCHEDULERS[name])


@pytest.mark.parametrize("name", CYCLING)
def test_cycling_schedules_drive_adam_betas_like_torch(name):
    _assert_same_trace(SCHEDULERS[name], optimizer="Adam")


@pytest.mark.parametrize("optimizer", ["Adagrad", "RMSprop"])
def test_cycle_momentum_without_momentum_or_betas_fails_as_torch(optimizer):
    _assert_same_trace(lambda m, o: m.CyclicLR(o, 0.01, 0.1), optimizer=optimizer, steps=2)


@pytest.mark.parametrize("name", ["StepLR", "LinearLR", "ExponentialLR", "CosineAnnealingLR", "OneCycleLR"])
def test_step_before_optimizer_step_warns_as_torch(name):
    _assert_same_trace(SCHEDULERS[name], steps=3, optimizer_steps=False)


EPOCHS = [0.5, 1.2, 1.9, 3.0, 4.7, 5.2, 6.1, 9.9, 10.0, 14.99, 15.1, 16, 40.3]


@pytest.mark.parametrize("T_0, T_mult", [(5, 2), (3, 1)])
def test_warm_restarts_at_fractional_epochs_match_torch(T_0, T_mult):
    _assert_same_trace(lambda m, o: m.CosineAnnealingWarmRestarts(o, T_0, T_mult, 0.001), steps=len(EPOCHS),
                       arguments=EPOCHS)


METRICS = [1.0, 0.9, 0.91, 0.92, 0.93, 0.95, 0.9, 0.89, 0.9, 0.9, 0.9, 0.9, 0.9, 0.7, 0.71, 0.72, 0.73] * 2


@pytest.mark.parametrize("kwargs", [
    dict(), dict(mode="max"), dict(patience=2, cooldown=2), dict(threshold_mode="abs", threshold=0.05),
    dict(mode="max", threshold_mode="abs", factor=0.5, patience=0), dict(min_lr=[0.02, 0.001], patience=1),
    dict(min_lr=0.03, patience=0, eps=1e-3), dict(patience=1, cooldown=1, threshold=0.0),
    dict(mode="bad"), dict(threshold_mode="bad"), dict(factor=1.0), dict(min_lr=[0.1]),
], ids=str)
def test_reduce_on_plateau_options_match_torch(kwargs):
    _assert_same_trace(lambda m, o: m.ReduceLROnPlateau(o, **kwargs), steps=len(METRICS), arguments=METRICS)


@pytest.mark.parametrize("build", [
    lambda m, o: m.StepLR(o, 2, verbose=True), lambda m, o: m.ReduceLROnPlateau(o, verbose=False),
    lambda m, o: m.CyclicLR(o, 0.01, 0.1, verbose=True),
])
def test_removed_verbose_argument_is_refused_as_torch(build):
    _assert_same_trace(build, steps=2)


def _with_initial_lr(make):
    def build(m, o):
        for group in o.param_groups:
            group["initial_lr"] = group["lr"]
        return make(m, o)
    return build


@pytest.mark.parametrize("build", [
    _with_initial_lr(lambda m, o: m.StepLR(o, 3, 0.5, last_epoch=5)),
    _with_initial_lr(lambda m, o: m.CosineAnnealingLR(o, 10, last_epoch=4)),
    _with_initial_lr(lambda m, o: m.LinearLR(o, 0.2, total_iters=10, last_epoch=3)),
    lambda m, o: m.StepLR(o, 3, last_epoch=5),
    lambda m, o: m.OneCycleLR(o, 0.5, total_steps=30, last_epoch=5),
], ids=["StepLR", "CosineAnnealingLR", "LinearLR", "StepLR-no-initial_lr", "OneCycleLR-no-initial_lr"])
def test_resuming_at_last_epoch_matches_torch(build):
    _assert_same_trace(build)


@pytest.mark.parametrize("build", [
    lambda m, o: m.LinearLR(o, start_factor=0), lambda m, o: m.ConstantLR(o, factor=2),
    lambda m, o: m.OneCycleLR(o, 0.1), lambda m, o: m.OneCycleLR(o, 0.1, total_steps=10, pct_start=1.2),
    lambda m, o: m.OneCycleLR(o, 0.1, total_steps=10, anneal_strategy="x"),
    lambda m, o: m.CyclicLR(o, 0.1, 1, mode="x"),
    lambda m, o: m.CosineAnnealingWarmRestarts(o, 0), lambda m, o: m.CosineAnnealingWarmRestarts(o, 2, 1.5),
    lambda m, o: m.SequentialLR(o, [m.StepLR(o, 2)], [3]), lambda m, o: m.LambdaLR(o, [lambda e: 1]),
    lambda m, o: m.StepLR(object(), 2), lambda m, o: m.OneCycleLR(o, 0.5, total_steps=3),
])
def test_invalid_arguments_raise_torchs_errors(build):
    _assert_same_trace(build, steps=5)


CARRIED = [name for name in SCHEDULERS if not name.startswith(("LambdaLR", "MultiplicativeLR", "CyclicLR-scale_fn"))]


@pytest.mark.parametrize("direction", ["jitorch-to-torch", "torch-to-jitorch"])
@pytest.mark.parametrize("name", CARRIED + ["ReduceLROnPlateau"])
def test_state_dict_carried_across_libraries_resumes_the_schedule(name, direction):
    src, dst = (jitorch, torch) if direction == "jitorch-to-torch" else (torch, jitorch)
    build = SCHEDULERS.get(name, lambda m, o: m.ReduceLROnPlateau(o, patience=1, cooldown=1))
    metrics = METRICS if name == "ReduceLROnPlateau" else None
    args = (lambda i: [] if metrics is None else [metrics[i]])
    src_opt = _optimizer(src, "SGD")
    src_sched = build(src.optim.lr_scheduler, src_opt)
    for i in range(7):
        src_opt.step()
        src_sched.step(*args(i))
    dst_opt = _optimizer(dst, "SGD")
    dst_sched = build(dst.optim.lr_scheduler, dst_opt)
    dst_sched.load_state_dict(src_sched.state_dict())
    dst_opt.load_state_dict({"state": {}, "param_groups": src_opt.state_dict()["param_groups"]})
    assert _plain(dst_sched.state_dict()) == _plain(src_sched.state_dict())
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a loaded scheduler warns about nothing
        for i in range(7, 14):
            src_opt.step()
            dst_opt.step()
            src_sched.step(*args(i))
            dst_sched.step(*args(i))
            assert [g["lr"] for g in dst_opt.param_groups] == [g["lr"] for g in src_opt.param_groups]
            assert dst_sched.get_last_lr() == src_sched.get_last_lr()
    assert _plain(dst_sched.state_dict()) == _plain(src_sched.state_dict())
