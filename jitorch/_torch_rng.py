"""PyTorch's CPU random stream: ``TorchCPUStream``, mt19937 seeded and drawn as ``CPUGeneratorImpl``, with the
NumPy ``Generator`` method names the samplers call (``random``, ``uniform``, ``normal``, ``integers``, ...), so a
CPU ``jitorch.Generator`` gives torch's numbers after the same ``manual_seed``.

What matches torch 2.13 bit for bit (ATen's ``DistributionTemplates.h``/``TransformationHelper.h``):

- the engine: ``mt19937(seed)`` initialised from the seed's low 32 bits (``init_genrand``), 32-bit draws, 64-bit
  draws as ``(first << 32) | second``;
- ``random``/``uniform`` (``rand``, ``uniform_``): float32 from a 32-bit draw's low 24 bits, float64 from a 64-bit
  draw's low 53 bits, ``x * (to - from) + from`` (half types draw float32 and round);
- ``normal``/``standard_normal`` (``randn``, ``normal_``): contiguous draws of 16 or more fill uniforms and turn
  blocks of 16 into normals (`codegen.llvm_random_blocks`), the last 16 redrawn when the size is no multiple of 16 (half
  types: blocks drawn one at a time); smaller or strided draws take the scalar Box-Muller of
  ``normal_distribution<double>``, which keeps its second sample for the next call (``manual_seed`` drops it);
- ``integers`` (``randint``, ``random_``): ``draw % range + low``, 64-bit draws when the range is 2**32 or more;
- ``permutation`` (``randperm``): ATen's swap loop over ``random() % (n - i)``.

- ``exponential``, ``cauchy``/``standard_cauchy``, ``geometric``, ``lognormal`` (`codegen.llvm_random_libm`): ATen's
  transforms of 53-bit uniforms (``lognormal``: of the scalar normals), float64 for the caller to round.

Other NumPy methods (``binomial``, ``poisson``, ``choice``...) are NumPy's, from a PCG64 seeded by one 64-bit draw of
this stream: reproducible under ``manual_seed``, not torch's numbers. ``torch.poisson``, ``torch.binomial`` and the
gamma family (Gamma, Beta, Dirichlet, Chi2, StudentT) do not use them: they run ATen's serial samplers on this
stream as generated code (`codegen.llvm_samplers`, driven by `jitorch._uniform_tape.run_sampler` from
`jitorch._torch_poisson`, `distributions._torch_binomial`, `distributions._torch_gamma`), so they give torch's
numbers at any size.

>>> s = TorchCPUStream(0)
>>> [round(float(v), 4) for v in s.random(3, dtype=np.float32)]  # torch.manual_seed(0); torch.rand(3)
[0.4963, 0.7682, 0.0885]
"""
from __future__ import annotations

import math

import numpy as np

from .codegen.llvm_random_blocks import double_blocks, float_blocks, fused_affine, uniform_function, uniforms_from_raw
from .codegen.llvm_random_libm import transform
from .codegen.llvm_mt19937 import N as _N, SCRATCH_WORDS, MT19937Engine, inside_out_shuffle, swap_shuffle
from .runtime.host_pointer import data_address

__all__ = ["TorchCPUStream", "STATE_BYTES"]

_TWO_PI = 2.0 * math.pi
_BLOCK = 16  # ATen's normal_fill block; smaller draws take the scalar path
_LARGE_PERMUTATION = 0xFFFFFFFF // 20  # randperm's switch to 64-bit draws


def _shape(size):
    if size is None:
        return ()
    return (int(size),) if isinstance(size, (int, np.integer)) else tuple(map(int, size))


def _scalar_or(out, size):
    """``out``, or its one value as a Python number for ``size=None`` (as NumPy's ``Generator.random()``)."""
    return out.item() if size is None else out


class TorchCPUStream:
    """One mt19937 stream as torch's CPU generator: ``TorchCPUStream(seed)``; ``state`` reads and sets it."""

    def __init__(self, seed):
        self._seed = int(seed) % (1 << 64)
        self._engine = MT19937Engine.seeded(self._seed)  # init_genrand of the low 32 bits: torch's seeding
        self._next_normal = None  # normal_distribution<double>'s cached second sample

    # -- state ------------------------------------------------------------------------------------------------
    @property
    def bit_generator(self):
        """This stream: ``bit_generator.state`` reads and sets the state, as on a NumPy Generator."""
        return self

    @property
    def state(self):
        return {"seed": self._seed, "key": self._engine.key.copy(), "pos": int(self._engine.pos[0]),
                "next_normal": self._next_normal}

    @state.setter
    def state(self, value):
        self._seed = value["seed"]
        self._engine = MT19937Engine(value["key"], value["pos"])
        self._next_normal = value["next_normal"]

    def to_bytes(self):
        """The state in ``torch.get_rng_state()``'s 5056-byte layout (ATen's ``CPUGeneratorImplState``)."""
        s = self.state
        raw = np.zeros(STATE_BYTES, np.uint8)
        head = raw[:24].view(np.uint64)
        head[0] = s["seed"]
        raw[8:16].view(np.int32)[:] = (_N + 1 - s["pos"], 1)  # left, seeded
        head[2] = s["pos"]  # next
        raw[24:24 + 8 * _N].view(np.uint64)[:] = s["key"]
        tail = raw[24 + 8 * _N:5040].view(np.float64)
        if s["next_normal"] is not None:
            tail[1] = s["next_normal"]  # normal_y
            raw[5040:5044].view(np.int32)[0] = 1  # normal_is_valid
        return raw

    @classmethod
    def from_bytes(cls, raw):
        """A stream from ``to_bytes``' layout (``torch.get_rng_state()``'s too); ValueError for other bytes."""
        raw = np.frombuffer(bytes(raw), np.uint8)
        if raw.size != STATE_BYTES:
            raise ValueError(f"expected {STATE_BYTES} bytes (torch's CPU generator state), got {raw.size}")
        left = int(raw[8:12].view(np.int32)[0])
        if not 1 <= left <= _N:
            raise ValueError(f"the mt19937 state's 'left' counter is {left}, outside [1, {_N}]")
        stream = cls.__new__(cls)
        valid = int(raw[5040:5044].view(np.int32)[0])
        stream.state = {"seed": int(raw[:8].view(np.uint64)[0]),
                        "key": raw[24:24 + 8 * _N].view(np.uint64).astype(np.uint32), "pos": _N + 1 - left,
                        "next_normal": float(raw[24 + 8 * _N:5040].view(np.float64)[1]) if valid else None}
        return stream

    # -- raw draws ----------------------------------------------------------------------------------------------
    def _u32(self, n):
        """``n`` 32-bit draws (``CPUGeneratorImpl::random``), held in uint64 for the integer samplers' sums."""
        return self._engine.draw(n).astype(np.uint64)

    def _u64(self, n):
        """``n`` 64-bit draws (``random64``): the first 32-bit draw is the high half."""
        pairs = self._engine.draw(2 * n).astype(np.uint64).reshape(n, 2)
        return (pairs[:, 0] << np.uint64(32)) | pairs[:, 1]

    def _uniform(self, n, wide):
        """``n`` draws of ``uniform_real_distribution`` on [0, 1): float64 (``wide``) or float32."""
        words = 2 * n if wide else n
        if words > SCRATCH_WORDS:
            return uniforms_from_raw(self._engine.draw(words), wide)
        out = np.empty(n, np.float64 if wide else np.float32)
        if n:
            # (`data_address`: a fresh array's address, without address_of's buffer export, a tenth of a small draw)
            convert, address = uniform_function(wide), data_address(out)
            self._engine.draw_scratch(words, lambda raw: convert(raw, address, n))
        return out

    # -- NumPy Generator's surface --------------------------------------------------------------------------------
    def random(self, size=None, dtype=np.float64):
        """Uniforms on [0, 1): ``torch.rand`` of float64 (the default) or float32 (also for half types)."""
        shape = _shape(size)
        out = self._uniform(math.prod(shape), np.dtype(dtype) == np.float64).reshape(shape)
        return _scalar_or(out, size)

    def uniform(self, low=0.0, high=1.0, size=None, dtype=np.float64):
        """``uniform_(low, high)``: ``fma(x, high - low, low)`` in the draw's precision."""
        shape = _shape(size)
        wide = np.dtype(dtype) == np.float64
        x = self._uniform(math.prod(shape), wide)
        kind = np.float64 if wide else np.float32
        lo, span = kind(low), kind(high) - kind(low)
        if not (lo == 0 and span == 1):
            fused_affine(x, span, lo)
        return _scalar_or(x.reshape(shape), size)

    def standard_normal(self, size=None, dtype=np.float64):
        return self.normal(0.0, 1.0, size, dtype)

    def normal(self, loc=0.0, scale=1.0, size=None, dtype=np.float64, contiguous=True):
        """``normal_(loc, scale)`` of a tensor of ``size`` and ``dtype`` (a half type: float32 values to round);
        ``contiguous`` False takes ATen's scalar path, as a strided tensor does."""
        shape = _shape(size)
        n = math.prod(shape)
        dt = np.dtype(dtype)
        if n < _BLOCK or not contiguous:
            # (half types through float32, as c10 converts a double)
            out = self._scalar_normals(n, float(loc), float(scale))
            out = out if dt == np.float64 else out.astype(np.float32)
        elif dt == np.float64:
            out = self._filled(n, True, double_blocks, float(loc), float(scale))
        elif dt == np.float32:
            out = self._filled(n, False, float_blocks, float(loc), float(scale))
        else:  # float16/bfloat16: float32 blocks drawn one at a time, then rounded by the caller
            out = self._half_filled(n, float(loc), float(scale))
        return _scalar_or(out.reshape(shape), size)

    def _filled(self, n, wide, blocks, mean, std):
        data = self._uniform(n, wide)
        whole = n - n % _BLOCK
        blocks(data[:whole], mean, std)
        if whole != n:  # ATen redraws the last 16 and transforms them
            tail = self._uniform(_BLOCK, wide)
            blocks(tail, mean, std)
            data[n - _BLOCK:] = tail
        return data

    def _half_filled(self, n, mean, std):
        whole = n - n % _BLOCK
        data = self._uniform(whole, False)
        float_blocks(data, mean, std)
        if whole != n:  # the last 16 drawn and transformed on their own, written over the end
            tail = self._uniform(_BLOCK, False)
            float_blocks(tail, mean, std)
            data = np.concatenate([data[:n - _BLOCK], tail])
        return data

    def _scalar_normals(self, n, mean, std):
        """``normal_distribution<double>`` drawn ``n`` times: pairs from two 53-bit uniforms (drawn here at once,
        in order), the cosine returned and the sine kept for the next draw; glibc's log1p/sin/cos through ``math``."""
        values = [] if self._next_normal is None else [self._next_normal]
        self._next_normal = None
        pairs = max(0, n - len(values) + 1) // 2
        uniforms = self._uniform(2 * pairs, True).tolist()
        for k in range(pairs):
            u1, u2 = uniforms[2 * k], uniforms[2 * k + 1]
            radius = math.sqrt(-2.0 * math.log1p(-u2))
            theta = _TWO_PI * u1
            values += (radius * math.cos(theta), radius * math.sin(theta))
        if len(values) > n:
            self._next_normal = values.pop()
        out = np.array(values, np.float64)
        if not (mean == 0 and std == 1):
            fused_affine(out, std, mean)
        return out

    # -- ATen's other distributions (`codegen.llvm_random_libm`): float64 values, which the caller rounds ------------
    def exponential(self, scale=1.0, size=None):
        """``exponential_(1 / scale)``: ``-scale * log1p(-u)``."""
        shape = _shape(size)
        return _scalar_or(transform("exponential", self._uniform(math.prod(shape), True), -scale).reshape(shape), size)

    def cauchy(self, median=0.0, sigma=1.0, size=None):
        """``cauchy_(median, sigma)``: ``fma(sigma, tan(pi * (u - 0.5)), median)``."""
        shape = _shape(size)
        values = transform("cauchy", self._uniform(math.prod(shape), True), median, sigma)
        return _scalar_or(values.reshape(shape), size)

    def standard_cauchy(self, size=None):
        return self.cauchy(0.0, 1.0, size)

    def geometric(self, p, size=None):
        """``geometric_(p)``: ``ceil(log(u) / log1p(-p))`` (float64 whole numbers)."""
        shape = _shape(size)
        values = transform("geometric", self._uniform(math.prod(shape), True), math.log1p(-p))
        return _scalar_or(values.reshape(shape), size)

    def lognormal(self, mean=0.0, sigma=1.0, size=None):
        """``log_normal_(mean, sigma)``: ``exp`` of ``normal_distribution<double>``'s draws (its cached sample
        too), one at a time whatever the size."""
        shape = _shape(size)
        values = transform("exp", self._scalar_normals(math.prod(shape), float(mean), float(sigma)))
        return _scalar_or(values.reshape(shape), size)

    def integers(self, low, high=None, size=None, dtype=np.int64, endpoint=False):
        """``random_(low, high)``: ``draw % range + low`` over 32-bit draws, 64-bit ones for a range of 2**32 or
        more whatever the dtype (the whole int64 range: the 64-bit draw itself)."""
        if high is None:
            low, high = 0, low
        low, high = int(low), int(high) + (1 if endpoint else 0)
        if high <= low:
            raise ValueError(f"integers: low={low} must be less than high={high}")
        shape = _shape(size)
        n = math.prod(shape)
        span = high - low
        if span >= 1 << 64:
            out = self._u64(n).view(np.int64)
        else:
            draws = self._u64(n) if span >= 1 << 32 else self._u32(n)
            draws %= np.uint64(span)
            draws += np.uint64(low % (1 << 64))  # wraps as ATen's unsigned sum
            out = draws.view(np.int64)
        return _scalar_or(out.reshape(shape).astype(dtype, copy=False), size)

    def permutation(self, n):
        """``randperm(n)``: ATen's loop swapping position ``i`` with ``i + random() % (n - i)`` (from ``2**32 / 20``
        on, its inside-out shuffle over 64-bit draws)."""
        if not isinstance(n, (int, np.integer)):
            raise TypeError("permutation: only a count is supported (randperm)")
        n = int(n)
        out = np.arange(n, dtype=np.int64)
        if n < 2:
            return out
        if n >= _LARGE_PERMUTATION:
            return inside_out_shuffle(out, self._engine.draw(2 * n))
        return swap_shuffle(out, self._engine.draw(n - 1))

    def __getattr__(self, name):
        """NumPy's other samplers (not torch's numbers), from a PCG64 seeded by one 64-bit draw of this stream."""
        if name.startswith("_") or not hasattr(np.random.Generator, name):
            raise AttributeError(f"{type(self).__name__} has no attribute {name!r}")
        return getattr(np.random.Generator(np.random.PCG64(int(self._u64(1)[0]))), name)


STATE_BYTES = 5056  # sizeof(CPUGeneratorImplState), the length of torch.get_rng_state()
