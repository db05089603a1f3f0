"""Training-loop hygiene, run with ``lib=torch`` and ``lib=jitorch`` from the same weights and data.

Gradient accumulation over micro-batches, ``clip_grad_norm_(error_if_nonfinite=True)``, bf16 ``autocast`` on the CPU
with the CPU ``GradScaler`` (enabled and disabled), an EMA of the weights by ``_foreach_mul_``/``_foreach_add_`` and
by ``swa_utils.AveragedModel``, a checkpoint of model + optimizer + scheduler + RNG state saved mid-run and resumed
(the resumed run must equal the uninterrupted one, and each library must read the other's file), and ``DataLoader``
shuffling under ``manual_seed`` and a seeded ``Generator``. jitorch's random streams are reproducible but are not
PyTorch's numbers (``jitorch._random``), so shuffled orders are compared within each library, not across them.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

import jitorch
from sweep_helpers import assert_close_tree, load_numpy_state, numpy_state, to_numpy

_rng = np.random.default_rng(0)
XS = _rng.standard_normal((40, 6)).astype(np.float32)
YS = _rng.integers(0, 3, 40)


def _bn_net(lib):
    lib.manual_seed(0)
    nn = lib.nn
    return nn.Sequential(nn.Linear(6, 16), nn.BatchNorm1d(16), nn.GELU(), nn.Linear(16, 3))


def _accumulate(lib, state, amp, micro=3, steps=3):
    F = lib.nn.functional
    model = load_numpy_state(lib, _bn_net(lib), state)
    opt = lib.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, nesterov=True, weight_decay=1e-4)
    scaler = lib.amp.GradScaler("cpu", enabled=amp, init_scale=2.0 ** 10)
    ema = [p.detach().clone() for p in model.parameters()]
    averaged = lib.optim.swa_utils.AveragedModel(model, multi_avg_fn=lib.optim.swa_utils.get_ema_multi_avg_fn(0.9))
    history = []
    for step in range(steps):
        opt.zero_grad(set_to_none=True)
        for k in range(micro):
            start = (step * micro + k) * 2
            x, y = lib.tensor(XS[start:start + 6]), lib.tensor(YS[start:start + 6])
            with lib.autocast("cpu", dtype=lib.bfloat16, enabled=amp):
                out = model(x)
                loss = F.cross_entropy(out, y) / micro
            scaler.scale(loss).backward()
        scaler.unscale_(opt)
        norm = lib.nn.utils.clip_grad_norm_(model.parameters(), 0.5, error_if_nonfinite=True)
        scaler.step(opt)
        scaler.update()
        with lib.no_grad():
            lib._foreach_mul_(ema, 0.9)
            lib._foreach_add_(ema, [p.detach() for p in model.parameters()], alpha=0.1)
        averaged.update_parameters(model)
        history.append([out.float(), loss, norm, {n: p.grad for n, p in model.named_parameters()}, scaler.get_scale()])
    return to_numpy(history), to_numpy(ema), numpy_state(model), numpy_state(averaged), scaler.state_dict()


@pytest.mark.parametrize("amp", [False, True])
def test_accumulation_clipping_ema_and_bf16_autocast_match_torch(amp):
    # bf16 autocast rounds the same products the same way in both libraries, so the float32 tolerance holds.
    state = numpy_state(_bn_net(torch))
    assert_close_tree(_accumulate(torch, state, amp), _accumulate(jitorch, state, amp), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("bad", [float("inf"), float("nan")])
def test_clip_grad_norm_error_if_nonfinite(bad):
    def run(lib):
        p = lib.nn.Parameter(lib.ones(3))
        p.grad = lib.tensor([1.0, bad, 2.0])
        with pytest.raises(RuntimeError, match="is non-finite, so it cannot be clipped"):
            lib.nn.utils.clip_grad_norm_([p], 1.0, error_if_nonfinite=True)
        return [lib.nn.utils.clip_grad_norm_([p], 1.0), p.grad]

    assert_close_tree(run(torch), run(jitorch))


def test_grad_scaler_skips_nonfinite_steps_and_backs_off():
    def run(lib):
        p = lib.nn.Parameter(lib.ones(3))
        opt = lib.optim.SGD([p], lr=1.0)
        scaler = lib.amp.GradScaler("cpu", init_scale=4.0, growth_interval=2)
        seen = []
        for g in ([1.0, 1.0, 1.0], [1.0, float("inf"), 1.0], [1.0, 1.0, 1.0], [1.0, 1.0, 1.0], [2.0, 2.0, 2.0]):
            opt.zero_grad()
            scaler.scale((p * lib.tensor(g)).sum()).backward()
            scaler.step(opt)
            scaler.update()
            seen.append([scaler.get_scale(), p.detach().clone()])
        disabled = lib.amp.GradScaler("cpu", enabled=False)
        loss = p.sum()
        return to_numpy(seen), scaler.state_dict(), disabled.scale(loss) is loss, disabled.state_dict()

    assert_close_tree(run(torch), run(jitorch), rtol=0, atol=0)


def _ln_net(lib):
    lib.manual_seed(0)
    nn = lib.nn
    return nn.Sequential(nn.Linear(6, 16), nn.LayerNorm(16), nn.ReLU(), nn.Linear(16, 3))


def _resumable(lib, state):
    model = load_numpy_state(lib, _ln_net(lib), state)
    opt = lib.optim.AdamW(model.parameters(), lr=1e-2, amsgrad=True)
    S = lib.optim.lr_scheduler
    sched = S.SequentialLR(opt, [S.LinearLR(opt, 0.1, total_iters=3), S.CosineAnnealingLR(opt, T_max=5)], [3])
    return model, opt, sched


def _run_with_checkpoint(lib, state, path, interrupt_at=None, steps=8):
    model, opt, sched = _resumable(lib, state)
    losses = []
    for i in range(steps):
        if i == interrupt_at:
            lib.save({"model": model.state_dict(), "opt": opt.state_dict(), "sched": sched.state_dict(),
                      "rng": lib.get_rng_state()}, path)
            ckpt = lib.load(path)
            model, opt, sched = _resumable(lib, state)
            model.load_state_dict(ckpt["model"])
            opt.load_state_dict(ckpt["opt"])
            sched.load_state_dict(ckpt["sched"])
            lib.set_rng_state(ckpt["rng"])
        x, y = lib.tensor(XS[i * 4:(i + 1) * 4]), lib.tensor(YS[i * 4:(i + 1) * 4])
        opt.zero_grad()
        loss = lib.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        sched.step()
        losses.append(loss.item())
    return losses, numpy_state(model), to_numpy(opt.state_dict()), sched.state_dict()


def test_checkpoint_resume_equals_uninterrupted_run(tmp_path):
    state = numpy_state(_ln_net(torch))
    results = {}
    for lib in (torch, jitorch):
        path = tmp_path / f"{lib.__name__}.pt"
        whole = _run_with_checkpoint(lib, state, path)
        assert_close_tree(whole, _run_with_checkpoint(lib, state, path, interrupt_at=4), rtol=0, atol=0)
        results[lib.__name__] = whole
    assert_close_tree(results["torch"], results["jitorch"], rtol=1e-5, atol=1e-6)
    # Each library resumes from the other's checkpoint file (its RNG state aside: the generators differ).
    for reader, writer in ((jitorch, torch), (torch, jitorch)):
        ckpt = reader.load(tmp_path / f"{writer.__name__}.pt", weights_only=True)
        model, opt, sched = _resumable(reader, state)
        model.load_state_dict(ckpt["model"])
        opt.load_state_dict(ckpt["opt"])
        sched.load_state_dict(ckpt["sched"])
        assert sched.get_last_lr() == ckpt["sched"]["_last_lr"]
        assert_close_tree(to_numpy(opt.state_dict()["state"]), to_numpy(ckpt["opt"]["state"]), rtol=0, atol=0)


def test_dataloader_shuffle_is_reproducible_under_seeds():
    dataset = jitorch.utils.data.TensorDataset(jitorch.arange(10), jitorch.arange(10) * 2)

    def epochs(generator=None, **kwargs):
        loader = jitorch.utils.data.DataLoader(dataset, batch_size=4, shuffle=True, num_workers=0,
                                               generator=generator, **kwargs)
        return [[batch[0].tolist() for batch in loader] for _ in range(2)]

    jitorch.manual_seed(0)
    first = epochs()
    jitorch.manual_seed(0)
    assert epochs() == first
    assert first[0] != first[1] and sorted(sum(first[0], [])) == list(range(10))
    assert epochs(jitorch.Generator().manual_seed(1)) == epochs(jitorch.Generator().manual_seed(1))
    jitorch.manual_seed(0)
    dropped = epochs(drop_last=True)
    assert dropped[0] == first[0][:2]
    # As in torch, an epoch's shuffle draws its seed from the default generator: later draws depend on it.
    jitorch.manual_seed(0)
    list(jitorch.utils.data.DataLoader(dataset, shuffle=True))
    after_loader = jitorch.rand(2)
    jitorch.manual_seed(0)
    assert not jitorch.equal(after_loader, jitorch.rand(2))
