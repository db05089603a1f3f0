"""``torch.quasirandom``: the Sobol engine, drawing the points torch draws.

The direction numbers are Joe and Kuo's (search criterion D(6), up to 21201 dimensions), the table torch and SciPy
share; SciPy's unscrambled engine hands them over. The walk is the Gray-code order: point ``k + 1`` is point ``k``
XOR the direction number at the lowest zero bit of ``k``, so a draw of ``n`` points is one cumulative XOR and a fast
forward is the XOR of the direction numbers where ``gray(k)`` and ``gray(k + n)`` differ.

Scrambling is Owen's linear matrix scramble plus a digital shift, both drawn from the generator in torch's order
(``randint(2, (d, 30))`` for the shift bits, then ``randint(2, (d, 30, 30))`` lower-triangular matrices), so a
seeded engine gives torch's points.

>>> import jitorch
>>> jitorch.quasirandom.SobolEngine(2).draw(4).tolist()
[[0.0, 0.0], [0.5, 0.5], [0.75, 0.25], [0.25, 0.75]]
"""
from __future__ import annotations

import numpy as np

__all__ = ["SobolEngine"]


def _from_numpy(array):
    import jitorch

    return jitorch.from_numpy(array)

_SUPPORTED_DTYPES = ("float32", "float64")


def _direction_numbers(dimension, bits):
    from scipy.stats import qmc

    # SciPy keeps the 30-bit direction numbers of its unscrambled engine in `_sv`: the same integers as torch's
    # `sobolstate` (a test compares them), with no public accessor.
    return qmc.Sobol(dimension, scramble=False, bits=bits)._sv.astype(np.int64)


def _gray(k):
    return k ^ (k >> 1)


def _lowest_zero_bits(start, n):
    """Index of the lowest zero bit of each of ``start, start + 1, ..., start + n - 1``."""
    k = np.arange(start, start + n, dtype=np.int64)
    # k ^ (k + 1) is 2**(t + 1) - 1 for t trailing ones; frexp of its successor reads t + 2 as the exponent.
    return np.frexp((k ^ (k + 1)) + 1)[1].astype(np.int64) - 2


def _bits_of(values, bits):
    """(..., bits) 0/1 array, most significant bit first."""
    shifts = np.arange(bits - 1, -1, -1, dtype=np.int64)
    return (values[..., None] >> shifts) & 1


def _linear_scramble(state, lower, bits):
    """Each direction number's bits (most significant first) times the dimension's lower-triangular matrix, over
    GF(2): the new bit p is the parity of ``lower[p, :k] . bits``."""
    old = _bits_of(state, bits)                                   # (d, j, k)
    new = np.einsum("djk,dpk->djp", old, lower) & 1               # (d, j, p)
    weights = np.int64(1) << np.arange(bits - 1, -1, -1, dtype=np.int64)
    return new @ weights


class SobolEngine:
    """Draws (scrambled) Sobol points in ``[0, 1)^dimension``, as ``torch.quasirandom.SobolEngine``.

    >>> import jitorch
    >>> engine = jitorch.quasirandom.SobolEngine(3, scramble=True, seed=0)
    >>> engine.draw(5).shape, engine.num_generated
    (jitorch.Size([5, 3]), 5)
    """

    MAXBIT = 30
    MAXDIM = 21201

    def __init__(self, dimension, scramble=False, seed=None):
        if not 1 <= dimension <= self.MAXDIM:
            raise ValueError(f"Supported range of dimensionality for SobolEngine is [1, {self.MAXDIM}]: "
                             f"got dimension={dimension}")
        self.seed, self.scramble, self.dimension = seed, scramble, dimension
        state = _direction_numbers(dimension, self.MAXBIT)
        if scramble:
            shift, state = self._scrambled(state)
        else:
            shift = np.zeros(dimension, np.int64)
        self.sobolstate = _from_numpy(state)
        self.shift = _from_numpy(shift)
        self.quasi = _from_numpy(shift.copy())
        # torch divides the long shift by 2**30 in the default dtype when the engine is made, and casts that first
        # point to a draw's dtype later: a float64 draw's first point keeps float32 rounding under the float32
        # default, as torch's does.
        self._first_point = (self.quasi / 2 ** self.MAXBIT).reshape(1, -1)
        self.num_generated = 0

    def _scrambled(self, state):
        import jitorch

        generator = None
        if self.seed is not None:
            generator = jitorch.Generator()
            generator.manual_seed(self.seed)
        d, bits = self.dimension, self.MAXBIT
        shift_bits = jitorch.randint(2, (d, bits), generator=generator).numpy()
        shift = shift_bits @ (np.int64(1) << np.arange(bits, dtype=np.int64))
        lower = np.tril(jitorch.randint(2, (d, bits, bits), generator=generator).numpy())
        lower[:, np.arange(bits), np.arange(bits)] = 1    # a unit diagonal keeps the scramble invertible
        return shift, _linear_scramble(state, lower, bits)

    def _walk(self, n, counter):
        """The next ``n`` integer points after ``self.quasi``, the Gray-code counter starting at ``counter``."""
        state = self.sobolstate.numpy()
        steps = state[:, _lowest_zero_bits(counter, n)].T          # (n, d)
        return np.bitwise_xor.accumulate(steps, axis=0) ^ self.quasi.numpy()

    def _check_dtype(self, dtype):
        import jitorch

        dtype = jitorch.get_default_dtype() if dtype is None else dtype
        if str(dtype).rpartition(".")[2] not in _SUPPORTED_DTYPES:
            raise NotImplementedError(f"SobolEngine.draw: dtype {dtype} is not supported; draw float32 or float64 "
                                      "points and convert them")
        return dtype

    def draw(self, n=1, out=None, dtype=None):
        """The next ``n`` points, an ``(n, dimension)`` tensor of ``dtype`` (default: the default dtype).

        >>> import jitorch
        >>> jitorch.quasirandom.SobolEngine(1).draw(3, dtype=jitorch.float64).flatten().tolist()
        [0.0, 0.5, 0.75]
        """
        dtype = self._check_dtype(dtype)
        n = int(n)
        if n < 0:
            raise ValueError(f"SobolEngine.draw: n must be non-negative, got {n}")
        np_dtype = np.float64 if str(dtype).endswith("float64") else np.float32
        head = []
        if self.num_generated == 0 and n > 0:
            head, counter, rest = [self._first_point.to(dtype).numpy()], 0, n - 1
        else:
            counter, rest = max(self.num_generated - 1, 0), n
        if rest:
            points = self._walk(rest, counter)
            self.quasi = _from_numpy(points[-1].copy())
            head.append((points * (1.0 / 2 ** self.MAXBIT)).astype(np_dtype))
        values = np.concatenate(head, 0) if head else np.zeros((0, self.dimension), np_dtype)
        self.num_generated += n
        result = _from_numpy(np.ascontiguousarray(values, np_dtype))
        if out is not None:
            out.resize_as_(result).copy_(result)
            return out
        return result

    def draw_base2(self, m, out=None, dtype=None):
        """The next ``2**m`` points; the total drawn must stay a power of two (Sobol points' balance).

        >>> import jitorch
        >>> jitorch.quasirandom.SobolEngine(2).draw_base2(3).shape
        jitorch.Size([8, 2])
        """
        n = 2 ** m
        total = self.num_generated + n
        if total & (total - 1):
            raise ValueError("The balance properties of Sobol' points require n to be a power of 2. "
                             f"{self.num_generated} points have been previously generated, then: "
                             f"n={self.num_generated}+2**{m}={total}. If you still want to do this, please use "
                             "'SobolEngine.draw()' instead.")
        return self.draw(n=n, out=out, dtype=dtype)

    def reset(self):
        """Back to the first point.

        >>> import jitorch
        >>> e = jitorch.quasirandom.SobolEngine(2); _ = e.draw(3)
        >>> e.reset().draw(1).tolist()
        [[0.0, 0.0]]
        """
        self.quasi.copy_(self.shift)
        self.num_generated = 0
        return self

    def fast_forward(self, n):
        """Skips ``n`` points, as drawing them would.

        >>> import jitorch
        >>> jitorch.quasirandom.SobolEngine(2).fast_forward(2).draw(1).tolist()
        [[0.75, 0.25]]
        """
        n = int(n)
        if n <= 0:
            return self
        counter, steps = (0, n - 1) if self.num_generated == 0 else (self.num_generated - 1, n)
        flipped = _gray(counter + steps) ^ _gray(counter)
        state = self.sobolstate.numpy()
        quasi = self.quasi.numpy()    # in place, as torch's _sobol_engine_ff_
        for bit in range(self.MAXBIT):
            if flipped >> bit & 1:
                quasi ^= state[:, bit]
        self.num_generated += n
        return self

    def __repr__(self):
        parts = [f"dimension={self.dimension}"]
        if self.scramble:
            parts.append("scramble=True")
        if self.seed is not None:
            parts.append(f"seed={self.seed}")
        return f"{type(self).__name__}({', '.join(parts)})"
