"""``out=`` for the functions whose torch versions take it but whose jitorch bodies compute a fresh result.

torch's native functions all have an ``out=`` overload; code written against it (``torch.sort(x, out=(v, i))``,
``torch.sum(x, 0, out=buf)``) must fill the given tensors, never silently leave them alone. Rather than thread
``out`` through every signature, the listed functions are wrapped once here: the result is computed as usual, then
written into ``out`` (resized when its shape differs) and ``out`` is returned, as a named tuple for ``(values,
indices)`` results. Only the namespace functions are wrapped: torch's Tensor methods take no ``out=``.

>>> import jitorch
>>> v, i = jitorch.empty(3), jitorch.empty(3, dtype=jitorch.long)
>>> jitorch.sort(jitorch.tensor([3.0, 1.0, 2.0]), out=(v, i)).indices is i, i
(True, tensor([1, 2, 0]))
"""
from __future__ import annotations

import functools

from ._grad_state import GradState
from ._overrides import public

__all__ = ["FUNCTIONS", "CREATION", "with_out", "creation_with_out", "install", "check_out_tensor"]

FUNCTIONS = (
    "sort", "msort", "topk", "kthvalue", "median", "nanmedian", "mode", "cummax", "cummin", "searchsorted",
    "bucketize", "histc", "logcumsumexp", "sum", "nansum", "mean", "nanmean", "prod", "amax", "amin", "aminmax", "max",
    "min", "argmax", "argmin", "all", "any", "var", "std", "logsumexp", "quantile", "nanquantile", "diff", "take",
    "take_along_dim", "gather", "index_add", "index_copy", "index_reduce", "scatter", "scatter_add", "scatter_reduce",
    "slice_scatter", "masked_select", "nonzero", "nonzero_static", "narrow_copy", "index_select", "isin",
    "multinomial", "angle", "sinc", "deg2rad", "rad2deg", "logit", "copysign", "fmax", "fmin", "hypot", "logaddexp",
    "logaddexp2", "float_power", "heaviside", "conj_physical",
)


def _tensors(value):
    from ._tensor import Tensor

    if isinstance(value, Tensor):
        yield value
    elif isinstance(value, (tuple, list)):
        for v in value:
            yield from _tensors(v)


# Results that are indices or masks: torch refuses an out of any other dtype for them.
_EXACT_DTYPE = ("argmax", "argmin", "searchsorted", "bucketize", "nonzero", "nonzero_static", "all", "any", "isin")
# 0/1 samples that torch draws straight into out, whatever its dtype (an int64 or bool mask).
_ANY_DTYPE = ("bernoulli",)
# Reductions whose dtype, when none is given, is out's: torch casts the input to it and reduces in it
# (``torch.sum(floats, 0, out=int64_buf)`` sums the truncated values).
_OUT_DTYPE = ("sum", "prod")


# Ops whose torch kernels read their tensor arguments while writing out: an out that overlaps one partially is
# refused (`refuse_operand_overlap`), for the index reads any overlap (`_indexing._check_no_overlap`).
_PARTIAL_OVERLAP = frozenset((
    "angle", "sinc", "deg2rad", "rad2deg", "logit", "conj_physical", "copysign", "fmax", "fmin", "hypot", "logaddexp",
    "logaddexp2", "float_power", "heaviside", "logcumsumexp", "sort"))
_ANY_OVERLAP = frozenset(("take", "index_select", "gather"))


def _refuse_overlap(op, out, result, args, kwargs):
    if op in _SAME_DTYPE and getattr(out, "dtype", None) is not result.dtype:
        return  # (torch refuses the dtype first: `_write`)
    if op in _PARTIAL_OVERLAP:
        from ._dispatch_inplace import refuse_operand_overlap

        inputs = tuple(_tensors((args, tuple(kwargs.values()))))
        for o in _tensors(out):
            refuse_operand_overlap(o, inputs)
    elif op in _ANY_OVERLAP:
        from ._indexing import _check_no_overlap

        inputs = tuple(_tensors((args, tuple(kwargs.values()))))
        for o in _tensors(out):
            _check_no_overlap(o, *inputs)


# Ops whose out must have the result's dtype, with torch's message (a template over the torch dtype names).
_SAME_DTYPE = {"conj_physical": "Found dtype {out} but expected {result}",
               "float_power": "the output given to float_power has dtype {out} but the operation's result requires "
                              "dtype {result}",
               "heaviside": "heaviside is not yet implemented for tensors with different dtypes."}


def check_out_tensor(out, op):
    """torch's argument parser's refusal of an ``out`` that is not a tensor (a NumPy array, a list of tensors...),
    for the writers of ``out=`` results to call before they touch it."""
    from ._tensor import Tensor

    if not isinstance(out, Tensor):
        kind = type(out)
        name = kind.__name__ if kind.__module__ == "builtins" else f"{kind.__module__.split('.')[0]}.{kind.__name__}"
        raise TypeError(f"{op}(): argument 'out' must be Tensor, not {name}")


def _write(result, out, op, exact):
    from ._dispatch import TORCH_TYPE_NAMES
    from ._pointwise import _write_out

    check_out_tensor(out, op)
    if exact and out.dtype is not result.dtype:
        raise RuntimeError(f"{op}(): Expected out tensor to have dtype {TORCH_TYPE_NAMES[result.dtype.name]}, but "
                           f"got {TORCH_TYPE_NAMES[out.dtype.name]} instead")
    return _write_out(result, out, op, _SAME_DTYPE.get(op))


def write_out(result, out, op):
    """Write ``result`` (a tensor or a tuple of them) into ``out`` and return what torch returns."""
    if out is None:
        return result
    if isinstance(result, tuple):
        if not isinstance(out, (tuple, list)) or len(out) != len(result):
            raise TypeError(f"{op}(): argument 'out' must be a tuple of {len(result)} Tensors, got {out!r}")
        fields = getattr(result, "_fields", ("",) * len(result))
        written = [_write(r, o, op, f == "indices") for r, o, f in zip(result, out, fields)]
        return type(result)(*written) if hasattr(result, "_fields") else tuple(written)
    if op in _ANY_DTYPE and hasattr(out, "dtype"):
        result = result.to(out.dtype)
    if op == "multinomial" and getattr(out, "dtype", result.dtype) is not result.dtype:  # torch's own words
        from ._dispatch import TORCH_TYPE_NAMES

        raise RuntimeError(f"multinomial expects Long tensor out, got: {TORCH_TYPE_NAMES[out.dtype.name]}")
    return _write(result, out, op, op in _EXACT_DTYPE)


def with_out(fn):
    """``fn`` that also takes ``out=``."""
    op = fn.__name__

    @functools.wraps(fn)
    def wrapper(*args, out=None, **kwargs):
        if out is not None and not isinstance(out, (tuple, list)):
            check_out_tensor(out, op)  # (before anything is computed, as torch's argument parser)
        if out is not None and op in _OUT_DTYPE and kwargs.get("dtype") is None and hasattr(out, "dtype"):
            kwargs["dtype"] = out.dtype
        result = fn(*args, **kwargs)
        if out is None:
            return result
        # torch refuses out= only where the op would have recorded a gradient (not for argmax, histc, ...).
        if GradState.enabled and any(t.requires_grad for t in _tensors(result)):
            raise RuntimeError(f"{op}(): functions with out=... arguments don't support automatic differentiation, "
                               f"but one of the arguments requires grad.")
        _refuse_overlap(op, out, result, args, kwargs)
        return write_out(result, out, op)
    wrapper.__out_variant__ = True
    return wrapper


# Factories whose signatures took ``out=`` and ignored it: the out tensor kept its garbage.
CREATION = ("zeros", "ones", "empty", "full", "arange", "range", "linspace", "logspace", "eye", "rand", "randn",
            "randint", "randperm")


def creation_with_out(fn):
    """Factory ``fn`` whose ``out=`` receives the result: the dtype and device default to out's (a given dtype must
    equal it, as in torch), out is resized to the result's shape, and out is returned."""
    op = fn.__name__

    @functools.wraps(fn)
    def wrapper(*args, out=None, **kwargs):
        if out is None:
            return fn(*args, **kwargs)
        from ._dispatch import TORCH_TYPE_NAMES
        from ._dtype import to_dtype

        check_out_tensor(out, op)
        if out.requires_grad and GradState.enabled:
            raise RuntimeError(f"aten::{op}(): functions with out=... arguments don't support automatic "
                               "differentiation, but one of the arguments requires grad.")
        dtype = kwargs.get("dtype")
        if dtype is not None and to_dtype(dtype) is not out.dtype:
            raise RuntimeError(f"dtype {TORCH_TYPE_NAMES[to_dtype(dtype).name]} does not match dtype of out parameter "
                               f"({TORCH_TYPE_NAMES[out.dtype.name]})")
        kwargs["dtype"] = out.dtype
        kwargs.setdefault("device", out.device)
        return write_out(fn(*args, **kwargs), out, op)
    wrapper.__out_variant__ = True
    return wrapper


def install(owner, names=FUNCTIONS, wrap=with_out):
    """Wrap ``owner.<name>`` (a module) for each listed name it has."""
    for name in names:
        fn = getattr(owner, name, None)
        if callable(fn) and not getattr(fn, "__out_variant__", False):
            original = getattr(fn, "__jitorch_original__", None)
            # The hand-over to a Proxy (_overrides.py) stays outermost, as in _numpy_names.install.
            setattr(owner, name, wrap(fn) if original is None else public(wrap(original)))
