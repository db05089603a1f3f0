"""Shared by the compiled-model sweeps (``test_compile_model_sweep*.py``): one research model, built by a sweep's
``make_*(lib)`` builder, run three ways from torch's initial weights on the same NumPy data: torch, eager jitorch and
``jitorch.compile``'d jitorch. A `Case` names the builder, the inputs of each step, the loss on the model's output and
the optimizer; `check_forward`, `check_training` and `check_reduce_overhead_step` compare compiled with eager (tight
tolerances: same kernels, mostly) and with torch (looser: another library's rounding)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import torch

import jitorch
from sweep_helpers import assert_runs_match, copy_weights


@dataclass
class Case:
    """``build(lib)`` -> a module; ``inputs(lib, step)`` -> its call's arguments; ``loss(lib, out)`` -> a 0-d
    loss; ``optimizer(lib, params, capturable)`` -> the optimizer; ``eval_forward``: compare the forward in eval mode
    (dropout off, BatchNorm on running statistics); ``state_atol``: parameters after Adam's steps, which move
    an element by up to lr whatever its gradient's size, so rounding noise in a near-zero gradient moves it a
    fraction of lr; ``seeded``: reseed both libraries before each step (dropout)."""
    build: Callable
    inputs: Callable
    loss: Callable
    optimizer: Callable
    rtol: float = 1e-5
    atol: float = 1e-6
    torch_rtol: float = 1e-4
    torch_atol: float = 1e-5
    state_atol: float = 1e-6
    seeded: bool = False
    steps: int = 3
    extra: dict = field(default_factory=dict)


def models(case):
    """(torch reference, eager jitorch, jitorch for compiling), all with torch's initial weights and buffers."""
    torch.manual_seed(0)
    ref = case.build(torch)
    eager, compiled = case.build(jitorch), case.build(jitorch)
    copy_weights(ref, eager)
    copy_weights(ref, compiled)
    return ref, eager, compiled


def _state(model):
    """Parameters and buffers (BatchNorm's running statistics too) by name."""
    return {**dict(model.named_parameters()), **dict(model.named_buffers())}


def check_forward(case, ref, eager, compiled_model, *, train=False):
    """``compile(model)(*inputs)`` equals eager jitorch's and torch's output, under no_grad."""
    cf = jitorch.compile(compiled_model)
    for m in (ref, eager, compiled_model):
        m.train(train)
    with torch.no_grad():
        want = ref(*case.inputs(torch, 0))
    with jitorch.no_grad():
        got_eager = eager(*case.inputs(jitorch, 0))
        got = cf(*case.inputs(jitorch, 0))
    assert_runs_match(got_eager, got, rtol=case.rtol, atol=case.atol, what="compiled forward vs eager")
    assert_runs_match(want, got, rtol=case.torch_rtol, atol=case.torch_atol, what="compiled forward vs torch")
    return cf


def _train(lib, case, run, model, opt):
    losses = []
    for step in range(case.steps):
        if case.seeded:
            lib.manual_seed(100 + step)
        losses.append(run(lib, model, opt, step))
    return losses


def _step_with(call):
    """A training step whose forward is ``call(model)(*inputs)`` and whose loss, backward and optimizer step follow."""
    def run(case):
        def step(lib, model, opt, i):
            opt.zero_grad()
            loss = case.loss(lib, call(model)(*case.inputs(lib, i)))
            loss.backward()
            opt.step()
            return loss.detach()
        return step
    return run


def check_training(case, *, torch_too=True):
    """``case.steps`` optimizer steps through ``compile(model)`` give eager's losses, parameters and buffers."""
    ref, eager, mc = models(case)
    for m in (ref, eager, mc):
        m.train()
    cf = jitorch.compile(mc)
    run_plain, run_compiled = _step_with(lambda m: m)(case), _step_with(lambda m: cf)(case)
    got = _train(jitorch, case, run_compiled, mc, case.optimizer(jitorch, mc.parameters(), False))
    want = _train(jitorch, case, run_plain, eager, case.optimizer(jitorch, eager.parameters(), False))
    assert_runs_match(want, got, rtol=case.rtol, atol=case.atol, what="compiled losses vs eager")
    assert_runs_match(_state(eager), _state(mc), rtol=case.rtol, atol=max(case.atol, case.state_atol),
                      what="compiled state vs eager")
    if torch_too:
        th = _train(torch, case, run_plain, ref, case.optimizer(torch, ref.parameters(), False))
        assert_runs_match(th, got, rtol=case.torch_rtol, atol=case.torch_atol, what="compiled losses vs torch")
        assert_runs_match(_state(ref), _state(mc), rtol=case.torch_rtol,
                          atol=max(case.torch_atol, 10 * case.state_atol), what="compiled state vs torch")
    return cf


def check_reduce_overhead_step(case):
    """The whole step (zero_grad, forward, loss, backward, optimizer step) under ``compile(mode="reduce-overhead")``
    with a capturable optimizer gives eager's losses, parameters and buffers."""
    _, eager, mc = models(case)
    for m in (eager, mc):
        m.train()
    opt = case.optimizer(jitorch, mc.parameters(), True)

    def whole_step(*args):
        opt.zero_grad()
        loss = case.loss(jitorch, mc(*args))
        loss.backward()
        opt.step()
        return loss.detach()

    cf = jitorch.compile(whole_step, mode="reduce-overhead")
    got = []
    for i in range(case.steps):
        if case.seeded:
            jitorch.manual_seed(100 + i)
        got.append(cf(*case.inputs(jitorch, i)))
    want = _train(jitorch, case, _step_with(lambda m: m)(case), eager,
                  case.optimizer(jitorch, eager.parameters(), False))
    assert_runs_match(want, got, rtol=case.rtol, atol=case.atol, what="reduce-overhead losses vs eager")
    assert_runs_match(_state(eager), _state(mc), rtol=case.rtol, atol=max(case.atol, case.state_atol),
                      what="reduce-overhead state")
    return cf


def explain_forward(case, model):
    """``jitorch.compiler.explain`` of the model's forward: it runs and reports at least one graph."""
    report = jitorch.compiler.explain(model)(*case.inputs(jitorch, 0))
    assert report.graph_count >= 1, str(report)
    assert "Graph count" in str(report)
    return report
