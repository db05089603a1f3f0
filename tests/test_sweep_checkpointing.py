"""Training-state checkpointing as research repos write it, run with ``lib=torch`` and ``lib=jitorch`` from the same
weights and NumPy data.

The full state (model, AdamW or SGD with momentum, OneCycleLR or CosineAnnealingWarmRestarts, GradScaler, the global
RNG state, a data generator's state, ``fork_rng``) saved to a BytesIO and resumed with ``map_location='cpu'`` and
``weights_only`` both ways must continue exactly as an uninterrupted run; each library resumes from the other's
checkpoint; an EMA through ``swa_utils.AveragedModel`` with ``get_ema_multi_avg_fn`` and ``update_bn``; model surgery
(``strict=False`` with missing/unexpected keys, renamed keys, a resized embedding, a frozen trunk unfrozen later with
``add_param_group``); meta-device checkpoints. Dropout and sampled batches use each library's own stream (jitorch
promises reproducible streams, not PyTorch's numbers), so those runs are compared within a library.
"""
from __future__ import annotations

import io
import re

import numpy as np
import pytest
import torch

import jitorch
from sweep_helpers import assert_close_tree, load_numpy_state, numpy_state, to_numpy

_rng = np.random.default_rng(0)
XS = _rng.standard_normal((64, 6)).astype(np.float32)
YS = _rng.integers(0, 3, 64)
BATCHES = _rng.integers(0, 64, (12, 8))


def _net(lib, dropout=0.0):
    lib.manual_seed(0)
    nn = lib.nn
    return nn.Sequential(nn.Linear(6, 16), nn.BatchNorm1d(16), nn.Dropout(dropout), nn.GELU(), nn.Linear(16, 3))


def _build(lib, state, kind, dropout=0.0):
    model = load_numpy_state(lib, _net(lib, dropout), state)
    S = lib.optim.lr_scheduler
    if kind == "adamw":
        opt = lib.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.05)
        sched = S.OneCycleLR(opt, max_lr=0.05, total_steps=12, pct_start=0.3)
    else:
        opt = lib.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, nesterov=True)
        sched = S.CosineAnnealingWarmRestarts(opt, T_0=3, T_mult=2, eta_min=1e-3)
    return model, opt, sched, lib.amp.GradScaler("cpu", init_scale=2.0 ** 8, growth_interval=2)


def _save(lib, objs, **extra):
    model, opt, sched, scaler = objs
    buf = io.BytesIO()
    lib.save({"model": model.state_dict(), "opt": opt.state_dict(), "sched": sched.state_dict(),
              "scaler": scaler.state_dict(), **extra}, buf)
    return buf.getvalue()


def _restore(lib, state, kind, data, weights_only=True, dropout=0.0):
    ckpt = lib.load(io.BytesIO(data), map_location="cpu", weights_only=weights_only)
    objs = _build(lib, state, kind, dropout)
    for obj, key in zip(objs, ("model", "opt", "sched", "scaler")):
        obj.load_state_dict(ckpt[key])
    return objs, ckpt


def _step(lib, objs, x, y, amp=True):
    model, opt, sched, scaler = objs
    opt.zero_grad()
    with lib.autocast("cpu", dtype=lib.bfloat16, enabled=amp):
        loss = lib.nn.functional.cross_entropy(model(x), y)
    scaler.scale(loss).backward()
    scaler.step(opt)
    scaler.update()
    sched.step()
    return [loss.float(), sched.get_last_lr(), scaler.get_scale()]


def _sampled_run(lib, state, kind, interrupt_at=None, weights_only=True):
    # Batches drawn by a seeded generator, dropout from the global stream: resuming must restore both.
    objs = _build(lib, state, kind, dropout=0.2)
    gen = lib.Generator().manual_seed(11)
    lib.manual_seed(123)
    log = []
    for i in range(10):
        if i == interrupt_at:
            data = _save(lib, objs, rng=lib.get_rng_state(), gen=gen.get_state())
            lib.manual_seed(999)  # what a fresh process would have
            objs, ckpt = _restore(lib, state, kind, data, weights_only, dropout=0.2)
            gen = lib.Generator()
            gen.set_state(ckpt["gen"])
            lib.set_rng_state(ckpt["rng"])
        idx = lib.randint(0, 64, (8,), generator=gen)
        log.append(_step(lib, objs, lib.tensor(XS)[idx], lib.tensor(YS)[idx]) + [lib.rand(1)])
    return to_numpy(log), numpy_state(objs[0]), to_numpy(objs[1].state_dict())


@pytest.mark.parametrize("weights_only", [True, False])
@pytest.mark.parametrize("kind", ["adamw", "sgd"])
@pytest.mark.parametrize("lib", [torch, jitorch], ids=["torch", "jitorch"])
def test_resumed_training_equals_the_uninterrupted_run(lib, kind, weights_only):
    state = numpy_state(_net(torch))
    whole = _sampled_run(lib, state, kind)
    assert_close_tree(whole, _sampled_run(lib, state, kind, interrupt_at=4, weights_only=weights_only), rtol=0, atol=0)


@pytest.mark.parametrize("kind", ["adamw", "sgd"])
def test_each_library_resumes_from_the_others_checkpoint(kind):
    state = numpy_state(_net(torch))
    runs = {}
    for lib in (torch, jitorch):
        objs = _build(lib, state, kind)
        batches = [(lib.tensor(XS[b]), lib.tensor(YS[b])) for b in BATCHES]
        first = to_numpy([_step(lib, objs, x, y) for x, y in batches[:5]])
        data = _save(lib, objs)
        rest = to_numpy([_step(lib, objs, x, y) for x, y in batches[5:]])
        runs[lib.__name__] = first, data, rest
    assert_close_tree(runs["torch"][0], runs["jitorch"][0], rtol=1e-5, atol=1e-6)
    assert_close_tree(runs["torch"][2], runs["jitorch"][2], rtol=1e-4, atol=1e-5)
    for reader, writer in ((jitorch, "torch"), (torch, "jitorch")):
        objs, ckpt = _restore(reader, state, kind, runs[writer][1])
        assert objs[2].get_last_lr() == ckpt["sched"]["_last_lr"]
        rest = to_numpy([_step(reader, objs, reader.tensor(XS[b]), reader.tensor(YS[b])) for b in BATCHES[5:]])
        assert_close_tree(runs[writer][2], rest, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("lib", [torch, jitorch], ids=["torch", "jitorch"])
def test_rng_states_fork_rng_and_generator_states(lib):
    lib.manual_seed(1)
    with lib.random.fork_rng():
        inside = lib.rand(2)
        lib.manual_seed(5)
    after = lib.rand(2)
    lib.manual_seed(1)
    assert lib.equal(inside, lib.rand(2)) and lib.equal(after, inside)
    g = lib.Generator().manual_seed(3)
    saved = g.get_state()
    first = lib.randn(3, generator=g)
    g.set_state(saved)
    assert lib.equal(first, lib.randn(3, generator=g))
    buf = io.BytesIO()
    lib.save({"g": saved, "cpu": lib.random.get_rng_state()}, buf)
    buf.seek(0)
    loaded = lib.load(buf, weights_only=True)
    assert loaded["g"].dtype == lib.uint8 and lib.equal(loaded["g"], saved)
    with pytest.raises(TypeError, match="ByteTensor"):
        g.set_state(lib.zeros(3))
    with pytest.raises(RuntimeError):
        lib.set_rng_state(lib.zeros(3, dtype=lib.uint8))


def _ema_run(lib, state, use_buffers):
    model = load_numpy_state(lib, _net(lib), state)
    su = lib.optim.swa_utils
    ema = su.AveragedModel(model, multi_avg_fn=su.get_ema_multi_avg_fn(0.8), use_buffers=use_buffers)
    ema_fn = su.AveragedModel(model, avg_fn=su.get_ema_avg_fn(0.8), use_buffers=use_buffers)
    swa = su.AveragedModel(model)
    opt = lib.optim.SGD(model.parameters(), lr=0.1)
    swa_sched = su.SWALR(opt, swa_lr=0.05, anneal_epochs=3, anneal_strategy="cos")
    lrs = []
    for b in BATCHES[:6]:
        opt.zero_grad()
        lib.nn.functional.cross_entropy(model(lib.tensor(XS[b])), lib.tensor(YS[b])).backward()
        opt.step()
        for averaged in (ema, ema_fn, swa):
            averaged.update_parameters(model)
        swa_sched.step()
        lrs.append(opt.param_groups[0]["lr"])
    data = lib.utils.data.DataLoader(lib.utils.data.TensorDataset(lib.tensor(XS)), batch_size=16)
    su.update_bn(data, swa)
    su.update_bn([lib.tensor(XS[i:i + 16]) for i in range(0, 64, 16)], ema)
    ema.eval()
    return [numpy_state(ema), numpy_state(ema_fn), numpy_state(swa), lrs, to_numpy(ema(lib.tensor(XS[:5]))),
            ema.n_averaged.item(), list(ema.state_dict())]


@pytest.mark.parametrize("use_buffers", [False, True])
def test_ema_and_swa_averaged_models_match_torch(use_buffers):
    state = numpy_state(_net(torch))
    assert_close_tree(_ema_run(torch, state, use_buffers), _ema_run(jitorch, state, use_buffers), rtol=1e-5, atol=1e-6)


def _modules(lib):
    nn = lib.nn

    class Old(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(10, 4)
            self.body = nn.Sequential(nn.Linear(4, 8), nn.LayerNorm(8))
            self.head = nn.Linear(8, 3)

    class New(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(12, 4, padding_idx=0)
            self.body = nn.Sequential(nn.Linear(4, 8), nn.LayerNorm(8))
            self.cls = nn.Linear(8, 5)
            self.register_buffer("pos", lib.zeros(3))

        def forward(self, ids):
            return self.cls(self.body(self.embed(ids)).relu())

    return Old, New


def _surgery(lib, old_state, new_state):
    Old, New = _modules(lib)
    old, new = load_numpy_state(lib, Old(), old_state), load_numpy_state(lib, New(), new_state)
    sd = old.state_dict()
    out = {}
    result = new.load_state_dict(sd, strict=False)
    out["keys"] = [sorted(result.missing_keys), sorted(result.unexpected_keys)]
    with pytest.raises(RuntimeError) as strict:
        new.load_state_dict(sd)
    out["strict"] = str(strict.value).replace(lib.__name__ + ".", "torch.")
    renamed = {re.sub(r"^emb\.", "embed.", k): v for k, v in sd.items() if not k.startswith("head")}
    renamed["embed.weight"] = lib.cat([renamed["embed.weight"], new.embed.weight.detach()[10:]])
    result = new.load_state_dict(renamed, strict=False)
    out["renamed_keys"] = [sorted(result.missing_keys), sorted(result.unexpected_keys)]
    with pytest.raises(RuntimeError) as shape:
        new.load_state_dict({"cls.weight": lib.zeros(3, 8)}, strict=False)
    out["shape"] = str(shape.value).replace(lib.__name__ + ".", "torch.")
    old_rows = new.embed.weight.data
    new.embed = lib.nn.Embedding(14, 4, padding_idx=0)  # two more tokens: new rows start at the mean embedding
    with lib.no_grad():
        new.embed.weight[:12] = old_rows
        new.embed.weight[12:] = old_rows.mean(0)
    for p in new.body.parameters():
        p.requires_grad_(False)
    opt = lib.optim.AdamW([p for p in new.parameters() if p.requires_grad], lr=1e-2)
    ids, target = lib.tensor(np.arange(14).reshape(2, 7)), lib.tensor(np.arange(14).reshape(2, 7) % 5)
    losses = []
    for i in range(6):
        if i == 3:  # unfreeze the trunk with its own learning rate
            for p in new.body.parameters():
                p.requires_grad_(True)
            opt.add_param_group({"params": list(new.body.parameters()), "lr": 1e-3, "weight_decay": 0.0})
        opt.zero_grad()
        loss = lib.nn.functional.cross_entropy(new(ids).flatten(0, 1), target.flatten())
        loss.backward()
        opt.step()
        losses.append(loss)
    out["losses"], out["state"] = to_numpy(losses), numpy_state(new)
    saved = opt.state_dict()
    out["groups"], out["opt_keys"] = saved["param_groups"], sorted(saved["state"])
    with pytest.raises(ValueError) as dup:
        opt.add_param_group({"params": [new.cls.weight]})
    out["dup"] = str(dup.value)
    return out


def test_model_surgery_matches_torch():
    Old, New = _modules(torch)
    torch.manual_seed(0)
    old_state, new_state = numpy_state(Old()), numpy_state(New())
    assert_close_tree(_surgery(torch, old_state, new_state), _surgery(jitorch, old_state, new_state), rtol=1e-5,
                      atol=1e-6)


@pytest.mark.parametrize("writer", [torch, jitorch], ids=["torch_saves", "jitorch_saves"])
def test_checkpoints_of_meta_models_and_inspection_on_meta(writer):
    # A model built on the meta device is saved as its shapes; a real checkpoint is inspected on meta without
    # reading its tensors' data.
    with writer.device("meta"):
        skeleton = writer.nn.Sequential(writer.nn.Linear(6, 16), writer.nn.BatchNorm1d(16))
    real = _net(writer)
    results = []
    for reader in (torch, jitorch):
        for obj, where in ((skeleton.state_dict(), None), (real.state_dict(), "meta")):
            buf = io.BytesIO()
            writer.save(obj, buf)
            buf.seek(0)
            loaded = reader.load(buf, map_location=where, weights_only=True)
            results.append({k: (v.device.type, tuple(v.shape), str(v.dtype).split(".")[-1]) for k, v in loaded.items()})
    assert results[:2] == results[2:] and all(d == "meta" for r in results for d, _, _ in r.values())
