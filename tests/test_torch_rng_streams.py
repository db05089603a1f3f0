"""jitorch's CPU random streams are torch's: after the same ``manual_seed`` the same calls give torch's numbers bit
for bit (rand/randn/randint/randperm, the in-place samplers, nn.init and module initialisation), the state bytes are
torch's layout, and interleaved calls keep the two streams in step."""
import numpy as np
import pytest
import torch

import jitorch

SEEDS = [0, 1, 1234, 2 ** 40 + 3, -5]
SIZES = [0, 1, 3, 15, 16, 17, 31, 1000, 4099]


def _same(a, b):
    a = a.detach().float().numpy() if a.dtype in (jitorch.float16, jitorch.bfloat16) else a.detach().numpy()
    b = b.detach().float().numpy() if b.dtype in (torch.float16, torch.bfloat16) else b.detach().numpy()
    assert a.shape == b.shape and a.dtype == b.dtype
    np.testing.assert_array_equal(a, b)


def _both(seed, fn):
    jitorch.manual_seed(seed)
    torch.manual_seed(seed)
    return fn(jitorch), fn(torch)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "bfloat16"])
def test_rand_and_randn_are_torchs(seed, n, dtype):
    def calls(m):
        dt = getattr(m, dtype)
        if dtype in ("float16", "bfloat16"):  # randn of half types: see the xfail below; normal_ is torch's
            return [m.rand(n, dtype=dt), m.empty(n, dtype=dt).normal_(), m.randn(5, dtype=dt), m.rand(2, n, dtype=dt),
                    m.empty(n, 3, dtype=dt).normal_()]
        return [m.rand(n, dtype=dt), m.randn(n, dtype=dt), m.randn(5, dtype=dt), m.rand(2, n, dtype=dt),
                m.randn(n, 3, dtype=dt)]
    for a, b in zip(*_both(seed, calls)):
        _same(a, b)


def test_half_randn_of_an_uneven_size_is_torchs():
    a, b = _both(0, lambda m: m.randn(17, dtype=m.float16))
    _same(a, b)


@pytest.mark.parametrize("seed", SEEDS[:3])
@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_inplace_samplers_are_torchs(seed, n, dtype):
    def calls(m):
        dt = getattr(m, dtype)
        return [m.empty(n, dtype=dt).uniform_(-2.5, 3.0), m.empty(n, dtype=dt).normal_(1.5, 0.3),
                m.empty(n, 2, dtype=dt).t().normal_(),  # strided: ATen's scalar path
                m.empty(n, dtype=dt).random_(-7, 50), m.empty(n, dtype=dt).random_(),
                m.rand_like(m.zeros(n, dtype=dt)), m.randn_like(m.zeros(n, dtype=dt)),
                m.normal(2.0, 3.0, size=(n,), dtype=dt)]
    for a, b in zip(*_both(seed, calls)):
        _same(a, b)


@pytest.mark.parametrize("seed", SEEDS)
def test_integers_and_permutations_are_torchs(seed):
    def calls(m):
        return [m.randint(0, 10, (17,)), m.randint(-5, 2 ** 40, (9,)), m.randint(3, (4, 5), dtype=m.int32),
                m.randperm(1), m.randperm(2), m.randperm(33), m.randperm(1000),
                m.empty(6, dtype=m.int64).random_(), m.empty(5, dtype=m.uint8).random_(),
                m.randint_like(m.zeros(3, 3), 4, 9)]
    for a, b in zip(*_both(seed, calls)):
        _same(a, b)


@pytest.mark.parametrize("seed", SEEDS[:3])
@pytest.mark.parametrize("n", [0, 1, 5, 17, 1000])
@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "bfloat16"])
def test_other_distributions_are_torchs(seed, n, dtype):
    def calls(m):
        dt = getattr(m, dtype)
        return [m.empty(n, dtype=dt).exponential_(0.37), m.empty(n, dtype=dt).cauchy_(0.7, 0.3),
                m.empty(n, dtype=dt).geometric_(0.37), m.empty(n, dtype=dt).log_normal_(0.5, 0.7),
                m.empty(n, 3, dtype=dt).t().exponential_(), m.empty(n, dtype=m.int64).geometric_(0.2),
                m.empty(n, dtype=dt).bernoulli_(0.3), m.empty(n, dtype=dt).bernoulli_(m.full((n,), 0.3, dtype=dt)),
                m.bernoulli(m.full((n,), 0.3, dtype=dt), generator=m.Generator().manual_seed(2)),
                m.nn.functional.dropout(m.ones(n, 4, dtype=dt), 0.3), m.nn.Dropout(0.5)(m.ones(n, 4, dtype=dt)),
                m.nn.functional.dropout2d(m.ones(n, 4, 2, 2, dtype=dt), 0.3),
                m.empty(7, dtype=m.int32).random_(-2 ** 31, 2 ** 31)]
    for a, b in zip(*_both(seed, calls)):
        _same(a, b)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_multinomial_is_torchs(dtype):
    def calls(m):
        dt = getattr(m, dtype)
        return [m.multinomial(m.ones(20, dtype=dt), 3), m.multinomial(m.arange(1, 9, dtype=dt), 2),
                m.multinomial(m.rand(3, 6, dtype=dt), 4, replacement=True),
                m.multinomial(m.arange(1., 12., dtype=dt), 7, replacement=True)]
    for a, b in zip(*_both(0, calls)):
        _same(a, b)


def test_bernoulli_of_float32_probabilities_is_torchs():
    a, b = _both(0, lambda m: m.bernoulli(m.full((40,), 0.3)))
    _same(a, b)


@pytest.mark.parametrize("seed", SEEDS[:3])
def test_interleaved_calls_keep_the_streams_in_step(seed):
    """Odd scalar normal counts leave a cached sample that the next small draw uses, as torch's generator."""
    def calls(m):
        out = []
        for n in (3, 1, 20, 5, 16, 2, 7):
            out += [m.randn(n, dtype=m.float64), m.rand(n), m.randn(n)]
        return out
    for a, b in zip(*_both(seed, calls)):
        _same(a, b)


@pytest.mark.parametrize("seed", SEEDS[:3])
def test_module_initialisation_and_nn_init_are_torchs(seed):
    def calls(m):
        lin, conv = m.nn.Linear(4, 3), m.nn.Conv2d(3, 8, 3)
        w = m.empty(5, 7)
        out = [lin.weight, lin.bias, conv.weight, conv.bias, m.nn.Embedding(10, 4).weight]
        for init in (lambda t: m.nn.init.xavier_uniform_(t), lambda t: m.nn.init.xavier_normal_(t),
                     lambda t: m.nn.init.kaiming_uniform_(t), lambda t: m.nn.init.kaiming_normal_(t),
                     lambda t: m.nn.init.normal_(t, 0.5, 2.0), lambda t: m.nn.init.uniform_(t, -1, 1)):
            out.append(init(w).clone())
        return out
    for a, b in zip(*_both(seed, calls)):
        _same(a, b)


@pytest.mark.parametrize("kwargs", [dict(std=0.02), dict(mean=0.5, std=1.0, a=0.0, b=0.1)])
def test_trunc_normal_is_torchs(kwargs):
    a, b = _both(0, lambda m: m.nn.init.trunc_normal_(m.empty(5, 7), **kwargs))
    _same(a, b)


def test_generators_and_state_bytes_are_torchs():
    g, tg = jitorch.Generator().manual_seed(5), torch.Generator().manual_seed(5)
    _same(jitorch.randn(40, generator=g), torch.randn(40, generator=tg))
    _same(jitorch.rand(3, generator=g), torch.rand(3, generator=tg))
    np.testing.assert_array_equal(g.get_state().numpy(), tg.get_state().numpy())
    assert jitorch.Generator().initial_seed() == torch.Generator().initial_seed()
    _same(jitorch.rand(4, generator=jitorch.Generator()), torch.rand(4, generator=torch.Generator()))
    with jitorch.random.fork_rng():
        jitorch.manual_seed(3)
        inner = jitorch.rand(3)
    jitorch.manual_seed(3)
    assert jitorch.equal(jitorch.rand(3), inner)


@pytest.mark.parametrize("seed", SEEDS[:3])
def test_complex_draws_are_torchs(seed):
    def calls(m):
        g = m.Generator().manual_seed(seed)
        return [m.randn(20, dtype=m.complex64), m.rand(5, dtype=m.complex128), m.randn(3, dtype=m.complex128),
                m.randn(3, dtype=m.complex64, generator=g), m.rand(2, 3, dtype=m.complex64),
                m.empty(5, dtype=m.complex64).normal_(1.0, 2.0), m.empty(9, dtype=m.complex128).uniform_(-1, 1)]
    for a, b in zip(*_both(seed, calls)):
        _same(a, b)


@pytest.mark.xfail(strict=True, reason="randn of fewer than 8 complex64 values from the default generator scales "
                                       "float32 normals by 1/sqrt(2) (NORMAL_SAMPLE, ops/random_ops.py); ATen scales "
                                       "the double sample before rounding, so some values differ in the last bit")
def test_small_complex64_randn_from_the_default_generator_is_torchs():
    for seed in range(20):
        a, b = _both(seed, lambda m: m.randn(3, dtype=m.complex64))
        _same(a, b)


@pytest.mark.parametrize("n", [3, 16, 17, 40])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_draws_from_a_generator_are_torchs(n, dtype):
    g, tg = jitorch.Generator().manual_seed(4), torch.Generator().manual_seed(4)
    for _ in range(2):
        _same(jitorch.randn(n, dtype=getattr(jitorch, dtype), generator=g),
              torch.randn(n, dtype=getattr(torch, dtype), generator=tg))
        _same(jitorch.rand(n, dtype=getattr(jitorch, dtype), generator=g),
              torch.rand(n, dtype=getattr(torch, dtype), generator=tg))


def test_generators_copy_and_pickle_mid_stream():
    import copy
    import pickle

    g = jitorch.Generator().manual_seed(3)
    jitorch.randn(3, dtype=jitorch.float64, generator=g)  # leaves a cached normal in the state
    copies = [copy.deepcopy(g), pickle.loads(pickle.dumps(g))]
    want = jitorch.randn(9, dtype=jitorch.float64, generator=g)
    for c in copies:
        np.testing.assert_array_equal(jitorch.randn(9, dtype=jitorch.float64, generator=c).numpy(), want.numpy())
