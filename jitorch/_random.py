"""Random numbers: ``Generator``, ``manual_seed`` and the sampling functions (``rand``, ``randn``, ``randint``, ...).

jitorch's streams come from NumPy's PCG64; they are reproducible under ``manual_seed`` but are not PyTorch's values.

>>> import jitorch
>>> _ = jitorch.manual_seed(0); a = jitorch.rand(3)
>>> _ = jitorch.manual_seed(0); bool((a == jitorch.rand(3)).all())
True
"""
from __future__ import annotations

import numpy as np

from . import _dtype
from ._creation import _finish
from ._shape import normalize_shape
from ._tensor import Tensor

__all__ = ["Generator", "manual_seed", "seed", "initial_seed", "get_rng_state", "set_rng_state", "default_generator",
           "rand", "randn", "randint", "randperm", "normal", "bernoulli", "multinomial", "poisson", "rand_like",
           "randn_like", "randint_like"]


class Generator:
    """A random stream: ``Generator().manual_seed(42)``."""

    def __init__(self, device="cpu"):
        from ._device import device as _device

        self.device = _device(device)
        self._seed = 67280421310721  # PyTorch's default seed value
        self._rng = np.random.Generator(np.random.PCG64(self._seed))

    def manual_seed(self, seed):
        seed = int(seed)
        if seed < 0:
            seed += 1 << 64
        self._seed = seed
        self._rng = np.random.Generator(np.random.PCG64(seed))
        return self

    def seed(self):
        s = int(np.random.SeedSequence().entropy) % (1 << 63)
        self.manual_seed(s)
        return s

    def initial_seed(self):
        return self._seed

    def get_state(self):
        import pickle

        state = pickle.dumps(self._rng.bit_generator.state)
        return _finish(np.frombuffer(state, dtype=np.uint8).copy())

    def set_state(self, new_state):
        import pickle

        self._rng.bit_generator.state = pickle.loads(new_state._host().tobytes())
        return self

    def clone_state(self):
        g = Generator(self.device)
        g._seed = self._seed
        g._rng.bit_generator.state = self._rng.bit_generator.state
        return g


default_generator = Generator()


def manual_seed(seed):
    """Seed the default generator (and CUDA generators); returns the default generator."""
    default_generator.manual_seed(seed)
    return default_generator


def seed():
    return default_generator.seed()


def initial_seed():
    return default_generator.initial_seed()


def get_rng_state():
    return default_generator.get_state()


def set_rng_state(new_state):
    default_generator.set_state(new_state)


def _rng(generator):
    return (generator or default_generator)._rng


def _float_dtype(dtype):
    dt = _dtype.get_default_dtype() if dtype is None else _dtype.to_dtype(dtype)
    return dt


def _sample(values, dt, device, requires_grad):
    return _finish(np.asarray(values).astype(dt.np, copy=False), requires_grad, device)


def rand(*size, generator=None, out=None, dtype=None, layout=None, device=None, requires_grad=False,
         pin_memory=False):
    """Uniform samples in [0, 1)."""
    dt = _float_dtype(dtype)
    shape = normalize_shape(size, "rand")
    gen_dtype = np.float64 if dt is _dtype.float64 else np.float32
    return _sample(_rng(generator).random(shape, dtype=gen_dtype), dt, device, requires_grad)


def randn(*size, generator=None, out=None, dtype=None, layout=None, device=None, requires_grad=False,
          pin_memory=False):
    """Standard normal samples."""
    dt = _float_dtype(dtype)
    shape = normalize_shape(size, "randn")
    gen_dtype = np.float64 if dt is _dtype.float64 else np.float32
    return _sample(_rng(generator).standard_normal(shape, dtype=gen_dtype), dt, device, requires_grad)


def randint(low=0, high=None, size=None, *, generator=None, out=None, dtype=None, layout=None, device=None,
            requires_grad=False):
    """Integers in ``[low, high)``; ``randint(high, size)`` is also accepted."""
    if size is None:
        if high is None:
            raise TypeError("randint() missing required argument 'size'")
        low, high, size = 0, low, high
    elif high is None:
        low, high = 0, low
    if high <= low:
        raise RuntimeError(f"random_ expects 'from' to be less than 'to', but got from={low} >= to={high}")
    dt = _dtype.int64 if dtype is None else _dtype.to_dtype(dtype)
    shape = normalize_shape((size,) if isinstance(size, int) else tuple(size), "randint")
    return _sample(_rng(generator).integers(low, high, shape), dt, device, requires_grad)


def randperm(n, *, generator=None, out=None, dtype=None, layout=None, device=None, requires_grad=False,
             pin_memory=False):
    dt = _dtype.int64 if dtype is None else _dtype.to_dtype(dtype)
    return _sample(_rng(generator).permutation(n), dt, device, requires_grad)


def normal(mean=0.0, std=1.0, size=None, *, generator=None, out=None, dtype=None, device=None, requires_grad=False):
    """Normal samples; ``mean`` and ``std`` may be tensors (broadcast) or numbers with a ``size``."""
    if isinstance(mean, Tensor) or isinstance(std, Tensor):
        ref = mean if isinstance(mean, Tensor) else std
        shape = np.broadcast_shapes(np.shape(mean._host() if isinstance(mean, Tensor) else mean),
                                    np.shape(std._host() if isinstance(std, Tensor) else std))
        noise = randn(shape, generator=generator, dtype=ref.dtype, device=ref.device)
        return (noise * std + mean).detach()
    if isinstance(std, (int, float)) and std < 0:
        raise RuntimeError(f"normal expects std >= 0.0, but found std {std}")
    shape = () if size is None else normalize_shape((size,) if isinstance(size, int) else tuple(size), "normal")
    return randn(shape, generator=generator, dtype=dtype, device=device) * std + mean


def bernoulli(input, p=None, *, generator=None, out=None):
    """0/1 samples with probabilities ``input`` (or the scalar ``p``)."""
    probs = input._host() if p is None else np.full(input._data.shape, p)
    if np.any((probs < 0) | (probs > 1)):
        raise RuntimeError("bernoulli: Expected p_in >= 0 && p_in <= 1 to be true, but got false.")
    draws = _rng(generator).random(probs.shape) < probs
    return _finish(draws.astype(input._data.dtype), False, input.device)


def multinomial(input, num_samples, replacement=False, *, generator=None, out=None):
    """Indices sampled from the rows of ``input`` (non-negative weights, not necessarily normalized)."""
    probs = input._host().astype(np.float64)
    if probs.ndim not in (1, 2):
        raise RuntimeError(f"multinomial: prob_dist must be 1 or 2 dim, got {probs.ndim}")
    if np.any(probs < 0) or not np.all(np.isfinite(probs)):
        raise RuntimeError("multinomial: probability tensor contains either `inf`, `nan` or element < 0")
    rows = probs.reshape(-1, probs.shape[-1])
    if not replacement and num_samples > rows.shape[1]:
        raise RuntimeError("multinomial: cannot sample n_sample > prob_dist.size(-1) samples without replacement")
    rng = _rng(generator)
    out = np.empty((rows.shape[0], num_samples), dtype=np.int64)
    for i, row in enumerate(rows):
        total = row.sum()
        if total <= 0:
            raise RuntimeError("multinomial: invalid multinomial distribution (sum of probabilities <= 0)")
        if replacement:
            out[i] = rng.choice(row.size, size=num_samples, replace=True, p=row / total)
        else:
            # Gumbel top-k: sampling without replacement in proportion to the weights.
            keys = np.where(row > 0, np.log(np.where(row > 0, row, 1)) - np.log(-np.log(rng.random(row.size))), -np.inf)
            if num_samples > int((row > 0).sum()):
                raise RuntimeError("multinomial: invalid multinomial distribution (with replacement=False, not enough "
                                   "non-negative category to sample)")
            out[i] = np.argsort(-keys, kind="stable")[:num_samples]
    return _finish(out.reshape(probs.shape[:-1] + (num_samples,)), False, input.device)


def poisson(input, generator=None):
    return _finish(_rng(generator).poisson(input._host()).astype(input._data.dtype), False, input.device)


def rand_like(input, *, dtype=None, device=None, requires_grad=False, memory_format=None):
    return rand(input.shape, dtype=dtype or input.dtype, device=device or input.device, requires_grad=requires_grad)


def randn_like(input, *, dtype=None, device=None, requires_grad=False, memory_format=None):
    return randn(input.shape, dtype=dtype or input.dtype, device=device or input.device, requires_grad=requires_grad)


def randint_like(input, low=0, high=None, *, dtype=None, device=None, requires_grad=False, memory_format=None):
    return randint(low, high, input.shape, dtype=dtype or input.dtype, device=device or input.device)


# -- in-place samplers --------------------------------------------------------------------------------------------
def _fill_from(self, values):
    from .autograd.grad_mode import no_grad

    with no_grad():
        self.copy_(_finish(np.asarray(values), False, self.device))
    return self


def _uniform_(self, from_=0.0, to=1.0, *, generator=None):
    return _fill_from(self, _rng(generator).uniform(from_, to, self._data.shape))


def _normal_(self, mean=0.0, std=1.0, *, generator=None):
    return _fill_from(self, _rng(generator).normal(mean, std, self._data.shape))


def _random_(self, from_=0, to=None, *, generator=None):
    if to is None:
        from_, to = 0, from_ if from_ else (2 ** 24 if self.is_floating_point() else np.iinfo(self._data.dtype).max)
    return _fill_from(self, _rng(generator).integers(from_, to, self._data.shape))


def _bernoulli_(self, p=0.5, *, generator=None):
    probs = p._host() if isinstance(p, Tensor) else p
    return _fill_from(self, _rng(generator).random(self._data.shape) < probs)


def _exponential_(self, lambd=1.0, *, generator=None):
    return _fill_from(self, _rng(generator).exponential(1.0 / lambd, self._data.shape))


def _log_normal_(self, mean=1.0, std=2.0, *, generator=None):
    return _fill_from(self, _rng(generator).lognormal(mean, std, self._data.shape))


def _cauchy_(self, median=0.0, sigma=1.0, *, generator=None):
    return _fill_from(self, median + sigma * _rng(generator).standard_cauchy(self._data.shape))


def _geometric_(self, p, *, generator=None):
    return _fill_from(self, _rng(generator).geometric(p, self._data.shape))


for _name, _fn in dict(uniform_=_uniform_, normal_=_normal_, random_=_random_, bernoulli_=_bernoulli_,
                       exponential_=_exponential_, log_normal_=_log_normal_, cauchy_=_cauchy_,
                       geometric_=_geometric_, bernoulli=bernoulli,
                       multinomial=multinomial).items():
    setattr(Tensor, _name, _fn)
