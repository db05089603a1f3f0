"""Random numbers: ``Generator``, ``manual_seed`` and the sampling functions (``rand``, ``randn``, ``randint``, ...).

Each device has its own generators. CPU streams are PyTorch's (``jitorch._torch_rng``: mt19937 seeded and drawn as
ATen's CPU generator, so ``manual_seed(0); rand(3)`` gives torch's numbers); CUDA streams are drawn on the device by a
``DeviceStream`` (``jitorch._random_device``: CuPy's Philox generator), one default generator per CUDA device, so a
CUDA sample never passes through the host. Which one draws is chosen by the device's array module
(``runtime.array_module_for``). ``manual_seed`` seeds the CPU generator and every CUDA one. CUDA streams are
reproducible under ``manual_seed`` but are not PyTorch's values.

>>> import jitorch
>>> _ = jitorch.manual_seed(0); a = jitorch.rand(3)
>>> _ = jitorch.manual_seed(0); bool((a == jitorch.rand(3)).all())
True

``Generator`` and its state bytes are in ``_random_generator``. The samplers with tensor parameters (``normal``,
``bernoulli``, ``multinomial``, ``poisson``) are in ``_random_params``, the in-place ones (``Tensor.uniform_``...) in
``_random_inplace``. Graph captures patch ``_rng``, ``_sample``, ``_fill_from`` and ``_finish`` here, so those
modules call them through this module.
"""
from __future__ import annotations

import math
import operator

import numpy as np

from . import _dtype
from ._creation import _finish
from ._creation_checks import check_randperm, checked_shape
from . import _memory_format as MF
from ._creation_filled import empty_like, keep_layout
from ._device import device as _device, get_default_device
from . import _dispatch
from ._dispatch_modes import MODES
from ._random_generator import _DEFAULT_SEED, Generator
from ._shape import int_sizes, normalize_shape, sizes_or_keyword
from ._tensor import Tensor
from ._torch_rng import TorchCPUStream
from .runtime.meta import MetaRNG

__all__ = ["Generator", "manual_seed", "seed", "initial_seed", "get_rng_state", "set_rng_state", "default_generator",
           "rand", "randn", "randint", "randperm", "rand_like", "randn_like", "randint_like"]

default_generator = Generator()
_META_GENERATOR = Generator.__new__(Generator)  # draws for meta tensors: meta arrays of the asked size, no numbers
_META_GENERATOR.device, _META_GENERATOR._seed, _META_GENERATOR._rng = _device("meta"), _DEFAULT_SEED, MetaRNG()
# One default generator per CUDA device, made on first use; ``_cuda_seed`` is the last ``manual_seed`` for those
# made later (seeding never initialises CUDA, as in PyTorch, where CUDA seeding is queued until CUDA starts).
_cuda_generators: dict = {}
_cuda_seed = None


def cuda_generator(index=None):
    """The default generator of CUDA device ``index`` (the current device when None); needs CUDA.

    >>> import jitorch
    >>> try:
    ...     g = cuda_generator()
    ... except RuntimeError:
    ...     g = None   # no CUDA device here
    >>> g is None or g.device.type == "cuda"
    True
    """
    from .runtime import array_module_for

    xp = array_module_for("cuda")
    index = int(xp.cuda.runtime.getDevice()) if index is None else int(index)
    g = _cuda_generators.get(index)
    if g is None:
        g = Generator(f"cuda:{index}")
        if _cuda_seed is not None:
            g.manual_seed(_cuda_seed)
        _cuda_generators[index] = g
    return g


def _seed_cuda_all(seed):
    global _cuda_seed
    _cuda_seed = seed
    for g in _cuda_generators.values():
        g.manual_seed(seed)


def manual_seed(seed):
    """Seed the CPU generator and every CUDA device's generator; returns the CPU generator.

    As ``torch.manual_seed``, anything ``int()`` takes is a seed (``1.5`` seeds 1); ``Generator.manual_seed`` wants an
    integer."""
    default_generator.manual_seed(int(seed))
    _seed_cuda_all(default_generator.initial_seed())
    return default_generator


def seed():
    """Seed every generator with a fresh non-deterministic seed and return it."""
    s = default_generator.seed()
    _seed_cuda_all(s)
    return s


def initial_seed():
    return default_generator.initial_seed()


def get_rng_state():
    return default_generator.get_state()


def set_rng_state(new_state):
    default_generator.set_state(new_state)


def _generator_for(generator, device):
    """The generator drawing for a tensor on ``device``: the given one (same device type) or that device's default."""
    dev = get_default_device() if device is None else _device(device)
    if dev.type == "meta":  # a meta tensor's draws are not drawn: no generator advances, as torch's meta kernels
        return _META_GENERATOR
    if generator is None:
        return default_generator if dev.type == "cpu" else cuda_generator(dev.index)
    if not isinstance(generator, Generator):
        raise TypeError(f"argument 'generator' must be torch.Generator, not {type(generator).__name__}")
    if generator.device.type != dev.type:
        raise RuntimeError(f"Expected a '{dev.type}' device type for generator but found '{generator.device.type}'")
    return generator


def _rng(generator):
    """Where samplers draw: NumPy's Generator (CPU) or a ``DeviceStream`` (CUDA), both with NumPy's method names.

    CPU graph capture and ``jitorch.compile`` wrap this function to see every draw.
    """
    return (generator or default_generator)._rng


def _draw_kw(gen, t):
    """The ``dtype`` keyword a device draw for ``t`` takes (NumPy's CPU methods have none and draw float64)."""
    if not gen._on_device:
        return {}
    return {"dtype": np.float64 if t._data.dtype in (np.float64, np.complex128) else np.float32}


def _float_dtype(dtype):
    dt = _dtype.get_default_dtype() if dtype is None else _dtype.to_dtype(dtype)
    return dt


_HALF_DTYPES = frozenset((np.dtype(np.float16), _dtype.bfloat16.np))


def half_uniform(values, np_dtype, low=0.0, high=1.0):
    """Uniform draws of [low, high) as a float16/bfloat16 array (other dtypes: unchanged): as ATen, a draw that rounds
    up to ``high`` becomes ``low`` (a float32 draw of 1 - 2**-24 would round to 1.0), so ``high`` never comes out."""
    dt = np.dtype(np_dtype)
    if dt not in _HALF_DTYPES:
        return values
    values = values.astype(dt)
    values[values == float(np.asarray(high, dtype=dt))] = low
    return values


def _sample(values, dt, device, requires_grad):
    # Draws are NumPy arrays on the CPU and device arrays on CUDA: cast where they are, never through the host.
    data = np.asarray(values) if isinstance(values, np.generic) or not hasattr(values, "astype") else values
    return _finish(data.astype(dt.np, copy=False), requires_grad, device)


_HOST_REFS: dict = {}  # dtype -> a 0-d array: the operand of a random row only carries its dtype


def _on_host(device):
    if device is None:
        return get_default_device().type == "cpu"
    return device == "cpu" or (type(device) is _device and device.type == "cpu")


def _row_sample(row, dt, device, **attrs):
    """A random row's sample (``ops/random_ops.py``) of dtype ``dt`` on ``device``: compiled graphs and CPU graph
    replays draw it afresh on every run, in eager's order, with eager's numbers. Its operand only carries the dtype
    and device."""
    if not MODES and _on_host(device):
        # What eager dispatch would do for this operand-less, gradient-less row, without building a 0-d tensor and
        # going through the dispatcher: a small ``rand`` cost 19 us of which the draw is 2 (torch: 3).
        ref = _HOST_REFS.get(dt)
        if ref is None:
            ref = _HOST_REFS[dt] = np.empty((), dt.np)
        return Tensor._make(row.kernel(_dispatch.CPU_XP, ref, **attrs))  # CPU_XP: the CuPy-surface tests swap it
    from ._creation import empty
    from ._dispatch import apply

    return apply(row, empty((), dtype=dt, device=device), **attrs)


def _float_sample(name, method, generator, dt, shape, device, requires_grad):
    """``rand`` (``method="random"``) or ``randn`` (``"standard_normal"``): a random row for the default generator,
    else the generator's own draw; complex dtypes draw both parts, as torch (each of variance 1/2 for randn)."""
    from .ops import random_ops

    if not (dt.is_floating_point or dt.is_complex):
        raise NotImplementedError(f"{name}: samples are floating point, not {dt}: pass a floating or complex dtype "
                                  f"(randint draws integers)")
    if generator is None:
        row = random_ops.UNIFORM_SAMPLE if method == "random" else random_ops.NORMAL_SAMPLE

        def draw(real, size):
            return _row_sample(row, real, device, shape=size)
    else:
        gen = _generator_for(generator, device)
        rng = _rng(gen)

        def draw(real, size):
            # torch's CPU stream draws half types' normals a block at a time (`_torch_rng`): it is told the dtype
            kind = np.float64 if real is _dtype.float64 else \
                real.np if real.np in _HALF_DTYPES and not gen._on_device else np.float32
            values = random_ops.draw_from(rng, method, size, dtype=kind)
            values = half_uniform(values, real.np) if method == "random" else values
            return _sample(values, real, device, False)
    if dt.is_complex and method == "standard_normal" and generator is not None and not gen._on_device:
        # ATen: normal_(0, 1 / sqrt(2)) of view_as_real, scaled in double before rounding (a float32 draw scaled
        # afterwards rounds twice). The default generator's draw stays a row, as compiled graphs draw it.
        from ._creation import empty

        out = empty(tuple(shape), dtype=dt, device=device).normal_(generator=generator)
    elif dt.is_complex:
        from ._creation import complex as _complex

        parts = draw(dt.to_real(), tuple(shape) + (2,))
        if method == "standard_normal":
            parts = parts * (1 / math.sqrt(2))  # ATen: normal_(0, 1 / sqrt(2)) of view_as_real
        out = _complex(parts[..., 0], parts[..., 1])
    else:
        out = draw(dt, shape)
    return out.requires_grad_() if requires_grad else out


def _fill_from(self, values):
    """Write a draw into ``self`` with ``copy_`` (the in-place samplers of ``_random_inplace``): recorded as torch
    records a sampler, the overwritten value getting a zero gradient. Graph captures patch this function to turn
    the draw into a replay step, so the samplers must call it through the module."""
    data = np.asarray(values) if isinstance(values, np.generic) or not hasattr(values, "astype") else values
    self.copy_(_finish(data, False, self.device))
    return self


_ROWS = []  # (uniform row, normal row) of ops/random_ops.py, looked up on first use (that module imports this one)


def _host_draw(normal, sizes, dtype, device):
    """``rand``/``randn``'s sample (``normal``: randn's) from the default generator for plain int sizes, a float32 or
    float64 dtype and the CPU, with no mode active: what `_float_sample`'s row draw gives, without its layers (half
    of a small ``randn``); None for the general path."""
    if MODES or device is not None or get_default_device().type != "cpu":
        return None
    shape = int_sizes(sizes)
    if shape is None or min(shape, default=0) < 0:
        return None
    dt = _dtype.get_default_dtype() if dtype is None else dtype
    if dt is not _dtype.float32 and dt is not _dtype.float64:
        return None
    if normal:
        stream = default_generator._rng
        if type(stream) is TorchCPUStream:
            # What NORMAL_SAMPLE's kernel runs for torch's CPU stream (`native_normal.standard_normal` hands it the
            # draw), without the row's and the kernel's frames: a fifth of a small ``randn``.
            return Tensor._make(stream.normal(0.0, 1.0, shape, dt.np))
    if not _ROWS:
        from .ops import random_ops

        _ROWS.extend((random_ops.UNIFORM_SAMPLE, random_ops.NORMAL_SAMPLE))
    return _row_sample(_ROWS[normal], dt, None, shape=shape)


def rand(*sizes, size=None, generator=None, out=None, dtype=None, layout=None, device=None,
         requires_grad=False, pin_memory=False):
    """Uniform samples in [0, 1)."""
    t = _host_draw(False, sizes, dtype, device) if size is None and generator is None else None
    if t is not None:
        return t.requires_grad_() if requires_grad else t
    dt = _float_dtype(dtype)
    shape = checked_shape(normalize_shape(sizes_or_keyword(sizes, size, "rand"), "rand"), "rand")
    return _float_sample("rand", "random", generator, dt, shape, device, requires_grad)


def randn(*sizes, size=None, generator=None, out=None, dtype=None, layout=None, device=None,
          requires_grad=False, pin_memory=False):
    """Standard normal samples."""
    t = _host_draw(True, sizes, dtype, device) if size is None and generator is None else None
    if t is not None:
        return t.requires_grad_() if requires_grad else t
    dt = _float_dtype(dtype)
    shape = checked_shape(normalize_shape(sizes_or_keyword(sizes, size, "randn"), "randn"), "randn")
    return _float_sample("randn", "standard_normal", generator, dt, shape, device, requires_grad)


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
    from ._random_inplace import _check_in_range
    from .ops import random_ops

    _check_in_range(dt, low, high - 1)  # torch draws with random_(low, high): both ends must fit the dtype
    shape = checked_shape(normalize_shape((size,) if isinstance(size, int) else tuple(size), "randint"), "randint")
    if generator is None:
        out = _row_sample(random_ops.INTEGER_SAMPLE, dt, device, shape=shape, low=int(low), high=int(high))
        return out.requires_grad_() if requires_grad else out
    rng = _rng(_generator_for(generator, device))
    return _sample(rng.integers(low, high, shape), dt, device, requires_grad)


def randperm(n, *, generator=None, out=None, dtype=None, layout=None, device=None, requires_grad=False,
             pin_memory=False):
    """A random permutation of ``0 .. n-1``."""
    n = operator.index(n)  # a NumPy integer or a 0-d tensor too (random_split's lengths)
    dt = _dtype.int64 if dtype is None else _dtype.to_dtype(dtype)
    check_randperm(n, dt)
    rng = _rng(_generator_for(generator, device))
    result = _sample(rng.permutation(n), dt, device, requires_grad)
    if out is not None:
        if tuple(out.shape) != (n,):
            out.resize_(n)
        return out.copy_(result)
    return result


def rand_like(input, *, generator=None, dtype=None, layout=None, device=None, requires_grad=False,
              memory_format=None):
    out = rand(input.shape, generator=generator, dtype=dtype or input.dtype, device=device or input.device,
               requires_grad=requires_grad)
    return keep_layout(out, input, memory_format)


def randn_like(input, *, generator=None, dtype=None, layout=None, device=None, requires_grad=False,
               memory_format=None):
    if input.dim() > 1 and not (memory_format in (None, MF.preserve_format) and input.is_contiguous()):
        # ATen's randn_like is ``empty_like(input).normal_()``: normals drawn into a strided layout land in memory
        # order (and take normal_'s serial path off a contiguous float32 tensor), not as a row-major draw.
        out = empty_like(input, dtype=dtype or input.dtype, device=device or input.device, memory_format=memory_format)
        if not out.is_contiguous():
            out.normal_(0, 1, generator=generator)
            return out.requires_grad_() if requires_grad else out
    out = randn(input.shape, generator=generator, dtype=dtype or input.dtype, device=device or input.device,
                requires_grad=requires_grad)
    return keep_layout(out, input, memory_format)


def randint_like(input, low=0, high=None, *, generator=None, dtype=None, layout=None, device=None,
                 requires_grad=False, memory_format=None):
    out = randint(low, high, input.shape, generator=generator, dtype=dtype or input.dtype,
                  device=device or input.device, requires_grad=requires_grad)
    return keep_layout(out, input, memory_format)
