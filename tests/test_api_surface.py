"""The torch submodules scripts touch on a CPU-only machine: cuda, amp, backends, accelerator, distributed, onnx,
nn.parallel. Each answer (value, or exception type and text) is compared with torch 2.13's CPU build."""
from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

import jitorch
import jitorch.accelerator
import jitorch.amp
import jitorch.backends
import jitorch.cuda
import jitorch.distributed
import jitorch.nn.parallel
import jitorch.onnx


def outcome(fn):
    """(value, None) or (None, (exception type name, message)), warnings silenced."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return fn(), None
        except Exception as e:  # noqa: BLE001 - the type is what is compared
            return None, (type(e).__name__, str(e))


@pytest.mark.parametrize("name", ["is_available", "device_count", "is_bf16_supported", "empty_cache",
                                  "memory_allocated", "max_memory_allocated", "memory_reserved", "max_memory_reserved",
                                  "memory_stats", "memory_stats_as_nested_dict", "get_arch_list", "get_rng_state_all",
                                  "seed", "seed_all", "is_initialized", "memory_cached"])
def test_cuda_values_match_cpu_torch(name):
    assert outcome(getattr(jitorch.cuda, name)) == outcome(getattr(torch.cuda, name))


@pytest.mark.parametrize("name", ["current_device", "synchronize", "initial_seed", "mem_get_info", "current_stream",
                                  "default_stream", "get_device_name", "get_device_properties", "init",
                                  "get_device_capability", "get_rng_state", "ipc_collect"])
def test_cuda_errors_match_cpu_torch(name):
    mine, theirs = outcome(getattr(jitorch.cuda, name)), outcome(getattr(torch.cuda, name))
    assert mine == theirs and theirs[1][0] == "AssertionError"


@pytest.mark.parametrize("name", ["reset_peak_memory_stats", "reset_accumulated_memory_stats", "memory_summary"])
def test_cuda_errors_of_same_type(name):
    assert outcome(getattr(jitorch.cuda, name))[1][0] == outcome(getattr(torch.cuda, name))[1][0]


@pytest.mark.parametrize("call", [lambda m: m.manual_seed(3), lambda m: m.manual_seed_all(3), lambda m: m.Stream(),
                                  lambda m: m.Event(enable_timing=True), lambda m: m.stream(None).__enter__(),
                                  lambda m: m.device(-1).__enter__(), lambda m: m.device(0).__enter__(),
                                  lambda m: m.set_device("cpu"), lambda m: m.set_device(-1),
                                  lambda m: m.is_bf16_supported(including_emulation=False),
                                  lambda m: m.memory_allocated(0), lambda m: m.set_per_process_memory_fraction(0.5)])
def test_cuda_calls_match_cpu_torch(call):
    assert outcome(lambda: call(jitorch.cuda)) == outcome(lambda: call(torch.cuda))


def test_set_device_index_fails_like_torch():
    assert outcome(lambda: jitorch.cuda.set_device(0))[1][0] == outcome(lambda: torch.cuda.set_device(0))[1][0]


def test_device_agnostic_script_idiom():
    device = "cuda" if jitorch.cuda.is_available() else "cpu"
    assert device == ("cuda" if torch.cuda.is_available() else "cpu")
    assert jitorch.zeros(2, device=device).device.type == device


def test_cuda_amp_aliases_warn_and_disable():
    with pytest.warns(FutureWarning, match="torch.cuda.amp.GradScaler"):
        scaler = jitorch.cuda.amp.GradScaler()
    assert not scaler.is_enabled()
    with pytest.warns(FutureWarning, match="torch.cuda.amp.autocast"):
        ctx = jitorch.cuda.amp.autocast()
    with ctx:
        assert jitorch.amp.autocast_mode.is_autocast_enabled() is False
    assert isinstance(ctx, jitorch.amp.autocast) and isinstance(scaler, jitorch.amp.GradScaler)


def test_backends_defaults_match_torch():
    mine, theirs = jitorch.backends, torch.backends
    for name in ("allow_tf32", "allow_fp16_reduced_precision_reduction", "allow_bf16_reduced_precision_reduction",
                 "fp32_precision"):
        assert getattr(mine.cuda.matmul, name) == getattr(theirs.cuda.matmul, name)
    for name in ("flash_sdp_enabled", "mem_efficient_sdp_enabled", "math_sdp_enabled", "cudnn_sdp_enabled",
                 "is_built"):
        assert getattr(mine.cuda, name)() == getattr(theirs.cuda, name)()
    for name in ("enabled", "benchmark", "deterministic", "allow_tf32"):
        assert getattr(mine.cudnn, name) == getattr(theirs.cudnn, name)
    assert (mine.cudnn.is_available(), mine.cudnn.version()) == (theirs.cudnn.is_available(), theirs.cudnn.version())
    assert (mine.mps.is_available(), mine.mps.is_built()) == (theirs.mps.is_available(), theirs.mps.is_built())
    assert mine.opt_einsum.is_available() == theirs.opt_einsum.is_available()


def test_backends_flags_are_settable():
    b = jitorch.backends
    b.cuda.matmul.allow_tf32 = True
    b.cudnn.benchmark = True
    try:
        assert b.cuda.matmul.allow_tf32 and b.cudnn.benchmark
        with b.cudnn.flags(enabled=False, deterministic=True):
            assert not b.cudnn.enabled and b.cudnn.deterministic
        assert b.cudnn.enabled and not b.cudnn.deterministic
        with pytest.raises(AttributeError):
            b.cuda.matmul.allow_tf33 = True
        b.cuda.enable_flash_sdp(False)
        assert not b.cuda.flash_sdp_enabled()
    finally:
        b.cuda.matmul.allow_tf32 = False
        b.cudnn.benchmark = False
        b.cuda.enable_flash_sdp(True)


def test_accelerator_matches_torch():
    a, t = jitorch.accelerator, torch.accelerator
    assert a.is_available() == t.is_available()
    assert a.current_accelerator() == t.current_accelerator()
    assert a.device_count() == t.device_count()
    assert outcome(a.current_device_index) == outcome(t.current_device_index)


@pytest.mark.parametrize("name", ["is_available", "is_initialized", "get_rank", "get_world_size",
                                  "destroy_process_group"])
def test_distributed_matches_torch(name):
    assert outcome(getattr(jitorch.distributed, name)) == outcome(getattr(torch.distributed, name))


def test_distributed_init_is_a_clear_error():
    with pytest.raises(RuntimeError, match="no process-group backend"):
        jitorch.distributed.init_process_group("gloo")


def test_onnx_export_not_implemented():
    with pytest.raises(NotImplementedError, match="jitorch.onnx.export"):
        jitorch.onnx.export(jitorch.nn.Linear(2, 2), (jitorch.zeros(1, 2),), "model.onnx")


@pytest.mark.parametrize("wrapper", ["DataParallel", "DistributedDataParallel"])
def test_parallel_wrappers_run_module_unchanged(wrapper):
    net = jitorch.nn.Linear(3, 2)
    wrapped = getattr(jitorch.nn.parallel, wrapper)(net)
    x = jitorch.randn(4, 3)
    np.testing.assert_array_equal(wrapped(x).detach().numpy(), net(x).detach().numpy())
    ref = torch.nn.parallel.DataParallel(torch.nn.Linear(3, 2))
    assert list(wrapped.state_dict()) == list(ref.state_dict())
    assert wrapped.module is net and len(list(wrapped.parameters())) == 2
    out = jitorch.nn.parallel.data_parallel(net, x)
    np.testing.assert_array_equal(out.detach().numpy(), net(x).detach().numpy())


def test_ddp_no_sync_is_accepted():
    ddp = jitorch.nn.parallel.DistributedDataParallel(jitorch.nn.Linear(2, 2))
    with ddp.no_sync():
        ddp(jitorch.ones(1, 2)).sum().backward()
    assert ddp.module.weight.grad is not None


def test_autocast_state_matches_torch():
    for mod in (jitorch, torch):
        assert not mod.amp.autocast_mode.is_autocast_available("meta")
    with jitorch.amp.autocast("cpu"), torch.autocast("cpu"):
        assert jitorch.amp.autocast_mode.is_autocast_enabled("cpu") == torch.is_autocast_enabled("cpu") is True
        assert jitorch.amp.autocast_mode.is_autocast_enabled() == torch.is_autocast_enabled() is False
        assert str(jitorch.amp.autocast_mode.get_autocast_dtype("cpu")) == "jitorch.bfloat16"
        with jitorch.amp.autocast("cpu", enabled=False):
            assert not jitorch.amp.autocast_mode.is_autocast_enabled("cpu")
        assert jitorch.amp.autocast_mode.is_autocast_enabled("cpu")
    assert not jitorch.amp.autocast_mode.is_autocast_enabled("cpu")


def test_autocast_warnings_match_torch():
    for device, dtype in (("cuda", None), ("cpu", "float64")):
        with pytest.warns(UserWarning) as mine:
            ctx = jitorch.amp.autocast(device, dtype=getattr(jitorch, dtype) if dtype else None)
        with pytest.warns(UserWarning) as theirs:
            torch.autocast(device, dtype=getattr(torch, dtype) if dtype else None)
        assert str(mine[0].message) == str(theirs[0].message)
        assert not ctx._enabled
    assert outcome(lambda: jitorch.amp.autocast(0)) == (None, outcome(lambda: torch.autocast(0))[1])


def test_autocast_decorator_and_math_still_runs():
    @jitorch.amp.autocast(device_type="cpu", dtype=jitorch.bfloat16)
    def f(a):
        assert jitorch.amp.autocast_mode.is_autocast_enabled("cpu")
        return jitorch.nn.functional.linear(a, a) + a @ a
    a = jitorch.ones(2, 2)
    np.testing.assert_allclose(f(a).float().numpy(), np.full((2, 2), 4.0))
    with pytest.raises(TypeError, match="requires a callable"):
        jitorch.amp.autocast("cpu")(3)
