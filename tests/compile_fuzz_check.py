"""Runs a `compile_fuzz_gen.Program` under torch (the oracle), eager jitorch, ``jitorch.compile`` (inference and
training) and ``jitorch.compile(mode="reduce-overhead")``, and lists every disagreement with torch.

`mismatches(prog)` returns ``[(where, message)]``; an empty list means every way agreed with torch eager: shapes,
dtypes, requires_grad, values and input gradients under the same random upstream gradients. The tolerance rule:

- integer and bool results: equal;
- float16/bfloat16 results of an EXACT program (every op in `compile_fuzz_ops.EXACT_CALLS`: IEEE arithmetic,
  selects, casts, extremes, views): torch's values exactly (NaN for NaN; 0.0 and -0.0 count as equal: torch's own
  maximum/minimum return either zero on a tie, by whether a vector lane or the scalar tail ran). Eager jitorch computes
  each half op in float32 and rounds once as ATen does, and the fused lowering promises the same (a row's
  expression in float32, its result rounded once), so such a chain has exactly one right answer;
- every other float result, and every gradient (torch's half backward formulas round their intermediates where
  jitorch's fused ones may not): within `TOL` of the coarsest float type the program computes in (its result's,
  its inputs', its casts'), the absolute part relative to the result's largest finite magnitude (one long chain's
  rounding, or a cancellation, does not count); a half result's `TOL` is a few of its ulps.
"""
from __future__ import annotations

import warnings

import numpy as np
import torch

import jitorch
from compile_fuzz_gen import HALF, _torch_inputs

# (rtol, atol relative to the largest finite magnitude) per float type, finest first; half types' are about 8 ulps
TOL = {"float64": (1e-9, 1e-10), "float32": (2e-4, 2e-5), "float16": (4e-3, 4e-3), "bfloat16": (3e-2, 3e-2)}
# Half gradients against torch's: ATen's half backward formulas round each intermediate (and some, as layer norm's
# ``a * dy + b * x + c``, cancel), so they are a few percent off the exact gradient; jitorch's compiled gradients
# are held to `TOL` against jitorch's eager ones instead.
GRAD_TOL = {**TOL, "float16": (3e-2, 3e-2), "bfloat16": (1.2e-1, 1.2e-1)}
RO_CALLS = 3


def _jitorch_inputs(inputs, requires_grad, bases=None):
    return _torch_inputs(inputs, requires_grad, jitorch, bases)  # the view ops jitorch and torch share


def _torch_inputs_from(inputs, bases, requires_grad):
    return _torch_inputs(inputs, requires_grad, torch, bases)


def _np(t):
    """The values as NumPy (half types widened to float32, exactly: bits compare as the half's)."""
    if t.dtype in (torch.float16, torch.bfloat16, jitorch.float16, jitorch.bfloat16):
        t = t.float()
    if isinstance(t, torch.Tensor):
        return t.detach().numpy(force=True)
    return np.asarray(t.detach()._host())


def compare(got, want, where, coarsest="float64", exact=False, tol=TOL):
    """[] when ``got`` (jitorch) matches ``want`` (torch) in shape, dtype and values; else one message. Float values
    are compared at the coarser of their dtype's and ``coarsest``'s tolerance, or bit for bit where ``exact`` and
    the dtype is a half type (the module docstring's rule)."""
    if not isinstance(got, jitorch.Tensor):
        return [(where, f"not a tensor: {type(got).__name__}")]
    if tuple(got.shape) != tuple(want.shape):
        return [(where, f"shape {tuple(got.shape)} != torch {tuple(want.shape)}")]
    gd, wd = str(got.dtype).split(".")[-1], str(want.dtype).split(".")[-1]
    if gd != wd:
        return [(where, f"dtype {gd} != torch {wd}")]
    a, b = _np(got), _np(want)
    if b.dtype.kind in "biu":
        bad = a != b
    elif exact and wd in HALF:
        bad = (a != b) & ~(np.isnan(a) & np.isnan(b))
    else:
        rtol, atol = tol[max(wd, coarsest, key=list(TOL).index)]  # float32 values made float64: float32's rounding
        finite = np.abs(b[np.isfinite(b)])
        scale = max(1.0, float(finite.max()) if finite.size else 1.0)
        with np.errstate(invalid="ignore", over="ignore"):
            bad = ~((np.abs(a - b) <= atol * scale + rtol * np.abs(b)) | (a == b) | (np.isnan(a) & np.isnan(b)))
    if np.any(bad):
        i = tuple(int(k) for k in np.argwhere(bad)[0])
        return [(where, f"{int(bad.sum())}/{bad.size} values differ, first at {i}: {a[i]!r} != torch {b[i]!r}")]
    return []


def _precision(prog):
    """(the coarsest float type ``prog`` computes in, whether its half results must be torch's bits)."""
    floats = {i.dtype for i in prog.inputs if i.base.dtype.kind == "f"} | set(prog.half)
    source = "".join(prog.lines)
    made32 = any(i.dtype in ("int64", "bool") for i in prog.inputs) or ".float()" in source or "float32" in source
    floats |= {"float32"} if made32 else set()
    return max(floats or {"float64"}, key=list(TOL).index), prog.exact


def _upstream(outs, seed):
    """Random upstream gradients, float32 values the output's dtype holds exactly (so no conversion differs)."""
    rng = np.random.default_rng(seed + 7)
    grads = []
    for o in outs:
        g = rng.standard_normal(tuple(o.shape)).astype(np.float32) if o.requires_grad else None
        name = str(o.dtype).split(".")[-1]
        grads.append(g.astype(HALF[name]).astype(np.float32) if g is not None and name in HALF else g)
    return grads


def _run(fn, xs, grads, lib, where):
    """(outputs, input gradients or None) of one way of running; an exception is returned as a mismatch."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        outs = list(fn(*xs))
        roots = [(o, g) for o, g in zip(outs, grads or [None] * len(outs)) if g is not None]
        if roots:
            dt = [o.dtype for o, _ in roots]
            lib.autograd.backward([o for o, _ in roots], [lib.tensor(g, dtype=d) for (_, g), d in zip(roots, dt)])
        return outs, [x.grad if x.requires_grad else None for x in xs]


def _compare_run(got, want, where, precision, grad_tol=GRAD_TOL):
    found = []
    if len(got[0]) != len(want[0]):
        return [(where, f"{len(got[0])} outputs != torch {len(want[0])}")]
    for k, (g, w) in enumerate(zip(got[0], want[0])):
        found += compare(g, w, f"{where} out[{k}]", *precision)
        if isinstance(g, jitorch.Tensor) and g.requires_grad != w.requires_grad:
            found.append((f"{where} out[{k}]", f"requires_grad {g.requires_grad} != torch {w.requires_grad}"))
    for k, (g, w) in enumerate(zip(got[1], want[1])):
        if w is None or g is None:
            other = g if w is None else w
            if other is not None and np.any(_np(other)):
                found.append((f"{where} grad[{k}]", "only one side has a nonzero gradient"))
            continue
        found += compare(g, w, f"{where} grad[{k}]", precision[0], tol=grad_tol)
    return found


def _attempt(where, thunk):
    try:
        return thunk(), []
    except Exception as e:  # noqa: BLE001 - torch ran this program, so any jitorch error is a finding
        return None, [(where, f"raised {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")]


def mismatches(prog, ways=("eager", "compile", "train", "reduce-overhead")):
    """Every disagreement of jitorch's ways of running ``prog`` with torch, as ``[(where, message)]``."""
    found = []
    tfn, jfn = prog.function(torch), prog.function(jitorch)
    want = _run(tfn, _torch_inputs(prog.inputs, False), None, torch, "torch")
    for way in ways:
        if way == "eager":
            got, err = _attempt(way, lambda: _run(jfn, _jitorch_inputs(prog.inputs, False), None, jitorch, way))
        elif way == "compile":
            found += _check_calls(prog, tfn, jitorch.compile(prog.function(jitorch)), way, 2)
            continue
        elif way == "train" and prog.is_float:
            found += _check_train(prog, tfn, jfn)
            continue
        elif way == "reduce-overhead" and prog.is_float:
            found += _check_reduce_overhead(prog, tfn)
            continue
        else:
            continue
        found += err or _compare_run(got, want, way, _precision(prog))
    return found


def _check_train(prog, tfn, jfn):
    """Eager and compiled (joint forward + backward) gradients under random upstream gradients; the compiled
    function is called again on new values, its gradients also held to `TOL` against eager jitorch's."""
    rng, found = np.random.default_rng(prog.seed + 2), []
    cf = jitorch.compile(prog.function(jitorch))
    for call in range(2):
        bases = [inp.base if call == 0 else _fresh(rng, inp) for inp in prog.inputs]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            touts = list(tfn(*_torch_inputs_from(prog.inputs, bases, True)))
        grads = _upstream(touts, prog.seed + call)
        want = _run(tfn, _torch_inputs_from(prog.inputs, bases, True), grads, torch, "torch")
        eager, eager_err = _attempt("eager-train",
                                    lambda: _run(jfn, _jitorch_inputs(prog.inputs, True, bases), grads, jitorch, ""))
        if call == 0:
            found += eager_err or _compare_run(eager, want, "eager-train", _precision(prog))
        got, err = _attempt(f"train call {call}",
                            lambda: _run(cf, _jitorch_inputs(prog.inputs, True, bases), grads, jitorch, ""))
        found += err or _compare_run(got, want, f"train call {call}", _precision(prog))
        if not (err or eager_err):
            found += _compare_run(got, eager, f"train call {call} vs eager", _precision(prog), TOL)
        if found:
            break
    return found


def _check_reduce_overhead(prog, tfn):
    return _check_calls(prog, tfn, jitorch.compile(prog.function(jitorch), mode="reduce-overhead"),
                        "reduce-overhead", RO_CALLS)


def _check_calls(prog, tfn, cf, way, calls):
    """``calls`` calls of the compiled ``cf`` (inputs requiring no grad), new input values from the second on."""
    rng = np.random.default_rng(prog.seed + 1)
    found = []
    for call in range(calls):
        bases = [inp.base if call == 0 else _fresh(rng, inp) for inp in prog.inputs]
        want = _run(tfn, _torch_inputs_from(prog.inputs, bases, False), None, torch, "torch")
        got, err = _attempt(f"{way} call {call}",
                            lambda: _run(cf, _jitorch_inputs(prog.inputs, False, bases), None, jitorch, ""))
        found += err or _compare_run(got, want, f"{way} call {call}", _precision(prog))
        if found:
            return found + _eager_too(prog, want, bases)
    return found


def _eager_too(prog, want, bases):
    """Triage note: whether eager jitorch disagrees with torch on the same values too (then compile is not at fault)."""
    eager, err = _attempt("eager", lambda: _run(prog.function(jitorch), _jitorch_inputs(prog.inputs, False, bases),
                                                None, jitorch, ""))
    return [("note", "eager jitorch disagrees too" if err or _compare_run(eager, want, "", _precision(prog))
             else "eager jitorch agrees with torch")]


def _fresh(rng, inp):
    return inp.values(rng)
