"""An LSTM or GRU layer direction's time loop as native programs (float32 NumPy arrays on the CPU).

`rnn_kernels` runs a time step as one product and 13 to 20 NumPy calls; at the sizes RNNs are trained at (a batch of
4 to 64 by a few hundred units) each call costs more in overhead than in arithmetic, and a kernel called from Python
per step still pays ctypes for its ~50 arguments. Here a run of steps is ONE native call (`codegen.llvm_program`):
per step the recurrent product (the generated row loop for narrow ones; from 64^3 multiply-adds or past 128 columns,
the weight packed in panels once per call, `codegen.llvm_gemm_packed`) and one generated kernel over the
``(batch, hidden)`` space that reads each gate's pre-activation and writes the activations, the states and the
workspace sections of `rnn_kernels` (so the backward reads one layout whichever path ran the forward).

A program covers a chunk of `CHUNKS` steps, its pointers table slots plus byte offsets: the same program runs every
chunk of that length with the table's bases moved, so any sequence length needs at most ``len(CHUNKS)`` programs
per layer shape, each compiled once (machine code cached on disk; kernels are shared by every program).

A gate ``k`` of a ``(B, G * H)`` array is the IR buffer ``(strides (G*H, 1), offset k*H)`` at the array's address:
the gates' elements are disjoint, so the ``noalias`` the emitter declares holds.

>>> import numpy as np
>>> from jitorch.ops import rnn_kernels, rnn_native
>>> rng = np.random.default_rng(0)
>>> gi, h0, c0 = (rng.standard_normal(s).astype(np.float32) for s in ((5, 3, 8), (3, 2), (3, 2)))
>>> w = rng.standard_normal((8, 2)).astype(np.float32)
>>> native = rnn_kernels.lstm_forward(np, gi, h0, c0, w, None, False)
>>> rnn_native.ENABLED = False
>>> plain = rnn_kernels.lstm_forward(np, gi, h0, c0, w, None, False)
>>> rnn_native.ENABLED = True
>>> all(np.allclose(a, b, atol=1e-6) for a, b in zip(native, plain))
True
"""
from __future__ import annotations

import numpy as np

from ..codegen.llvm_gemm import VECTOR_BYTES
from ..codegen.llvm_gemm_packed import pack_panels
from ..codegen.llvm_objcache import default_cache
from ..codegen.llvm_program import Gemm, KernelCall, PackedGemm, Ref, compile_program
from ..runtime.host_pointer import data_address
from . import rnn_cells as cells

__all__ = ["ENABLED", "CHUNKS", "applies", "lstm_forward", "lstm_backward", "gru_forward", "gru_backward"]

ENABLED = True  # tests turn it off to compare with the NumPy path
CHUNKS = (32, 16, 8, 4, 2, 1)  # steps per program: a length is a sum of these (at most one program per size)
_PACK_MIN_FLOPS = 64 * 64 * 64  # as compiled graphs for BLAS: below this the generated row loop wins
_MAX_PROGRAMS = 128
_programs: dict = {}
_F32 = np.dtype(np.float32)
_ITEM = 4


def applies(xp, steps, *arrays):
    """Whether the native programs take a scan of ``steps`` over these arrays: float32 NumPy arrays (None: an absent
    one) over at least two steps. A single step (a cell) is faster as NumPy calls than through the program's
    setup, which asks each array for its address."""
    return ENABLED and steps >= 2 and xp is np and all(
        a is None or (type(a) is np.ndarray and a.dtype == _F32) for a in arrays)


_address = data_address


def _c(a):
    return np.ascontiguousarray(a, dtype=np.float32)


def _chunks(steps):
    """``(start, length)`` of consecutive runs of processing positions, lengths from `CHUNKS`."""
    out, start = [], 0
    for size in CHUNKS:
        while steps - start >= size:
            out.append((start, size))
            start += size
    return out


class _Slots:
    """Names of the program's table entries, numbered in first use."""

    def __init__(self):
        self.index = {}

    def __call__(self, name, elements=0):
        return Ref(self.index.setdefault(name, len(self.index)), elements * _ITEM)

    def table(self, addresses):
        return np.array([addresses[name] for name in self.index], dtype=np.uint64)


def _packs(m, n, k):
    """Whether a step's product by a weight runs on the weight packed in panels (`llvm_gemm_packed`) rather than the
    generated row loop: where the loop is slow (wide rows, or from 64^3 multiply-adds, as compiled graphs decide
    for BLAS). BLAS itself would repack the weight at every step: twice the packed product's time for 20 rows by
    256 x 1024."""
    return m * n * k >= _PACK_MIN_FLOPS or n * _ITEM > VECTOR_BYTES


def _gemm(slots, m, n, k, a, weight, c):
    """``c (m, n) = a (m, k) @ W (k, n)``, all row-major and contiguous; ``W`` is table entry ``weight``, as
    `_weight` lays it out."""
    if _packs(m, n, k):
        return PackedGemm(m, n, k, a, k, slots(weight), c, n)
    return Gemm("f32", m, n, k, a, (k, 1), slots(weight), (n, 1), c, (n, 1))


def _weight(b, m):
    """The right operand ``b`` ``(k, n)`` of a product by ``m`` rows as `_gemm` reads it: packed or contiguous."""
    k, n = b.shape
    return pack_panels(b)[0] if _packs(m, n, k) else _c(b)


def _program(key, build):
    found = _programs.get(key)
    if found is None:
        if len(_programs) >= _MAX_PROGRAMS:
            _programs.clear()
        slots = _Slots()
        calls = build(slots)
        found = _programs[key] = (compile_program(calls, cache=default_cache()), slots)
    return found


def _positions(size, reverse, backward):
    """Local step indices of a chunk in the order they run, and each one's previous step (None: outside)."""
    order = list(range(size - 1, -1, -1)) if reverse != backward else list(range(size))
    prev = [(u + 1 if reverse else u - 1) for u in order]
    return [(u, p if 0 <= p < size else None) for u, p in zip(order, prev)]


def _run(kind, steps, reverse, backward, shape, build, bases, widths, before):
    """Run ``kind``'s programs over every chunk. ``bases``: table entries that stay put; ``widths``: per-step arrays
    (name -> (base address, elements per step)), moved to each chunk's lowest step; ``before(lo, size)``: the
    entries that depend on the chunk (the state before it)."""
    for start, size in _chunks(steps):
        program, slots = _program((kind, size, reverse, backward) + shape, lambda s: build(s, size))
        lo = start if reverse == backward else steps - start - size
        addresses = dict(bases)
        for name, (base, width) in widths.items():
            addresses[name] = base + lo * width * _ITEM
        addresses.update(before(lo, size))
        table = slots.table(addresses)
        program(_address(table))


def _prev_state(states, first, steps, reverse, lo, size):
    """The state before a chunk (in forward time): the initial one at the sequence's start."""
    t = lo - 1 if not reverse else lo + size
    return first if t < 0 or t >= steps else states[t]


# -- LSTM ----------------------------------------------------------------------------------------------------------
def _lstm_forward_calls(slots, size, batch, hid, out, proj, reverse):
    calls, gates = [], 4 * hid
    cell = cells.lstm_forward_kernel(batch, hid)
    for u, p in _positions(size, reverse, backward=False):
        h_prev = slots("HS", p * batch * out) if p is not None else slots("HPREV")
        c_prev = slots("CS", p * batch * hid) if p is not None else slots("CPREV")
        calls.append(_gemm(slots, batch, gates, out, h_prev, "W", slots("PRE")))
        acts, gi = slots("ACTS", u * batch * gates), slots("GI", u * batch * gates)
        h_out = slots("RAW") if proj else slots("HS", u * batch * out)
        calls.append(KernelCall(cell, (slots("PRE"),) * 4 + (gi,) * 4 + (c_prev,) + (acts,) * 4 + (
            slots("CS", u * batch * hid), slots("TCS", u * batch * hid), h_out)))
        if proj:
            calls.append(_gemm(slots, batch, out, hid, slots("RAW"), "WR", slots("HS", u * batch * out)))
    return calls


def lstm_forward(xp, gi, h0, c0, w_hh, w_hr, reverse, sections):
    """`rnn_kernels.lstm_forward`'s loop as native programs: ``(y, h_n, c_n)``; fills the workspace ``sections``."""
    acts, cs, tcs, hs = sections
    steps, batch, gates = gi.shape
    hid, out, proj = gates // 4, h0.shape[-1], w_hr is not None
    gi, h0, c0, w_t = _c(gi), _c(h0), _c(c0), _weight(w_hh.T, batch)
    pre, raw = np.empty((batch, gates), np.float32), np.empty((batch, hid), np.float32)
    w_hr_t = _weight(w_hr.T, batch) if proj else raw
    bases = dict(W=_address(w_t), PRE=_address(pre), RAW=_address(raw), WR=_address(w_hr_t))
    widths = {"GI": (_address(gi), batch * gates), "ACTS": (_address(acts), batch * gates),
              "CS": (_address(cs), batch * hid), "TCS": (_address(tcs), batch * hid), "HS": (_address(hs), batch * out)}

    def before(lo, size):
        return {"HPREV": _address(_prev_state(hs, h0, steps, reverse, lo, size)),
                "CPREV": _address(_prev_state(cs, c0, steps, reverse, lo, size))}
    _run("lstm_fwd", steps, reverse, False, (batch, hid, out, proj),
         lambda s, size: _lstm_forward_calls(s, size, batch, hid, out, proj, reverse), bases, widths, before)
    last = 0 if reverse else steps - 1
    return hs.copy(), hs[last].copy(), cs[last].copy()


def _lstm_backward_calls(slots, size, batch, hid, out, proj, reverse):
    calls, gates = [], 4 * hid
    cell = cells.lstm_backward_kernel(batch, hid, proj)
    add = cells.add_kernel(batch, out) if proj else None
    for u, p in _positions(size, reverse, backward=True):
        c_prev = slots("CS", p * batch * hid) if p is not None else slots("CPREV")
        if proj:  # dh = (gy[t] + the recurrent part) @ w_hr, kept for w_hr's gradient
            dhs = slots("DHS", u * batch * out)
            calls.append(KernelCall(add, (slots("GY", u * batch * out), slots("REC"), dhs)))
            calls.append(_gemm(slots, batch, hid, out, dhs, "WR", slots("RAW")))
            parts = (slots("RAW"), slots("ZERO"))
        else:
            parts = (slots("GY", u * batch * out), slots("REC"))
        acts, d = slots("ACTS", u * batch * gates), slots("D", u * batch * gates)
        calls.append(KernelCall(cell, parts + (acts,) * 4 + (slots("TCS", u * batch * hid), c_prev, slots("DC")) +
                                (d,) * 4))
        calls.append(_gemm(slots, batch, out, gates, d, "W", slots("REC")))
    return calls


def lstm_backward(xp, gy, ghn, gcn, c0, w_hh, w_hr, sections, reverse):
    """`rnn_kernels.lstm_backward`'s loop as native programs: ``(d_gates, dh0, dc0, dhs)`` (``dhs``: the projected
    states' gradients, for ``w_hr``'s; None without a projection)."""
    acts, cs, tcs, _ = sections
    steps, batch, out = gy.shape
    hid, proj = w_hh.shape[0] // 4, w_hr is not None
    gy, c0, w_hh = _c(gy), _c(c0), _weight(w_hh, batch)
    d_gates = np.empty((steps, batch, 4 * hid), np.float32)
    dhs = np.empty(gy.shape, np.float32) if proj else None
    dc, rec = np.array(gcn, np.float32, order="C"), np.array(ghn, np.float32, order="C")
    raw, zero = np.empty((batch, hid), np.float32), np.zeros(1, np.float32)
    w_hr = _weight(w_hr, batch) if proj else raw
    bases = dict(W=_address(w_hh), DC=_address(dc), REC=_address(rec), RAW=_address(raw),
                 ZERO=_address(zero), WR=_address(w_hr))
    widths = {"GY": (_address(gy), batch * out), "ACTS": (_address(acts), batch * 4 * hid),
              "TCS": (_address(tcs), batch * hid), "CS": (_address(cs), batch * hid),
              "D": (_address(d_gates), batch * 4 * hid)}
    if proj:
        widths["DHS"] = (_address(dhs), batch * out)

    def before(lo, size):
        return {"CPREV": _address(_prev_state(cs, c0, steps, reverse, lo, size))}
    _run("lstm_bwd", steps, reverse, True, (batch, hid, out, proj),
         lambda s, size: _lstm_backward_calls(s, size, batch, hid, out, proj, reverse), bases, widths, before)
    return d_gates, rec, dc, dhs


# -- GRU -----------------------------------------------------------------------------------------------------------
def _gru_forward_calls(slots, size, batch, hid, bias, reverse):
    calls, gates = [], 3 * hid
    cell = cells.gru_forward_kernel(batch, hid, bias)
    for u, p in _positions(size, reverse, backward=False):
        h_prev = slots("HS", p * batch * hid) if p is not None else slots("HPREV")
        calls.append(_gemm(slots, batch, gates, hid, h_prev, "W", slots("GH")))
        gi, rz = slots("GI", u * batch * gates), slots("RZ", u * batch * 2 * hid)
        calls.append(KernelCall(cell, (slots("GH"),) * 3 + ((slots("BH"),) * 3 if bias else ()) + (gi,) * 3 + (
            h_prev, rz, rz, slots("N", u * batch * hid), slots("HN", u * batch * hid), slots("HS", u * batch * hid))))
    return calls


def gru_forward(xp, gi, h0, w_hh, b_hh, reverse, sections):
    """`rnn_kernels.gru_forward`'s loop as native programs: ``(y, h_n)``; fills the workspace ``sections``."""
    rzs, ns, hns, hs = sections
    steps, batch, gates = gi.shape
    hid, bias = gates // 3, b_hh is not None
    gi, h0, w_t = _c(gi), _c(h0), _weight(w_hh.T, batch)
    gh = np.empty((batch, gates), np.float32)
    b_hh = _c(b_hh) if bias else gh
    bases = dict(W=_address(w_t), GH=_address(gh), BH=_address(b_hh))
    widths = {"GI": (_address(gi), batch * gates), "RZ": (_address(rzs), batch * 2 * hid),
              "N": (_address(ns), batch * hid), "HN": (_address(hns), batch * hid), "HS": (_address(hs), batch * hid)}

    def before(lo, size):
        return {"HPREV": _address(_prev_state(hs, h0, steps, reverse, lo, size))}
    _run("gru_fwd", steps, reverse, False, (batch, hid, bias),
         lambda s, size: _gru_forward_calls(s, size, batch, hid, bias, reverse), bases, widths, before)
    last = 0 if reverse else steps - 1
    return hs.copy(), hs[last].copy()


def _gru_backward_calls(slots, size, batch, hid, reverse):
    calls, gates = [], 3 * hid
    cell = cells.gru_backward_kernel(batch, hid)
    for u, p in _positions(size, reverse, backward=True):
        h_prev = slots("HS", p * batch * hid) if p is not None else slots("HPREV")
        rz, dgi, dgh = (slots("RZ", u * batch * 2 * hid), slots("DGI", u * batch * gates),
                        slots("DGH", u * batch * gates))
        calls.append(KernelCall(cell, (slots("GY", u * batch * hid), slots("DHZ"), slots("REC"), rz, rz,
                                       slots("N", u * batch * hid), slots("HN", u * batch * hid), h_prev) +
                                (dgi,) * 3 + (dgh,) * 3))
        calls.append(_gemm(slots, batch, hid, gates, dgh, "W", slots("REC")))
    return calls


def gru_backward(xp, gy, ghn, h0, w_hh, sections, reverse):
    """`rnn_kernels.gru_backward`'s loop as native programs: ``(d_gi, d_gh, dh0)``."""
    rzs, ns, hns, hs = sections
    steps, batch, hid = gy.shape
    gy, h0, w_hh = _c(gy), _c(h0), _weight(w_hh, batch)
    d_gi = np.empty((steps, batch, 3 * hid), np.float32)
    d_gh = np.empty((steps, batch, 3 * hid), np.float32)
    dhz, rec = np.array(ghn, np.float32, order="C"), np.zeros((batch, hid), np.float32)
    bases = dict(W=_address(w_hh), DHZ=_address(dhz), REC=_address(rec))
    widths = {"GY": (_address(gy), batch * hid), "RZ": (_address(rzs), batch * 2 * hid),
              "N": (_address(ns), batch * hid), "HN": (_address(hns), batch * hid), "HS": (_address(hs), batch * hid),
              "DGI": (_address(d_gi), batch * 3 * hid), "DGH": (_address(d_gh), batch * 3 * hid)}

    def before(lo, size):
        return {"HPREV": _address(_prev_state(hs, h0, steps, reverse, lo, size))}
    _run("gru_bwd", steps, reverse, True, (batch, hid),
         lambda s, size: _gru_backward_calls(s, size, batch, hid, reverse), bases, widths, before)
    rec += dhz  # dh_{-1} = dh_0 z_0 + the recurrent product
    return d_gi, d_gh, rec
