"""The elementwise part of one LSTM or GRU time step, forward and backward, as IR kernels over ``(batch, hidden)``
(`jitorch.codegen.ir`), for the native programs of `rnn_native`.

Each kernel's buffers are listed in the order its program passes their addresses. A gate ``k`` of a ``(B, G * H)``
array is a buffer with strides ``(G * H, 1)`` and offset ``k * H`` at the array's address. The formulas are those
of `rnn_kernels` (PyTorch's): LSTM gates i, f, g, o; GRU gates r, z, n with ``b_hn`` inside ``r * (...)``.

>>> print(add_kernel(2, 3))
kernel (2, 3) reduce=0
  buf0 f32 strides=(3, 1) offset=0
  buf1 f32 strides=(3, 1) offset=0
  buf2 f32 strides=(3, 1) offset=0
  %0 = load buf0
  %1 = load buf1
  %2 = add %0 %1
  store buf2 %2
"""
from __future__ import annotations

from ..codegen.ir import Buffer, Kernel, Store, const, load, op

__all__ = ["lstm_forward_kernel", "lstm_backward_kernel", "gru_forward_kernel", "gru_backward_kernel", "add_kernel"]


class _Builder:
    """Buffers and stores of one kernel over ``(batch, hidden)``."""

    def __init__(self, batch, hidden):
        self.batch, self.hidden, self.buffers, self.stores = batch, hidden, [], []

    def _add(self, buffer):
        self.buffers.append(buffer)
        return load(len(self.buffers) - 1, "f32"), len(self.buffers) - 1

    def gates(self, count, of, broadcast=False):
        """Buffers of gates ``0..count-1`` of a ``(B, of * H)`` array (``broadcast``: a bias row)."""
        width = of * self.hidden
        return [self._add(Buffer("f32", (0 if broadcast else width, 1), k * self.hidden)) for k in range(count)]

    def plain(self):
        """A contiguous ``(B, H)`` buffer."""
        return self._add(Buffer("f32", (self.hidden, 1)))

    def zero(self):
        """One element broadcast over the space (a part of a sum that is absent)."""
        return self._add(Buffer("f32", (0, 0)))

    def store(self, buffer, value):
        self.stores.append(Store(buffer[1], value))

    def kernel(self):
        return Kernel((self.batch, self.hidden), tuple(self.buffers), tuple(self.stores))


def _one():
    return const(1, "f32")


def _mul(*xs):
    out = xs[0]
    for x in xs[1:]:
        out = op("mul", out, x)
    return out


def _add(a, b):
    return op("add", a, b)


def _sub(a, b):
    return op("sub", a, b)


def _d_sigmoid(s):
    """The sigmoid's derivative from its value."""
    return _mul(s, _sub(_one(), s))


def lstm_forward_kernel(batch, hidden):
    """Reads the recurrent product and ``gi[t]`` per gate and ``c_{t-1}``; writes the activations per gate, ``c_t``,
    ``tanh(c_t)`` and ``h_t`` (before the projection, if any)."""
    b = _Builder(batch, hidden)
    pre, gi, (c_prev, _) = b.gates(4, 4), b.gates(4, 4), b.plain()
    acts, c_out, tc_out, h_out = b.gates(4, 4), b.plain(), b.plain(), b.plain()
    z = [_add(p, g) for (p, _), (g, _) in zip(pre, gi)]
    i, f, g, o = op("sigmoid", z[0]), op("sigmoid", z[1]), op("tanh", z[2]), op("sigmoid", z[3])
    for buf, value in zip(acts, (i, f, g, o)):
        b.store(buf, value)
    c = _add(_mul(f, c_prev), _mul(i, g))
    tc = op("tanh", c)
    b.store(c_out, c)
    b.store(tc_out, tc)
    b.store(h_out, _mul(o, tc))
    return b.kernel()


def lstm_backward_kernel(batch, hidden, projected):
    """Reads the two parts of ``dh`` (the step's output gradient and the recurrent one; with a projection one part,
    the other a broadcast zero), the activations, ``tanh(c_t)``, ``c_{t-1}`` and ``dc`` (rewritten in place with
    ``dc_{t-1}``); writes the gradients of the gates' pre-activations."""
    b = _Builder(batch, hidden)
    (dh_a, _), (dh_b, _) = b.plain(), (b.zero() if projected else b.plain())
    acts, (tc, _), (c_prev, _), dc_buf = b.gates(4, 4), b.plain(), b.plain(), b.plain()
    d_gates = b.gates(4, 4)
    dh = _add(dh_a, dh_b)
    i, f, g, o = (a for a, _ in acts)
    dc = _add(dc_buf[0], _mul(dh, o, _sub(_one(), _mul(tc, tc))))
    b.store(d_gates[0], _mul(dc, g, _d_sigmoid(i)))
    b.store(d_gates[1], _mul(dc, c_prev, _d_sigmoid(f)))
    b.store(d_gates[2], _mul(dc, i, _sub(_one(), _mul(g, g))))
    b.store(d_gates[3], _mul(dh, tc, _d_sigmoid(o)))
    b.store(dc_buf, _mul(dc, f))
    return b.kernel()


def gru_forward_kernel(batch, hidden, bias):
    """Reads the recurrent product per gate (plus ``b_hh``'s rows), ``gi[t]`` per gate and ``h_{t-1}``; writes r and
    z (the workspace's ``(B, 2H)`` section), n, ``hn = h W_hn^T + b_hn`` and ``h_t``."""
    b = _Builder(batch, hidden)
    gh = b.gates(3, 3)
    bh = b.gates(3, 3, broadcast=True) if bias else None
    gi, (h_prev, _) = b.gates(3, 3), b.plain()
    (r_out, z_out), n_out, hn_out, h_out = b.gates(2, 2), b.plain(), b.plain(), b.plain()
    hh = [_add(g, c) for (g, _), (c, _) in zip(gh, bh)] if bias else [g for g, _ in gh]
    r = op("sigmoid", _add(gi[0][0], hh[0]))
    z = op("sigmoid", _add(gi[1][0], hh[1]))
    n = op("tanh", _add(gi[2][0], _mul(r, hh[2])))
    for buf, value in ((r_out, r), (z_out, z), (n_out, n), (hn_out, hh[2])):
        b.store(buf, value)
    b.store(h_out, _add(n, _mul(z, _sub(h_prev, n))))
    return b.kernel()


def gru_backward_kernel(batch, hidden):
    """``dh = gy[t] + dhz + rec`` (``dhz``: the next step's ``dh z``, rewritten in place with this step's; ``rec``:
    the recurrent product); reads r, z, n, hn and ``h_{t-1}``; writes the gradients of ``gi`` and of the recurrent
    product ``h W_hh^T + b_hh`` per gate."""
    b = _Builder(batch, hidden)
    (gy, _), dhz, (rec, _) = b.plain(), b.plain(), b.plain()
    (r, _), (z, _) = b.gates(2, 2)
    (n, _), (hn, _), (h_prev, _) = b.plain(), b.plain(), b.plain()
    d_gi, d_gh = b.gates(3, 3), b.gates(3, 3)
    dh = _add(_add(gy, dhz[0]), rec)
    dn = _mul(dh, _sub(_one(), z), _sub(_one(), _mul(n, n)))
    dz = _mul(dh, _sub(h_prev, n), _d_sigmoid(z))
    dr = _mul(dn, hn, _d_sigmoid(r))
    for buf, value in ((d_gi[0], dr), (d_gi[1], dz), (d_gi[2], dn), (d_gh[0], dr), (d_gh[1], dz),
                       (d_gh[2], _mul(dn, r)), (dhz, _mul(dh, z))):
        b.store(buf, value)
    return b.kernel()


def add_kernel(batch, width):
    """``out = a + b`` over contiguous ``(batch, width)`` arrays."""
    b = _Builder(batch, width)
    (x, _), (y, _), out = b.plain(), b.plain(), b.plain()
    b.store(out, _add(x, y))
    return b.kernel()
