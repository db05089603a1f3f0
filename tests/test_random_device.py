"""The device RNG: samplers drawing through a ``DeviceStream`` (CuPy's Generator API), checked on the CPU with a fake
CuPy (``tests/cupy_random_fake.py``: CuPy's random surface over NumPy, arrays marked as device arrays), plus
``cuda``-marked tests of the real thing.

What is checked here: every sampler runs with only CuPy's API; what reaches a tensor was made by the device module
(never re-made on the host), with no device-to-host copy; reproducibility under ``manual_seed``; the state round
trip; distribution moments; device/generator mismatch errors and seeding of the per-device generators.
"""
import types

import numpy as np
import pytest
import torch

import jitorch
from cupy_random_fake import DeviceArray, fake_cupy
from jitorch import _random
from jitorch._random import Generator
from jitorch._random_device import DeviceStream
from jitorch._tensor import Tensor
from jitorch.ops import random_ops

SAMPLERS = {
    "rand": lambda g: jitorch.rand(3, 4, generator=g),
    "rand64": lambda g: jitorch.rand(5, dtype=jitorch.float64, generator=g),
    "randn": lambda g: jitorch.randn(6, generator=g),
    "randint": lambda g: jitorch.randint(-3, 9, (7,), generator=g),
    "randperm": lambda g: jitorch.randperm(9, generator=g),
    "normal": lambda g: jitorch.normal(2.0, 3.0, (5,), generator=g),
    "bernoulli": lambda g: jitorch.bernoulli(jitorch.full((8,), 0.4), generator=g),
    "multinomial": lambda g: jitorch.multinomial(jitorch.tensor([[0.0, 1, 2, 3], [1, 1, 1, 1]]), 3, generator=g),
    "multinomial_repl": lambda g: jitorch.multinomial(jitorch.tensor([0.0, 1, 2, 5]), 6, True, generator=g),
    "poisson": lambda g: jitorch.poisson(jitorch.full((5,), 3.0), generator=g),
    "uniform_": lambda g: jitorch.zeros(5).uniform_(-1, 1, generator=g),
    "normal_": lambda g: jitorch.zeros(5, dtype=jitorch.float64).normal_(1, 2, generator=g),
    "random_": lambda g: jitorch.zeros(5).random_(0, 7, generator=g),
    "random_top": lambda g: jitorch.zeros(5, dtype=jitorch.uint8).random_(generator=g),
    "random_int64": lambda g: jitorch.zeros(5, dtype=jitorch.int64).random_(-2 ** 63, None, generator=g),
    "uniform_complex": lambda g: jitorch.zeros(5, dtype=jitorch.complex64).uniform_(generator=g),
    "bernoulli_": lambda g: jitorch.zeros(5).bernoulli_(0.3, generator=g),
    "bernoulli_t": lambda g: jitorch.zeros(3).bernoulli_(jitorch.tensor([0.0, 1.0, 0.5]), generator=g),
    "exponential_": lambda g: jitorch.zeros(5).exponential_(2.0, generator=g),
    "log_normal_": lambda g: jitorch.zeros(5).log_normal_(generator=g),
    "cauchy_": lambda g: jitorch.zeros(5).cauchy_(generator=g),
    "geometric_": lambda g: jitorch.zeros(5).geometric_(0.3, generator=g),
}


@pytest.fixture
def device_gen():
    """A generator drawing through a ``DeviceStream`` over the fake CuPy, for CPU tensors."""
    return Generator._over(DeviceStream(fake_cupy(), 1234))


@pytest.fixture(autouse=True)
def made(monkeypatch):
    """Types of the arrays wrapped into tensors; device arrays are unwrapped to plain NumPy for the rest of jitorch
    (which takes any array that is not exactly an ``ndarray`` for a CuPy one)."""
    seen = []
    original = Tensor.__dict__["_make"].__func__

    def make(data):
        seen.append(type(data))
        return original(data.view(np.ndarray) if isinstance(data, DeviceArray) else data)
    monkeypatch.setattr(Tensor, "_make", staticmethod(make))
    return seen


def _forbid_host_reads(monkeypatch):
    def refuse(self, *args, **kwargs):
        raise AssertionError("a device sampler read a tensor on the host")
    for name in ("_host", "item", "tolist", "numpy"):
        monkeypatch.setattr(Tensor, name, refuse)


@pytest.mark.parametrize("name", sorted(SAMPLERS))
def test_samplers_draw_on_the_device_only(name, device_gen, made, monkeypatch):
    build = SAMPLERS[name]
    copies = DeviceArray.host_copies
    _forbid_host_reads(monkeypatch)
    out = build(device_gen)
    # The samples reached a tensor as a device array: nothing was drawn, converted or validated on the host.
    assert DeviceArray in made
    assert DeviceArray.host_copies == copies
    assert device_gen._rng._gen.calls, "the CuPy generator was never called"
    monkeypatch.undo()
    reference = build(jitorch.Generator().manual_seed(0))  # the CPU generator's result: same shape and dtype
    assert out.shape == reference.shape and out.dtype == reference.dtype


@pytest.mark.parametrize("name", sorted(SAMPLERS))
def test_device_streams_reproduce_under_manual_seed(name):
    build = SAMPLERS[name]
    g1, g2 = Generator._over(DeviceStream(fake_cupy(), 7)), Generator._over(DeviceStream(fake_cupy(), 0))
    g2.manual_seed(7)
    a, b = build(g1), build(g2)
    assert a.dtype == b.dtype and a.tolist() == b.tolist()
    assert g1.initial_seed() == 7
    # A second draw moves on (for samplers whose output can differ).
    if name in ("rand", "randn", "normal", "uniform_", "normal_"):
        assert build(g1).tolist() != a.tolist()


def test_device_state_round_trip(device_gen):
    state = device_gen.get_state()
    assert state.dtype is jitorch.uint8 and state.device.type == "cpu" and state.dim() == 1
    first = jitorch.randn(10, generator=device_gen)
    device_gen.manual_seed(99)
    device_gen.set_state(state)
    assert jitorch.randn(10, generator=device_gen).tolist() == first.tolist()
    assert device_gen.initial_seed() == 1234
    clone = device_gen.clone_state()
    assert jitorch.rand(4, generator=clone).tolist() == jitorch.rand(4, generator=device_gen).tolist()
    with pytest.raises(RuntimeError, match="wrong size"):
        device_gen.set_state(state[:-8])
    with pytest.raises(RuntimeError, match="more than 8 bytes"):
        device_gen.set_state(state[:4])


def test_device_distribution_moments(device_gen):
    g = device_gen
    u = jitorch.rand(20000, generator=g)
    assert 0 <= u.min().item() and u.max().item() < 1
    assert abs(u.mean().item() - 0.5) < 0.01 and abs(u.var().item() - 1 / 12) < 0.005
    z = jitorch.randn(20000, dtype=jitorch.float64, generator=g)
    assert abs(z.mean().item()) < 0.03 and abs(z.std().item() - 1) < 0.03
    r = jitorch.randint(-2, 3, (20000,), generator=g)
    counts = np.bincount(r.numpy() + 2, minlength=5)
    assert r.min().item() == -2 and r.max().item() == 2 and np.all(np.abs(counts / 20000 - 0.2) < 0.02)
    assert sorted(jitorch.randperm(50, generator=g).tolist()) == list(range(50))
    p = jitorch.tensor([0.0, 0.25, 0.9, 1.0]).repeat(5000)
    freq = jitorch.bernoulli(p, generator=g).reshape(5000, 4).mean(0)
    np.testing.assert_allclose(freq.numpy(), [0.0, 0.25, 0.9, 1.0], atol=0.03)
    e = jitorch.zeros(20000).exponential_(4.0, generator=g)
    assert e.min().item() >= 0 and abs(e.mean().item() - 0.25) < 0.01
    n = jitorch.zeros(20000).normal_(3.0, 2.0, generator=g)
    assert abs(n.mean().item() - 3) < 0.06 and abs(n.std().item() - 2) < 0.06
    c = jitorch.zeros(20001).cauchy_(1.0, 0.5, generator=g)
    assert abs(c.median().item() - 1.0) < 0.05
    geo = jitorch.zeros(20000).geometric_(0.25, generator=g)
    assert geo.min().item() >= 1 and abs(geo.mean().item() - 4) < 0.15


def test_device_multinomial_frequencies(device_gen):
    weights = jitorch.tensor([[0.0, 1.0, 3.0, 0.0, 6.0], [2.0, 2.0, 0.0, 4.0, 0.0]])
    want = weights.numpy() / weights.numpy().sum(1, keepdims=True)
    drawn = jitorch.multinomial(weights, 20000, True, generator=device_gen).numpy()
    for row, probs in zip(drawn, want):
        np.testing.assert_allclose(np.bincount(row, minlength=5) / 20000, probs, atol=0.015)
    firsts = np.zeros((2, 5))
    for _ in range(2000):
        rows = jitorch.multinomial(weights, 3, generator=device_gen).numpy()
        assert all(len(set(r)) == 3 for r in rows) and 0 not in rows[0] and 3 not in rows[0] and 2 not in rows[1]
        firsts[[0, 1], rows[:, 0]] += 1
    np.testing.assert_allclose(firsts / 2000, want, atol=0.04)  # the first pick follows the weights


def test_device_dropout_mask_comes_from_the_device_generator(device_gen, made):
    x = jitorch.ones(4000)
    made.clear()
    mask = x.new_empty(4000).bernoulli_(0.75, generator=device_gen)
    kept = mask.mean().item()
    assert abs(kept - 0.75) < 0.03 and DeviceArray in made


def test_generator_device_must_match_the_tensor():
    cuda_like = Generator._over(DeviceStream(fake_cupy(), 0), device="cuda:0")
    with pytest.raises(RuntimeError, match="Expected a 'cpu' device type for generator but found 'cuda'"):
        jitorch.rand(2, generator=cuda_like)
    with pytest.raises(RuntimeError, match="Expected a 'cpu' device type for generator but found 'cuda'"):
        jitorch.zeros(2).normal_(generator=cuda_like)


@pytest.mark.skipif(jitorch.cuda.is_available(), reason="checks the CPU-only behaviour")
def test_cuda_generator_without_cuda_raises_like_torch():
    with pytest.raises(RuntimeError):
        torch.Generator(device="cuda")
    with pytest.raises(RuntimeError, match="CUDA"):
        jitorch.Generator(device="cuda")
    jitorch.cuda.manual_seed(3)  # queued no-ops, as in CPU-only torch
    jitorch.cuda.manual_seed_all(3)
    jitorch.cuda.seed_all()
    with pytest.raises(AssertionError):
        jitorch.cuda.get_rng_state()


def test_manual_seed_seeds_every_cuda_generator(monkeypatch):
    fake = Generator._over(DeviceStream(fake_cupy(), 5), device="cuda:0")
    monkeypatch.setitem(_random._cuda_generators, 0, fake)
    monkeypatch.setattr(_random, "_cuda_seed", None)
    jitorch.manual_seed(321)
    assert fake.initial_seed() == 321 and _random._cuda_seed == 321
    reference = Generator._over(DeviceStream(fake_cupy(), 321), device="cuda:0")
    assert fake._rng.random((4,)).tolist() == reference._rng.random((4,)).tolist()
    s = jitorch.seed()
    assert fake.initial_seed() == s == jitorch.initial_seed()


# -- on a GPU ---------------------------------------------------------------------------------------------------------
@pytest.mark.cuda
def test_cuda_draws_reproduce_under_manual_seed():
    jitorch.manual_seed(11)
    a = (jitorch.rand(100, device="cuda"), jitorch.randn(100, device="cuda"), jitorch.randperm(50, device="cuda"))
    jitorch.manual_seed(11)
    b = (jitorch.rand(100, device="cuda"), jitorch.randn(100, device="cuda"), jitorch.randperm(50, device="cuda"))
    assert all(x.device.type == "cuda" and bool((x == y).all()) for x, y in zip(a, b))
    jitorch.cuda.manual_seed(12)
    assert jitorch.cuda.initial_seed() == 12


@pytest.mark.cuda
def test_cuda_samplers_make_device_arrays_without_syncing():
    import warnings

    import cupy
    import cupyx

    jitorch.manual_seed(0)
    x = jitorch.ones(1000, device="cuda")
    half = x * 0.5
    weights = jitorch.rand(4, 10, device="cuda")
    cupy.cuda.Device().synchronize()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # allow_synchronize is deprecated, and still the way to catch a sync
        with cupyx.allow_synchronize(False):
            outs = [jitorch.rand(1000, device="cuda"), jitorch.randn(10, device="cuda"),
                    jitorch.randint(0, 5, (10,), device="cuda"), jitorch.randperm(10, device="cuda"),
                    jitorch.bernoulli(half), jitorch.multinomial(weights, 3),
                    jitorch.multinomial(weights, 5, True), x.clone().uniform_(), x.clone().normal_(),
                    jitorch.nn.functional.dropout(x, 0.5)]
    assert all(isinstance(o._data, cupy.ndarray) for o in outs)


@pytest.mark.cuda
def test_cuda_moments_and_state_round_trip():
    jitorch.manual_seed(1)
    z = jitorch.randn(100000, device="cuda")
    assert abs(z.mean().item()) < 0.02 and abs(z.std().item() - 1) < 0.02
    u = jitorch.rand(100000, device="cuda")
    assert abs(u.mean().item() - 0.5) < 0.01
    state = jitorch.cuda.get_rng_state()
    a = jitorch.rand(10, device="cuda")
    jitorch.cuda.set_rng_state(state)
    assert bool((jitorch.rand(10, device="cuda") == a).all())
    g = jitorch.Generator(device="cuda").manual_seed(3)
    h = jitorch.Generator(device="cuda").manual_seed(3)
    assert bool((jitorch.randn(5, device="cuda", generator=g) == jitorch.randn(5, device="cuda", generator=h)).all())



@pytest.mark.parametrize("row, sampler", [(random_ops.UNIFORM_SAMPLE, jitorch.rand),
                                          (random_ops.NORMAL_SAMPLE, jitorch.randn)])
def test_random_rows_draw_device_samples_like_the_sampler(row, sampler, device_gen, made, monkeypatch):
    # rand()/randn() with the default generator are these rows; on a device their kernel draws there, through the
    # samplers' hooks (which CUDA graph capture replaces), the numbers the sampler itself draws.
    class DeviceRef(DeviceArray):
        device = types.SimpleNamespace(id=0)

    monkeypatch.setattr(_random, "cuda_generator", lambda index=None: device_gen)
    ref = np.zeros((), np.float32).view(DeviceRef)
    device_gen.manual_seed(5)
    made.clear()
    out = row.kernel(fake_cupy(), ref, (3, 4))
    assert DeviceArray in made and out.shape == (3, 4) and out.dtype == np.float32
    device_gen.manual_seed(5)
    np.testing.assert_array_equal(out, sampler(3, 4, generator=device_gen).numpy())
