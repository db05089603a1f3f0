"""float16/bfloat16 arithmetic against PyTorch bit for bit: PyTorch's CPU kernels accumulate halves in float32
("opmath") and round once, and take a Python scalar of mul/div as a float32; naive half arithmetic overflows (a
float16 sum of 10000 tens is inf), rounds divisors (24000 is 24064 in bfloat16) or rounds twice."""
import numpy as np
import pytest
import torch
from helpers import check_op, make_array

import jitorch
import jitorch.nn.functional as F
import torch.nn.functional as TF

HALVES = ["float16", "bfloat16"]


def _half(shape, dtype, low=-1.0, high=5.0, seed=0):
    return make_array(shape, dtype, np.random.default_rng(seed), low, high)


@pytest.mark.parametrize("dtype", HALVES)
def test_mean_and_mean_losses_accumulate_in_float32(dtype):
    big = np.full(10000, 10.0, dtype=np.float32).astype(_half((1,), dtype).dtype)
    zeros = np.zeros_like(big)
    for jt, th in ((lambda x: x.mean(), lambda x: x.mean()),
                   (lambda x, y: F.mse_loss(x, y), lambda x, y: TF.mse_loss(x, y)),
                   (lambda x, y: F.l1_loss(x, y), lambda x, y: TF.l1_loss(x, y)),
                   (lambda x, y: F.smooth_l1_loss(x, y), lambda x, y: TF.smooth_l1_loss(x, y)),
                   (lambda x, y: F.huber_loss(x, y), lambda x, y: TF.huber_loss(x, y))):
        args = [big, zeros][:jt.__code__.co_argcount]
        j, t = check_op(jt, th, args, atol=0, rtol=0, grad=False)
        assert np.isfinite(t.float().item()) and j.float().item() == t.float().item()


@pytest.mark.parametrize("dtype", HALVES)
@pytest.mark.parametrize("shape,dims", [((8, 3000), None), ((8, 3000), 1), ((8, 3000), 0), ((4, 6, 5), (0, 2)),
                                        ((), None), ((3, 0), 1), ((0,), None)])
def test_mean_rounds_once(dtype, shape, dims):
    # The gradient is g / n with n as a float32: a bfloat16 n of 24000 would be 24064.
    kw = {} if dims is None else {"dim": dims, "keepdim": True}
    check_op(lambda x: x.mean(**kw), lambda x: x.mean(**kw), [_half(shape, dtype)], atol=0, rtol=0)


def test_mean_to_a_half_dtype_sums_the_input_unrounded():
    x = make_array((1000,), "float32", np.random.default_rng(1))
    check_op(lambda t: t.mean(dtype=jitorch.float16), lambda t: t.mean(dtype=torch.float16), [x], atol=0, rtol=0,
             grad=False)


@pytest.mark.parametrize("dtype", HALVES)
@pytest.mark.parametrize("dim", [1, 0])
def test_softmax_computes_in_float32(dtype, dim):
    x = _half((8, 300), dtype, -6, 6)
    # Within one rounding of the float32 result: PyTorch's vectorized exp/log differ from NumPy's in the last bits.
    atol = 2e-3 if dtype == "float16" else 1.6e-2
    check_op(lambda t: t.softmax(dim), lambda t: t.softmax(dim), [x], atol=atol, rtol=0)
    check_op(lambda t: t.log_softmax(dim), lambda t: t.log_softmax(dim), [x], atol=atol * 8, rtol=0)
    j, t = F.softmax(jitorch.from_numpy(x), dim), TF.softmax(torch.from_numpy(x.astype(np.float32)).to(
        getattr(torch, dtype)), dim)
    # Summed in float32, the probabilities of a row add up to 1 within the half type's rounding of each.
    assert abs(j.float().sum(dim) - 1).max().item() < 0.02 and j.dtype == jitorch.from_numpy(x).dtype
    assert (j.float().numpy() != t.float().numpy()).mean() < 0.05


@pytest.mark.parametrize("dtype", HALVES)
def test_scalar_mul_and_div_use_a_float32_scalar(dtype):
    x = _half((2000,), dtype, 0.5, 20)
    for jt, th in ((lambda t: t * 1.1, lambda t: t * 1.1), (lambda t: 1.1 * t, lambda t: 1.1 * t),
                   (lambda t: t / 3.3, lambda t: t / 3.3), (lambda t: 1.3 / t, lambda t: 1.3 / t),
                   (lambda t: t * 3001, lambda t: t * 3001), (lambda t: jitorch.mul(t, 0.7), lambda t: t.mul(0.7)),
                   (lambda t: t * np.float64(1.1), lambda t: t * np.float64(1.1))):
        check_op(jt, th, [x], atol=0, rtol=0)
    j, t = jitorch.from_numpy(x.copy()), torch.from_numpy(x.astype(np.float32)).to(getattr(torch, dtype))
    j.mul_(1.1).div_(3.3)
    t.mul_(1.1).div_(3.3)
    np.testing.assert_array_equal(j.float().numpy(), t.float().numpy())
    # The sample of the report: float16 12.57 * 1.1 is 13.828125 (13.8203125 with 1.1 rounded to float16).
    assert (jitorch.tensor([12.57], dtype=jitorch.float16) * 1.1).item() == 13.828125


@pytest.mark.parametrize("dtype", HALVES)
@pytest.mark.parametrize("params", ["none", "half", "float32"])
def test_batch_norm_output_as_native_batch_norm(dtype, params):
    # Statistics are rounded to the parameters' dtype (the input's unless they are float32), then x * alpha + beta.
    x = _half((4, 3, 6, 5), dtype, 5, 15)
    rng = np.random.default_rng(3)
    w, b = rng.standard_normal(3).astype(np.float32), rng.standard_normal(3).astype(np.float32)
    if params == "half":
        w, b = w.astype(x.dtype), b.astype(x.dtype)
    args = [x] if params == "none" else [x, w, b]
    # bfloat16: PyTorch's variance can round a channel's invstd to the neighbouring bfloat16 (0.4% of that channel).
    atol, rtol = (0, 0) if dtype == "float16" else (0.03, 2 ** -7)

    def call(lib, fn):
        def run(t, *wb):
            p = getattr(lib, dtype if params == "half" else "float32")
            rm, rv = lib.zeros(3, dtype=p), lib.ones(3, dtype=p)
            train = fn(t, rm if params != "none" else None, rv if params != "none" else None, *wb, training=True)
            return train, fn(t, rm, rv, *wb, training=False), rm
        return run
    check_op(call(jitorch, F.batch_norm), call(torch, TF.batch_norm), args, atol=atol, rtol=rtol, grad_atol=0.05,
             grad_rtol=0.02)


@pytest.mark.parametrize("dtype", HALVES)
def test_instance_norm_half(dtype):
    atol = 0 if dtype == "float16" else 1.6e-2
    check_op(F.instance_norm, TF.instance_norm, [_half((2, 3, 6, 5), dtype, 5, 15)], atol=atol, rtol=0,
             grad_atol=0.05, grad_rtol=0.02)


@pytest.mark.parametrize("dtype", HALVES)
def test_average_pools_sum_in_float32(dtype):
    x = _half((2, 3, 12, 12), dtype, 5, 15)
    check_op(lambda t: F.avg_pool2d(t, 5), lambda t: TF.avg_pool2d(t, 5), [x], atol=0, rtol=0)
    # Overlapping windows: PyTorch's backward adds each window's share in the half type, one rounding per add.
    check_op(lambda t: F.avg_pool2d(t, 3, 2, 1), lambda t: TF.avg_pool2d(t, 3, 2, 1), [x], atol=0, rtol=0,
             grad_atol=1e-3 if dtype == "float16" else 8e-3, grad_rtol=0)
    check_op(lambda t: F.adaptive_avg_pool2d(t, 1), lambda t: TF.adaptive_avg_pool2d(t, 1), [x], atol=0, rtol=0)
    check_op(lambda t: F.adaptive_avg_pool1d(t[0], 5), lambda t: TF.adaptive_avg_pool1d(t[0], 5), [x[0]], atol=0,
             rtol=0, grad_atol=1e-3 if dtype == "float16" else 8e-3, grad_rtol=0)  # overlapping windows, as above


@pytest.mark.parametrize("dtype", HALVES)
def test_linear_and_addmm_add_the_bias_before_rounding(dtype):
    # PyTorch's addmm path computes product + bias in float32 and rounds once; rounding twice is 1 ulp off in ~20%.
    x, w, b = _half((50, 8), dtype, -2, 2, 1), _half((6, 8), dtype, -2, 2, 2), _half((6,), dtype, -2, 2, 3)
    x3, bat1, bat2 = _half((3, 50, 8), dtype, -2, 2, 4), _half((3, 5, 8), dtype, -2, 2, 5), _half((3, 8, 6), dtype,
                                                                                                    -2, 2, 6)
    exact = dict(atol=0, rtol=0)
    check_op(F.linear, TF.linear, [x, w, b], **exact)
    check_op(F.linear, TF.linear, [x3, w, b], **exact)  # contiguous n-D with a 1-D bias: flattened into one addmm
    check_op(F.linear, TF.linear, [x[0], w, b], **exact)
    # A non-contiguous input, or a bias that is not a vector: matmul then add_, rounded twice in both.
    check_op(F.linear, TF.linear, [x3, w, b], layout=["transposed", "contiguous", "contiguous"], **exact)
    check_op(F.linear, TF.linear, [x3, w, _half((50, 6), dtype, -2, 2, 8)], **exact)
    check_op(lambda i, a, m: jitorch.addmm(i, a, m.t()), lambda i, a, m: torch.addmm(i, a, m.t()), [b, x, w],
             **exact)
    check_op(lambda i, a, m: jitorch.addmm(i, a, m.t(), beta=0.5, alpha=2.0),
             lambda i, a, m: torch.addmm(i, a, m.t(), beta=0.5, alpha=2.0), [b, x, w], atol=0, rtol=0,
             grad_atol=0, grad_rtol=2 ** -7)  # torch rounds mm(g, m) before scaling it by alpha
    check_op(jitorch.baddbmm, torch.baddbmm, [_half((3, 5, 6), dtype, -2, 2, 7), bat1, bat2], **exact)
    check_op(jitorch.addmv, torch.addmv, [b, w, x[0]], **exact)


def test_linear_under_bfloat16_autocast_rounds_once():
    x, w, b = (make_array(s, "float32", np.random.default_rng(i)) for i, s in enumerate([(64, 8), (6, 8), (6,)]))
    outs = []
    for lib, fn in ((jitorch, F.linear), (torch, TF.linear)):
        with lib.autocast("cpu", dtype=lib.bfloat16):
            outs.append(fn(*(lib.from_numpy(a.copy()) for a in (x, w, b))).float().numpy())
    np.testing.assert_array_equal(outs[0], outs[1])
