"""jitorch.utils.checkpoint against torch.utils.checkpoint: warnings, errors, early stop, saved-tensor hooks around
and inside a checkpoint, BatchNorm statistics, in-place ops in the region and selective checkpointing's refusal."""
import contextlib
import functools
import warnings

import numpy as np
import pytest
import torch

import jitorch
from helpers import same_error


def _both(fn):
    return fn(jitorch), fn(torch)


@pytest.mark.parametrize("sequential", [False, True])
def test_missing_use_reentrant_warns_with_torchs_text_so_torch_filters_apply(sequential):
    def call(lib):
        x = lib.ones(2, requires_grad=True)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            if sequential:
                lib.utils.checkpoint.checkpoint_sequential([lambda t: t * 2], 1, x)
            else:
                lib.utils.checkpoint.checkpoint(lambda t: t * 2, x)
        with warnings.catch_warnings():
            # The filter research code writes for torch (a regex matched at the message's start).
            warnings.filterwarnings("error")
            warnings.filterwarnings("ignore", message="torch.utils.checkpoint")
            lib.utils.checkpoint.checkpoint(lambda t: t * 2, x)
        return [str(w.message) for w in caught]

    mine, theirs = _both(call)
    assert mine == theirs and len(mine) == 1


@pytest.mark.parametrize("case", ["grad", "backward_inputs", "debug", "context_fn", "determinism", "kwargs",
                                  "segments0"])
def test_errors_as_torch(case):
    def attempt(lib):
        cp = lib.utils.checkpoint
        x = lib.ones(3, requires_grad=True)
        if case == "grad":
            lib.autograd.grad(cp.checkpoint(lambda t: t.sin(), x, use_reentrant=True).sum(), x)
        elif case == "backward_inputs":
            cp.checkpoint(lambda t: t.sin(), x, use_reentrant=True).sum().backward(inputs=[x])
        elif case == "debug":
            cp.checkpoint(lambda t: t.sin(), x, use_reentrant=True, debug=True)
        elif case == "context_fn":
            cp.checkpoint(lambda t: t.sin(), x, use_reentrant=False, debug=True,
                          context_fn=lambda: (contextlib.nullcontext(), contextlib.nullcontext()))
        elif case == "determinism":
            cp.checkpoint(lambda t: t.sin(), x, use_reentrant=False, determinism_check="shapes")
        elif case == "kwargs":
            cp.checkpoint(lambda t, s=1: t * s, x, use_reentrant=True, s=2)
        else:
            cp.checkpoint_sequential([lambda t: t], 0, x, use_reentrant=False)

    if case == "segments0":  # torch divides by zero
        with pytest.raises(ZeroDivisionError):
            attempt(jitorch)
        return
    same_error(attempt)


def _hook_log(lib, early_stop, set_globally):
    log = []
    net = lib.nn.Sequential(lib.nn.Linear(3, 3), lib.nn.Tanh(), lib.nn.Linear(3, 2))
    for i, m in enumerate(net):
        m.register_forward_pre_hook(lambda mod, inp, i=i: log.append(f"pre{i}"))
        m.register_forward_hook(lambda mod, inp, out, i=i: log.append(f"fwd{i}"))
    net.register_forward_hook(lambda *a: log.append("net"))
    x = lib.ones(2, 3, requires_grad=True)
    if set_globally:
        with lib.utils.checkpoint.set_checkpoint_early_stop(early_stop):
            out = lib.utils.checkpoint.checkpoint(net, x, use_reentrant=False)
    else:
        out = lib.utils.checkpoint.checkpoint(net, x, use_reentrant=False, early_stop=early_stop)
    log.append("|")
    out.sum().backward()
    return log


@pytest.mark.parametrize("early_stop", [True, False])
@pytest.mark.parametrize("set_globally", [False, True])
def test_early_stop_ends_the_recomputation_at_the_last_saving_op_as_torch(early_stop, set_globally):
    mine, theirs = _both(lambda lib: _hook_log(lib, early_stop, set_globally))
    assert mine == theirs
    # With early stop, the last Linear's forward hook and the net's do not run again.
    assert mine[mine.index("|"):].count("net") == (0 if early_stop else 1)


@pytest.mark.parametrize("where", ["around", "inside", "at_backward"])
def test_saved_tensor_hooks_and_checkpoint_as_torch(where):
    def run(lib):
        log = []
        x = lib.tensor([0.3, -1.2, 0.8], requires_grad=True)
        hooks = lib.autograd.graph.saved_tensors_hooks(lambda t: log.append(("pack", tuple(t.shape))) or t,
                                                       lambda t: log.append("unpack") or t)

        def fn(t):
            with hooks if where == "inside" else contextlib.nullcontext():
                return t.sin().exp()

        with hooks if where == "around" else contextlib.nullcontext():
            out = lib.utils.checkpoint.checkpoint(fn, x, use_reentrant=False)
        log.append("|")
        with hooks if where == "at_backward" else contextlib.nullcontext():
            out.sum().backward()
        return log, x.grad.numpy()

    (mine, gm), (theirs, gt) = _both(run)
    assert mine == theirs
    np.testing.assert_allclose(gm, gt, rtol=1e-6)


def test_save_on_cpu_around_checkpointed_blocks_gives_torchs_gradients():
    rng = np.random.default_rng(0)
    xd, wd = rng.standard_normal((4, 5)).astype(np.float32), rng.standard_normal((5, 5)).astype(np.float32)

    def run(lib):
        x, w = lib.tensor(xd, requires_grad=True), lib.tensor(wd, requires_grad=True)
        with lib.autograd.graph.save_on_cpu():
            h = lib.utils.checkpoint.checkpoint(lambda t: (t @ w).tanh(), x, use_reentrant=False)
            out = lib.utils.checkpoint.checkpoint(lambda t: (t @ w).sigmoid(), h, use_reentrant=False)
        out.sum().backward()
        return x.grad.numpy(), w.grad.numpy()

    for got, want in zip(*_both(run)):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("reentrant", [False, True])
@pytest.mark.parametrize("tail", [False, True])
def test_batch_norm_statistics_update_in_the_forward_and_the_recomputation_as_torch(reentrant, tail):
    xd = np.random.default_rng(1).standard_normal((6, 3)).astype(np.float32)

    def run(lib):
        layers = [lib.nn.Linear(3, 3), lib.nn.BatchNorm1d(3)] + ([lib.nn.Tanh()] if tail else [])
        net = lib.nn.Sequential(*layers)
        with lib.no_grad():
            net[0].weight.copy_(lib.eye(3))
            net[0].bias.zero_()
        x = lib.tensor(xd, requires_grad=True)
        lib.utils.checkpoint.checkpoint(net, x, use_reentrant=reentrant).sum().backward()
        bn = net[1]
        return bn.running_mean.numpy(), bn.running_var.numpy(), int(bn.num_batches_tracked), x.grad.numpy()

    for got, want in zip(*_both(run)):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_in_place_ops_in_the_region_and_under_saved_tensor_hooks_save_the_old_value_as_torch():
    rng = np.random.default_rng(2)
    xd, wd = rng.standard_normal(4).astype(np.float32), rng.standard_normal(4).astype(np.float32)

    def run(lib, mode):
        x, w = lib.tensor(xd, requires_grad=True), lib.tensor(wd, requires_grad=True)

        def fn(t):
            h = t.sin()
            h.mul_(w)  # mul saves its inputs: the gradient of w needs sin(x), not the product
            return h.exp()

        if mode == "checkpoint":
            out = lib.utils.checkpoint.checkpoint(fn, x, use_reentrant=False)
        else:
            with lib.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t):
                out = fn(x)
        out.sum().backward()
        return x.grad.numpy(), w.grad.numpy()

    for mode in ("checkpoint", "hooks"):
        for got, want in zip(run(jitorch, mode), run(torch, mode)):
            np.testing.assert_allclose(got, want, rtol=1e-5)


@pytest.mark.parametrize("reentrant", [False, True])
def test_structured_outputs_as_torch(reentrant):
    def run(lib):
        x = lib.tensor([0.5, -1.0], requires_grad=True)
        a, n, d = lib.utils.checkpoint.checkpoint(lambda t: (t.sin(), 3, {"k": t.cos()}), x,
                                                  use_reentrant=reentrant)
        (a.sum() + (d["k"].sum() if d["k"].requires_grad else 0)).backward()
        return n, d["k"].requires_grad, x.grad.numpy()

    (n1, r1, g1), (n2, r2, g2) = _both(run)
    assert (n1, r1) == (n2, r2)
    np.testing.assert_allclose(g1, g2, rtol=1e-6)


def test_selective_checkpointing_is_refused_clearly():
    cp = jitorch.utils.checkpoint
    assert [p.name for p in cp.CheckpointPolicy] == [p.name for p in torch.utils.checkpoint.CheckpointPolicy]
    assert [p.value for p in cp.CheckpointPolicy] == [p.value for p in torch.utils.checkpoint.CheckpointPolicy]
    with pytest.raises(TypeError, match="policy_fn_or_list must be either a function or a list of ops."):
        cp.create_selective_checkpoint_contexts(3)
    ctx_fn = functools.partial(cp.create_selective_checkpoint_contexts,
                               lambda ctx, op, *a, **k: cp.CheckpointPolicy.PREFER_RECOMPUTE)
    with pytest.raises(NotImplementedError, match="torch.ops.aten"):
        cp.checkpoint(lambda t: t.sin(), jitorch.ones(2, requires_grad=True), use_reentrant=False, context_fn=ctx_fn)
