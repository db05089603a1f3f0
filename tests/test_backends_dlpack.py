"""``torch.utils.dlpack``, ``torch.mps``, ``torch.backends.mkldnn/mkl/openmp`` and ``torch.cuda.nvtx`` as a CPU
machine sees them, against torch 2.13 CPU."""
import numpy as np
import pytest
import torch

import jitorch
from jitorch.utils import dlpack


def test_dlpack_capsules_round_trip_between_libraries():
    x = torch.arange(6.0).reshape(2, 3)
    shared = dlpack.from_dlpack(torch.utils.dlpack.to_dlpack(x))
    np.testing.assert_array_equal(shared.numpy(), x.numpy())
    x[0, 0] = 7.0  # zero-copy: the import sees the producer's later writes
    assert shared[0, 0].item() == 7.0
    back = torch.utils.dlpack.from_dlpack(dlpack.to_dlpack(jitorch.arange(4, dtype=jitorch.int32)))
    assert back.dtype == torch.int32 and back.tolist() == [0, 1, 2, 3]
    assert dlpack.from_dlpack(np.arange(3.0)).tolist() == [0.0, 1.0, 2.0]
    t = jitorch.ones(2)
    assert dlpack.from_dlpack(t) is t and jitorch.utils.dlpack.DLDeviceType.kDLCPU == 1


def test_a_consumed_capsule_and_read_only_memory_raise_clear_errors():
    capsule = dlpack.to_dlpack(jitorch.arange(3.0))
    imported = dlpack.from_dlpack(capsule)
    with pytest.raises(RuntimeError) as want:
        c = torch.utils.dlpack.to_dlpack(torch.ones(1))
        torch.utils.dlpack.from_dlpack(c)
        torch.utils.dlpack.from_dlpack(c)
    with pytest.raises(RuntimeError) as got:
        dlpack.from_dlpack(capsule)
    assert str(got.value) == str(want.value)
    # NumPy imports a legacy capsule read-only: a write asks for a clone instead of corrupting or crashing.
    with pytest.raises(RuntimeError, match=r"add_: the tensor's memory is read-only.*clone\(\)"):
        imported.add_(1)
    assert (imported.clone().add_(1)).tolist() == [1.0, 2.0, 3.0]
    frozen = np.arange(3.0)
    frozen.flags.writeable = False
    with pytest.raises(RuntimeError, match="mul_: the tensor's memory is read-only"):
        jitorch.from_numpy(frozen).mul_(2)
    assert frozen.tolist() == [0.0, 1.0, 2.0]


@pytest.mark.parametrize("call", ["synchronize()", "empty_cache()", "current_allocated_memory()",
                                  "driver_allocated_memory()", "recommended_max_memory()", "seed()",
                                  "get_rng_state()", "set_per_process_memory_fraction(0.5)"])
def test_mps_answers_as_torch_without_the_device(call):
    with pytest.raises(RuntimeError) as want:
        eval("torch.mps." + call)
    with pytest.raises(RuntimeError) as got:
        eval("jitorch.mps." + call)
    assert str(got.value) == str(want.value)


def test_mps_queries_and_backend_flags():
    assert (jitorch.mps.is_available(), jitorch.mps.device_count()) == (torch.mps.is_available(), 0)
    assert jitorch.mps.manual_seed(0) is None
    mkldnn = jitorch.backends.mkldnn
    defaults = (mkldnn.enabled, mkldnn.deterministic, mkldnn.allow_tf32, mkldnn.fp32_precision)
    assert defaults == (torch.backends.mkldnn.enabled, torch.backends.mkldnn.deterministic,
                        torch.backends.mkldnn.allow_tf32, torch.backends.mkldnn.fp32_precision)
    with mkldnn.flags(enabled=False, deterministic=True):
        assert (mkldnn.enabled, mkldnn.deterministic) == (False, True)
    assert (mkldnn.enabled, mkldnn.deterministic) == defaults[:2]
    # jitorch uses neither oneDNN, MKL nor OpenMP; a script that asks gets the truth.
    assert not (mkldnn.is_available() or jitorch.backends.mkl.is_available()
                or jitorch.backends.openmp.is_available())


def test_nvtx_without_cuda_raises_torchs_error():
    if jitorch.cuda.is_available():  # the cuda-marked test below covers the device
        return
    for call in (lambda m: m.cuda.nvtx.range_push("a"), lambda m: m.cuda.nvtx.mark("a")):
        with pytest.raises(RuntimeError) as want:
            call(torch)
        with pytest.raises(RuntimeError) as got:
            call(jitorch)
        assert str(got.value) == str(want.value)
    with pytest.raises(RuntimeError, match="NVTX"):
        with jitorch.cuda.nvtx.range("step {}", 3):
            pass
    with pytest.raises(RuntimeError, match="NVTX"):  # torch's CPU stub lacks range_start altogether
        jitorch.cuda.nvtx.range_start("a")


@pytest.mark.cuda
def test_nvtx_ranges_nest_on_a_cuda_device():
    nvtx = jitorch.cuda.nvtx
    assert nvtx.range_push("outer") == 0 and nvtx.range_push("inner") == 1
    assert nvtx.range_pop() == 1 and nvtx.range_pop() == 0
    with nvtx.range("step {}", 1):
        nvtx.mark("inside")
    nvtx.range_end(nvtx.range_start("loose"))


def test_versioned_capsules_import_writable_as_torch():
    source = np.arange(3.0)
    shared = dlpack.from_dlpack(source.__dlpack__(max_version=(1, 0)))
    shared.add_(1)  # a versioned capsule that is not read-only shares writable memory, as torch's import
    assert source.tolist() == [1.0, 2.0, 3.0]
    x = torch.arange(3.0)
    capsule = x.__dlpack__(max_version=(1, 0))
    dlpack.from_dlpack(capsule).mul_(2)
    assert x.tolist() == [0.0, 2.0, 4.0]
    with pytest.raises(RuntimeError, match="consumed only once"):
        dlpack.from_dlpack(capsule)
