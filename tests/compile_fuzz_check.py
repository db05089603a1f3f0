"""Runs a `compile_fuzz_gen.Program` under torch (the oracle), eager jitorch, ``jitorch.compile`` (inference and
training) and ``jitorch.compile(mode="reduce-overhead")``, and lists every disagreement with torch.

`mismatches(prog)` returns ``[(where, message)]``; an empty list means every way agreed with torch: shapes, dtypes,
values within the dtype's tolerance (relative to the output's largest finite magnitude, so one long chain's rounding
does not count), and input gradients under the same random upstream gradients.
"""
from __future__ import annotations

import warnings

import numpy as np
import torch

import jitorch
from compile_fuzz_gen import _torch_inputs

# (rtol, atol relative to the largest finite magnitude) per result dtype
TOL = {"float32": (2e-4, 2e-5), "float64": (1e-9, 1e-10)}
RO_CALLS = 3


def _jitorch_inputs(inputs, requires_grad, bases=None):
    out = []
    for k, inp in enumerate(inputs):
        base = (inp.base if bases is None else bases[k]).copy()
        t = jitorch.from_numpy(np.array(base, order="C"))
        t = inp.torch_view(t)  # the same view ops jitorch and torch share (permute, slicing, expand)
        t = t.detach()
        out.append(t.requires_grad_(True) if requires_grad and t.is_floating_point() else t)
    return out


def _torch_inputs_from(inputs, bases, requires_grad):
    out = []
    for inp, base in zip(inputs, bases):
        t = inp.torch_view(torch.from_numpy(base.copy())).detach()
        out.append(t.requires_grad_(True) if requires_grad and t.is_floating_point() else t)
    return out


def _np(t):
    if isinstance(t, torch.Tensor):
        return t.detach().numpy(force=True)
    return np.asarray(t.detach()._host())


def compare(got, want, where, narrow=False):
    """[] when ``got`` (jitorch) matches ``want`` (torch) in shape, dtype and values; else one message."""
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
    else:
        rtol, atol = TOL["float32" if narrow else wd]  # float64 results of float32 values: float32's rounding
        finite = np.abs(b[np.isfinite(b)])
        scale = max(1.0, float(finite.max()) if finite.size else 1.0)
        with np.errstate(invalid="ignore", over="ignore"):
            bad = ~((np.abs(a - b) <= atol * scale + rtol * np.abs(b)) | (a == b) | (np.isnan(a) & np.isnan(b)))
    if np.any(bad):
        i = tuple(int(k) for k in np.argwhere(bad)[0])
        return [(where, f"{int(bad.sum())}/{bad.size} values differ, first at {i}: {a[i]!r} != torch {b[i]!r}")]
    return []


def _narrow(prog):
    return any(i.base.dtype == np.float32 for i in prog.inputs)


def _upstream(outs, seed):
    rng = np.random.default_rng(seed + 7)
    return [rng.standard_normal(tuple(o.shape)) if o.requires_grad else None for o in outs]


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


def _compare_run(got, want, where, narrow):
    found = []
    if len(got[0]) != len(want[0]):
        return [(where, f"{len(got[0])} outputs != torch {len(want[0])}")]
    for k, (g, w) in enumerate(zip(got[0], want[0])):
        found += compare(g, w, f"{where} out[{k}]", narrow)
        if isinstance(g, jitorch.Tensor) and g.requires_grad != w.requires_grad:
            found.append((f"{where} out[{k}]", f"requires_grad {g.requires_grad} != torch {w.requires_grad}"))
    for k, (g, w) in enumerate(zip(got[1], want[1])):
        if w is None or g is None:
            other = g if w is None else w
            if other is not None and np.any(_np(other)):
                found.append((f"{where} grad[{k}]", "only one side has a nonzero gradient"))
            continue
        found += compare(g, w, f"{where} grad[{k}]", narrow)
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
        found += err or _compare_run(got, want, way, _narrow(prog))
    return found


def _check_train(prog, tfn, jfn):
    """Eager and compiled (joint forward + backward) gradients under random upstream gradients; the compiled
    function is called again on new values."""
    rng, found = np.random.default_rng(prog.seed + 2), []
    cf = jitorch.compile(prog.function(jitorch))
    for call in range(2):
        bases = [inp.base if call == 0 else _fresh(rng, inp.base) for inp in prog.inputs]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            touts = list(tfn(*_torch_inputs_from(prog.inputs, bases, True)))
        grads = _upstream(touts, prog.seed + call)
        want = _run(tfn, _torch_inputs_from(prog.inputs, bases, True), grads, torch, "torch")
        if call == 0:
            eager, err = _attempt("eager-train",
                                  lambda: _run(jfn, _jitorch_inputs(prog.inputs, True, bases), grads, jitorch, ""))
            found += err or _compare_run(eager, want, "eager-train", _narrow(prog))
        got, err = _attempt(f"train call {call}",
                            lambda: _run(cf, _jitorch_inputs(prog.inputs, True, bases), grads, jitorch, ""))
        found += err or _compare_run(got, want, f"train call {call}", _narrow(prog))
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
        bases = [inp.base if call == 0 else _fresh(rng, inp.base) for inp in prog.inputs]
        want = _run(tfn, _torch_inputs_from(prog.inputs, bases, False), None, torch, "torch")
        got, err = _attempt(f"{way} call {call}",
                            lambda: _run(cf, _jitorch_inputs(prog.inputs, False, bases), None, jitorch, ""))
        found += err or _compare_run(got, want, f"{way} call {call}", _narrow(prog))
        if found:
            return found + _eager_too(prog, want, bases)
    return found


def _eager_too(prog, want, bases):
    """Triage note: whether eager jitorch disagrees with torch on the same values too (then compile is not at fault)."""
    eager, err = _attempt("eager", lambda: _run(prog.function(jitorch), _jitorch_inputs(prog.inputs, False, bases),
                                                None, jitorch, ""))
    return [("note", "eager jitorch disagrees too" if err or _compare_run(eager, want, "", _narrow(prog))
             else "eager jitorch agrees with torch")]


def _fresh(rng, base):
    if base.dtype == bool:
        return np.asarray(rng.random(base.shape) < 0.5)
    if base.dtype.kind == "i":
        return np.asarray(rng.integers(-3, 4, base.shape), dtype=base.dtype)
    return np.asarray(rng.uniform(-2.0, 2.0, base.shape), dtype=base.dtype)
