"""The sorted head of a float32 top-k as one LLVM function per direction, for `jitorch.ops.native_topk`: per row,
the first ``m`` positions of the stable order (descending with NaN first, or ascending with NaN last), kept by
insertion (a later equal value goes after an earlier one), then whether two neighbours of the head are equal (NaNs
equal). Returns the number of rows with such a pair.

What decides "v goes ahead of w", descending (`_BEFORE`), emitted once against the row's last head value and once
against each value the insertion passes::

    %bl.gt = fcmp ogt float %v, %thr
    %bl.vn = fcmp uno float %v, %v
    %bl.wo = fcmp ord float %thr, %thr
    %bl.nan = and i1 %bl.vn, %bl.wo
    %bl = or i1 %bl.gt, %bl.nan

>>> import numpy as np
>>> x = np.array([[1.0, np.nan, 3.0, 3.0, -1.0]], np.float32)
>>> order, tied = np.empty((1, 3), np.int64), np.empty(1, np.bool_)
>>> topk_head_function(True)(x.ctypes.data, order.ctypes.data, tied.ctypes.data, 1, 5, 3), order.tolist()
(1, [[1, 2, 3]])
"""
from __future__ import annotations

import ctypes

from .llvm_compile import compile_function
from .llvm_objcache import default_cache

__all__ = ["topk_head_function"]

_NAMES = {True: "jitorch_topk_head_f32_desc_v4", False: "jitorch_topk_head_f32_asc_v4"}

# %{p}: v goes ahead of w. Descending: v > w, or v is NaN and w is not; ascending: v < w, or w alone is NaN.
_BEFORE = {
    True: """  %{p}.gt = fcmp ogt float %{v}, %{w}
  %{p}.vn = fcmp uno float %{v}, %{v}
  %{p}.wo = fcmp ord float %{w}, %{w}
  %{p}.nan = and i1 %{p}.vn, %{p}.wo
  %{p} = or i1 %{p}.gt, %{p}.nan
""",
    False: """  %{p}.lt = fcmp olt float %{v}, %{w}
  %{p}.vo = fcmp ord float %{v}, %{v}
  %{p}.wn = fcmp uno float %{w}, %{w}
  %{p}.nan = and i1 %{p}.vo, %{p}.wn
  %{p} = or i1 %{p}.lt, %{p}.nan
""",
}

# Per row: the head's positions in ``idx`` and their values in ``vals`` (a scratch row on the stack), the last
# value ``thr`` in a register: most elements are one compare with it.
_IR = """define i64 @{name}(ptr noalias %x, ptr noalias %idx, ptr noalias %tied, i64 %rows, i64 %n,
                                       i64 %m) nounwind {{
entry:
  %vals = alloca float, i64 %m, align 16
  %m1 = sub i64 %m, 1
  %go = icmp sgt i64 %rows, 0
  br i1 %go, label %row, label %done
row:
  %r = phi i64 [0, %entry], [%r.next, %row.end]
  %ntied = phi i64 [0, %entry], [%ntied.next, %row.end]
  %xbase = mul i64 %r, %n
  %xr = getelementptr float, ptr %x, i64 %xbase
  %ibase = mul i64 %r, %m
  %ir = getelementptr i64, ptr %idx, i64 %ibase
  br label %elem
elem:
  %i = phi i64 [0, %row], [%i.next, %elem.end]
  %cnt = phi i64 [0, %row], [%cnt.next, %elem.end]
  %thr = phi float [0.0, %row], [%thr.next, %elem.end]
  %vp = getelementptr float, ptr %xr, i64 %i
  %v = load float, ptr %vp, align 4
  %full = icmp eq i64 %cnt, %m
  br i1 %full, label %check, label %shift
check:
{before_thr}  br i1 %bl, label %shift, label %elem.end
shift:
  %j = phi i64 [%cnt, %elem], [%m1, %check], [%jp, %move]
  %jpos = icmp sgt i64 %j, 0
  br i1 %jpos, label %compare, label %put
compare:
  %jp = sub i64 %j, 1
  %pvp = getelementptr float, ptr %vals, i64 %jp
  %pv = load float, ptr %pvp, align 4
{before_prev}  br i1 %bs, label %move, label %put
move:
  %pp = getelementptr i64, ptr %ir, i64 %jp
  %pi = load i64, ptr %pp, align 8
  %dp = getelementptr i64, ptr %ir, i64 %j
  store i64 %pi, ptr %dp, align 8
  %dvp = getelementptr float, ptr %vals, i64 %j
  store float %pv, ptr %dvp, align 4
  br label %shift
put:
  %sp = getelementptr i64, ptr %ir, i64 %j
  store i64 %i, ptr %sp, align 8
  %svp = getelementptr float, ptr %vals, i64 %j
  store float %v, ptr %svp, align 4
  %grow = icmp slt i64 %cnt, %m
  %add = zext i1 %grow to i64
  %cnt.put = add i64 %cnt, %add
  %tp = getelementptr float, ptr %vals, i64 %m1
  %thr.put = load float, ptr %tp, align 4
  br label %elem.end
elem.end:
  %cnt.next = phi i64 [%cnt, %check], [%cnt.put, %put]
  %thr.next = phi float [%thr, %check], [%thr.put, %put]
  %i.next = add i64 %i, 1
  %more = icmp slt i64 %i.next, %n
  br i1 %more, label %elem, label %ties
ties:
  %t = phi i64 [1, %elem.end], [%t.next, %tie]
  %flag = phi i1 [false, %elem.end], [%flag.next, %tie]
  %tmore = icmp slt i64 %t, %cnt.next
  br i1 %tmore, label %tie, label %row.end
tie:
  %tq = sub i64 %t, 1
  %avp = getelementptr float, ptr %vals, i64 %tq
  %av = load float, ptr %avp, align 4
  %bvp = getelementptr float, ptr %vals, i64 %t
  %bv = load float, ptr %bvp, align 4
  %eq = fcmp oeq float %av, %bv
  %an = fcmp uno float %av, %av
  %bn = fcmp uno float %bv, %bv
  %nn = and i1 %an, %bn
  %same = or i1 %eq, %nn
  %flag.next = or i1 %flag, %same
  %t.next = add i64 %t, 1
  br label %ties
row.end:
  %fb = zext i1 %flag to i8
  %fp = getelementptr i8, ptr %tied, i64 %r
  store i8 %fb, ptr %fp, align 1
  %fi = zext i1 %flag to i64
  %ntied.next = add i64 %ntied, %fi
  %r.next = add i64 %r, 1
  %rmore = icmp slt i64 %r.next, %rows
  br i1 %rmore, label %row, label %done
done:
  %total = phi i64 [0, %entry], [%ntied.next, %row.end]
  ret i64 %total
}}
"""

_functions: dict = {}


def topk_head_function(descending):
    """``f(x, idx, tied, rows, n, m) -> rows with ties`` (addresses, then sizes), compiled once per direction."""
    fn = _functions.get(descending)
    if fn is None:
        name = _NAMES[descending]
        before = _BEFORE[descending]
        ir = _IR.format(name=name, before_thr=before.format(p="bl", v="v", w="thr"),
                        before_prev=before.format(p="bs", v="v", w="pv"))
        address = compile_function(ir, name, default_cache())
        fn = _functions[descending] = ctypes.CFUNCTYPE(ctypes.c_int64, *[ctypes.c_void_p] * 3,
                                                       *[ctypes.c_int64] * 3)(address)
    return fn
