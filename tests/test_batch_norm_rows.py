"""Training-mode batch_norm through the native_batch_norm rows: forward, gradients (random upstream gradients),
running statistics, non-contiguous and 2-D/3-D/5-D inputs, float64 gradcheck and gradgradcheck, against torch."""
import numpy as np
import pytest
import torch
from helpers import check_op, gradcheck_op, gradgradcheck_op, make_array

import jitorch


def _bn(lib, affine):
    def fn(x, *wb):
        w, b = wb if affine else (None, None)
        return lib.nn.functional.batch_norm(x, None, None, w, b, training=True, eps=1e-5)
    return fn


@pytest.mark.parametrize("shape", [(6, 3), (4, 3, 5), (3, 4, 5, 6), (2, 3, 2, 3, 4)])
@pytest.mark.parametrize("affine", [True, False])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_batch_norm_training_matches_torch(shape, affine, dtype):
    rng = np.random.default_rng(0)
    x = make_array(shape, dtype, rng) * 2 + 0.5
    wb = [make_array((shape[1],), dtype, rng), make_array((shape[1],), dtype, rng)] if affine else []
    tol = dict(atol=1e-5, rtol=1e-4) if dtype == "float32" else dict(atol=1e-10, rtol=1e-9)
    check_op(_bn(jitorch, affine), _bn(torch, affine), [x, *wb], **tol)


@pytest.mark.parametrize("shape", [(16, 8, 12, 12), (3, 5, 17, 59), (2, 3, 1000), (2, 2, 3, 4, 200)])
@pytest.mark.parametrize("affine", [True, False])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_batch_norm_generated_channel_kernels_match_torch(shape, affine, dtype, monkeypatch):
    # From 4096 elements with a spatial part of 8 or more, the rows run generated per-channel kernels
    # (ops/native_lowered.py): both rows must take them here, and match torch forward and backward.
    from jitorch.ops import native_lowered

    taken = []
    for name in ("batch_norm", "batch_norm_backward"):
        real = getattr(native_lowered, name)
        monkeypatch.setattr(native_lowered, name,
                            lambda *a, real=real, name=name: taken.append(name) or real(*a))
    rng = np.random.default_rng(5)
    x = make_array(shape, dtype, rng) * 2 + 0.5
    wb = [make_array((shape[1],), dtype, rng), make_array((shape[1],), dtype, rng)] if affine else []
    tol = dict(atol=1e-5, rtol=1e-4) if dtype == "float32" else dict(atol=1e-10, rtol=1e-9)
    check_op(_bn(jitorch, affine), _bn(torch, affine), [x, *wb], **tol)
    assert {"batch_norm", "batch_norm_backward"} <= set(taken)
    assert native_lowered.batch_norm(np.zeros((2, 3, 4)), None, None, 1e-5) is None  # too small: NumPy's row


def test_batch_norm_non_contiguous_input_matches_torch():
    x = make_array((5, 4, 3, 6), "float32", np.random.default_rng(1))
    wb = [make_array((4,), "float32"), make_array((4,), "float32")]
    check_op(_bn(jitorch, True), _bn(torch, True), [x, *wb], layout=["transposed", "contiguous", "contiguous"],
             atol=1e-5, rtol=1e-4)


def test_batch_norm_running_statistics_match_torch():
    rng = np.random.default_rng(2)
    xs = [rng.standard_normal((8, 3, 4, 4)).astype(np.float32) * 3 + 1 for _ in range(3)]
    jb, tb = jitorch.nn.BatchNorm2d(3, momentum=0.3), torch.nn.BatchNorm2d(3, momentum=0.3)
    for x in xs:
        jb(jitorch.tensor(x))
        tb(torch.tensor(x))
    for name in ("running_mean", "running_var", "num_batches_tracked"):
        np.testing.assert_allclose(getattr(jb, name).numpy(), getattr(tb, name).numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("affine", [True, False])
def test_batch_norm_gradcheck_and_gradgradcheck(affine):
    rng = np.random.default_rng(3)
    arrays = [rng.standard_normal((4, 3, 5)) * 2 + 1] + ([rng.standard_normal(3), rng.standard_normal(3)]
                                                        if affine else [])
    gradcheck_op(_bn(jitorch, affine), arrays)
    gradgradcheck_op(_bn(jitorch, affine), arrays)


@pytest.mark.parametrize("norm", ["batch", "layer"])
def test_output_changed_in_place_after_a_norm_does_not_break_its_backward(norm):
    # The rows' backward reads only their saved statistics, as torch's: ``ReLU(inplace=True)`` after them is fine.
    rng = np.random.default_rng(4)
    xd = rng.standard_normal((4, 3, 5)).astype(np.float32)
    gd = rng.standard_normal((4, 3, 5)).astype(np.float32)
    grads = []
    for lib in (jitorch, torch):
        x = lib.tensor(xd, requires_grad=True)
        layer = lib.nn.BatchNorm1d(3) if norm == "batch" else lib.nn.LayerNorm(5)
        out = lib.nn.functional.relu(layer(x), inplace=True)
        out.backward(lib.tensor(gd))
        grads.append(x.grad.detach().numpy())
    np.testing.assert_allclose(grads[0], grads[1], rtol=1e-4, atol=1e-5)


def test_generated_batch_norm_kernels_with_aliased_or_reshaped_parameters_match_torch():
    # The eager kernels' plans map buffers to operands by memory: a plan made for weight-is-bias, for weight and
    # bias sliced from one buffer, or for a gradient that aliases the input once read the wrong operand on every
    # later call of the same layout; and a (1, 1, C) weight was read with its last stride as the channel's.
    rng = np.random.default_rng(11)
    x = rng.standard_normal((16, 8, 64)).astype(np.float32)
    w, b = rng.standard_normal(8).astype(np.float32), rng.standard_normal(8).astype(np.float32)

    def forward(lib, ww, bb):
        return lib.nn.functional.batch_norm(lib.tensor(x), None, None, ww, bb, training=True).numpy()

    def close(got, want):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)

    want = forward(torch, torch.tensor(w), torch.tensor(b))
    jw = jitorch.tensor(w)
    forward(jitorch, jw, jw)  # weight is bias
    packed = jitorch.tensor(np.concatenate([w, b]))
    close(forward(jitorch, packed[:8], packed[8:]), want)
    close(forward(jitorch, jitorch.tensor(w), jitorch.tensor(b)), want)
    close(forward(jitorch, jitorch.tensor(w.reshape(1, 1, 8)), jitorch.tensor(b.reshape(1, 1, 8))), want)
    g = rng.standard_normal(x.shape).astype(np.float32)
    for upstream in ("aliased", "separate"):
        grads = []
        for lib in (jitorch, torch):
            xx, ww = lib.tensor(x, requires_grad=True), lib.tensor(w, requires_grad=True)
            out = lib.nn.functional.batch_norm(xx, None, None, ww, None, training=True)
            out.backward(xx.detach() if upstream == "aliased" else lib.tensor(g))
            grads.append((xx.grad.numpy(), ww.grad.numpy()))
        close(grads[0][0], grads[1][0])
        np.testing.assert_allclose(grads[0][1], grads[1][1], rtol=1e-4, atol=1e-3)


def test_the_eager_pool_window_limit_matches_the_lowering():
    from jitorch.cpu._lower_pool import MAX_WINDOW
    from jitorch.ops import native_lowered

    assert native_lowered._MAX_WINDOW == MAX_WINDOW
