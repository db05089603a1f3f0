"""``fused=True`` Adam, AdamW and SGD: one generated kernel per flag set, equal to PyTorch's fused CPU kernels."""
import importlib

import numpy as np
import pytest
import torch

import jitorch
from jitorch.optim import _fused

SHAPES = [(5, 7), (13,), (3, 4, 6)]
TOL = {np.float32: dict(rtol=1e-5, atol=1e-6), np.float64: dict(rtol=1e-12, atol=1e-13)}


def _run(lib, cls, kw, steps=20, dtype=np.float32, seed=0, scheduler=False):
    """Parameters and state after ``steps`` updates with seeded random gradients (identical for both libraries)."""
    rng = np.random.default_rng(seed)
    params = [lib.tensor(rng.standard_normal(s).astype(dtype), requires_grad=True) for s in SHAPES]
    grads = [[rng.standard_normal(s).astype(dtype) for s in SHAPES] for _ in range(steps)]
    opt = getattr(lib.optim, cls)(params, **kw)
    sched = lib.optim.lr_scheduler.StepLR(opt, step_size=3, gamma=0.5) if scheduler else None
    for k in range(steps):
        for p, g in zip(params, grads[k]):
            p.grad = lib.tensor(g)
        opt.step()
        if sched is not None:
            sched.step()
    state = [{k: (v.detach().numpy().copy() if hasattr(v, "numpy") else v) for k, v in opt.state[p].items()}
             for p in params]
    return [p.detach().numpy().copy() for p in params], state


ADAM_CASES = [
    ("Adam", dict(lr=0.01)),
    ("Adam", dict(lr=0.01, weight_decay=0.1)),
    ("Adam", dict(lr=0.01, amsgrad=True, weight_decay=0.1, maximize=True)),
    ("Adam", dict(lr=0.1, betas=(0.3, 0.9), eps=1e-3)),  # lerp weight >= 0.5: the other lerp branch
    ("Adam", dict(lr=0.01, weight_decay=0.05, decoupled_weight_decay=True)),
    ("AdamW", dict(lr=0.01)),
    ("AdamW", dict(lr=0.01, amsgrad=True, maximize=True, weight_decay=0.2)),
]
SGD_CASES = [
    ("SGD", dict(lr=0.01)),
    ("SGD", dict(lr=0.01, momentum=0.9)),
    ("SGD", dict(lr=0.01, momentum=0.9, nesterov=True, weight_decay=0.1)),
    ("SGD", dict(lr=0.01, momentum=0.5, dampening=0.3, maximize=True)),
    ("SGD", dict(lr=0.02, weight_decay=0.01, maximize=True)),
]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("cls,kw", ADAM_CASES + SGD_CASES)
def test_fused_matches_torch_fused(cls, kw, dtype):
    ours, our_state = _run(jitorch, cls, dict(kw, fused=True), dtype=dtype)
    ref, ref_state = _run(torch, cls, dict(kw, fused=True), dtype=dtype)
    for a, b in zip(ours, ref):
        assert a.dtype == b.dtype
        np.testing.assert_allclose(a, b, **TOL[dtype])
    for mine, theirs in zip(our_state, ref_state):
        assert sorted(mine) == sorted(theirs)
        for key in mine:
            np.testing.assert_allclose(mine[key], theirs[key], **TOL[dtype])
            assert np.asarray(mine[key]).dtype == np.asarray(theirs[key]).dtype, key


@pytest.mark.parametrize("cls,kw", [ADAM_CASES[2], SGD_CASES[2]])
def test_fused_matches_unfused_with_scheduler(cls, kw):
    """The learning rate is read at run time: a scheduler's changes apply, and no kernel is compiled per step."""
    _run(jitorch, cls, dict(kw, fused=True), steps=2)
    before = _fused.fused_kernel_count()
    fused, _ = _run(jitorch, cls, dict(kw, fused=True), scheduler=True)
    assert _fused.fused_kernel_count() - before <= 1  # only SGD's first-step kernel may be new
    plain, _ = _run(jitorch, cls, kw, scheduler=True)
    ref, _ = _run(torch, cls, dict(kw, fused=True), scheduler=True)
    for a, b, c in zip(fused, plain, ref):
        np.testing.assert_allclose(a, c, **TOL[np.float32])
        np.testing.assert_allclose(b, c, rtol=1e-4, atol=1e-5)


def test_one_kernel_per_flag_set():
    params = [jitorch.zeros(s, requires_grad=True) for s in SHAPES]
    for p in params:
        p.grad = jitorch.ones(p.shape)
    jitorch.optim.Adam(params, lr=0.5, amsgrad=True, maximize=True, weight_decay=0.25, fused=True).step()
    before = _fused.fused_kernel_count()
    opt = jitorch.optim.Adam(params, lr=0.1, amsgrad=True, maximize=True, weight_decay=0.5, fused=True)
    for _ in range(3):
        opt.step()
    assert _fused.fused_kernel_count() == before  # same flags, other sizes and hyperparameters: no new kernel


@pytest.mark.parametrize("cls,kw", [("Adam", dict(lr=0.01, amsgrad=True)), ("SGD", dict(lr=0.01, momentum=0.9))])
def test_fused_fallback_for_half_precision(cls, kw):
    """bfloat16 is outside the kernel's domain: the unfused update runs. Adam agrees with PyTorch's fused kernel;
    SGD with PyTorch's unfused rule (torch 2.13's bfloat16 fused CPU SGD keeps a momentum buffer that differs from
    its own unfused update by far more than rounding, so it is no oracle here)."""
    rng = np.random.default_rng(1)
    data = rng.standard_normal((4, 6)).astype(np.float32)
    grads = [rng.standard_normal((4, 6)).astype(np.float32) for _ in range(5)]
    outs = []
    for lib in (jitorch, torch):
        p = lib.tensor(data).to(lib.bfloat16).requires_grad_()
        opt = getattr(lib.optim, cls)([p], fused=True if lib is jitorch or cls == "Adam" else None, **kw)
        for g in grads:
            p.grad = lib.tensor(g).to(lib.bfloat16)
            opt.step()
        outs.append(p.detach().float().numpy())
    np.testing.assert_allclose(outs[0], outs[1], rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("fn_name", ["adam", "sgd"])
def test_functional_grad_scale_and_found_inf(fn_name):
    """AMP: the gradient is unscaled in place; a found inf skips the update (and rolls Adam's count back)."""
    rng = np.random.default_rng(2)
    p0, g0 = rng.standard_normal(8).astype(np.float32), rng.standard_normal(8).astype(np.float32) * 64
    results = []
    for lib in (jitorch, torch):
        fn = getattr(importlib.import_module(f"{lib.__name__}.optim.{fn_name}"), fn_name)
        p, m, v, step, bufs = lib.tensor(p0), lib.zeros(8), lib.zeros(8), lib.tensor(0.0), [None]
        out = []
        for inf in (0.0, 1.0, 0.0):
            amp = dict(grad_scale=lib.tensor(64.0), found_inf=lib.tensor(inf))
            grad = lib.tensor(g0)
            if fn_name == "adam":
                fn([p], [grad], [m], [v], [], [step], fused=True, amsgrad=False, beta1=0.9, beta2=0.999, lr=0.1,
                   weight_decay=0.0, eps=1e-8, maximize=False, **amp)
                out.append([p.numpy().copy(), grad.numpy().copy(), m.numpy().copy(), float(step)])
            else:
                fn([p], [grad], bufs, fused=True, weight_decay=0.0, momentum=0.9, lr=0.1, dampening=0.0,
                   nesterov=False, maximize=False, **amp)
                out.append([p.numpy().copy(), grad.numpy().copy()])
        results.append(out)
    for mine, theirs in zip(*results):
        for a, b in zip(mine, theirs):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_fused_errors_match_torch():
    p = jitorch.zeros(3, requires_grad=True)
    with pytest.raises(RuntimeError, match="fused.*differentiable"):
        jitorch.optim.Adam([p], fused=True, differentiable=True)
    with pytest.raises(RuntimeError, match="`fused` and `foreach` cannot be `True` together"):
        jitorch.optim.SGD([p], lr=0.1, fused=True, foreach=True)
    q = jitorch.zeros(3, dtype=jitorch.int64)
    q.grad = jitorch.zeros(3, dtype=jitorch.int64)
    with pytest.raises(RuntimeError, match="floating point"):
        jitorch.optim.Adam([q], fused=True).step()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("cls,kw", [ADAM_CASES[0], ADAM_CASES[2], ADAM_CASES[5], SGD_CASES[1], SGD_CASES[2]])
def test_default_runs_the_fused_kernel_and_matches_torch_default(cls, kw, dtype, monkeypatch):
    """fused=None on CPU float tensors takes the fused kernel (one pass per parameter): every parameter goes through
    it, the result is fused=True's within rounding, and matches torch's default (for-loop) update."""
    calls = []
    name = "fused_adam" if cls.startswith("Adam") else "fused_sgd"
    module = importlib.import_module("jitorch.optim.adam" if cls.startswith("Adam") else "jitorch.optim.sgd")
    original = getattr(module, name)

    def counting(params, *args, **kwargs):
        done = original(params, *args, **kwargs)
        calls.append((len(params), done))
        return done
    monkeypatch.setattr(module, name, counting)
    default, _ = _run(jitorch, cls, kw, dtype=dtype)
    assert calls and all(n == len(SHAPES) and done for n, done in calls)
    fused, _ = _run(jitorch, cls, dict(kw, fused=True), dtype=dtype)
    ref, _ = _run(torch, cls, kw, dtype=dtype)
    for a, b, c in zip(default, fused, ref):
        # (torch's fused=True rounds the last elements of a parameter otherwise than its default: each path follows
        # its own, bit for bit in test_adam_bits.py)
        np.testing.assert_allclose(a, b, **TOL[dtype])
        np.testing.assert_allclose(a, c, **TOL[dtype])


def test_default_keeps_the_per_tensor_rule_outside_the_kernels_domain():
    """Non-contiguous parameters (and differentiable=True) take the per-tensor rule, as before."""
    base = jitorch.randn(6, 4)
    p = base.t().detach().requires_grad_()
    assert not p.is_contiguous()
    opt = jitorch.optim.SGD([p], lr=0.1, momentum=0.9)
    before = p.detach().clone()
    for _ in range(2):
        p.grad = jitorch.ones_like(p)
        opt.step()
    # buf = 1, then 0.9 + 1 = 1.9: p moves by 0.1 * (1 + 1.9)
    np.testing.assert_allclose(p.detach().numpy(), before.numpy() - 0.29, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("cls,kw", [("SGD", dict(lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.01)),
                                    ("Adam", dict(lr=0.01, amsgrad=True)), ("AdamW", dict(lr=0.01))])
def test_large_parameters_split_over_threads_equal_one_thread(cls, kw, monkeypatch):
    # A parameter of 2^19 elements is worth splitting at 2 threads (ops/native_eager.launch through the native
    # pool); a small one is not. Either way every element gets the same arithmetic: bit-for-bit equal to 1 thread.
    from jitorch.codegen.llvm_pool import NativePool

    splits = []
    real = NativePool.run_kernel
    monkeypatch.setattr(NativePool, "run_kernel", lambda self, *a, **k: splits.append(1) or real(self, *a, **k))
    rng = np.random.default_rng(12)
    shapes = [(512, 1024), (7, 5)]
    values = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    grads = [[rng.standard_normal(s).astype(np.float32) for s in shapes] for _ in range(3)]
    old = jitorch.get_num_threads()
    results = []
    try:
        for threads in (1, 2):
            jitorch.set_num_threads(threads)
            params = [jitorch.tensor(v, requires_grad=True) for v in values]
            opt = getattr(jitorch.optim, cls)(params, **kw)
            for step in grads:
                for p, g in zip(params, step):
                    p.grad = jitorch.tensor(g)
                opt.step()
            results.append([p.detach().numpy() for p in params])
            assert len(splits) == (0 if threads == 1 else 3)  # the large parameter, once a step
    finally:
        jitorch.set_num_threads(old)
    for one, two in zip(*results):
        np.testing.assert_array_equal(one, two)


@pytest.mark.parametrize("cls", ["Adam", "AdamW"])
def test_parameters_with_different_step_counts(cls):
    """The kernel's scalars are shared by parameters whose counts agree; one that joined late (a gradient from the
    third step on, a group added later) has its own bias corrections, as in torch."""
    results = []
    for lib in (torch, jitorch):
        rng = np.random.default_rng(3)
        params = [lib.tensor(rng.standard_normal(s).astype(np.float32), requires_grad=True) for s in SHAPES]
        late = lib.tensor(rng.standard_normal(4).astype(np.float32), requires_grad=True)
        opt = getattr(lib.optim, cls)(params, lr=0.05)
        for k in range(6):
            if k == 3:
                opt.add_param_group({"params": [late], "lr": 0.1})
            for i, p in enumerate(params + ([late] if k >= 3 else [])):
                p.grad = None if (i == 1 and k < 2) else lib.tensor(rng.standard_normal(p.shape).astype(np.float32))
            opt.step()
        results.append(([p.detach().numpy().copy() for p in params + [late]],
                        [float(opt.state[p]["step"]) for p in params + [late]]))
    (ref, ref_steps), (ours, our_steps) = results
    assert our_steps == ref_steps == [6.0, 4.0, 6.0, 3.0]
    for a, b in zip(ours, ref):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
