"""Samplers whose parameters may be tensors: ``normal``, ``bernoulli``, ``multinomial`` and ``poisson``.

A sample is not a differentiable function of its parameters, but as in torch it requires grad when one of them does,
and the gradient it passes back is zero (torch's ``NormalBackward``, ``BernoulliBackward``, ``PoissonBackward``);
``bernoulli`` with a number ``p`` has no derivative at all, so its backward raises, as torch's. The arguments are
checked as ATen checks them (a negative std, a probability outside [0, 1], an integer dtype), with its exception
types. Checks that read values (``std >= 0``, probabilities in [0, 1]) run on the host; on a CUDA generator the
probabilities are not read (see ``_random_device``).

>>> import jitorch
>>> mean = jitorch.zeros(3, requires_grad=True)
>>> jitorch.normal(mean, 1.0).sum().backward(); mean.grad
tensor([0., 0., 0.])
"""
from __future__ import annotations

import numpy as np

from . import _random
from ._creation import _finish
from ._random_inplace import fmt_number, not_implemented
from ._shape import broadcast_shapes, normalize_shape
from ._tensor import Tensor
from ._torch_poisson import torch_poisson
from ._torch_rng import TorchCPUStream
from .autograd.function import Function
from .autograd.grad_mode import GradState

__all__ = ["normal", "bernoulli", "multinomial", "poisson"]


def _sampler_node(name, differentiable=True):
    """An autograd function recording a draw: ``apply(draw, *params)`` returns ``draw()``, whose gradient to every
    parameter is zero (or, not ``differentiable``, whose backward raises as torch's)."""
    def forward(ctx, draw, *params):
        ctx.param_meta = [(p.shape, p.dtype, p.device) for p in params]
        return draw()

    def backward(ctx, grad):
        from ._creation import zeros

        if not differentiable:
            raise RuntimeError(f"derivative for aten::{name.lower()} is not implemented")
        return (None, *(zeros(shape, dtype=dtype, device=device) for shape, dtype, device in ctx.param_meta))
    return type(name, (Function,), {"forward": staticmethod(forward), "backward": staticmethod(backward),
                                    "__module__": __name__})


_NORMAL, _BERNOULLI, _BERNOULLI_P, _POISSON = (_sampler_node("Normal"), _sampler_node("Bernoulli"),
                                               _sampler_node("Bernoulli", differentiable=False),
                                               _sampler_node("Poisson"))


def _recorded(node, draw, *params):
    """``draw()``, recorded as ``node`` when grad mode is on and a tensor parameter requires grad."""
    tensors = [p for p in params if isinstance(p, Tensor)]
    if GradState.enabled and any(t.requires_grad for t in tensors):
        return node.apply(draw, *tensors)
    return draw()


def _check_std(std):
    if isinstance(std, Tensor):
        if std.dtype.is_complex:
            raise RuntimeError("normal expects standard deviation to be non-complex")
        if std.numel() and not bool((std.detach() >= 0).all()):  # NaN fails too, as in torch
            raise RuntimeError("normal expects all elements of std >= 0.0")
    elif not std >= 0.0:
        raise RuntimeError(f"normal expects std >= 0.0, but found std {fmt_number(std)}")


def normal(mean, std=1.0, size=None, *, generator=None, out=None, dtype=None, layout=None, device=None,
           pin_memory=False, requires_grad=False):
    """Normal samples: ``normal(mean, std)`` with a tensor ``mean`` or ``std`` (broadcast; the result has the dtype
    of ``mean``, else of ``std``), or ``normal(mean, std, size)`` with numbers.

    >>> import jitorch
    >>> jitorch.normal(2.0, 3.0, (2, 4)).shape
    jitorch.Size([2, 4])
    """
    from ._random import randn

    if not isinstance(mean, Tensor) and not isinstance(std, Tensor):
        if size is None:
            raise TypeError(f"normal(): received an invalid combination of arguments - got ({type(mean).__name__}, "
                            f"{type(std).__name__}): with numbers for mean and std pass a size, as normal(2.0, 3.0, "
                            f"(4,))")
        _check_std(std)
        dt = _random._float_dtype(dtype)
        if not (dt.is_floating_point or dt.is_complex):
            raise not_implemented("normal_kernel_cpu", dt)
        shape = normalize_shape((size,) if isinstance(size, int) else tuple(size), "normal")
        # As ATen: ``empty(size).normal_(mean, std)``, whose draws (and rounding) are torch's on the CPU.
        from ._creation import empty

        sample = empty(shape, dtype=dt, device=device).normal_(mean, std, generator=generator)
        return sample.requires_grad_() if requires_grad else sample
    if size is not None:
        raise TypeError("normal(): a size goes only with numbers for mean and std; a tensor mean or std gives the "
                        "shape")
    _check_std(std)
    ref = mean if isinstance(mean, Tensor) else std
    if not (ref.dtype.is_floating_point or ref.dtype.is_complex):
        raise not_implemented("normal_kernel_cpu", ref.dtype)
    shape = broadcast_shapes(*(tuple(x.shape) for x in (mean, std) if isinstance(x, Tensor)), op="normal")

    def draw():
        m = mean.detach() if isinstance(mean, Tensor) else mean
        s = std.detach() if isinstance(std, Tensor) else std
        noise = randn(shape, generator=generator, dtype=ref.dtype, device=ref.device)
        return (noise * s + m).to(ref.dtype)
    return _recorded(_NORMAL, draw, mean, std)


def bernoulli(input, p=None, *, generator=None, out=None):
    """0/1 samples of ``input``'s dtype with the probabilities ``input`` (or the number ``p``).

    >>> import jitorch
    >>> jitorch.bernoulli(jitorch.tensor([0.0, 1.0]))
    tensor([0., 1.])
    """
    if isinstance(p, Tensor):
        raise TypeError("bernoulli(): p must be a number; for probabilities per element pass them as input")
    if p is None:
        if input.dtype.is_complex:
            raise not_implemented("bernoulli_tensor_cpu_self_", input.dtype)
        if not input.dtype.is_floating_point and input.numel():
            raise not_implemented("bernoulli_tensor_cpu_p_", input.dtype)
    else:
        if not 0 <= p <= 1:
            raise RuntimeError(f"bernoulli_ expects p to be in [0, 1], but got p={fmt_number(p)}")
        if input.dtype.is_complex:
            raise not_implemented("bernoulli_scalar_cpu_", input.dtype)

    def draw():
        return _bernoulli_draw(input.detach(), p, generator)
    return _recorded(_BERNOULLI if p is None else _BERNOULLI_P, draw, input)


def _bernoulli_draw(input, p, generator):
    if generator is None:  # random rows (``ops/random_ops.py``): compiled graphs draw them afresh on every run
        from ._dispatch import apply
        from .ops import random_ops

        if p is None:
            return apply(random_ops.BERNOULLI_SAMPLE, input)
        return _random._row_sample(random_ops.BERNOULLI_MASK, input.dtype, input.device, p=p,
                                   shape=tuple(input.shape))
    gen = _random._generator_for(generator, input.device)
    if gen._on_device:  # no range check: it would read the probabilities on the host (see _random_device)
        probs = input._data if p is None else p
        return _finish(_random._rng(gen).bernoulli(probs, input._data.shape, input._data.dtype), False, input.device)
    probs = input._host() if p is None else np.full(input._data.shape, p)
    if not np.all((probs >= 0) & (probs <= 1)):
        raise RuntimeError("bernoulli: Expected p_in >= 0 && p_in <= 1 to be true, but got false.")
    # ATen: 53-bit uniforms against a number or float64 probabilities, 24-bit float32 ones against the others
    wide = p is not None or probs.dtype == np.float64
    draws = _random._rng(gen).random(probs.shape, dtype=np.float64 if wide else np.float32) < probs
    return _finish(draws.astype(input._data.dtype), False, input.device)


def multinomial(input, num_samples, replacement=False, *, generator=None, out=None):
    """Indices sampled from the rows of ``input`` (non-negative weights, not necessarily normalized).

    Without replacement, the categories of positive weight come first, then (as in torch) ones of zero weight:
    ``multinomial(tensor([1., 0, 0]), 2)`` is ``[0, 1]`` or ``[0, 2]``.
    """
    if isinstance(num_samples, (bool, float)) or not hasattr(num_samples, "__index__"):
        raise TypeError(f"multinomial(): argument 'num_samples' must be int, not {type(num_samples).__name__}")
    num_samples = int(num_samples)
    if input.dim() not in (1, 2):
        raise RuntimeError("prob_dist must be 1 or 2 dim")
    if not input.dtype.is_floating_point:
        raise RuntimeError(f"multinomial only supports floating-point dtypes for input, got: "
                           f"{_dispatch_name(input.dtype)}")
    if num_samples <= 0:
        raise RuntimeError("cannot sample n_sample <= 0 samples")
    if not replacement and num_samples > input.shape[-1]:
        raise RuntimeError("cannot sample n_sample > prob_dist.size(-1) samples without replacement")
    gen = _random._generator_for(generator, input.device)
    if gen._on_device:
        data = input._data
        drawn = _random._rng(gen).multinomial(data.reshape(-1, data.shape[-1]), num_samples, replacement)
        return _finish(drawn.reshape(data.shape[:-1] + (num_samples,)), False, input.device)
    probs = input._host().astype(np.float64)
    rows = probs if probs.ndim == 2 else probs[None]  # not reshape(-1, k): k may be 0
    _check_weights(rows, fast_path=not replacement or num_samples == 1)
    from ._random_multinomial import sample_rows

    out = sample_rows(_random._rng(gen), rows, num_samples, replacement)
    return _finish(out.reshape(probs.shape[:-1] + (num_samples,)), False, input.device)


def _check_weights(rows, fast_path):
    """ATen's checks, in its order and with its words: its fast path (no replacement, or one sample) checks the
    whole tensor at once; its kernel with replacement walks row by row, each element, then the row's sum."""
    valid = (rows >= 0) & (rows < np.inf)  # NaN fails both
    if fast_path:
        if not valid.all():
            raise RuntimeError("probability tensor contains either `inf`, `nan` or element < 0")
        return
    bad_rows = ~valid.all(axis=1)
    first_bad = int(np.argmax(bad_rows)) if bad_rows.any() else rows.shape[0]
    empty_rows = ~(rows.sum(axis=1) > 0)
    if empty_rows[:first_bad].any():
        raise RuntimeError("invalid multinomial distribution (sum of probabilities <= 0)")
    if first_bad < rows.shape[0]:
        row = rows[first_bad]
        if not (row[int(np.argmin(valid[first_bad]))] >= 0):
            raise RuntimeError("invalid multinomial distribution (encountering probability entry < 0)")
        raise RuntimeError("invalid multinomial distribution (encountering probability entry = infinity or NaN)")


def _dispatch_name(dtype):
    from ._dispatch import TORCH_TYPE_NAMES

    return TORCH_TYPE_NAMES[dtype.name]


def poisson(input, generator=None):
    """Poisson counts with rates ``input``, in ``input``'s dtype (a floating one).

    >>> import jitorch
    >>> jitorch.poisson(jitorch.zeros(2))
    tensor([0., 0.])
    """
    if not input.dtype.is_floating_point:
        raise not_implemented("poisson_cpu", input.dtype)
    gen = _random._generator_for(generator, input.device)

    def draw():
        lam = input._data if gen._on_device else input._host()
        if not gen._on_device and lam.size and not bool((lam >= 0).all()):  # NaN fails too, as in torch
            raise RuntimeError("poisson: invalid Poisson rate, expected rate to be non-negative")
        stream = _random._rng(gen)
        if isinstance(stream, TorchCPUStream):
            counts = torch_poisson(stream, lam.astype(np.float64))  # ATen's serial sampler: torch's counts
        else:  # another generator's stream: NumPy's sampler on a seed drawn from it (reproducible)
            counts = stream.poisson(lam, lam.shape)
        return _finish(counts.astype(input._data.dtype), False, input.device)
    return _recorded(_POISSON, draw, input)


for _name, _fn in dict(bernoulli=bernoulli, multinomial=multinomial).items():
    setattr(Tensor, _name, _fn)
