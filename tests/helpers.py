"""Shared op-test helpers: run the same computation in jitorch and in PyTorch (the oracle) and compare.

``check_op(jt_fn, torch_fn, inputs, atol=..., rtol=...)`` builds both frameworks' tensors from the same NumPy arrays,
compares shapes, dtypes and values (NaN-aware), then runs backward with the same random upstream gradient and compares
the input gradients. ``gradcheck_op(fn, arrays)`` runs ``jitorch.autograd.gradcheck`` in float64.

Inputs are NumPy arrays (turned into tensors) or anything else (Python scalars, dims, ...) passed through unchanged.
A ``layout`` makes array inputs non-contiguous: ``"transposed"`` (a permuted view of a reversed-shape array),
``"sliced"`` (every other element of an array twice as long in the last dim) or ``"expanded"`` (the first slice along
dim 0 broadcast over the shape: stride 0, so its values are those of that slice repeated).
"""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
import torch

import jitorch

__all__ = ["DTYPES", "FLOAT_DTYPES", "INT_DTYPES", "LAYOUTS", "np_dtype", "make_array", "to_jitorch", "to_torch",
           "check_op", "check_error", "gradcheck_op", "gradgradcheck_op", "assert_same", "tol_for"]

DTYPES = ("bool", "uint8", "int8", "int16", "int32", "int64", "float16", "bfloat16", "float32", "float64")
FLOAT_DTYPES = ("float16", "bfloat16", "float32", "float64")
INT_DTYPES = ("uint8", "int8", "int16", "int32", "int64")
LAYOUTS = ("contiguous", "transposed", "sliced", "expanded")

# Tolerances that absorb the rounding differences of computing half types in float32 and rounding once (PyTorch)
# versus NumPy's per-ufunc rounding.
_TOL = {"float16": (2e-3, 2e-3), "bfloat16": (2e-2, 2e-2), "float32": (1e-5, 1e-5), "float64": (1e-10, 1e-10)}


def tol_for(dtype_name):
    """(atol, rtol) suitable for comparing results computed in ``dtype_name``."""
    return _TOL.get(dtype_name, (0.0, 0.0))


def np_dtype(name):
    return np.dtype(ml_dtypes.bfloat16) if name == "bfloat16" else np.dtype(name)


def make_array(shape, dtype="float32", rng=None, low=-3.0, high=3.0):
    """Random values of ``dtype`` in ``[low, high)`` (integers: ``[ceil(low), floor(high)]``, clipped to the type)."""
    rng = np.random.default_rng(0) if rng is None else rng
    shape = tuple(shape)
    if dtype == "bool":
        return np.asarray(rng.random(shape) < 0.5)
    if dtype in ("complex64", "complex128"):
        return np.asarray((rng.uniform(low, high, shape) + 1j * rng.uniform(low, high, shape)).astype(dtype))
    if dtype in INT_DTYPES:
        info = np.iinfo(dtype)
        lo, hi = max(int(np.ceil(low)), info.min), min(int(np.floor(high)), info.max)
        hi = max(hi, lo)  # a domain narrower than one integer still yields its lower bound
        return np.asarray(rng.integers(lo, hi + 1, shape).astype(dtype))
    return np.asarray(rng.uniform(low, high, shape).astype(np_dtype(dtype)))


def normal_array(*shape, seed=0, dtype=np.float64):
    """Standard normal values of ``dtype`` (complex: independent real and imaginary parts), from ``seed``."""
    rng = np.random.default_rng(seed)
    a = rng.standard_normal(shape)
    if np.dtype(dtype).kind == "c":
        a = a + 1j * rng.standard_normal(shape)
    return a.astype(dtype)


# -- building tensors -------------------------------------------------------------------------------------------------
def _layout_of(arr, layout):
    """(values the view shows, contiguous base array, name of the view) for a layout; falls back to contiguous."""
    if layout == "transposed" and arr.ndim >= 2:
        return arr, np.ascontiguousarray(arr.transpose()), "transposed"
    if layout == "sliced" and arr.ndim >= 1:
        base = np.zeros(arr.shape[:-1] + (2 * arr.shape[-1],), dtype=arr.dtype)
        base[..., ::2] = arr
        return arr, base, "sliced"
    if layout == "expanded" and arr.ndim >= 1 and arr.shape[0] > 1:
        base = np.ascontiguousarray(arr[:1])
        return np.broadcast_to(base, arr.shape), base, "expanded"
    if layout not in LAYOUTS:
        raise ValueError(f"unknown layout {layout!r}; expected one of {LAYOUTS}")
    # np.ascontiguousarray would turn a 0-d array into shape (1,); a C-ordered copy keeps 0-d inputs 0-d.
    return arr, np.array(arr, order="C", copy=True), "contiguous"


def _np_view(base, kind, shape):
    if kind == "transposed":
        return base.transpose()
    if kind == "sliced":
        return base[..., ::2]
    if kind == "expanded":
        return np.broadcast_to(base, shape)
    return base


def _torch_view(base, kind, shape):
    if kind == "transposed":
        return base.permute(*reversed(range(base.dim())))
    if kind == "sliced":
        return base[..., ::2]
    if kind == "expanded":
        return base.expand(shape)
    return base


def _torch_from_np(arr):
    if arr.dtype == np_dtype("bfloat16"):
        return torch.from_numpy(np.array(arr, order="C").astype(np.float32)).to(torch.bfloat16)
    return torch.from_numpy(np.array(arr, copy=True))


def _can_require_grad(arr):
    return arr.dtype.kind in "fc" or arr.dtype == np_dtype("bfloat16")


def to_jitorch(arr, layout="contiguous", requires_grad=False):
    """A jitorch leaf tensor showing ``arr``'s values in ``layout`` (built from NumPy views, not jitorch view ops)."""
    _, base, kind = _layout_of(np.asarray(arr), layout)
    t = jitorch.from_numpy(_np_view(base.copy(), kind, np.shape(arr)))
    return t.requires_grad_(True) if requires_grad else t


def to_torch(arr, layout="contiguous", requires_grad=False):
    _, base, kind = _layout_of(np.asarray(arr), layout)
    t = _torch_view(_torch_from_np(base), kind, np.shape(arr)).detach()
    return t.requires_grad_(True) if requires_grad else t


# -- comparing results ------------------------------------------------------------------------------------------------
def _dtype_name(t):
    return str(t.dtype).split(".")[-1]


def _np_of(t):
    """Host values of a jitorch or torch tensor as a NumPy array (half types widened to float64)."""
    if isinstance(t, torch.Tensor):
        t = t.detach()
        if t.dtype in (torch.bfloat16, torch.float16):
            t = t.double()
        return t.numpy(force=True)  # force: gradients of some ops are ZeroTensors
    arr = np.asarray(t._host())
    return arr.astype(np.float64) if arr.dtype in (np_dtype("bfloat16"), np.float16) else arr


def _flatten(out, where="out"):
    """[(path, leaf)] for nested tuples/lists/named tuples of tensors and scalars."""
    if isinstance(out, (jitorch.Tensor, torch.Tensor)):
        return [(where, out)]
    if isinstance(out, (tuple, list)) and not isinstance(out, (jitorch.Size, torch.Size)):
        items = []
        for i, o in enumerate(out):
            items += _flatten(o, f"{where}[{i}]")
        return items
    return [(where, out)]


def assert_same(jt, th, *, atol=0.0, rtol=0.0, what="output", check_dtype=True):
    """Shape, dtype and NaN-aware values of a jitorch result ``jt`` against PyTorch's ``th``."""
    if isinstance(th, torch.Tensor):
        assert isinstance(jt, jitorch.Tensor), f"{what}: expected a Tensor, got {type(jt).__name__}"
        assert tuple(jt.shape) == tuple(th.shape), f"{what}: shape {tuple(jt.shape)} != torch {tuple(th.shape)}"
        if check_dtype:
            assert _dtype_name(jt) == _dtype_name(th), f"{what}: dtype {jt.dtype} != torch {th.dtype}"
        a, b = _np_of(jt), _np_of(th)
        if b.dtype.kind in "biu" and a.dtype.kind in "biu":
            np.testing.assert_array_equal(a, b, err_msg=what)
        elif "c" in (a.dtype.kind, b.dtype.kind):
            np.testing.assert_allclose(a.astype(np.complex128), b.astype(np.complex128), atol=atol, rtol=rtol,
                                       equal_nan=True, err_msg=what)
        else:
            np.testing.assert_allclose(a.astype(np.float64), b.astype(np.float64), atol=atol, rtol=rtol,
                                       equal_nan=True, err_msg=what)
        return
    if isinstance(th, torch.Size):
        assert tuple(jt) == tuple(th), f"{what}: {tuple(jt)} != torch {tuple(th)}"
        return
    if isinstance(th, float) and isinstance(jt, float):
        np.testing.assert_allclose(jt, th, atol=atol, rtol=rtol, equal_nan=True, err_msg=what)
        return
    assert type(jt) is type(th) and jt == th, f"{what}: {jt!r} != torch {th!r}"


def _compare_structure(jt_out, th_out, atol, rtol, check_dtype):
    if hasattr(jt_out, "_fields") and type(th_out) is not tuple:  # named tuples: torch's must have the fields
        for field in jt_out._fields:
            assert hasattr(th_out, field), f"torch's result has no field {field!r}"
    jt_items, th_items = _flatten(jt_out), _flatten(th_out)
    assert len(jt_items) == len(th_items), f"{len(jt_items)} outputs != torch's {len(th_items)}"
    for (where, a), (_, b) in zip(jt_items, th_items):
        assert_same(a, b, atol=atol, rtol=rtol, what=where, check_dtype=check_dtype)
    return [a for _, a in jt_items], [b for _, b in th_items]


def _run_both(jt_fn, torch_fn, jt_args, th_args):
    """Run torch first; when it raises, jitorch must raise the same exception type. Returns None on that path."""
    try:
        th_out = torch_fn(*th_args)
    except Exception as th_err:  # noqa: BLE001 - any error type is part of the contract being compared
        try:
            jt_fn(*jt_args)
        except Exception as jt_err:  # noqa: BLE001
            assert isinstance(jt_err, type(th_err)), \
                f"torch raised {type(th_err).__name__}({th_err}); jitorch raised {type(jt_err).__name__}({jt_err})"
            return None
        raise AssertionError(f"torch raised {type(th_err).__name__}({th_err}) but jitorch did not") from None
    return jt_fn(*jt_args), th_out


def check_op(jt_fn, torch_fn, inputs, *, atol=1e-6, rtol=1e-5, grad=True, layout="contiguous", grad_atol=None,
             grad_rtol=None, check_dtype=True, seed=0):
    """Compare ``jt_fn(*inputs)`` with ``torch_fn(*inputs)`` forward and, when ``grad``, backward.

    ``inputs``: NumPy arrays become tensors (float ones require grad when ``grad``); other values pass unchanged.
    ``layout``: one of ``LAYOUTS`` for every array input, or a sequence with one layout per input.
    When torch raises, jitorch must raise the same exception type. Returns (jitorch result, torch result) or None.
    """
    layouts = [layout] * len(inputs) if isinstance(layout, str) else list(layout)
    jt_args, th_args, leaves = [], [], []
    for x, lay in zip(inputs, layouts):
        if isinstance(x, np.ndarray):
            rg = grad and _can_require_grad(x)
            j, t = to_jitorch(x, lay, rg), to_torch(x, lay, rg)
            if _layout_of(x, lay)[2] != "contiguous" and min(x.shape) > 1:  # size-1 dims can stay contiguous
                assert not j.is_contiguous() and not t.is_contiguous(), f"layout {lay} should be non-contiguous"
            jt_args.append(j)
            th_args.append(t)
            if rg:
                leaves.append((j, t))
        else:
            jt_args.append(x)
            th_args.append(x)
    ran = _run_both(jt_fn, torch_fn, jt_args, th_args)
    if ran is None:
        return None
    jt_out, th_out = ran
    jt_items, th_items = _compare_structure(jt_out, th_out, atol, rtol, check_dtype)
    if grad and leaves:
        _check_backward(jt_items, th_items, leaves, grad_atol if grad_atol is not None else atol,
                        grad_rtol if grad_rtol is not None else rtol, seed)
    return jt_out, th_out


def _check_backward(jt_items, th_items, leaves, atol, rtol, seed):
    rng = np.random.default_rng(seed)
    jt_roots, th_roots, jt_grads, th_grads = [], [], [], []
    for i, (j, t) in enumerate(zip(jt_items, th_items)):
        if not isinstance(t, torch.Tensor):
            continue
        assert bool(getattr(j, "requires_grad", False)) == t.requires_grad, \
            f"out[{i}].requires_grad: jitorch {getattr(j, 'requires_grad', None)} != torch {t.requires_grad}"
        if not t.requires_grad:
            continue
        g = rng.standard_normal(tuple(t.shape)).astype(np.float64)
        if t.is_complex():  # a complex upstream gradient exercises both parts of the conjugate-Wirtinger rule
            g = np.asarray(g + 1j * rng.standard_normal(tuple(t.shape)))  # 0-d: a NumPy scalar otherwise
        jt_roots.append(j)
        th_roots.append(t)
        jt_grads.append(jitorch.tensor(g, dtype=j.dtype))
        th_grads.append(torch.from_numpy(g).to(t.dtype))
    if not th_roots:
        return
    torch.autograd.backward(th_roots, th_grads)
    jitorch.autograd.backward(jt_roots, jt_grads)
    for k, (j, t) in enumerate(leaves):
        # No gradient and an all-zero gradient are the same answer (PyTorch itself returns either, op by op).
        if t.grad is None or j.grad is None:
            other = j.grad if t.grad is None else t.grad
            assert other is None or not np.any(_np_of(other)), f"input {k}: only one framework has a nonzero grad"
            continue
        assert_same(j.grad, t.grad, atol=atol, rtol=rtol, what=f"grad of input {k}")


def check_error(jt_fn, torch_fn, inputs=(), *, match=(), layout="contiguous"):
    """Both frameworks must raise the same exception type; jitorch's message must contain every string of ``match``.

    Returns jitorch's exception so a test can inspect it further.
    """
    jt_args = [to_jitorch(x, layout) if isinstance(x, np.ndarray) else x for x in inputs]
    th_args = [to_torch(x, layout) if isinstance(x, np.ndarray) else x for x in inputs]
    try:
        torch_fn(*th_args)
    except Exception as e:  # noqa: BLE001
        th_err = e
    else:
        raise AssertionError("torch did not raise: the test's premise is wrong")
    try:
        jt_fn(*jt_args)
    except Exception as jt_err:  # noqa: BLE001
        assert isinstance(jt_err, type(th_err)), \
            f"torch raised {type(th_err).__name__}({th_err}); jitorch raised {type(jt_err).__name__}({jt_err})"
        for m in (match,) if isinstance(match, str) else match:
            assert m in str(jt_err), f"jitorch's message {str(jt_err)!r} does not mention {m!r}"
        return jt_err
    raise AssertionError(f"torch raised {type(th_err).__name__}({th_err}) but jitorch did not")


# -- gradient checks ----------------------------------------------------------------------------------------------
def _gradcheck_inputs(arrays):
    out = []
    for x in arrays:
        if isinstance(x, np.ndarray) and x.dtype.kind in "fc":
            wide = np.complex128 if x.dtype.kind == "c" else np.float64
            out.append(jitorch.tensor(x.astype(wide), requires_grad=True))
        elif isinstance(x, np.ndarray):
            out.append(jitorch.tensor(x))
        else:
            out.append(x)
    return tuple(out)


def gradcheck_op(fn, arrays, *, eps=1e-6, atol=1e-5, rtol=1e-3):
    """``jitorch.autograd.gradcheck`` of ``fn`` with float (complex) arrays as float64 (complex128) leaves; other values
    pass unchanged."""
    assert jitorch.autograd.gradcheck(fn, _gradcheck_inputs(arrays), eps=eps, atol=atol, rtol=rtol)


def check_double_backward(name, jt_fn, torch_fn, x, rng):
    """A unary op's gradient with a random upstream gradient (drawn from ``rng``), taken with ``create_graph=True``,
    then differentiated again along another random direction, wrt ``x`` and the upstream gradient: both libraries on
    the same data."""
    g, gg = (rng.standard_normal(x.shape).astype(x.dtype) for _ in range(2))
    results = []
    for lib, fn in ((jitorch, jt_fn), (torch, torch_fn)):
        xt, gt = lib.tensor(x, requires_grad=True), lib.tensor(g, requires_grad=True)
        (dx,) = lib.autograd.grad(fn(xt), xt, gt, create_graph=True)
        ddx, dg = lib.autograd.grad(dx, (xt, gt), lib.tensor(gg))
        results.append([t.detach().numpy() for t in (dx, ddx, dg)])
    for got, want, what in zip(*results, ("grad", "grad of grad wrt x", "grad of grad wrt g")):
        np.testing.assert_allclose(got, want, atol=2e-6 * np.abs(want).max(), rtol=1e-5, err_msg=f"{name}: {what}")


def gradgradcheck_op(fn, arrays, *, eps=1e-6, atol=1e-5, rtol=1e-3):
    """Second-order ``jitorch.autograd.gradgradcheck`` in float64."""
    assert jitorch.autograd.gradgradcheck(fn, _gradcheck_inputs(arrays), eps=eps, atol=atol, rtol=rtol)


def same_error(fn):
    """``fn(lib)`` must raise with torch and with jitorch, the same exception type and message (jitorch's dtype names
    read as torch's)."""
    errors = []
    for lib in (torch, jitorch):
        with pytest.raises(Exception) as info:
            fn(lib)
        errors.append(info.value)
    assert type(errors[1]) is type(errors[0])
    assert str(errors[1]).replace("jitorch.", "torch.") == str(errors[0])


def assert_sample_moments(x, dist, n, var_rtol):
    """The per-column mean and variance of ``n`` jitorch samples ``x`` against torch distribution ``dist``: within 6
    standard errors of its closed forms (the variance's error from the fourth moment), or, where torch has none,
    against torch's own samples with two-sample bounds."""
    try:
        mean, var = dist.mean.numpy(), dist.variance.numpy()
    except NotImplementedError:  # torch has no closed form: compare with torch's own samples (two-sample bounds)
        torch.manual_seed(1)
        y = dist.sample((n,)).numpy()
        assert np.all(np.abs(x.mean(0) - y.mean(0)) <= 6 * np.sqrt((x.var(0) + y.var(0)) / n) + 1e-12)
        np.testing.assert_allclose(x.var(0), y.var(0), rtol=var_rtol, atol=1e-12)
        return
    assert np.all(np.abs(x.mean(0) - mean) <= 6 * np.sqrt(var / n) + 1e-12), (x.mean(0), mean)
    m4 = ((x - x.mean(0)) ** 4).mean(0)
    assert np.all(np.abs(x.var(0) - var) <= 6 * np.sqrt(np.maximum(m4 - x.var(0) ** 2, 0) / n) + 1e-12)


def outcome(fn):
    """What ``fn()`` gave, comparable across the libraries: ``(exception type name, first line of its message)``
    (IndexError's subclasses as IndexError), or ``(dtype name, detached result)``; warnings silenced."""
    import warnings

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            out = fn()
    except Exception as e:  # noqa: BLE001 - the exception is what is compared
        kind = "IndexError" if isinstance(e, IndexError) else type(e).__name__
        return kind, str(e).split("\n")[0]
    return str(out.dtype).split(".")[-1], out.detach()


def optimizer_steps(opt, w, grads, capture=False):
    """``opt.step()`` once per array of ``grads``, each exactly ``w``'s gradient (the backward of ``(w * g).sum()``),
    eager or captured with ``jitorch.compile(mode="reduce-overhead")``; returns the step function that ran."""
    def step(g):
        opt.zero_grad()
        (w * g).sum().backward()
        opt.step()

    run = jitorch.compile(step, mode="reduce-overhead") if capture else step
    for g in grads:
        run(g)
    return run
