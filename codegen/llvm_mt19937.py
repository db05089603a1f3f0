"""mt19937 draws as one LLVM function, and ATen's ``randperm`` shuffle over them (`swap_shuffle`).

``MT19937Engine`` holds the 624-word state and position and fills arrays with tempered 32-bit outputs (NumPy's
``MT19937.random_raw`` takes about 2.6 ns a draw; the generated loop, its tempering vectorized, about 0.3).

The state is the standard one (Matsumoto and Nishimura's ``genrand_int32``), as ATen's ``at::mt19937`` keeps it:
``key`` is the state array, ``pos`` the index of the next word to temper, 624 meaning "twist first".

>>> e = MT19937Engine.seeded(5489)
>>> [int(v) for v in e.draw(3)]  # the reference implementation's first outputs for its default seed
[3499211612, 581869302, 3890346734]
"""
from __future__ import annotations

import ctypes
import threading

import numpy as np

__all__ = ["MT19937Engine", "SCRATCH_WORDS", "address_of", "inside_out_shuffle", "swap_shuffle"]

N = 624
_M = 397

_IR = """define private void @twist(ptr noalias %mt) nounwind {
entry:
  br label %lo
lo:
  %i = phi i64 [0, %entry], [%i.next, %lo]
  %i1 = add i64 %i, 1
  %im = add i64 %i, 397
  call void @step(ptr %mt, i64 %i, i64 %i1, i64 %im)
  %i.next = add i64 %i, 1
  %lo.more = icmp slt i64 %i.next, 227
  br i1 %lo.more, label %lo, label %hi
hi:
  %k = phi i64 [227, %lo], [%k.next, %hi]
  %k1 = add i64 %k, 1
  %km = sub i64 %k, 227
  call void @step(ptr %mt, i64 %k, i64 %k1, i64 %km)
  %k.next = add i64 %k, 1
  %hi.more = icmp slt i64 %k.next, 623
  br i1 %hi.more, label %hi, label %last
last:
  call void @step(ptr %mt, i64 623, i64 0, i64 396)
  ret void
}

define private void @step(ptr noalias %mt, i64 %i, i64 %next, i64 %far) alwaysinline nounwind {
  %pi = getelementptr i32, ptr %mt, i64 %i
  %pn = getelementptr i32, ptr %mt, i64 %next
  %pf = getelementptr i32, ptr %mt, i64 %far
  %a = load i32, ptr %pi, align 4
  %b = load i32, ptr %pn, align 4
  %f = load i32, ptr %pf, align 4
  %upper = and i32 %a, -2147483648
  %lower = and i32 %b, 2147483647
  %y = or i32 %upper, %lower
  %half = lshr i32 %y, 1
  %odd = and i32 %y, 1
  %neg = sub i32 0, %odd
  %mag = and i32 %neg, -1727483681
  %x = xor i32 %f, %half
  %v = xor i32 %x, %mag
  store i32 %v, ptr %pi, align 4
  ret void
}

define void @NAME(ptr noalias %mt, ptr noalias %posp, ptr noalias %out, i64 %n) nounwind {
entry:
  %pos0 = load i64, ptr %posp, align 8
  %any = icmp sgt i64 %n, 0
  br i1 %any, label %chunk, label %done
chunk:
  %done.n = phi i64 [0, %entry], [%done.next, %copied]
  %pos = phi i64 [%pos0, %entry], [%pos.next, %copied]
  %full = icmp sge i64 %pos, 624
  br i1 %full, label %regen, label %ready
regen:
  call void @twist(ptr %mt)
  br label %ready
ready:
  %p = phi i64 [%pos, %chunk], [0, %regen]
  %avail = sub i64 624, %p
  %left = sub i64 %n, %done.n
  %short = icmp slt i64 %left, %avail
  %take = select i1 %short, i64 %left, i64 %avail
  br label %copy
copy:
  %j = phi i64 [0, %ready], [%j.next, %copy]
  %src = add i64 %p, %j
  %ps = getelementptr i32, ptr %mt, i64 %src
  %w = load i32, ptr %ps, align 4
  %t1s = lshr i32 %w, 11
  %t1 = xor i32 %w, %t1s
  %t2s = shl i32 %t1, 7
  %t2m = and i32 %t2s, -1658038656
  %t2 = xor i32 %t1, %t2m
  %t3s = shl i32 %t2, 15
  %t3m = and i32 %t3s, -272236544
  %t3 = xor i32 %t2, %t3m
  %t4s = lshr i32 %t3, 18
  %t4 = xor i32 %t3, %t4s
  %dst = add i64 %done.n, %j
  %pd = getelementptr i32, ptr %out, i64 %dst
  store i32 %t4, ptr %pd, align 4
  %j.next = add i64 %j, 1
  %more = icmp slt i64 %j.next, %take
  br i1 %more, label %copy, label %copied
copied:
  %done.next = add i64 %done.n, %take
  %pos.next = add i64 %p, %take
  %again = icmp slt i64 %done.next, %n
  br i1 %again, label %chunk, label %finish
finish:
  store i64 %pos.next, ptr %posp, align 8
  br label %done
done:
  ret void
}
"""
_fill: list = []
_shuffle: list = []


def address_of(array):
    """The data address of a writable NumPy array (0 when empty): ``array.ctypes.data`` costs 1.8 us a call, a
    small draw's whole budget; a ``c_char`` over its buffer 0.4."""
    return ctypes.addressof(ctypes.c_char.from_buffer(array)) if array.size else 0


def _fill_function():
    if not _fill:
        from .llvm_compile import compile_function
        from .llvm_objcache import default_cache

        name = "jitorch_torch_mt19937_fill_v1"
        address = compile_function(_IR.replace("NAME", name), name, default_cache())
        _fill.append(ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)(address))
    return _fill[0]


class MT19937Engine:
    """The 624-word state and position of one mt19937, drawn by the generated function (``draw``, ``draw_scratch``).

    Draws hold a lock: the generated function runs without the GIL, and two threads drawing from one generator
    must not interleave inside it (ATen's generators lock a mutex the same way)."""

    __slots__ = ("key", "pos", "_lock", "_scratch", "_addresses")

    def __init__(self, key, pos):
        self.key = np.ascontiguousarray(key, dtype=np.uint32).copy()
        if self.key.shape != (N,) or not 0 <= int(pos) <= N:
            raise ValueError(f"mt19937: expected {N} state words and a position in [0, {N}], got "
                             f"{self.key.shape} and {pos}")
        self.pos = np.array([int(pos)], np.int64)
        self._lock = threading.Lock()
        self._scratch = np.empty(SCRATCH_WORDS, np.uint32)
        self._addresses = (self.key.ctypes.data, self.pos.ctypes.data, self._scratch.ctypes.data)

    def __reduce__(self):  # (copies and pickles: the lock and the addresses are remade)
        return type(self), (self.key, int(self.pos[0]))

    @classmethod
    def seeded(cls, seed):
        """``init_genrand(seed)`` (``seed`` a 32-bit number): the state ATen's ``mt19937(seed)`` starts from."""
        return cls(np.random.RandomState(int(seed) & 0xFFFFFFFF).get_state()[1], N)

    def draw(self, n):
        """The next ``n`` 32-bit outputs, as a uint32 array."""
        out = np.empty(int(n), np.uint32)
        if n:
            key, pos, _ = self._addresses
            with self._lock:
                _fill_function()(key, pos, address_of(out), out.size)
        return out

    def draw_scratch(self, n, then):
        """The next ``n`` outputs (at most ``SCRATCH_WORDS``) written to this engine's scratch buffer, and
        ``then(address)`` called on it under the lock (the buffer is reused by the next draw)."""
        key, pos, scratch = self._addresses
        with self._lock:
            if n:
                _fill_function()(key, pos, scratch, n)
            return then(scratch)


SCRATCH_WORDS = 4096


_SHUFFLE_IR = """define void @NAME(ptr noalias %perm, ptr noalias %draws, i64 %n) nounwind {
entry:
  %last = sub i64 %n, 1
  %any = icmp sgt i64 %last, 0
  br i1 %any, label %loop, label %done
loop:
  %i = phi i64 [0, %entry], [%i.next, %loop]
  %pd = getelementptr i32, ptr %draws, i64 %i
  %d32 = load i32, ptr %pd, align 4
  %d = zext i32 %d32 to i64
  %left = sub i64 %n, %i
  %z = urem i64 %d, %left
  %j = add i64 %i, %z
  %pi = getelementptr i64, ptr %perm, i64 %i
  %pj = getelementptr i64, ptr %perm, i64 %j
  %vi = load i64, ptr %pi, align 8
  %vj = load i64, ptr %pj, align 8
  store i64 %vj, ptr %pi, align 8
  store i64 %vi, ptr %pj, align 8
  %i.next = add i64 %i, 1
  %more = icmp slt i64 %i.next, %last
  br i1 %more, label %loop, label %done
done:
  ret void
}
"""


_INSIDE_OUT_IR = """define void @NAME(ptr noalias %perm, ptr noalias %draws, i64 %n) nounwind {
entry:
  %any = icmp sgt i64 %n, 0
  br i1 %any, label %loop, label %done
loop:
  %i = phi i64 [0, %entry], [%i.next, %loop]
  %k = shl i64 %i, 1
  %ph = getelementptr i32, ptr %draws, i64 %k
  %hi32 = load i32, ptr %ph, align 4
  %k1 = add i64 %k, 1
  %pl = getelementptr i32, ptr %draws, i64 %k1
  %lo32 = load i32, ptr %pl, align 4
  %hi = zext i32 %hi32 to i64
  %lo = zext i32 %lo32 to i64
  %hs = shl i64 %hi, 32
  %r = or i64 %hs, %lo
  %count = add i64 %i, 1
  %z = urem i64 %r, %count
  %pi = getelementptr i64, ptr %perm, i64 %i
  %pz = getelementptr i64, ptr %perm, i64 %z
  store i64 %i, ptr %pi, align 8
  %vz = load i64, ptr %pz, align 8
  store i64 %vz, ptr %pi, align 8
  store i64 %i, ptr %pz, align 8
  %i.next = add i64 %i, 1
  %more = icmp slt i64 %i.next, %n
  br i1 %more, label %loop, label %done
done:
  ret void
}
"""


def inside_out_shuffle(perm, draws):
    """ATen's ``randperm`` for ``n >= 2**32 / 20``: the inside-out Fisher-Yates over 64-bit draws (``draws``: ``2 n``
    32-bit draws, uint32, each pair ``(high, low)``): ``perm[i] = perm[z]; perm[z] = i`` for ``z = r % (i + 1)``."""
    if perm.dtype != np.int64 or draws.dtype != np.uint32 or draws.size < 2 * perm.size or \
            not perm.flags.c_contiguous or not draws.flags.c_contiguous:
        raise ValueError("inside_out_shuffle: expected a contiguous int64 output and 2 n contiguous uint32 draws")
    if len(_shuffle) < 2:
        from .llvm_compile import compile_function
        from .llvm_objcache import default_cache

        swap_shuffle(np.zeros(1, np.int64), np.zeros(1, np.uint32))  # (compiles the first function)
        name = "jitorch_torch_randperm_inside_out_v1"
        address = compile_function(_INSIDE_OUT_IR.replace("NAME", name), name, default_cache())
        _shuffle.append(ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)(address))
    _shuffle[1](address_of(perm), address_of(draws), perm.size)
    return perm


def swap_shuffle(perm, draws):
    """ATen's ``randperm`` loop in place on ``perm`` (int64, contiguous): for each ``i < n - 1`` swap ``perm[i]``
    with ``perm[i + draws[i] % (n - i)]`` (``draws``: ``n - 1`` 32-bit draws, uint32)."""
    if perm.dtype != np.int64 or draws.dtype != np.uint32 or draws.size < perm.size - 1 or \
            not perm.flags.c_contiguous or not draws.flags.c_contiguous:
        raise ValueError("swap_shuffle: expected a contiguous int64 permutation and n - 1 contiguous uint32 draws")
    if not _shuffle:
        from .llvm_compile import compile_function
        from .llvm_objcache import default_cache

        name = "jitorch_torch_randperm_shuffle_v1"
        address = compile_function(_SHUFFLE_IR.replace("NAME", name), name, default_cache())
        _shuffle.append(ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)(address))
    _shuffle[0](address_of(perm), address_of(draws), perm.size)
    return perm
