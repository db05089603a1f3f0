"""nn.utils against PyTorch: gradient clipping (norms, clipped gradients, errors) and parameter/vector conversion."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import jitorch

SHAPES = [(3, 4), (5,), (2, 2, 2)]


def params_with_grads(rng, scale=1.0, dtype=np.float32):
    """Matching torch and jitorch parameter lists whose .grad are the same random arrays."""
    grads = [(scale * rng.standard_normal(s)).astype(dtype) for s in SHAPES]
    th, jt = [], []
    for g in grads:
        p = torch.nn.Parameter(torch.zeros(g.shape, dtype=torch.from_numpy(g).dtype))
        p.grad = torch.from_numpy(g.copy())
        th.append(p)
        q = jitorch.nn.Parameter(jitorch.zeros(g.shape, dtype=jitorch.from_numpy(g).dtype))
        q.grad = jitorch.from_numpy(g.copy())
        jt.append(q)
    return th, jt


def assert_grads_equal(jt, th, rtol=1e-5):
    for q, p in zip(jt, th):
        assert (q.grad is None) == (p.grad is None)
        if p.grad is not None:
            np.testing.assert_allclose(q.grad.numpy(), p.grad.numpy(), rtol=rtol, atol=1e-6)


@pytest.mark.parametrize("norm_type", [2.0, 1, 3.0, math.inf, 0.5])
@pytest.mark.parametrize("max_norm,scale", [(1.0, 1.0), (100.0, 1.0), (0.5, 0.01)])
def test_clip_grad_norm_matches_torch(rng, norm_type, max_norm, scale):
    th, jt = params_with_grads(rng, scale)
    total_t = torch.nn.utils.clip_grad_norm_(th, max_norm, norm_type=norm_type)
    total_j = jitorch.nn.utils.clip_grad_norm_(jt, max_norm, norm_type=norm_type)
    assert isinstance(total_j, jitorch.Tensor) and total_j.dim() == 0 and total_j.dtype is jitorch.float32
    np.testing.assert_allclose(total_j.item(), total_t.item(), rtol=1e-5)
    assert_grads_equal(jt, th)


def test_clip_grad_norm_inputs(rng):
    th, jt = params_with_grads(rng, dtype=np.float64)
    jt[1].grad = None
    th[1].grad = None
    total_t = torch.nn.utils.clip_grad_norm_(iter(th), 0.1)  # any iterable; parameters without grad are skipped
    total_j = jitorch.nn.utils.clip_grad_norm_(iter(jt), 0.1)
    assert total_j.dtype is jitorch.float64
    np.testing.assert_allclose(total_j.item(), total_t.item(), rtol=1e-12)
    assert_grads_equal(jt, th)
    single = jitorch.nn.Parameter(jitorch.zeros(2))
    single.grad = jitorch.tensor([3.0, 4.0])
    assert jitorch.nn.utils.clip_grad_norm_(single, 1.0).item() == 5.0  # a lone tensor is accepted
    assert jitorch.nn.utils.clip_grad_norm_([], 1.0).item() == 0.0
    with pytest.warns(UserWarning, match="`parameters` is an empty generator"):
        jitorch.nn.utils.clip_grad_norm_((p for p in []), 1.0)


def test_clip_grad_norm_nonfinite(rng):
    th, jt = params_with_grads(rng)
    th[0].grad[0, 0] = math.inf
    jt[0].grad[0, 0] = math.inf
    with pytest.raises(RuntimeError) as th_err:
        torch.nn.utils.clip_grad_norm_(th, 1.0, error_if_nonfinite=True)
    with pytest.raises(RuntimeError) as jt_err:
        jitorch.nn.utils.clip_grad_norm_(jt, 1.0, error_if_nonfinite=True)
    assert str(jt_err.value) == str(th_err.value)
    total_t = torch.nn.utils.clip_grad_norm_(th, 1.0)
    total_j = jitorch.nn.utils.clip_grad_norm_(jt, 1.0)
    assert math.isinf(total_j.item()) and math.isinf(total_t.item())
    for q, p in zip(jt, th):
        np.testing.assert_array_equal(np.isnan(q.grad.numpy()), np.isnan(p.grad.numpy()))


def test_total_norm_and_clip_with_norm(rng):
    th, jt = params_with_grads(rng)
    norm_t = torch.nn.utils.get_total_norm([p.grad for p in th], 3.0)
    norm_j = jitorch.nn.utils.get_total_norm([p.grad for p in jt], 3.0)
    np.testing.assert_allclose(norm_j.item(), norm_t.item(), rtol=1e-5)
    torch.nn.utils.clip_grads_with_norm_(th, 0.3, norm_t)
    jitorch.nn.utils.clip_grads_with_norm_(jt, 0.3, norm_j)
    assert_grads_equal(jt, th)


def test_clip_grad_value_matches_torch(rng):
    th, jt = params_with_grads(rng)
    assert torch.nn.utils.clip_grad_value_(th, 0.5) is None
    assert jitorch.nn.utils.clip_grad_value_(jt, 0.5) is None
    assert_grads_equal(jt, th, rtol=0)


@pytest.mark.parametrize("clip_value", [0.5, -0.25, 0.0, math.inf, math.nan])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_clip_grad_value_edges_match_torch(rng, clip_value, dtype):
    """Small and large gradients, a strided view's, inf/NaN entries, a negative bound (min > max: everything becomes
    the max, as torch's clamp) and non-finite bounds; one version bump per clamped gradient."""
    base = rng.standard_normal((30, 20)).astype(dtype)
    big = (3 * rng.standard_normal(9000)).astype(dtype)
    small = np.array([np.nan, np.inf, -np.inf, 0.7, -0.0, 0.1], dtype=dtype)
    grads = {}
    for lib in (torch, jitorch):
        params = [lib.nn.Parameter(lib.zeros(n, dtype=getattr(lib, np.dtype(dtype).name))) for n in (6, 9000, 30)]
        held = lib.tensor(base.copy())
        params[0].grad, params[1].grad, params[2].grad = lib.tensor(small.copy()), lib.tensor(big.copy()), held[:, 3]
        versions = [p.grad._version for p in params]
        lib.nn.utils.clip_grad_value_(params, clip_value)
        if lib is jitorch:
            assert [p.grad._version for p in params] == [v + 1 for v in versions]
        grads[lib] = [np.asarray(p.grad.numpy()) for p in params] + [held.numpy()]
    for j, t in zip(grads[jitorch], grads[torch]):
        assert j.dtype == t.dtype
        np.testing.assert_array_equal(j, t)
        # clip 0.0 keeps -0.0 and makes -1.5 -0.0 (a NaN's sign bit is nobody's to compare)
        np.testing.assert_array_equal(np.signbit(j) & ~np.isnan(j), np.signbit(t) & ~np.isnan(t))


def test_clip_grad_norm_two_norm_on_arrays_matches_dispatched_ops_and_torch(rng, monkeypatch):
    """The 2-norm of gradients taken on their arrays (small ones by a dot, large ones as the norm row, strided ones
    by the row's kernel) equals the dispatched ops' within float32 rounding, and torch's; with nothing to clip
    (``max_norm`` above the norm) the gradients keep their values bit for bit and their versions still advance."""
    from jitorch.nn.utils import clip_grad

    arrays = [rng.standard_normal(s).astype(np.float32) for s in ((300, 200), (17,), (40, 30), (), (5000,), (999,))]
    for max_norm in (2.0, 1e6):
        results = []
        for host in (True, False):
            if not host:
                monkeypatch.setattr(clip_grad, "_host_arrays", lambda tensors: None)
            params = [jitorch.nn.Parameter(jitorch.zeros(a.shape)) for a in arrays]
            for p, a in zip(params, arrays):
                p.grad = jitorch.tensor(a.copy())
            params[2].grad = jitorch.tensor(arrays[2].T.copy()).t()  # strided
            versions = [p.grad._version for p in params]
            total = jitorch.nn.utils.clip_grad_norm_(params, max_norm)
            assert [p.grad._version for p in params] == [v + 1 for v in versions]
            results.append([total.numpy()] + [p.grad.numpy() for p in params])
        monkeypatch.undo()
        for host, dispatched in zip(*results):
            np.testing.assert_allclose(host, dispatched, rtol=1e-6, atol=0)
        th = [torch.nn.Parameter(torch.zeros(a.shape)) for a in arrays]
        for p, a in zip(th, arrays):
            p.grad = torch.tensor(a.copy())
        total_t = torch.nn.utils.clip_grad_norm_(th, max_norm)
        np.testing.assert_allclose(results[0][0], total_t.numpy(), rtol=1e-5)
        for j, p, a in zip(results[0][1:], th, arrays):
            np.testing.assert_allclose(j, p.grad.numpy(), rtol=1e-5, atol=1e-7)
            if max_norm > 1e5:
                np.testing.assert_array_equal(j, a)


def test_clipping_does_not_record_autograd(rng):
    _, jt = params_with_grads(rng)
    for p in jt:
        p.grad.requires_grad_()
    jitorch.nn.utils.clip_grad_norm_(jt, 0.1)
    assert all(p.grad.grad_fn is None for p in jt)


def test_clip_on_host_arrays_equals_dispatched_ops(rng, monkeypatch):
    """Float CPU gradients clip on their arrays; the result must be the dispatched ops' to the bit, writes must reach
    a view's base, and versions advance as an in-place ``mul_`` would."""
    from jitorch.nn.utils import clip_grad

    flat = rng.standard_normal(20).astype(np.float32)
    results = []
    for host in (True, False):
        if not host:
            monkeypatch.setattr(clip_grad, "_host_arrays", lambda tensors: None)
        buffer = jitorch.tensor(flat.copy())
        params = [jitorch.nn.Parameter(jitorch.zeros(3, 4)),
                  jitorch.nn.Parameter(jitorch.zeros(8, dtype=jitorch.float64))]
        params[0].grad = buffer[:12].view(3, 4)
        params[1].grad = jitorch.tensor(flat[12:].astype(np.float64) * 7)
        versions = [p.grad._version for p in params]
        total = jitorch.nn.utils.clip_grad_norm_(params, 0.5, norm_type=3.0)
        assert [p.grad._version for p in params] == [v + 1 for v in versions]
        results.append((total.numpy(), buffer.numpy(), params[1].grad.numpy()))
    for host, dispatched in zip(*results):
        assert host.dtype == dispatched.dtype
        np.testing.assert_array_equal(host, dispatched)
    th = [torch.nn.Parameter(torch.zeros(3, 4)), torch.nn.Parameter(torch.zeros(8, dtype=torch.float64))]
    th[0].grad = torch.from_numpy(flat[:12].copy()).view(3, 4)
    th[1].grad = torch.from_numpy(flat[12:].astype(np.float64) * 7)
    total_t = torch.nn.utils.clip_grad_norm_(th, 0.5, norm_type=3.0)
    np.testing.assert_allclose(results[0][0], total_t.numpy(), rtol=1e-6)
    np.testing.assert_allclose(results[0][1][:12], th[0].grad.numpy().reshape(-1), rtol=1e-6)


def test_parameters_to_vector_and_back(rng):
    arrays = [rng.standard_normal(s).astype(np.float32) for s in SHAPES]
    th = [torch.nn.Parameter(torch.from_numpy(a.copy())) for a in arrays]
    jt = [jitorch.nn.Parameter(jitorch.from_numpy(a.copy())) for a in arrays]
    vec_t, vec_j = torch.nn.utils.parameters_to_vector(th), jitorch.nn.utils.parameters_to_vector(jt)
    np.testing.assert_array_equal(vec_j.detach().numpy(), vec_t.detach().numpy())
    assert vec_j.requires_grad and vec_j.grad_fn is not None  # differentiable, as in PyTorch
    (vec_j * 2).sum().backward()
    assert all(np.all(p.grad.numpy() == 2) for p in jt)
    new = rng.standard_normal(vec_t.numel()).astype(np.float32)
    torch.nn.utils.vector_to_parameters(torch.from_numpy(new.copy()), th)
    source = jitorch.from_numpy(new.copy())
    assert jitorch.nn.utils.vector_to_parameters(source, jt) is None
    for q, p in zip(jt, th):
        assert type(q) is jitorch.nn.Parameter and q.shape == p.shape
        np.testing.assert_array_equal(q.detach().numpy(), p.detach().numpy())
    source[0] = 100.0  # the parameters now view the vector's memory
    assert jt[0][0, 0].item() == 100.0
    with pytest.raises(TypeError, match="expected torch.Tensor, but got: list"):
        jitorch.nn.utils.vector_to_parameters([1.0], jt)
