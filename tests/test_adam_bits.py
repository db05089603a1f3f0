"""Adam and AdamW give torch 2.13's parameter and state bits, float32 and float64, through every path: the default
(jitorch's fused kernel in torch's per-op rounding), ``foreach=True``, ``fused=False`` (the array ops),
``fused=True`` (torch's fused kernel, its scalar-loop tail included) and a ``reduce-overhead`` captured step.

torch's per-op update takes its square root from MKL's ``vsSqrt``, which on some CPUs (this AMD EPYC) is off by an
ulp on ~17% of float32 inputs, where jitorch's is IEEE's; the per-op references run with IEEE's root
(`ieee_sqrt`), so everything else is compared bit for bit. torch's fused kernel uses the vector unit's root."""
from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.optim.adam as torch_adam

import jitorch
import jitorch.optim.adam as jitorch_adam
from helpers import optimizer_steps

DTYPES = [np.float32, np.float64]
SIZES = [1, 15, 17, 1000, 4099]
CONFIGS = {
    "adam": ("Adam", {}),
    "l2": ("Adam", {"weight_decay": 0.01}),
    "adamw": ("AdamW", {}),
    "amsgrad_maximize": ("Adam", {"amsgrad": True, "maximize": True, "weight_decay": 0.05}),
    "large_lerp_weight": ("AdamW", {"betas": (0.3, 0.9), "lr": 0.01, "amsgrad": True}),
    "tensor_lr": ("AdamW", {"lr": "tensor", "weight_decay": 0.1}),
}
STEPS = 4


@pytest.fixture
def ieee_sqrt(monkeypatch):
    monkeypatch.setattr(torch.Tensor, "sqrt", lambda self: torch.from_numpy(np.sqrt(self.detach().numpy())))
    monkeypatch.setattr(torch, "_foreach_sqrt", lambda tensors: [t.sqrt() for t in tensors])


def _train(lib, n, dtype, config, capture=False, **flags):
    name, kwargs = CONFIGS[config]
    kwargs = dict(kwargs)
    if kwargs.get("lr") == "tensor":
        kwargs["lr"] = lib.tensor(3e-3)
    rng = np.random.default_rng(n)
    w = lib.nn.Parameter(lib.from_numpy(rng.standard_normal(n).astype(dtype)))
    opt = getattr(lib.optim, name)([w], **kwargs, **flags)

    run = optimizer_steps(opt, w, [lib.from_numpy((rng.standard_normal(n) * 0.1).astype(dtype)) for _ in range(STEPS)],
                          capture)
    state = opt.state[w]
    return run, [w.detach()] + [state[k] for k in ("exp_avg", "exp_avg_sq", "max_exp_avg_sq") if k in state]


def _assert_bits(got, want, names=("param", "exp_avg", "exp_avg_sq", "max_exp_avg_sq")):
    assert len(got) == len(want)
    for what, a, b in zip(names, got, want):
        a, b = a.numpy(), b.numpy()
        assert a.dtype == b.dtype
        differ = np.flatnonzero((a.view(f"u{a.itemsize}") != b.view(f"u{b.itemsize}")).reshape(-1))  # (-0.0 too)
        assert differ.size == 0, f"{what}: {differ.size} of {a.size} elements differ, first at {differ[:5]}"


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("config", CONFIGS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("path", ["default", "foreach", "unfused"])
def test_per_op_paths_equal_torch_per_op_step(path, dtype, config, n, ieee_sqrt):
    if path == "foreach" and config == "tensor_lr":  # torch refuses the pair: so must jitorch, with its message
        for lib in (torch, jitorch):
            with pytest.raises(ValueError, match="lr as a Tensor is not supported for capturable=False and foreach"):
                _train(lib, n, dtype, config, foreach=True)
        return
    flags = {"foreach": {"foreach": True}, "unfused": {"fused": False}}.get(path, {})
    want = _train(torch, n, dtype, config, **({"foreach": True} if path == "foreach" else {}))[1]
    _assert_bits(_train(jitorch, n, dtype, config, **flags)[1], want)


@pytest.mark.skipif(torch.backends.cpu.get_cpu_capability() != "AVX512",
                    reason="torch's fused tail (which elements its scalar loop rounds) is laid out for AVX-512")
@pytest.mark.parametrize("n", SIZES + [5, 23, 31, 100003])
@pytest.mark.parametrize("config", CONFIGS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_fused_equals_torch_fused(dtype, config, n):
    _assert_bits(_train(jitorch, n, dtype, config, fused=True)[1], _train(torch, n, dtype, config, fused=True)[1])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("found_inf", [0.0, 1.0])
def test_fused_amp_unscales_by_division_as_torch(dtype, found_inf):
    rng = np.random.default_rng(3)
    arrays = [rng.standard_normal(1037).astype(dtype) for _ in range(4)]
    arrays[3] = np.abs(arrays[3])
    results = []
    for lib, module in ((jitorch, jitorch_adam), (torch, torch_adam)):
        p, g, m, v = (lib.from_numpy(a.copy()) for a in arrays)
        step = lib.tensor(2.0)
        for _ in range(2):
            module.adam([p], [g], [m], [v], [], [step], fused=True, grad_scale=lib.tensor(3.0),
                        found_inf=lib.tensor(found_inf), amsgrad=False, beta1=0.9, beta2=0.999, lr=1e-3,
                        weight_decay=0.01, eps=1e-8, maximize=False)
        results.append([p, g, m, v, step.reshape(1)])
    _assert_bits(results[0][:4], results[1][:4], ("param", "grad", "exp_avg", "exp_avg_sq"))
    assert results[0][4].item() == results[1][4].item()


@pytest.mark.parametrize("config", ["adam", "adamw", "amsgrad_maximize", "tensor_lr"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_captured_step_equals_torch_per_op_step_in_one_native_call(dtype, config, ieee_sqrt):
    run, got = _train(jitorch, 1000, dtype, config, capture=True)
    _assert_bits(got, _train(torch, 1000, dtype, config)[1])
    if config == "tensor_lr":  # (its step reads the lr back: the calls take the default compiled path)
        assert run.graph is None
        return
    assert run.graph is not None and run.fallback_reason is None and run.recaptures == 0
    report = run.graph.native_report()
    assert report["native"] and report["segments"] == 1 and not report["fallbacks"]


@pytest.mark.parametrize("weight", [0.1, 0.7])
def test_array_ops_round_lerp_and_addcmul_once(weight):
    from jitorch.optim._kernels import ARRAY_OPS

    rng = np.random.default_rng(4)
    a, b, c = (rng.standard_normal(4099).astype(np.float32) for _ in range(3))
    want = torch.from_numpy(a.copy()).lerp_(torch.from_numpy(b), weight).numpy()
    np.testing.assert_array_equal(ARRAY_OPS.lerp_(a.copy(), b, weight), want)
    want = torch.from_numpy(a.copy()).addcmul_(torch.from_numpy(b), torch.from_numpy(c), value=weight).numpy()
    np.testing.assert_array_equal(ARRAY_OPS.addcmul_(a.copy(), b, c, weight), want)
    twice = a + np.float32(weight) * b * c  # the product rounded first: not torch's values
    assert np.sum(twice != want) > 50
