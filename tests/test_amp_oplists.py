"""CPU autocast's op lists against torch's (aten/src/ATen/autocast_mode.cpp, AutocastCPU): each op's output dtype
under ``autocast("cpu", bfloat16)`` for float32 inputs (does it lower?) and for bfloat16 inputs (does it go to
float32?), and its values within bfloat16 tolerance.

jitorch builds several of these ops from rows that autocast on their own (``mv`` and adaptive average pooling from
a matmul row, ``trace`` from a sum...); torch runs each as one kernel with its own rule, or none.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

import jitorch


def _arr(*shape, seed=0):
    return np.random.default_rng(seed).uniform(0.5, 1.5, shape).astype(np.float32)


A, V = _arr(4, 4), _arr(4, seed=1)
X1, X2, X3 = _arr(1, 2, 8, seed=2), _arr(1, 2, 6, 6, seed=3), _arr(1, 2, 4, 4, 4, seed=4)

# name -> fn(lib, a, v, x1, x2, x3): x1/x2/x3 are (N, C, L), (N, C, H, W) and (N, C, D, H, W) inputs.
OPS = {
    # not on the CPU lists: run as called, though jitorch makes them of matmul rows
    "dot": lambda T, a, v, x1, x2, x3: T.dot(v, v),
    "vdot": lambda T, a, v, x1, x2, x3: T.vdot(v, v),
    "mv": lambda T, a, v, x1, x2, x3: T.mv(a, v),
    "inner_1d": lambda T, a, v, x1, x2, x3: T.inner(v, v),
    "tensordot_full": lambda T, a, v, x1, x2, x3: T.tensordot(a, a, 2),
    "matrix_exp": lambda T, a, v, x1, x2, x3: T.linalg.matrix_exp(a * 0.1),
    "adaptive_avg_pool1d": lambda T, a, v, x1, x2, x3: T.nn.functional.adaptive_avg_pool1d(x1, 3),
    "adaptive_avg_pool2d": lambda T, a, v, x1, x2, x3: T.nn.functional.adaptive_avg_pool2d(x2, 4),
    "reflect_pad_3d": lambda T, a, v, x1, x2, x3: T.nn.functional.pad(x3, (1, 1, 1, 1, 1, 1), mode="reflect"),
    "circular_pad_2d": lambda T, a, v, x1, x2, x3: T.nn.functional.pad(x2, (1, 1, 1, 1), mode="circular"),
    "max_pool3d_with_indices": lambda T, a, v, x1, x2, x3: T.nn.functional.max_pool3d(x3, 2, return_indices=True)[0],
    # lower precision
    "linalg_vecdot": lambda T, a, v, x1, x2, x3: T.linalg.vecdot(a, a),
    "inner_2d": lambda T, a, v, x1, x2, x3: T.inner(a, a),
    "tensordot": lambda T, a, v, x1, x2, x3: T.tensordot(a, a, 1),
    # float32
    "trace": lambda T, a, v, x1, x2, x3: T.trace(a),
    "cdist": lambda T, a, v, x1, x2, x3: T.cdist(a, a),
    "quantile": lambda T, a, v, x1, x2, x3: T.quantile(a, 0.5),
    "quantile_tensor_q": lambda T, a, v, x1, x2, x3: T.quantile(a, T.tensor([0.25, 0.5]), dim=0),
    "nanquantile": lambda T, a, v, x1, x2, x3: T.nanquantile(a, 0.5, dim=1),
    "reflect_pad_1d": lambda T, a, v, x1, x2, x3: T.nn.functional.pad(x1, (2, 1), mode="reflect"),
    "reflect_pad_2d": lambda T, a, v, x1, x2, x3: T.nn.ReflectionPad2d(1)(x2),
    "replicate_pad_1d": lambda T, a, v, x1, x2, x3: T.nn.ReplicationPad1d((1, 2))(x1),
    "replicate_pad_2d": lambda T, a, v, x1, x2, x3: T.nn.functional.pad(x2, (1, 1, 2, 0), mode="replicate"),
    "replicate_pad_3d": lambda T, a, v, x1, x2, x3: T.nn.functional.pad(x3, (1, 1, 1, 1, 1, 1), mode="replicate"),
    "avg_pool3d": lambda T, a, v, x1, x2, x3: T.nn.functional.avg_pool3d(x3, 2),
    "max_pool3d": lambda T, a, v, x1, x2, x3: T.nn.MaxPool3d(2)(x3),
    "adaptive_avg_pool3d": lambda T, a, v, x1, x2, x3: T.nn.functional.adaptive_avg_pool3d(x3, 3),
    "adaptive_max_pool3d": lambda T, a, v, x1, x2, x3: T.nn.functional.adaptive_max_pool3d(x3, 3),
    "adaptive_max_pool3d_indices": lambda T, a, v, x1, x2, x3: T.nn.functional.adaptive_max_pool3d(
        x3, 3, return_indices=True)[0],
    "max_unpool2d": lambda T, a, v, x1, x2, x3: T.nn.functional.max_unpool2d(
        *T.nn.functional.max_pool2d(x2, 2, return_indices=True), 2),
    "max_unpool3d": lambda T, a, v, x1, x2, x3: T.nn.functional.max_unpool3d(
        *T.nn.functional.max_pool3d(x3, 2, return_indices=True), 2),
    "pinverse": lambda T, a, v, x1, x2, x3: T.pinverse(a),
    "lstsq": lambda T, a, v, x1, x2, x3: T.linalg.lstsq(a, a[:, :2]).solution,
    "grid_sample": lambda T, a, v, x1, x2, x3: T.nn.functional.grid_sample(
        x2, (x2[:, :1, :3, :4].reshape(1, 3, 2, 2) - 1) * 0.9, align_corners=False),
    "view_as_complex": lambda T, a, v, x1, x2, x3: T.view_as_complex(a.reshape(8, 2)).abs(),
    "fft": lambda T, a, v, x1, x2, x3: T.fft.fft(a).abs(),
    "rfft2": lambda T, a, v, x1, x2, x3: T.fft.rfft2(x2).abs(),
    "irfft": lambda T, a, v, x1, x2, x3: T.fft.irfft(a, n=6),
    "hfft": lambda T, a, v, x1, x2, x3: T.fft.hfft(v),
    "ctc_loss": lambda T, a, v, x1, x2, x3: T.nn.functional.ctc_loss(
        a.reshape(4, 1, 4).log_softmax(-1), T.tensor([[1, 2]]), [4], [2]),
    # for comparison: the unlisted 2-d pools and plain matmul keep their behaviour
    "avg_pool2d": lambda T, a, v, x1, x2, x3: T.nn.functional.avg_pool2d(x2, 2),
    "matmul_1d": lambda T, a, v, x1, x2, x3: v @ v,
}


def _run(T, fn, low):
    tensors = [T.from_numpy(x.copy()) for x in (A, V, X1, X2, X3)]
    if low:
        tensors = [t.to(T.bfloat16) for t in tensors]
    with T.autocast("cpu", dtype=T.bfloat16):
        return fn(T, *tensors)


@pytest.mark.parametrize("low", [False, True], ids=["float32_inputs", "bfloat16_inputs"])
@pytest.mark.parametrize("name", OPS)
def test_cpu_autocast_output_dtype_and_values_match_torch(name, low):
    jt, th = _run(jitorch, OPS[name], low), _run(torch, OPS[name], low)
    assert jt.dtype.name == str(th.dtype).split(".")[1], f"{name}: jitorch {jt.dtype}, torch {th.dtype}"
    if name == "matrix_exp" and low:
        return  # torch's bfloat16 matrix_exp overflows (entries of 1e30); jitorch's is exp(A) rounded to bfloat16
    tol = 3e-2 if jitorch.bfloat16 in (jt.dtype,) or low else 1e-4
    np.testing.assert_allclose(jt.detach().float().numpy(), th.detach().float().numpy(), rtol=tol, atol=tol)


def test_index_copy_promotes_mixed_dtypes_like_torch():
    # torch's promote policy: float32 if an argument is float32, else bfloat16; float64 is left out (so a bfloat16
    # self with a float64 source still differs in dtype, and index_copy refuses it in both)
    for self_dt, src_dt in (("float32", "bfloat16"), ("bfloat16", "float32"), ("bfloat16", "float64")):
        results = []
        for T in (jitorch, torch):
            x = T.zeros(3, 2, dtype=getattr(T, self_dt))
            src = T.ones(1, 2, dtype=getattr(T, src_dt))
            with T.autocast("cpu", dtype=T.bfloat16):
                try:
                    out = x.index_copy(0, T.tensor([1]), src)
                except RuntimeError as e:
                    results.append(type(e))
                    continue
            assert out[1].tolist() == [1.0, 1.0] and out[0].tolist() == [0.0, 0.0]
            results.append(str(out.dtype).split(".")[1])
        assert results[0] == results[1], (self_dt, src_dt, results)


def test_low_precision_inputs_the_lists_leave_alone_still_fail_like_torch():
    # det is not on torch's CPU float32 list: bfloat16 stays bfloat16, which neither library's LAPACK takes
    for T in (jitorch, torch):
        with T.autocast("cpu", dtype=T.bfloat16), pytest.raises((RuntimeError, NotImplementedError)):
            T.linalg.det(T.eye(3, dtype=T.bfloat16))


def test_unlisted_ops_do_not_disable_autocast_for_what_follows():
    with jitorch.autocast("cpu", dtype=jitorch.bfloat16):
        jitorch.mv(jitorch.ones(2, 2), jitorch.ones(2))
        assert (jitorch.ones(2, 2) @ jitorch.ones(2, 2)).dtype is jitorch.bfloat16
        assert jitorch.is_autocast_enabled("cpu")


def test_prod_multiplies_in_float32_under_float16_autocast_like_torch():
    # 60 factors near 1.3 overflow float16 (max 65504) but not float32: computed in half, the product would be inf
    x = np.full((60,), 1.3, dtype=np.float32)
    results = []
    for T in (jitorch, torch):
        with T.autocast("cpu", dtype=T.float16):
            h = T.from_numpy(x).to(T.float16)
            results.append([(str(p.dtype).split(".")[1], p.item()) for p in (h.prod(), T.prod(h, 0))])
    assert results[0] == results[1] and results[1][0][0] == "float32", results
