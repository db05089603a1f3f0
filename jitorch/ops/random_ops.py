"""Random rows: ops whose kernel draws from jitorch's generators each time it runs.

``bernoulli_mask(ref, p=, shape=)`` is a fresh ``shape`` tensor of ``ref``'s dtype and device whose elements are 1
with probability ``p`` (dropout's mask); ``uniform_sample(ref, shape=)``, ``normal_sample(ref, shape=)`` and
``integer_sample(ref, shape=, low=, high=)`` are ``rand``, ``randn`` and ``randint`` from the device's default
generator. For these ``ref`` is only where the dtype and device come from; callers pass a 0-d tensor made for the
purpose, so in a graph the draw depends on no computed value (``CONSTANT_DRAWS``). ``bernoulli_sample(probs)`` is
``bernoulli(probs)``. Draws keep their order among themselves (compiled graphs move constant draws ahead of all
computation, which consumes no random numbers, up to the first draw that reads a computed value), so compiled code
with the same seed gets eager's numbers. Being a row (not a creation function) makes each a node of compiled graphs
that draws fresh numbers on every run; its fusion rule is opaque, so no pass fuses, recomputes or folds it.

The CPU draw reads the default generator's stream at each call, as ``Tensor.bernoulli_`` draws it (CPU graph
capture records the row as a step that reruns the kernel, drawing again per replay). A device draw goes through
``Tensor.bernoulli_`` itself, whose draw CUDA graph capture replays from a static buffer.

>>> import jitorch
>>> from jitorch._dispatch import apply
>>> _ = jitorch.manual_seed(0)
>>> m = apply(BERNOULLI_MASK, jitorch.empty(()), p=0.5, shape=(2, 3))
>>> m.shape, sorted(set(m.flatten().tolist())) in ([0.0, 1.0], [0.0], [1.0])
(jitorch.Size([2, 3]), True)
>>> _ = jitorch.manual_seed(0)
>>> bool((jitorch.empty(2, 3).bernoulli_(0.5) == m).all())  # the numbers Tensor.bernoulli_ draws
True
"""
from __future__ import annotations

import numpy as np

from .. import _random
from .native_normal import standard_normal
from .table import NOT_DIFFERENTIABLE, Opaque, defop

__all__ = ["BERNOULLI_MASK", "UNIFORM_SAMPLE", "NORMAL_SAMPLE", "INTEGER_SAMPLE", "BERNOULLI_SAMPLE", "RANDOM_ROWS",
           "CONSTANT_DRAWS"]


def _bernoulli_mask_kernel(xp, ref, p, shape):
    from .. import _random, _random_inplace
    from .._tensor import Tensor

    if type(ref) is np.ndarray:
        # The generator's stream looked up now: ``manual_seed`` replaces it.
        return (_random.default_generator._rng.random(shape) < p).astype(ref.dtype)
    out = Tensor._make(xp.empty(shape, ref.dtype))
    _random_inplace._bernoulli_(out, p, generator=_random.cuda_generator(ref.device.id))
    return out._data


BERNOULLI_MASK = defop("bernoulli_mask", _bernoulli_mask_kernel, NOT_DIFFERENTIABLE,
                       Opaque("random draw: fresh numbers on every run"))


def draw_from(rng, method, *args, **kwargs):
    """``rng``'s ``method`` (NumPy's names); float32 ``standard_normal`` as ATen draws it (`native_normal`)."""
    if method == "standard_normal":
        return standard_normal(rng, *args, **kwargs)
    return getattr(rng, method)(*args, **kwargs)


def _draw(ref, method, *args, **kwargs):
    """``method`` of the default generator of ``ref``'s device, in ``ref``'s dtype, as the samplers draw it.

    On the CPU the stream is looked up now (``manual_seed`` replaces it; CPU graph capture reruns the kernel). On a
    device the draw goes through the samplers' hooks, which CUDA graph capture turns into a static buffer refilled
    before each replay."""
    if type(ref) is np.ndarray:
        values = draw_from(_random.default_generator._rng, method, *args, **kwargs)
        return (_random.half_uniform(values, ref.dtype) if method == "random" else values).astype(ref.dtype,
                                                                                                  copy=False)
    from .._dtype import to_dtype

    gen = _random.cuda_generator(ref.device.id)
    values = getattr(_random._rng(gen), method)(*args, **kwargs)
    values = _random.half_uniform(values, ref.dtype) if method == "random" else values
    return _random._sample(values, to_dtype(np.dtype(ref.dtype)), gen.device, False)._data


def _float_draw(method):
    """A kernel drawing ``method`` ("random", "standard_normal") as ``jitorch.rand``/``randn`` do: float64 for
    float64, float32 otherwise, then cast to ``ref``'s dtype."""
    normal = method == "standard_normal"

    def kernel(xp, ref, shape):
        # (a half-type CPU draw asks the stream for its dtype: torch's normal fill takes half types a block at a time)
        dtype = np.float64 if ref.dtype == _F64 else ref.dtype if type(ref) is np.ndarray and \
            ref.dtype in _random._HALF_DTYPES else np.float32
        if normal and type(ref) is np.ndarray:  # `_draw`'s CPU path, its layers inline (a small randn's fixed cost)
            return standard_normal(_random.default_generator._rng, shape, dtype).astype(ref.dtype, copy=False)
        return _draw(ref, method, shape, dtype=dtype)
    kernel.__name__ = f"_{method}_kernel"
    return kernel


_F64 = np.dtype(np.float64)


def _integer_sample_kernel(xp, ref, shape, low, high):
    """``randint(low, high, shape)``, in ``ref``'s dtype."""
    return _draw(ref, "integers", low, high, shape)


UNIFORM_SAMPLE = defop("uniform_sample", _float_draw("random"), NOT_DIFFERENTIABLE,
                       Opaque("random draw: fresh numbers on every run"))
NORMAL_SAMPLE = defop("normal_sample", _float_draw("standard_normal"), NOT_DIFFERENTIABLE,
                      Opaque("random draw: fresh numbers on every run"))
INTEGER_SAMPLE = defop("integer_sample", _integer_sample_kernel, NOT_DIFFERENTIABLE,
                       Opaque("random draw: fresh numbers on every run"))


def _bernoulli_sample_kernel(xp, probs):
    """0/1 draws with the probabilities ``probs`` (``torch.bernoulli(probs)``), from the default generator of their
    device, as ``jitorch.bernoulli`` draws them."""
    from .. import _random

    if type(probs) is np.ndarray:
        if probs.size and not bool(((probs >= 0) & (probs <= 1)).all()):
            raise RuntimeError("bernoulli: Expected p_in >= 0 && p_in <= 1 to be true, but got false.")
        draws = _random.default_generator._rng.random(probs.shape,
                                                      dtype=np.float64 if probs.dtype == _F64 else np.float32)
        return (draws < probs).astype(probs.dtype)  # (float32 draws for float32 and half probabilities, as torch's)
    gen = _random.cuda_generator(probs.device.id)  # no range check: it would read the probabilities on the host
    return _random._rng(gen).bernoulli(probs, probs.shape, probs.dtype)


BERNOULLI_SAMPLE = defop("bernoulli_sample", _bernoulli_sample_kernel, NOT_DIFFERENTIABLE,
                         Opaque("random draw: fresh numbers on every run"))

# Rows whose every run draws: never folded, recomputed, deduplicated or skipped (compiled code runs each once, in
# program order, as eager does).
RANDOM_ROWS = frozenset({BERNOULLI_MASK, UNIFORM_SAMPLE, NORMAL_SAMPLE, INTEGER_SAMPLE, BERNOULLI_SAMPLE})
# Those whose operand is a 0-d tensor made for the purpose: they read no computed value, so they may draw ahead of
# the computation (as long as they stay in order with every other draw).
CONSTANT_DRAWS = frozenset({BERNOULLI_MASK, UNIFORM_SAMPLE, NORMAL_SAMPLE, INTEGER_SAMPLE})
