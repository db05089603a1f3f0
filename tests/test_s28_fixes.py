"""Regressions found by the s28 research scripts (tests/scripts/s28_*.py), each compared with torch."""
import numpy as np
import pytest
import torch

import jitorch


def _np(t):
    return t.detach().numpy()


@pytest.mark.parametrize("dtype", ["float32", "float64", "bfloat16"])
@pytest.mark.parametrize("kwargs", [dict(std=0.02), dict(), dict(mean=0.5, std=1.0, a=0.0, b=0.1),
                                    dict(mean=3.0, std=1.0, a=2.0, b=2.5), dict(std=1.0, a=-1.0, b=1.0)])
def test_trunc_normal_draws_torchs_values(kwargs, dtype):
    """Swin/ViT init their position tables with trunc_normal_: a seeded run must start from torch's weights."""
    def draw(m):
        m.manual_seed(0)
        t = m.nn.init.trunc_normal_(m.empty(49, 3, dtype=getattr(m, dtype)), **kwargs)
        return t.float(), m.rand(2)  # the stream continues where torch's does

    (a, a_next), (b, b_next) = draw(jitorch), draw(torch)
    np.testing.assert_array_equal(_np(a), _np(b))
    np.testing.assert_array_equal(_np(a_next), _np(b_next))
    lo, hi = kwargs.get("a", -2.0), kwargs.get("b", 2.0)
    assert lo <= _np(a).min() and _np(a).max() <= hi


def test_trunc_normal_with_generator_and_empty():
    g, tg = jitorch.Generator().manual_seed(3), torch.Generator().manual_seed(3)
    a = jitorch.nn.init.trunc_normal_(jitorch.empty(4, 6), std=0.5, generator=g)
    b = torch.nn.init.trunc_normal_(torch.empty(4, 6), std=0.5, generator=tg)
    np.testing.assert_array_equal(_np(a), _np(b))
    assert jitorch.nn.init.trunc_normal_(jitorch.empty(0, 3)).shape == (0, 3)


@pytest.mark.parametrize("shape,dim,g_shape", [((3, 4, 5), 0, (3, 1, 1)), ((3, 4, 5), 2, (1, 1, 5)),
                                               ((3, 4, 5), 1, (1, 4, 1)), ((3, 4, 5), -2, (1, 4, 1)),
                                               ((3, 4, 5), -1, ()), ((6, 2), 1, (1, 2))])
def test_weight_norm_top_level_functions(shape, dim, g_shape):
    """torch._weight_norm / torch.norm_except_dim, which hand-written weight-norm layers call: values and grads."""
    rng = np.random.default_rng(0)
    v_np, g_np = rng.standard_normal(shape).astype(np.float32), rng.standard_normal(g_shape).astype(np.float32)
    up = rng.standard_normal(shape).astype(np.float32)
    outs = []
    for m in (jitorch, torch):
        v = m.tensor(v_np, requires_grad=True)
        g = m.tensor(g_np, requires_grad=True)
        w = m._weight_norm(v, g, dim)
        w.backward(m.tensor(up))
        outs.append([_np(w), _np(v.grad), _np(g.grad), _np(m.norm_except_dim(v, 2, dim)),
                     _np(m.norm_except_dim(v, 3, dim))])
    for a, b in zip(*outs):
        assert a.shape == b.shape
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_norm_except_dim_bad_dim_names_the_range():
    with pytest.raises(IndexError, match=r"Dimension out of range \(expected to be in range of \[-3, 2\], but got 5\)"):
        jitorch.norm_except_dim(jitorch.ones(2, 3, 4), 2, 5)


def _seeded_pair(fn):
    """``fn``'s draws (a tensor or a list of them) after ``manual_seed(3)``, then the stream's next draws."""
    outs = []
    for m in (jitorch, torch):
        m.manual_seed(3)
        first = fn(m)
        first = first if isinstance(first, list) else [first]
        outs.append([_np(t) for t in first] + [_np(m.randn(3)), _np(m.rand(2))])  # the stream goes on in step
    return outs


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("make", [
    lambda m, dt: m.distributions.Gamma(m.tensor([0.3, 1.0, 2.5, 7.0], dtype=dt), m.tensor(1.5, dtype=dt)).rsample(
        (5,)),
    lambda m, dt: m.distributions.Beta(m.tensor(0.4, dtype=dt), m.tensor(0.4, dtype=dt)).sample(),  # mixup's lambda
    lambda m, dt: m.distributions.Beta(m.tensor([2.0, 0.5], dtype=dt), m.tensor([1.0, 3.0], dtype=dt)).rsample((4,)),
    lambda m, dt: m.distributions.Dirichlet(m.tensor([0.1, 1.0, 5.0], dtype=dt)).sample((6,)),
    lambda m, dt: m.distributions.StudentT(m.tensor(3.0, dtype=dt)).sample((7,)),
    lambda m, dt: m.distributions.Chi2(m.tensor([1.0, 4.0], dtype=dt)).sample((3,)),
])
def test_gamma_family_samples_are_torchs(make, dtype):
    """Gamma/Beta/Dirichlet/StudentT draws replay ATen's serial Marsaglia-Tsang loop on torch's stream."""
    a, b = _seeded_pair(lambda m: make(m, getattr(m, dtype)))
    for x, y in zip(a, b):
        assert x.dtype == y.dtype and x.shape == y.shape
        np.testing.assert_array_equal(x, y)


def test_gamma_after_a_cached_normal_and_at_edge_concentrations():
    """randn(3) leaves Box-Muller's second sample cached: the gamma loop's first normal is that one, as in ATen;
    concentrations 0, NaN and below -1 give the smallest normal number and still consume torch's draws."""
    def draw(m):
        m.randn(3)
        alpha = m.tensor([0.0, float("nan"), -0.5, -2.0, 1e-3, 0.5, 30.0])
        return m.distributions.Gamma(alpha, m.tensor(1.0), validate_args=False).sample()
    a, b = _seeded_pair(draw)
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)
    assert a[0][0] == np.finfo(np.float32).tiny


def test_large_gamma_draws_are_torchs():
    """Large draws run ATen's serial sampler as generated code on torch's stream: torch's values at any size."""
    jitorch.manual_seed(0)
    x = jitorch.distributions.Gamma(jitorch.full((20000,), 2.0), 1.0).sample()
    torch.manual_seed(0)
    y = torch.distributions.Gamma(torch.full((20000,), 2.0), 1.0).sample()
    np.testing.assert_array_equal(_np(x), y.numpy())


@pytest.mark.parametrize("dtype", ["float32", "float64", "bfloat16"])
@pytest.mark.parametrize("inplace", [False, True])
def test_rrelu_training_draws_torchs_slopes(dtype, inplace):
    """ATen draws one float64 uniform per non-positive element (0 included, NaN not), in row-major order; the
    gradient is the slope (1 for positives and NaN)."""
    rng = np.random.default_rng(1)
    a = rng.standard_normal((5, 6)).astype(np.float32)
    a[0, 0], a[1, 1], a[2, 2] = 0.0, np.nan, -0.0
    upstream = rng.standard_normal(a.shape).astype(np.float32)
    outs = []
    for m in (jitorch, torch):
        m.manual_seed(0)
        x = m.tensor(a).to(getattr(m, dtype)).requires_grad_(True)
        src = x.clone() if inplace else x
        y = m.nn.functional.rrelu(src, 0.1, 0.4, training=True, inplace=inplace)
        y.backward(m.tensor(upstream).to(y.dtype))
        outs.append([y.detach().float().numpy(), x.grad.float().numpy(), m.rand(3).numpy()])
    for p, q in zip(*outs):
        np.testing.assert_array_equal(p, q)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_poisson_counts_are_torchs(dtype):
    """Both of ATen's regimes (products of uniforms below rate 10, Hoermann's PTRS from 10) and rate 0, then the
    stream continues in step; torch.distributions.Poisson and NegativeBinomial sample through it."""
    rates = np.array([[0.0, 0.5, 3.0, 9.99], [10.0, 55.5, 1e4, 1e-3]])

    def draw(m):
        r = m.tensor(rates).to(getattr(m, dtype))
        g = m.Generator().manual_seed(7)
        return [m.poisson(r), m.distributions.Poisson(r[0, 1:]).sample((3,)), m.poisson(r, generator=g),
                m.distributions.NegativeBinomial(m.tensor(4.0), probs=m.tensor(0.3)).sample((5,))]
    a, b = _seeded_pair(draw)
    for x, y in zip(a, b):
        assert x.dtype == y.dtype
        np.testing.assert_array_equal(x, y)


def test_poisson_rejects_negative_rates_naming_the_op():
    with pytest.raises(RuntimeError, match="invalid Poisson rate, expected rate to be non-negative"):
        jitorch.poisson(jitorch.tensor([1.0, -0.5]))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_binomial_counts_are_torchs(dtype):
    """Inversion (count * p < 10), BTRS (>= 10), p above 1/2 (flipped), and the edges 0 / 1, through
    torch.binomial (with a generator too) and Binomial.sample."""
    count = np.array([0.0, 1.0, 10.0, 25.0, 40.0, 100.0, 1000.0, 12345.0, 7.0, 50.0])
    prob = np.array([0.3, 1.0, 0.0, 0.5, 0.99, 0.2, 0.01, 0.7, 0.45, 0.8])

    def draw(m):
        c, p = m.tensor(count).to(getattr(m, dtype)), m.tensor(prob).to(getattr(m, dtype))
        g = m.Generator().manual_seed(11)
        return [m.binomial(c, p), m.binomial(c, p, generator=g),
                m.distributions.Binomial(c[3:6], probs=p[3:6]).sample((4,)),
                m.distributions.Binomial(20, logits=m.tensor([-1.0, 2.0], dtype=getattr(m, dtype))).sample()]
    a, b = _seeded_pair(draw)
    for x, y in zip(a, b):
        assert x.dtype == y.dtype
        np.testing.assert_array_equal(x, y)


def test_von_mises_samples_are_torchs():
    """torch redraws uniforms for the whole shape every round and lets a later acceptance overwrite an entry."""
    def draw(m):
        d = m.distributions.VonMises(m.tensor([0.0, 1.0, -2.0]), m.tensor([0.5, 4.0, 1e-6]))
        return [d.sample((5,)), m.distributions.VonMises(m.tensor(0.3, dtype=m.float64), m.tensor(2.0)).sample((7,))]
    a, b = _seeded_pair(draw)
    for x, y in zip(a, b):
        assert x.dtype == y.dtype
        np.testing.assert_array_equal(x, y)


def test_large_poisson_and_binomial_draws_are_torchs():
    """Large draws run ATen's serial samplers as generated code on torch's stream: torch's counts at any size."""
    def draw(lib):
        lib.manual_seed(0)
        return (lib.poisson(lib.full((70000,), 4.0)),
                lib.binomial(lib.full((20000,), 30.0), lib.full((20000,), 0.2)))
    for ours, theirs in zip(draw(jitorch), draw(torch)):
        np.testing.assert_array_equal(_np(ours), theirs.numpy())
