"""``nn.functional`` normalizations (layer, RMS, group, batch, instance, local response, ``normalize``), checked
against PyTorch 2.13.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as TF
from helpers import check_error, check_op, gradcheck_op, np_dtype, to_jitorch, to_torch, tol_for

import jitorch
import jitorch.nn.functional as F

from nn_functional_helpers import F32


# -- normalization --------------------------------------------------------------------------------------------------
def both(arr, requires_grad=False):
    return to_jitorch(arr, requires_grad=requires_grad), to_torch(arr, requires_grad=requires_grad)


@pytest.mark.parametrize("shape,normalized", [((2, 3, 4), (4,)), ((2, 3, 4), (3, 4)), ((5,), (5,))])
@pytest.mark.parametrize("affine", ["none", "weight", "both"])
def test_layer_norm_matches_torch(shape, normalized, affine, rng):
    x = rng.standard_normal(shape).astype(np.float32) * 2 + 1
    w = rng.standard_normal(normalized).astype(np.float32)
    b = rng.standard_normal(normalized).astype(np.float32)
    extra = {"none": [], "weight": [w], "both": [w, b]}[affine]
    check_op(lambda x, *wb: F.layer_norm(x, normalized, *wb, eps=1e-3),
             lambda x, *wb: TF.layer_norm(x, normalized, *wb, eps=1e-3), [x] + extra, **F32)
    gradcheck_op(lambda x, *wb: F.layer_norm(x, normalized, *wb), [a.astype(np.float64) for a in [x] + extra])


@pytest.mark.parametrize("shape", [(4,), (2, 3)])
def test_rms_norm_matches_torch(shape, rng):
    x = rng.standard_normal((2, 3) + shape).astype(np.float32)
    w = rng.standard_normal(shape).astype(np.float32)
    check_op(lambda x, w: F.rms_norm(x, shape, w), lambda x, w: TF.rms_norm(x, shape, w), [x, w], **F32)
    check_op(lambda x: F.rms_norm(x, shape, eps=0.1), lambda x: TF.rms_norm(x, shape, eps=0.1), [x], **F32)
    gradcheck_op(lambda x, w: F.rms_norm(x, shape, w), [x.astype(np.float64), w.astype(np.float64)])


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_rms_norm_half_default_eps_is_float32s(dtype):
    # eps=None means float32's epsilon for half inputs (computed upcast), not the half type's much larger one
    x = (np.random.default_rng(0).standard_normal((2, 5)) * 0.05).astype(np_dtype(dtype))
    w = np.random.default_rng(1).standard_normal(5).astype(np_dtype(dtype))
    atol, rtol = tol_for(dtype)  # half eps (1e-3 against a mean square of 2.5e-3) was off by 15%
    check_op(lambda x, w: F.rms_norm(x, (5,), w), lambda x, w: TF.rms_norm(x, (5,), w), [x, w], grad=False,
             atol=atol, rtol=rtol)


# Not (2, 6) with 6 groups: one value per group, where both frameworks output rounding noise / sqrt(eps).
@pytest.mark.parametrize("groups,shape", [(g, s) for g in (1, 2, 3, 6) for s in ((2, 6), (2, 6, 5), (3, 6, 2, 3))
                                          if (g, s) != (6, (2, 6))])
def test_group_norm_matches_torch(groups, shape, rng):
    x = rng.standard_normal(shape).astype(np.float32) * 3
    w, b = rng.standard_normal(6).astype(np.float32), rng.standard_normal(6).astype(np.float32)
    check_op(lambda x, w, b: F.group_norm(x, groups, w, b), lambda x, w, b: TF.group_norm(x, groups, w, b),
             [x, w, b], **F32)
    gradcheck_op(lambda x, w, b: F.group_norm(x, groups, w, b, eps=1e-3),
                     [a.astype(np.float64) for a in (x, w, b)])


@pytest.mark.parametrize("call", [
    lambda F, lib: F.layer_norm(lib.ones(2, 3, 4), [5]),
    lambda F, lib: F.layer_norm(lib.ones(2, 3), [3], weight=lib.ones(2)),
    lambda F, lib: F.layer_norm(lib.ones(2, 3), [3], bias=lib.ones(2)),
    lambda F, lib: F.layer_norm(lib.ones(2, 3), 3),
    lambda F, lib: F.rms_norm(lib.ones(2, 3, 4), [5]),
    lambda F, lib: F.group_norm(lib.ones(2, 6, 4), 4),
    lambda F, lib: F.group_norm(lib.ones(1, 2), 2),
    lambda F, lib: F.group_norm(lib.ones(2, 6, 4), 3, weight=lib.ones(2)),
    lambda F, lib: F.group_norm(lib.ones(6), 3),
])
def test_norm_errors_match_torch(call):
    check_error(lambda: call(F, jitorch), lambda: call(TF, torch))


@pytest.mark.parametrize("shape", [(6, 3), (4, 3, 5), (2, 3, 4, 2)])
@pytest.mark.parametrize("momentum", [0.1, 0.5])
def test_batch_norm_training_matches_torch(shape, momentum, rng):
    x = rng.standard_normal(shape).astype(np.float32) * 2 + 0.5
    w, b = rng.standard_normal(3).astype(np.float32), rng.standard_normal(3).astype(np.float32)
    rm, rv = rng.standard_normal(3).astype(np.float32), rng.uniform(0.5, 2, 3).astype(np.float32)
    jt_rm, th_rm = both(rm)
    jt_rv, th_rv = both(rv)
    check_op(lambda x, w, b: F.batch_norm(x, jt_rm, jt_rv, w, b, True, momentum),
             lambda x, w, b: TF.batch_norm(x, th_rm, th_rv, w, b, True, momentum), [x, w, b], **F32)
    np.testing.assert_allclose(jt_rm.numpy(), th_rm.numpy(), **F32)
    np.testing.assert_allclose(jt_rv.numpy(), th_rv.numpy(), **F32)  # unbiased batch variance
    assert not jt_rm.requires_grad and jt_rm.grad_fn is None
    gradcheck_op(lambda x, w, b: F.batch_norm(x, None, None, w, b, True), [a.astype(np.float64) for a in (x, w, b)])


@pytest.mark.parametrize("shape", [(6, 3), (2, 3, 4, 2)])
def test_batch_norm_eval_and_stat_free_training_match_torch(shape, rng):
    x = rng.standard_normal(shape).astype(np.float32)
    w, b = rng.standard_normal(3).astype(np.float32), rng.standard_normal(3).astype(np.float32)
    rm, rv = rng.standard_normal(3).astype(np.float32), rng.uniform(0.5, 2, 3).astype(np.float32)
    (jt_rm, th_rm), (jt_rv, th_rv) = both(rm), both(rv)
    check_op(lambda x, w, b: F.batch_norm(x, jt_rm, jt_rv, w, b, False, eps=1e-3),
             lambda x, w, b: TF.batch_norm(x, th_rm, th_rv, w, b, False, eps=1e-3), [x, w, b], **F32)
    check_op(lambda x: F.batch_norm(x, None, None, training=True),
             lambda x: TF.batch_norm(x, None, None, training=True), [x], **F32)
    rm64, rv64 = jitorch.tensor(rm.astype(np.float64)), jitorch.tensor(rv.astype(np.float64))
    gradcheck_op(lambda x, w: F.batch_norm(x, rm64, rv64, w), [a.astype(np.float64) for a in (x, w)])


@pytest.mark.parametrize("call", [
    lambda F, lib: F.batch_norm(lib.ones(4, 3), None, None, training=False),
    lambda F, lib: F.batch_norm(lib.ones(4, 3), lib.zeros(2), lib.ones(2), training=True),
    lambda F, lib: F.batch_norm(lib.ones(1, 3), lib.zeros(3), lib.ones(3), training=True),
    lambda F, lib: F.batch_norm(lib.ones(4, 3), lib.zeros(3), lib.ones(3), weight=lib.ones(2)),
    lambda F, lib: F.batch_norm(lib.ones(4, 3), lib.zeros(3), lib.ones(3), training=True, eps=0.0),
    lambda F, lib: F.batch_norm(lib.ones(4, 3), lib.zeros(3), None, training=True),
    lambda F, lib: F.instance_norm(lib.ones(2, 3, 1)),
    lambda F, lib: F.batch_norm(lib.ones(4, 3), lib.zeros(3, requires_grad=True), lib.ones(3)),
])
def test_batch_and_instance_norm_errors_match_torch(call):
    check_error(lambda: call(F, jitorch), lambda: call(TF, torch))


@pytest.mark.parametrize("shape", [(2, 3, 5), (3, 3, 2, 4)])
def test_instance_norm_matches_torch(shape, rng):
    x = rng.standard_normal(shape).astype(np.float32) * 2
    w, b = rng.standard_normal(3).astype(np.float32), rng.standard_normal(3).astype(np.float32)
    check_op(lambda x, w, b: F.instance_norm(x, weight=w, bias=b),
             lambda x, w, b: TF.instance_norm(x, weight=w, bias=b), [x, w, b], **F32)
    rm, rv = rng.standard_normal(3).astype(np.float32), rng.uniform(0.5, 2, 3).astype(np.float32)
    jt_rm, th_rm = both(rm)
    jt_rv, th_rv = both(rv)
    check_op(lambda x: F.instance_norm(x, jt_rm, jt_rv, momentum=0.3),
             lambda x: TF.instance_norm(x, th_rm, th_rv, momentum=0.3), [x], **F32)
    np.testing.assert_allclose(jt_rm.numpy(), th_rm.numpy(), **F32)
    np.testing.assert_allclose(jt_rv.numpy(), th_rv.numpy(), **F32)
    check_op(lambda x: F.instance_norm(x, jt_rm, jt_rv, use_input_stats=False),
             lambda x: TF.instance_norm(x, th_rm, th_rv, use_input_stats=False), [x], **F32)
    gradcheck_op(lambda x, w, b: F.instance_norm(x, weight=w, bias=b), [a.astype(np.float64) for a in (x, w, b)])


@pytest.mark.parametrize("shape", [(2, 7, 5), (2, 6, 3, 4), (1, 5, 2, 2, 3)])
@pytest.mark.parametrize("size", [1, 2, 3, 5])
def test_local_response_norm_matches_torch(shape, size, rng):
    x = rng.standard_normal(shape).astype(np.float32) * 3
    check_op(lambda x: F.local_response_norm(x, size, alpha=0.1, beta=0.6, k=2.0),
             lambda x: TF.local_response_norm(x, size, alpha=0.1, beta=0.6, k=2.0), [x], **F32)


@pytest.mark.parametrize("p,dim", [(2.0, 1), (1.0, 0), (3.0, -1)])
def test_normalize_matches_torch(p, dim, rng):
    x = rng.standard_normal((3, 4)).astype(np.float32)
    x[1] = 0.0  # a zero vector: the eps floor
    check_op(lambda x: F.normalize(x, p, dim), lambda x: TF.normalize(x, p, dim), [x], **F32)
    gradcheck_op(lambda x: F.normalize(x, p, dim), [rng.standard_normal((3, 4))])


def test_half_precision_norms_compute_in_float32(rng):
    x = rng.standard_normal((4, 8)).astype(np.float16)
    for name, args in [("layer_norm", ([8],)), ("rms_norm", ([8],)), ("group_norm", (2,))]:
        check_op(lambda t: getattr(F, name)(t, *args), lambda t: getattr(TF, name)(t, *args), [x], atol=2e-3,
                 rtol=2e-3, grad=False)
