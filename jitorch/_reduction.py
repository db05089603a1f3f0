"""Public reductions and normalizations (sum, mean, max, var, softmax, ...) as functions and Tensor methods.

>>> import jitorch
>>> x = jitorch.tensor([[1.0, 2.0], [3.0, 4.0]])
>>> x.sum(), x.mean(dim=0), x.var(1, keepdim=True).shape, x.softmax(-1)[0]
(tensor(10.), tensor([2., 3.]), jitorch.Size([2, 1]), tensor([0.2689, 0.7311]))
"""
from __future__ import annotations

import numpy as np

from . import _dispatch, _dtype, _grad_state, return_types
from ._dispatch import MODES, TENSOR_TYPES, apply, sync_view
from ._shape import wrap_dim, wrap_dims
from ._tensor import Tensor
from .amp._cast_mode import autocast_policy
from .autograd.graph import named
from .ops import reduction as R
from .ops.linalg import VECTOR_NORM
from .ops.nn_fused import FUSED_DTYPES, LOG_SOFTMAX, SOFTMAX, softmax_output

__all__ = [
    "sum", "nansum", "mean", "nanmean", "prod", "amax", "amin", "aminmax", "max", "min", "argmax", "argmin", "all",
    "any", "var", "std", "var_mean", "std_mean", "logsumexp", "softmax", "log_softmax", "cumsum", "cumprod",
    "count_nonzero", "norm", "trace",
]


def _dims(input, dim, op):
    if type(dim) is int:  # (the common call: one plain int in range; other dims and 0-d tensors: the checks below)
        ndim = input._data.ndim
        if -ndim <= dim < ndim:
            return (dim + ndim if dim < 0 else dim,)
    if isinstance(dim, (list, tuple)) and len(dim) == 0:
        return tuple(range(input._data.ndim))
    dims = wrap_dims(dim, input._data.ndim, op)
    # A 0-d tensor accepts dim 0 / -1 and reduces over nothing.
    return dims if input._data.ndim else ()


_HALVES = (_dtype.float16, _dtype.bfloat16)
_REAL = (np.dtype(np.float32), np.dtype(np.float64))


def _sum_dtype(input, dtype):
    if dtype is not None:
        return _dtype.to_dtype(dtype)
    d = input.dtype
    return _dtype.int64 if d.category <= _dtype.INT else d


def sum(input, dim=None, keepdim=False, *, dtype=None):
    """Sum over ``dim`` (int, tuple, or all); integer and bool inputs sum to int64."""
    dt = _sum_dtype(input, dtype)
    if dim is None:  # (what _dims gives, less its checks)
        return apply(R.SUM, input, dims=tuple(range(input._data.ndim)), keepdim=keepdim, dtype=dt.np)
    out = apply(R.SUM, input, dims=_dims(input, dim, "sum"), keepdim=keepdim, dtype=dt.np)
    return named(out, "SumBackward1")  # torch's dim overload


def nansum(input, dim=None, keepdim=False, *, dtype=None):
    if input.is_complex():
        raise RuntimeError("nansum on CPU does not support complex inputs")
    if not input.is_floating_point():  # integers hold no NaN: a plain sum (int64 for integer inputs)
        return sum(input, dim, keepdim, dtype=dtype)
    dt = _sum_dtype(input, dtype)
    return apply(R.NANSUM, input, dims=_dims(input, dim, "nansum"), keepdim=keepdim, dtype=dt.np)


def mean(input, dim=None, keepdim=False, *, dtype=None):
    """Mean over ``dim``; the input (or ``dtype``) must be floating or complex."""
    dt = _dtype.to_dtype(dtype) if dtype is not None else input.dtype
    if dt.category < _dtype.FLOAT:
        raise RuntimeError(f"mean(): could not infer output dtype. Input dtype must be either a floating point or "
                           f"complex dtype. Got: {_type_name(dt)}")
    dims = _dims(input, dim, "mean")
    n = 1
    for d in dims:
        n *= input._data.shape[d]
    if dt in _HALVES:
        # PyTorch sums and divides halves in float32 and rounds once: a half sum overflows (10000 tens is inf in
        # float16) and a half n rounds (24000 is 24064 in bfloat16), in the value and in the gradient g / n.
        return mean(input, dims, keepdim, dtype=_dtype.float32).to(dt)
    x = input._data
    if n and type(x) is np.ndarray and x.dtype.kind == "f" and dt.np in _REAL and not MODES and not (
            input._requires_grad and _grad_state.GradState.enabled):
        # Nothing records: the sum row's kernel and the division's ufunc (what ``total / n`` runs on a float
        # array), without their two dispatches (2 us of a 32x32 mean's 5.6).
        if input._base is not None and input._view_ver != input._ver_owner._ver:
            sync_view(input)
            x = input._data
        total = R.SUM.kernel(_dispatch.CPU_XP, x, dims=dims, keepdim=keepdim, dtype=dt.np)
        out = np.true_divide(total if type(total) is np.ndarray else np.asarray(total), n)
        return Tensor._make(out if type(out) is np.ndarray else np.asarray(out))
    total = apply(R.SUM, input, dims=dims, keepdim=keepdim, dtype=dt.np)
    return named(total / n if n else total * float("nan"), "MeanBackward0" if dim is None else "MeanBackward1")


def nanmean(input, dim=None, keepdim=False, *, dtype=None):
    if input.dtype.category < _dtype.FLOAT:
        raise RuntimeError(f"nanmean(): expected input to have floating point or complex dtype but got "
                           f"{_type_name(input.dtype)}")
    keep = ~input.isnan()
    return nansum(input, dim, keepdim, dtype=dtype) / keep.sum(dim, keepdim)


def _type_name(dt):
    from ._dispatch import TORCH_TYPE_NAMES

    return TORCH_TYPE_NAMES[dt.name]


# On both autocast float32 lists: cast before the result dtype is taken from the input, or the row would multiply in
# half precision (overflowing to inf) and only its result would be float32.
@autocast_policy(cpu="fp32", cuda="fp32")
def prod(input, dim=None, keepdim=False, *, dtype=None):
    if isinstance(dim, (tuple, list)):
        raise TypeError(f"prod(): argument 'dim' (position 2) must be int, not {type(dim).__name__}")
    dt = _sum_dtype(input, dtype)
    dims = _dims(input, dim, "prod")
    if dt is not input.dtype and input._requires_grad and dt.category >= _dtype.FLOAT:
        # (an integer dtype= keeps the row, whose recording raises torch's "Autograd not support dtype")
        input = input.to(dt)  # cast first, as torch: the cast's backward hands back a gradient of the input's dtype
    return apply(R.PROD, input, dims=dims, keepdim=keepdim, dtype=dt.np)


def _check_nonempty(input, dim, op):
    """Reductions without an identity (max, min) need elements: PyTorch's errors for empty inputs."""
    if input._data.size:
        return
    if dim is None or (isinstance(dim, (tuple, list)) and not dim):
        raise RuntimeError(f"{op}(): Expected reduction dim to be specified for input.numel() == 0. Specify the "
                           "reduction dim with the 'dim' argument.")
    for d in _dims(input, dim, op):
        if input._data.shape[d] == 0:
            raise IndexError(f"{op}(): Expected reduction dim {d} to have non-zero size.")


def amax(input, dim=(), keepdim=False):
    _check_nonempty(input, dim, "amax")
    return apply(R.AMAX, input, dims=_dims(input, dim, "amax"), keepdim=keepdim)


def amin(input, dim=(), keepdim=False):
    _check_nonempty(input, dim, "amin")
    return apply(R.AMIN, input, dims=_dims(input, dim, "amin"), keepdim=keepdim)


def aminmax(input, *, dim=None, keepdim=False):
    if dim is None and input._data.size == 0:
        raise RuntimeError("aminmax(): cannot compute aminmax over an empty dimension as the operation has no "
                           "identity.")
    d = () if dim is None else dim
    return return_types.aminmax(amin(input, d, keepdim), amax(input, d, keepdim))


def _extreme(input, dim, keepdim, other, op_all, op_dim, op_pair, result_type):
    if isinstance(dim, Tensor):
        return op_pair(input, dim)
    if other is not None:
        return op_pair(input, other)
    if dim is None:
        if input._data.size == 0:
            raise RuntimeError(f"{op_all.name}(): Expected reduction dim to be specified for input.numel() == 0. "
                               "Specify the reduction dim with the 'dim' argument.")
        value = apply(op_all, input, dims=tuple(range(input._data.ndim)), keepdim=False)
        if not (input._requires_grad and _grad_state.GradState.enabled):
            return value
        # torch's max()/min() over everything split the gradient evenly over the elements equal to the result,
        # NaN ones included when the result is NaN (amax's own backward, as torch's, gives NaN everywhere there).
        value = value.detach()
        mask = (input == value) | (input.isnan() & value.isnan())
        return named(value + (input - value).where(mask, 0.0).sum() / mask.sum(),
                     "MaxBackward1" if op_all is R.AMAX else "MinBackward1")
    d = wrap_dim(dim, input._data.ndim, result_type.__name__)
    return result_type(*apply(op_dim, input, dim=d, keepdim=keepdim))


def max(input, dim=None, keepdim=False, *, other=None):
    """``max(x)``, ``max(x, dim)`` -> (values, indices), or elementwise ``max(x, y)``."""
    from ._pointwise import maximum

    return _extreme(input, dim, keepdim, other, R.AMAX, R.MAX_DIM, maximum, return_types.max)


def min(input, dim=None, keepdim=False, *, other=None):
    """``min(x)``, ``min(x, dim)`` -> (values, indices), or elementwise ``min(x, y)``."""
    from ._pointwise import minimum

    return _extreme(input, dim, keepdim, other, R.AMIN, R.MIN_DIM, minimum, return_types.min)


def _check_arg_input(input, op):
    if input.dtype is _dtype.bool:
        raise RuntimeError(f"{op}(): does not support bool input")


def argmax(input, dim=None, keepdim=False):
    _check_arg_input(input, "argmax")
    d = None if dim is None else wrap_dim(dim, input._data.ndim, "argmax")
    return apply(R.ARGMAX, input, dim=d, keepdim=keepdim)


def argmin(input, dim=None, keepdim=False):
    _check_arg_input(input, "argmin")
    d = None if dim is None else wrap_dim(dim, input._data.ndim, "argmin")
    return apply(R.ARGMIN, input, dim=d, keepdim=keepdim)


def _logical_dims(input, dim, op):
    # Unlike sum's, all/any's ``dim=()`` reduces nothing (an elementwise truth test), as in PyTorch.
    if isinstance(dim, (list, tuple)) and len(dim) == 0:
        return ()
    return _dims(input, dim, op)


def all(input, dim=None, keepdim=False):
    return apply(R.ALL, input, dims=_logical_dims(input, dim, "all"), keepdim=keepdim)


def any(input, dim=None, keepdim=False):
    return apply(R.ANY, input, dims=_logical_dims(input, dim, "any"), keepdim=keepdim)


def logsumexp(input, dim, keepdim=False):
    """``log(sum(exp(x)))`` computed stably (shifted by the detached maximum)."""
    if input.dtype.category < _dtype.FLOAT:
        input = input.to(_dtype.get_default_dtype())
    dims = _dims(input, dim, "logsumexp")
    if input._data.size == 0:
        return sum(input.exp(), dims, keepdim).log()
    m = amax(input.real if input.dtype.is_complex else input, dims, keepdim=True).detach()  # complex: shift by real
    m = m.where(m.isfinite(), 0.0)
    out = (input - m).exp().sum(dims, keepdim=True).log() + m
    return named(out if keepdim else out.squeeze(dims) if dims else out, "LogsumexpBackward0")


def _softmax_input(input, dim, dtype, op):
    if dtype is not None:
        input = input.to(dtype)
    elif input.dtype.category < _dtype.FLOAT and input._data.size:
        raise NotImplementedError(f"\"{op}_lastdim_kernel_impl\" not implemented for '{_type_name(input.dtype)}'")
    if dim is None:
        dim = 0 if input._data.ndim in (0, 1, 3) else 1  # PyTorch's legacy implicit-dim choice
    return input, wrap_dim(dim, input._data.ndim, op)


def softmax(input, dim=None, dtype=None, _stacklevel=3):
    """Numerically stable softmax along ``dim``."""
    if dtype is None and type(dim) is int:
        out = softmax_output(SOFTMAX, input, dim)  # the last dim of a plain CPU tensor: the kernel, no dispatch
        if out is not None:
            return out
    input, d = _softmax_input(input, dim, dtype, "softmax")
    if input._data.size == 0:  # nothing to normalize (PyTorch keeps even an integer dtype here)
        return input.clone()
    # One fused row (PyTorch's _softmax): one pass over the data and one autograd node instead of five.
    if input._data.dtype in FUSED_DTYPES:
        return apply(SOFTMAX, input, dim=d)
    if input.dtype in _HALVES:  # PyTorch's kernels compute halves in float32 and round once
        return softmax(input.float(), d).to(input.dtype)
    shifted = input - amax(input, d, keepdim=True).detach()
    e = shifted.exp()
    return e / e.sum(d, keepdim=True)


def log_softmax(input, dim=None, dtype=None, _stacklevel=3):
    """Numerically stable ``log(softmax(x))``."""
    if dtype is None and type(dim) is int:
        out = softmax_output(LOG_SOFTMAX, input, dim)
        if out is not None:
            return out
    input, d = _softmax_input(input, dim, dtype, "log_softmax")
    if input._data.size == 0:
        return input.clone()
    if input._data.dtype in FUSED_DTYPES:
        return apply(LOG_SOFTMAX, input, dim=d)
    if input.dtype in _HALVES:  # CPU: the row rounds as ATen (ops.half_log_softmax); elsewhere in float32, once
        return apply(LOG_SOFTMAX, input, dim=d) if input.is_cpu else log_softmax(input.float(), d).to(input.dtype)
    shifted = input - amax(input, d, keepdim=True).detach()
    return shifted - shifted.exp().sum(d, keepdim=True).log()


def cumsum(input, dim, *, dtype=None, out=None):
    return _scan(R.CUMSUM, input, dim, dtype, out)


def cumprod(input, dim, *, dtype=None, out=None):
    return _scan(R.CUMPROD, input, dim, dtype, out)


def _scan(op, input, dim, dtype, out):
    if out is not None:
        from ._out_variants import check_out_tensor

        check_out_tensor(out, op.name)
    # with out= and no dtype, torch scans in out's dtype
    dt = _sum_dtype(input, dtype if dtype is not None or out is None else out.dtype)
    if out is not None and out.dtype is not dt:
        raise RuntimeError(f"{op.name}: Expected out tensor to have dtype {dt}, but got {out.dtype} instead; pass "
                           f"an out tensor of the requested dtype")
    if dt is _dtype.bool:  # ATen has no boolean scan kernel
        raise NotImplementedError(f'"{op.name}_out_cpu" not implemented for \'Bool\' (scan in an integer dtype: '
                                  f"dtype=jitorch.int64)")
    d = wrap_dim(dim, input._data.ndim, op.name)
    if input._data.ndim == 0:  # the rows' backward flips along dim: a 0-d input scans as one element
        return _scan_out(_scan(op, input.reshape(1), 0, dtype, None).reshape(()), out, op.name, (input,))
    read = (input,) if out is not None else ()  # (an out may not overlap it partially)
    if dt is not input.dtype and input._requires_grad and dt.category >= _dtype.FLOAT:
        # (an integer dtype= keeps the row, whose recording raises torch's "Autograd not support dtype")
        input = input.to(dt)  # cast first, as torch: the cast's backward hands back a gradient of the input's dtype
    return _scan_out(apply(op, input, dim=d, dtype=dt.np), out, op.name, read)


def _scan_out(result, out, op, inputs=()):
    if out is None:  # (the import below costs half a microsecond a call)
        return result
    from ._pointwise import _write_out

    return _write_out(result, out, op, inputs=inputs)


def count_nonzero(input, dim=None):
    return sum(input != 0, dim)


def norm(input, p="fro", dim=None, keepdim=False, out=None, dtype=None):
    """Vector p-norms (``p`` a number, ``inf``, ``-inf``) and the Frobenius norm."""
    if (p == "fro" or p is None or p == 2) and out is None and dtype is None and type(input) in TENSOR_TYPES and (
            dim is None or type(dim) is int):
        x = input._data
        if type(x) is np.ndarray and x.dtype in _REAL and x.ndim:
            # ``vector_norm``'s row for the 2-norm of a plain float tensor, without its checks (all pass) and the
            # public function's hand-over test: 9 us on 32 x 32, where torch takes 3
            return apply(VECTOR_NORM, input, ord=2.0, dims=wrap_dims(dim, x.ndim, "linalg.vector_norm"),
                         keepdim=bool(keepdim))
    from .linalg import vector_norm

    if p == "fro" or p is None:
        p = 2
    if p == "nuc":
        from .linalg import matrix_norm

        return matrix_norm(input, "nuc", dim if dim is not None else (-2, -1), keepdim, dtype=dtype, out=out)
    return vector_norm(input, p, dim, keepdim, dtype=dtype, out=out)


@autocast_policy(cpu="fp32")
def trace(input):
    if input._data.ndim != 2:
        raise RuntimeError(f"trace: expected a matrix, but got tensor with dim {input._data.ndim}")
    return input.diagonal().sum()


def _norm_method(self, p="fro", dim=None, keepdim=False, dtype=None):
    """``Tensor.norm``: as ``torch.norm`` less ``out``, so a fourth positional argument is the dtype."""
    return norm(self, p, dim, keepdim, dtype=dtype)


_norm_method.__name__ = _norm_method.__qualname__ = "norm"


def _sum_to_size(self, *size):
    """Sum broadcast dims away so the result has shape ``size`` (the inverse of ``expand``)."""
    from ._shape import normalize_shape

    size = normalize_shape(size, "sum_to_size")
    shape = self._data.shape
    lead = len(shape) - len(size)
    if lead < 0:
        raise RuntimeError(f"size {{{list(size)}}} is not expandable to size {{{list(shape)}}}.")
    dims = tuple(range(lead)) + tuple(lead + i for i, s in enumerate(size) if s == 1 and shape[lead + i] != 1)
    for i, s in enumerate(size):
        if s != 1 and s != shape[lead + i]:
            raise RuntimeError(f"size {{{list(size)}}} is not expandable to size {{{list(shape)}}}.")
    out = apply(R.SUM, self, dims=dims, keepdim=True, dtype=self._data.dtype) if dims else self
    return out.reshape(size) if lead else out


from ._reduction_variance import std, std_mean, var, var_mean  # noqa: E402 - split for size; re-exported here

_METHODS = {name: globals()[name] for name in __all__}
_METHODS.update(sum_to_size=_sum_to_size, norm=_norm_method)
for _name, _fn in _METHODS.items():
    setattr(Tensor, _name, _fn)
