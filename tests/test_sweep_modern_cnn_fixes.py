"""What the modern-CNN sweep (``test_sweep_modern_cnn.py``, ``test_sweep_modern_gan.py``) found, each against torch:
the strides of pooled and convolved ``(N, C, 1, 1)`` results (squeeze-excitation), the layouts of convolution
gradients for channels-last inputs or weights, the activations' refusal of integer inputs, and a compiled module
reading a NumPy array attribute."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import jitorch
from sweep_helpers import LIBS, arr

_POOLS_TO_ONE = {
    "adaptive_avg_pool2d": lambda F, x: F.adaptive_avg_pool2d(x, 1),
    "adaptive_avg_pool2d (1, None)": lambda F, x: F.adaptive_avg_pool2d(x[:, :, :1], (1, None))[..., :1],
    "adaptive_max_pool2d": lambda F, x: F.adaptive_max_pool2d(x, 1),
    "adaptive_max_pool2d indices": lambda F, x: F.adaptive_max_pool2d(x, 1, return_indices=True)[1],
    "max_pool2d": lambda F, x: F.max_pool2d(x, 5),
    "avg_pool2d": lambda F, x: F.avg_pool2d(x, 5),
    "interpolate nearest": lambda F, x: F.interpolate(x, size=1),
    "depthwise conv": lambda F, x: F.conv2d(x, x.new_ones(4, 1, 5, 5), groups=4),
}


@pytest.mark.parametrize("name", sorted(_POOLS_TO_ONE))
@pytest.mark.parametrize("channels_last", [False, True])
def test_results_of_one_pixel_have_torch_strides(name, channels_last):
    """ATen's kernels allocate a channels-last ``(N, C, 1, 1)`` result as ``(C, 1, C, C)``, not the row-major strides
    a ``contiguous(memory_format=...)`` of it would keep."""
    x_np = np.random.default_rng(0).normal(size=(2, 4, 5, 5)).astype(np.float32)
    res = []
    for lib in LIBS:
        x = lib.tensor(x_np)
        if channels_last:
            x = x.contiguous(memory_format=lib.channels_last)
        y = _POOLS_TO_ONE[name](lib.nn.functional, x)
        res.append((arr(y), y.stride(), y.is_contiguous(memory_format=lib.channels_last)))
    np.testing.assert_allclose(res[1][0], res[0][0], rtol=1e-6, atol=1e-6)
    assert res[1][1:] == res[0][1:]


def test_squeeze_excitation_gradients_have_torch_strides():
    """A 1x1 conv on an ``(N, C, 1, 1)`` pooled input: its output and both gradients row-major, as torch's."""
    x_np = np.random.default_rng(1).normal(size=(4, 16, 6, 6)).astype(np.float32)
    w_np = np.random.default_rng(2).normal(size=(8, 16, 1, 1)).astype(np.float32)
    res = []
    for lib in LIBS:
        pooled = lib.nn.functional.adaptive_avg_pool2d(lib.tensor(x_np), 1).requires_grad_(True)
        w = lib.tensor(w_np).requires_grad_(True)
        y = lib.nn.functional.conv2d(pooled, w)
        up = lib.tensor(np.random.default_rng(3).normal(size=(4, 8, 1, 1)).astype(np.float32))
        gx, gw = lib.autograd.grad(y, (pooled, w), up)
        res.append([(arr(t), t.stride()) for t in (y, gx, gw)])
    for (a, sa), (b, sb) in zip(res[0], res[1]):
        np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-6)
        assert sb == sa


@pytest.mark.parametrize("transposed", [False, True])
@pytest.mark.parametrize("x_cl,w_cl", [(True, True), (True, False), (False, True)])
@pytest.mark.parametrize("groups,kernel", [(4, 3), (1, 3), (2, 1)])
def test_conv_gradients_channels_last_as_torch(transposed, x_cl, w_cl, groups, kernel):
    """ATen's CPU convolution backward writes both gradients channels-last (size-1 dims' strides included) when the
    input or the weight is: ``autograd.grad`` hands them out as they are."""
    rng = np.random.default_rng(4)
    x_np = rng.normal(size=(2, 4, 6, 6)).astype(np.float32)
    w_shape = (4, 8 // groups, kernel, kernel) if transposed else (8, 4 // groups, kernel, kernel)
    w_np = rng.normal(size=w_shape).astype(np.float32)
    res = []
    for lib in LIBS:
        F = lib.nn.functional
        x, w = lib.tensor(x_np), lib.tensor(w_np)
        x = x.contiguous(memory_format=lib.channels_last) if x_cl else x
        w = w.contiguous(memory_format=lib.channels_last) if w_cl else w
        x.requires_grad_(True)
        w.requires_grad_(True)
        pad = kernel // 2
        y = (F.conv_transpose2d(x, w, stride=2, padding=pad, output_padding=1, groups=groups) if transposed
             else F.conv2d(x, w, padding=pad, groups=groups))
        up = lib.tensor(np.random.default_rng(6).normal(size=tuple(y.shape)).astype(np.float32))
        gx, gw = lib.autograd.grad(y, (x, w), up)
        res.append([(arr(t), t.stride()) for t in (y, gx, gw)])
    for what, (a, sa), (b, sb) in zip(("output", "input grad", "weight grad"), res[0], res[1]):
        np.testing.assert_allclose(b, a, rtol=1e-4, atol=1e-4, err_msg=what)
        assert sb == sa, f"{what}: strides {sa} in torch, {sb} in jitorch"


def test_depthwise_weight_grad_layout_after_backward():
    """``model.to(memory_format=channels_last)`` on a depthwise conv: ``.grad`` of its ``(C, 1, k, k)`` weight has the
    weight's strides, as torch's."""
    x_np = np.random.default_rng(5).normal(size=(2, 4, 6, 6)).astype(np.float32)
    strides = []
    for lib in LIBS:
        lib.manual_seed(0)
        conv = lib.nn.Conv2d(4, 4, 3, padding=1, groups=4).to(memory_format=lib.channels_last)
        conv(lib.tensor(x_np).contiguous(memory_format=lib.channels_last)).square().sum().backward()
        strides.append((conv.weight.stride(), conv.weight.grad.stride()))
    assert strides[1] == strides[0] == ((9, 1, 3, 1), (9, 1, 3, 1))


_FLOAT_ONLY = {"hardswish": "hardswish_cpu", "hardsigmoid": "hardsigmoid_cpu", "leaky_relu": "leaky_relu_cpu",
               "elu": "elu_cpu", "selu": "elu_cpu", "celu": "elu_cpu", "softplus": "softplus_cpu", "mish": "mish_cpu",
               "logsigmoid": "log_sigmoid_cpu", "hardshrink": "hardshrink_cpu", "softshrink": "softshrink_check",
               "glu": "glu_cpu", "rrelu": "leaky_relu_cpu"}


@pytest.mark.parametrize("name", sorted(_FLOAT_ONLY))
@pytest.mark.parametrize("dtype", ["int64", "uint8", "bool", "complex64"])
def test_float_only_activations_refuse_other_dtypes(name, dtype):
    for lib in LIBS:
        x = lib.ones(2, 4, dtype=getattr(lib, dtype))
        with pytest.raises(NotImplementedError) as info:
            getattr(lib.nn.functional, name)(x)
        assert _FLOAT_ONLY[name] in str(info.value), (lib.__name__, str(info.value))


def test_hardswish_module_inplace_refuses_integers():
    for lib in LIBS:
        for module in (lib.nn.Hardswish(inplace=True), lib.nn.Hardsigmoid(inplace=True)):
            with pytest.raises(NotImplementedError, match="not implemented for 'Long'"):
                module(lib.tensor([1, 2, 3]))


@pytest.mark.parametrize("dtype", ["int64", "int32", "uint8", "int8"])
def test_relu6_and_hardtanh_keep_integer_dtypes(dtype):
    x_np = np.array([-7, -3, -1, 0, 2, 5, 6, 9]).astype(dtype)  # uint8: wrapped, 249 253 255 ...
    res = []
    for lib in LIBS:
        F, x = lib.nn.functional, lib.tensor(x_np)
        inplace = x.clone()
        lib.nn.ReLU6(inplace=True)(inplace)
        res.append([F.relu6(x), F.hardtanh(x, -1.5, 2.5) if dtype != "uint8" else F.hardtanh(x, 0.0, 2.5), inplace])
    for a, b in zip(*res):
        assert b.dtype == getattr(jitorch, dtype) and a.dtype == getattr(torch, dtype)
        np.testing.assert_array_equal(arr(b), arr(a))


def test_hardtanh_refusals_as_torch():
    for lib in LIBS:
        F = lib.nn.functional
        with pytest.raises(RuntimeError, match="Bool inputs not supported for hardtanh"):
            F.relu6(lib.tensor([True, False]))
        with pytest.raises(RuntimeError, match="cannot do hardtanh on an unsigned type with negative limits"):
            F.hardtanh(lib.tensor([1, 2], dtype=lib.uint8))


def test_compiled_module_reads_numpy_attribute_by_value():
    """A module that turns a NumPy attribute into a tensor (``x.new_tensor(self.mask)``, a drop-path mask drawn
    outside) bakes it into the graph: a new array must retrace, not reuse the first one's values."""
    class Masked(jitorch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin, self.mask = jitorch.nn.Linear(3, 3), None

        def forward(self, x):
            return self.lin(x) * x.new_tensor(self.mask)

    model = Masked()
    compiled = jitorch.compile(model)
    x = jitorch.ones(2, 3)
    for mask in ([0.0, 2.0, 3.0], [5.0, 2.0, 3.0], [5.0, 2.0, 3.0], [1.0, 0.0, 0.0]):
        model.mask = np.array(mask, dtype=np.float32)
        with jitorch.no_grad():
            np.testing.assert_allclose(arr(compiled(x)), arr(model.lin(x) * jitorch.tensor(mask)), rtol=1e-6)


def test_compiled_module_reads_list_of_arrays():
    """Masks handed over in a list: read by index (guarded entry by entry) or popped from a list replaced before each
    call (guarded by the list itself, which the guard keeps alive so a new list cannot reuse its id)."""
    class Queued(jitorch.nn.Module):
        def __init__(self, pop):
            super().__init__()
            self.pop, self.masks = pop, []

        def forward(self, x):
            mask = self.masks.pop(0) if self.pop else self.masks[0]
            return x * x.new_tensor(mask)

    x = jitorch.ones(3)
    for pop in (False, True):
        model = Queued(pop)
        compiled = jitorch.compile(model)
        for step in range(3):
            model.masks = [np.array([step, 2.0, 3.0], dtype=np.float32)]
            np.testing.assert_array_equal(arr(compiled(x)), [step, 2.0, 3.0])
            assert len(model.masks) == (0 if pop else 1)
