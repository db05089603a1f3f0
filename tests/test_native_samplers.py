"""ATen's serial Poisson, binomial and gamma/Dirichlet samplers as generated code (codegen/llvm_samplers.py, run
by jitorch/_uniform_tape.py's ``run_sampler``) against torch after the same seed: the values, and the stream after
them (the next draws, the cached Box-Muller normal), for rates and parameters in every regime, 0-d, empty and
non-contiguous inputs, float32 and float64; the refill path with a buffer of a few uniforms; and the generated
samplers against the per-draw Python replays on the same stream.
"""
import numpy as np
import pytest
import torch

import jitorch
from jitorch._torch_poisson import torch_poisson, torch_poisson_reference
from jitorch._torch_rng import TorchCPUStream
from jitorch.distributions._torch_binomial import torch_binomial, torch_binomial_reference
from jitorch.distributions._torch_gamma import (torch_dirichlet, torch_dirichlet_reference, torch_standard_gamma,
                                                torch_standard_gamma_reference)

SEEDS = [0, 1, 7, 12345]
DTYPES = ["float32", "float64"]
_RNG = np.random.default_rng(2024)
# rates: 0, tiny, the product regime (< 10), PTRS from 10, huge (ATen's int64 overflow past 2**63), inf
RATES = np.concatenate([_RNG.uniform(0, 10, 300), _RNG.uniform(10, 2000, 200),
                        [0.0, 1e-300, 1e-8, 9.999, 10.0, 1e6, 5e18, 1e20, 1e300, np.inf]])
# binomial: inversion (count * p < 10), BTRS, p above 1/2 (flipped), the edges; a NaN probability gives NaN
COUNTS = np.concatenate([np.floor(_RNG.uniform(0, 60, 300)), np.floor(_RNG.uniform(50, 5000, 200)),
                         [0.0, 1.0, 5.0, 25.0, 1000.0, 1e6, 3e9, 1e20, 7.0, 40.0, -3.0]])
PROBS = np.concatenate([_RNG.uniform(0, 1, 500),
                        [0.3, 1.0, 0.5, 0.5, 0.0, 0.2, 0.7, 0.4, np.nan, 0.99, 0.5]])
# gamma: boosted (< 1), Marsaglia-Tsang, 0, tiny, NaN and negatives (ATen's smallest normal), huge, inf
ALPHAS = np.concatenate([_RNG.uniform(0, 1, 200), _RNG.exponential(3.0, 300),
                         [0.0, 1e-300, 1e-30, 1 / 3, 1.0, 1e6, 1e300, np.nan, -0.5, -2.0, -1e-300, np.inf]])


def _same_stream(stream):
    """The stream's state equals torch's default generator's (engine, position and cached normal)."""
    return stream.to_bytes().tobytes() == torch.get_rng_state().numpy().tobytes()


def _torch_seeded(seed, cached_normal):
    torch.manual_seed(seed)
    if cached_normal:  # a scalar normal_distribution<double> draw keeps its second sample
        torch.randn(1, dtype=torch.float64)


def _stream(seed, cached_normal):
    stream = TorchCPUStream(seed)
    if cached_normal:
        stream._scalar_normals(1, 0.0, 1.0)
    return stream


# -- Poisson -------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("max_block", [None, 1, 5])
def test_poisson_is_torchs_in_every_regime(seed, max_block):
    stream = _stream(seed, False)
    ours = torch_poisson(stream, RATES, max_block=max_block)
    _torch_seeded(seed, False)
    np.testing.assert_array_equal(ours, torch.poisson(torch.tensor(RATES)).numpy())
    assert _same_stream(stream)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(), (0,), (3, 0), (7, 9)])
def test_poisson_op_is_torchs_for_shapes_dtypes_and_strides(dtype, shape):
    rates = _RNG.uniform(0, 25, shape)
    for m in (jitorch, torch):
        m.manual_seed(3)
    for contiguous in (True, False):
        a, b = jitorch.tensor(rates, dtype=getattr(jitorch, dtype)), torch.tensor(rates, dtype=getattr(torch, dtype))
        if not contiguous and len(shape) == 2:
            a, b = a.t(), b.t()
        ours, theirs = jitorch.poisson(a), torch.poisson(b)
        assert ours.dtype == getattr(jitorch, dtype) and tuple(ours.shape) == tuple(theirs.shape)
        np.testing.assert_array_equal(ours.numpy(), theirs.numpy())
    np.testing.assert_array_equal(jitorch.rand(4).numpy(), torch.rand(4).numpy())  # the stream goes on in step


def test_large_poisson_draw_stays_on_torchs_stream():
    rates = _RNG.uniform(0, 30, 200_000)
    jitorch.manual_seed(5)
    torch.manual_seed(5)
    np.testing.assert_array_equal(jitorch.poisson(jitorch.tensor(rates)).numpy(),
                                  torch.poisson(torch.tensor(rates)).numpy())
    np.testing.assert_array_equal(jitorch.rand(3).numpy(), torch.rand(3).numpy())


# -- binomial ------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("max_block", [None, 1, 3])
def test_binomial_is_torchs_in_every_regime(seed, dtype, max_block):
    count, prob = COUNTS.astype(dtype), PROBS.astype(dtype)
    stream = _stream(seed, False)
    ours = torch_binomial(stream, count, prob, max_block=max_block)
    _torch_seeded(seed, False)
    theirs = torch.binomial(torch.tensor(count), torch.tensor(prob)).numpy()
    assert ours.dtype == theirs.dtype
    np.testing.assert_array_equal(ours, theirs)
    assert _same_stream(stream)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(), (0,), (2, 0), (6, 11)])
def test_binomial_op_and_distribution_are_torchs(dtype, shape):
    count, prob = np.floor(_RNG.uniform(0, 80, shape)), _RNG.uniform(0, 1, shape)
    outs = []
    for m in (jitorch, torch):
        m.manual_seed(9)
        c, p = m.tensor(count, dtype=getattr(m, dtype)), m.tensor(prob, dtype=getattr(m, dtype))
        draws = [m.binomial(c, p), m.distributions.Binomial(c, probs=p).sample((2,))]
        if len(shape) == 2:  # non-contiguous inputs walk in the view's row-major order
            draws.append(m.binomial(c.t(), p.t()))
        outs.append([d.numpy() for d in draws] + [m.rand(3).numpy()])
    for x, y in zip(*outs):
        assert x.dtype == y.dtype
        np.testing.assert_array_equal(x, y)


def test_binomial_with_a_nan_count_is_nan_without_drawing():
    """ATen's loops never end there (torch hangs): NaN, and the stream is left as it was."""
    stream, reference = TorchCPUStream(0), TorchCPUStream(0)
    ours = torch_binomial(stream, np.array([np.nan, 4.0]), np.array([0.3, 0.0]))
    assert np.isnan(ours[0]) and ours[1] == 0
    assert stream.to_bytes().tobytes() == reference.to_bytes().tobytes()


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_binomial_with_infinite_counts_is_torchs_and_keeps_the_stream_in_step(dtype):
    def draw(lib):
        lib.manual_seed(0)
        count = lib.tensor([np.inf, np.inf, np.inf, -np.inf], dtype=getattr(lib, dtype))
        prob = lib.tensor([0.3, 0.0, 1.0, 0.3], dtype=getattr(lib, dtype))
        return lib.binomial(count, prob).numpy(), lib.rand(3).numpy()
    for ours, theirs in zip(draw(jitorch), draw(torch)):
        np.testing.assert_array_equal(ours, theirs)


# -- gamma and Dirichlet -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("cached_normal", [False, True])
@pytest.mark.parametrize("max_block", [None, 1, 4])
def test_standard_gamma_is_torchs_in_every_regime(seed, dtype, cached_normal, max_block):
    alpha = ALPHAS.astype(dtype)
    stream = _stream(seed, cached_normal)
    ours = torch_standard_gamma(stream, alpha, max_block=max_block)
    _torch_seeded(seed, cached_normal)
    theirs = torch._standard_gamma(torch.tensor(alpha)).numpy()
    assert ours.dtype == theirs.dtype
    np.testing.assert_array_equal(ours, theirs)
    assert _same_stream(stream)  # the normal cached at the end included


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("max_block", [None, 2])
def test_dirichlet_is_torchs(seed, dtype, max_block):
    alpha = np.abs(ALPHAS[:500]).reshape(100, 5).astype(dtype)
    alpha[~np.isfinite(alpha) | (alpha > 1e30)] = 2.0
    stream = _stream(seed, True)
    ours = torch_dirichlet(stream, alpha, max_block=max_block)
    _torch_seeded(seed, True)
    theirs = torch._sample_dirichlet(torch.tensor(alpha)).numpy()
    assert ours.dtype == theirs.dtype
    np.testing.assert_array_equal(ours, theirs)
    assert _same_stream(stream)


@pytest.mark.parametrize("terms", [5, 6, 9, 17, 33, 100, 256])
def test_dirichlet_normalises_by_atens_row_sum(terms):
    """ATen's float64 row sum adds four-lane vectors and the tail in its own order, not NumPy's."""
    alpha = _RNG.uniform(0.5, 5.0, (60, terms))
    stream = _stream(0, False)
    ours = torch_dirichlet(stream, alpha)
    _torch_seeded(0, False)
    np.testing.assert_array_equal(ours, torch._sample_dirichlet(torch.tensor(alpha)).numpy())


@pytest.mark.parametrize("dtype", DTYPES)
def test_gamma_family_distributions_are_torchs_for_shapes_and_strides(dtype):
    conc = _RNG.uniform(0.05, 6.0, (5, 3))
    outs = []
    for m in (jitorch, torch):
        m.manual_seed(21)
        c = m.tensor(conc, dtype=getattr(m, dtype))
        draws = [m.distributions.Gamma(c, m.tensor(2.0, dtype=c.dtype)).sample(),
                 m.distributions.Gamma(c.t(), m.tensor(1.0, dtype=c.dtype)).sample((2,)),
                 m.distributions.Gamma(c[0, 0], m.tensor(1.0, dtype=c.dtype)).sample(),
                 m.distributions.Gamma(c[:0], m.tensor(1.0, dtype=c.dtype)).sample(),
                 m.distributions.Dirichlet(c[:, :2]).sample((3,)),
                 m.distributions.Beta(c[:, 0], c[:, 1]).sample()]
        outs.append([d.numpy() for d in draws] + [m.randn(5, dtype=m.float64).numpy()])
    for x, y in zip(*outs):
        assert x.dtype == y.dtype and x.shape == y.shape
        np.testing.assert_array_equal(x, y)


def test_large_gamma_draw_stays_on_torchs_stream():
    alpha = _RNG.exponential(2.0, 100_000).astype(np.float32)
    jitorch.manual_seed(4)
    torch.manual_seed(4)
    ours = jitorch.distributions.Gamma(jitorch.tensor(alpha), jitorch.tensor(1.0)).sample()
    np.testing.assert_array_equal(ours.numpy(), torch._standard_gamma(torch.tensor(alpha)).numpy())
    np.testing.assert_array_equal(jitorch.randn(3).numpy(), torch.randn(3).numpy())


# -- the generated samplers against the Python replays, on the same stream ----------------------------------------
@pytest.mark.parametrize("seed", SEEDS)
def test_generated_samplers_agree_with_the_python_replays(seed):
    finite_rates = RATES[RATES < 2.0 ** 62]  # (the replay's counts are Python ints: no int64 overflow to copy)
    cases = [
        (torch_poisson, torch_poisson_reference, (finite_rates,)),
        (torch_binomial, torch_binomial_reference, (COUNTS[np.isfinite(COUNTS)].astype(np.float32),
                                                    PROBS[np.isfinite(COUNTS)].astype(np.float32))),
        (torch_binomial, torch_binomial_reference, (COUNTS, PROBS)),
        (torch_standard_gamma, torch_standard_gamma_reference, (ALPHAS[(ALPHAS >= 0) | np.isnan(ALPHAS)],)),
        (torch_standard_gamma, torch_standard_gamma_reference, (ALPHAS[ALPHAS >= 0].astype(np.float32),)),
        (torch_dirichlet, torch_dirichlet_reference, (np.abs(ALPHAS[:480]).reshape(-1, 6).clip(0.01, 50),)),
    ]
    for native, replay, args in cases:
        for max_block in (None, 2):
            a, b = _stream(seed, True), _stream(seed, True)
            ours, reference = native(a, *args, max_block=max_block), replay(b, *args)
            np.testing.assert_array_equal(ours, reference)
            assert a.to_bytes().tobytes() == b.to_bytes().tobytes(), native.__name__
