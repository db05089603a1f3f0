"""float32 normal draws (``randn``, ``Normal.sample``, ``normal_``) compared with torch's in distribution (two-sample
Kolmogorov-Smirnov on 200k draws each, moments), plus dtypes, shapes, seeding, finiteness, and a CPU graph's replay
drawing what eager draws. (CPU streams are torch's own now: `test_torch_rng_streams.py` compares them bit for bit.)"""
import numpy as np
import pytest
import scipy.stats
import torch

import jitorch

N = 200_000


def _torch_normals(n, seed=0):
    torch.manual_seed(seed)
    return torch.randn(n).numpy().astype(np.float64)


@pytest.mark.parametrize("draw", [
    lambda: jitorch.randn(N),
    lambda: jitorch.randn(400, 500),
    lambda: jitorch.empty(N).normal_(),
    lambda: jitorch.randn(N, generator=jitorch.Generator().manual_seed(5)),
    lambda: jitorch.randn(N + 1),  # odd: one Box-Muller pair half used
])
def test_same_distribution_as_torch(draw):
    jitorch.manual_seed(0)
    x = draw()
    assert x.dtype == jitorch.float32
    z = x.numpy().astype(np.float64).ravel()
    assert np.isfinite(z).all()
    assert scipy.stats.ks_2samp(z, _torch_normals(z.size)).pvalue > 1e-3
    assert abs(z.mean()) < 0.01 and abs(z.std() - 1) < 0.01
    # the pairs are independent: cos and sin halves of one draw are uncorrelated
    half = z.size // 2
    assert abs(np.corrcoef(z[:half], z[half:2 * half])[0, 1]) < 0.01


@pytest.mark.parametrize("mean,std", [(0.0, 1.0), (3.0, 0.5), (-2.0, 4.0), (1.0, 0.0)])
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "complex64"])
def test_normal_inplace_moments_match_torch(mean, std, dtype):
    jitorch.manual_seed(1)
    torch.manual_seed(1)
    jt = jitorch.empty(N, dtype=getattr(jitorch, dtype)).normal_(mean, std)
    th = torch.empty(N, dtype=getattr(torch, dtype)).normal_(mean, std)
    assert jt.dtype.is_complex == th.dtype.is_complex and str(jt.dtype) == str(th.dtype).replace("torch", "jitorch")
    a = jt.to(jitorch.complex128 if dtype == "complex64" else jitorch.float64).numpy()
    b = th.to(torch.complex128 if dtype == "complex64" else torch.float64).numpy()
    for part in ((np.real, np.imag) if dtype == "complex64" else (np.real,)):
        pa, pb = part(a), part(b)
        tol = 0.02 * max(std, 1e-3) + (0.02 * abs(mean) if dtype != "float32" else 0.0)
        assert abs(pa.mean() - pb.mean()) < tol + 1e-6
        assert abs(pa.std() - pb.std()) < tol + 1e-6
        if std > 0:
            assert scipy.stats.ks_2samp(pa, pb).pvalue > 1e-3


def test_seeded_streams_repeat_and_generators_agree():
    jitorch.manual_seed(7)
    a = jitorch.randn(5000)
    jitorch.manual_seed(7)
    b = jitorch.randn(5000)
    c = jitorch.randn(5000, generator=jitorch.Generator().manual_seed(7))
    assert bool((a == b).all()) and bool((a == c).all())
    assert not bool((a == jitorch.randn(5000)).all())


def test_small_and_float64_draws_are_torchs():
    # (was: the small draw equal to NumPy's PCG64 stream; CPU streams are torch's mt19937 now)
    jitorch.manual_seed(3)
    torch.manual_seed(3)
    np.testing.assert_array_equal(jitorch.randn(10).numpy(), torch.randn(10).numpy())
    x = jitorch.randn(5000, dtype=jitorch.float64)
    assert x.dtype == jitorch.float64
    np.testing.assert_array_equal(x.numpy(), torch.randn(5000, dtype=torch.float64).numpy())


@pytest.mark.parametrize("sampler", [lambda buf: buf.normal_(2.0, 0.5), lambda buf: buf.copy_(jitorch.randn(5000))])
def test_a_captured_draw_replays_the_eager_sequence(sampler):
    buf = jitorch.empty(5000)
    graph = jitorch.cpu.CPUGraph()
    with jitorch.cpu.graph(graph):
        sampler(buf)
    jitorch.manual_seed(7)
    graph.replay()
    replayed = buf.numpy().copy()
    jitorch.manual_seed(7)
    eager = sampler(jitorch.empty(5000)).numpy()
    np.testing.assert_array_equal(replayed, eager)
