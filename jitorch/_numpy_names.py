"""NumPy's argument names that torch accepts too: ``axis=`` for ``dim=`` and ``keepdims=`` for ``keepdim=``.

torch's argument parser maps them for every native function with a ``dim`` or ``keepdim`` parameter, so tutorials
write ``torch.cumprod(alphas, axis=0)`` or ``x.mean(axis=1, keepdims=True)``. Its Python-level functions
(``torch.split``, ``Tensor.norm``, ``F.softmax``, ``F.normalize``) refuse them; so does jitorch, which renames the
keywords once here, for the names listed below, instead of in every signature.

>>> import jitorch
>>> jitorch.arange(6.0).view(2, 3).sum(axis=1, keepdims=True)
tensor([[ 3.],
        [12.]])
"""
from __future__ import annotations

import functools

from . import _overrides
from ._overrides import find_override, register_public

__all__ = ["numpy_names", "install"]

# torch.X and Tensor.X: native in torch, with a ``dim`` or ``keepdim`` parameter (the list
# ``torch.overrides.get_testing_overrides()`` gives, plus the overloaded max/min/argmax/argmin/prod/count_nonzero).
SHARED = (
    "all", "amax", "amin", "aminmax", "any", "argmax", "argmin", "argsort", "chunk", "count_nonzero", "cross",
    "cummax", "cummin", "cumprod", "cumsum", "diff", "gather", "index_add", "index_copy", "index_fill", "index_select",
    "kthvalue", "log_softmax", "logcumsumexp", "logsumexp", "max", "mean", "median", "min", "mode", "nanmean",
    "nanmedian", "nanquantile", "nansum", "narrow", "prod", "quantile", "renorm", "repeat_interleave", "scatter",
    "scatter_add", "scatter_reduce", "select", "select_scatter", "slice_scatter", "softmax", "sort",
    "split_with_sizes", "squeeze", "std", "sum", "take_along_dim", "tensor_split", "topk", "unbind", "unsqueeze",
    "var",
)
FUNCTIONS = SHARED + (
    "cat", "concat", "concatenate", "stack", "cosine_similarity", "pairwise_distance", "cumulative_trapezoid",
    "trapezoid", "trapz", "std_mean", "var_mean", "unflatten",
)
METHODS = SHARED + (
    "cumprod_", "cumsum_", "index_add_", "index_copy_", "index_fill_", "scatter_", "scatter_add_", "scatter_reduce_",
    "squeeze_", "unsqueeze_", "renorm_",
)
LINALG = ("cross", "matrix_norm", "norm", "vecdot", "vector_norm")
SPECIAL = ("log_softmax", "logsumexp", "softmax")
FUNCTIONAL = ("cosine_similarity", "pairwise_distance")  # F.X is torch.X for these two


def _renamed(name, kwargs):
    kwargs = dict(kwargs)
    for numpy_name, torch_name in (("axis", "dim"), ("keepdims", "keepdim")):
        if numpy_name in kwargs:
            if torch_name in kwargs:
                raise TypeError(f"{name}() got multiple values for argument '{torch_name}' (as '{numpy_name}')")
            kwargs[torch_name] = kwargs.pop(numpy_name)
    return kwargs


def numpy_names(fn):
    """``fn`` that also takes ``axis=``/``keepdims=`` for its ``dim=``/``keepdim=``."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        if "axis" in kwargs or "keepdims" in kwargs:
            kwargs = _renamed(fn.__name__, kwargs)
        return fn(*args, **kwargs)
    wrapper.__numpy_names__ = True
    return wrapper


def install(owner, names):
    """Wrap ``owner.<name>`` (a module or a class) for each name it has."""
    for name in names:
        fn = owner.__dict__.get(name) if isinstance(owner, type) else getattr(owner, name, None)
        if callable(fn) and not _wraps_numpy_names(fn):
            original = getattr(fn, "__jitorch_original__", None)
            setattr(owner, name, numpy_names(fn) if original is None else _public_numpy_names(original))


def _wraps_numpy_names(fn):
    """Whether ``fn`` is a `numpy_names` wrapper, or wraps one (the Tensor method wrappers `_overrides` installs while
    an overriding value lives: a second install must not wrap the method twice)."""
    while fn is not None:
        if getattr(fn, "__numpy_names__", False):
            return True
        fn = getattr(fn, "__wrapped__", None)
    return False


def _public_numpy_names(fn):
    """`numpy_names` of a public function's original ``fn``, and its hand-over to a Proxy (_overrides.py), as one
    wrapper: two stacked wrappers cost 0.35 us more on every ``cat`` or ``sum``. The hand-over comes first, with the
    keywords as given, so a traced call records the function the module holds; ``__jitorch_original__`` (what an
    overriding type calls to compute) renames as the module's function does."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        if _overrides._live:
            if _overrides.FUNCTION_MODES:
                return _overrides.mode_call(wrapper, args, kwargs)
            found = find_override(args, kwargs)
            if found is not None:
                return type(found).__jitorch_function__(wrapper, args, kwargs)
        if kwargs and ("axis" in kwargs or "keepdims" in kwargs):
            kwargs = _renamed(fn.__name__, kwargs)
        return fn(*args, **kwargs)
    wrapper.__numpy_names__ = True
    return register_public(wrapper, numpy_names(fn))
