"""More of torch's shape API as composites: ``split_with_sizes``, ``hsplit``/``vsplit``/``dsplit``,
``slice_scatter``/``select_scatter``, ``fill_diagonal_``, ``resize_``, legacy ``new``, and small aliases.

>>> import jitorch
>>> [t.shape for t in jitorch.hsplit(jitorch.zeros(2, 6), 3)]
[jitorch.Size([2, 2]), jitorch.Size([2, 2]), jitorch.Size([2, 2])]
>>> jitorch.zeros(3, 3).fill_diagonal_(1.0)
tensor([[1., 0., 0.],
        [0., 1., 0.],
        [0., 0., 1.]])
"""
from __future__ import annotations

import numpy as np

from . import _dtype
from ._dispatch import TORCH_TYPE_NAMES, apply
from ._dispatch_inplace import refuse_operand_overlap
from ._shape import wrap_dim
from .runtime import array_module_for
from ._tensor import Tensor
from .amp._cast_mode import autocast_policy
from .ops import complex_ops as C

__all__ = ["split_with_sizes", "hsplit", "vsplit", "dsplit", "slice_scatter", "select_scatter", "is_same_size",
           "conj", "conj_physical", "real", "imag", "view_as_real", "view_as_complex", "diagflat", "row_stack",
           "narrow_copy", "nonzero_static"]


def narrow_copy(input, dim, start, length):
    """``narrow`` as a new contiguous tensor rather than a view."""
    from ._movement import narrow

    return narrow(input, dim, start, length).contiguous().clone()


def nonzero_static(input, *, size, fill_value=-1):
    """``nonzero`` with exactly ``size`` rows: truncated, or padded with ``fill_value`` (a shape known up front)."""
    from ._movement import cat, nonzero

    if not isinstance(size, int) or size < 0:
        raise RuntimeError(f"nonzero_static: 'size' must be an non-negative integer, got {size!r}")
    idx = nonzero(input)
    if idx.shape[0] >= size:
        return idx[:size]
    return cat([idx, idx.new_full((size - idx.shape[0], idx.shape[1]), fill_value)])


def diagflat(input, offset=0):
    """The flattened ``input`` on the ``offset``-th diagonal of a square matrix."""
    from ._movement import diag

    return diag(input.reshape(-1), offset)


def row_stack(tensors, *, out=None):
    """``vstack`` (torch's older name)."""
    from ._movement import vstack
    from ._movement_copy import _check_sequence, _nonempty_list

    _check_sequence(tensors, "row_stack")
    return vstack(_nonempty_list(tensors, "vstack"))  # torch names vstack in row_stack's other errors


def split_with_sizes(input, split_sizes, dim=0):
    """Split into pieces of exactly ``split_sizes`` along ``dim`` (they must sum to its size)."""
    dim = wrap_dim(dim, input.dim())
    if sum(split_sizes) != input.shape[dim]:
        raise RuntimeError(f"split_with_sizes expects split_sizes to sum exactly to {input.shape[dim]} (input tensor's "
                           f"size at dimension {dim}), but got split_sizes={list(split_sizes)}")
    return input.split(list(split_sizes), dim)


def _split_along(input, sections, dim, name, min_dim):
    from ._movement import tensor_split

    if input.dim() < min_dim:
        raise RuntimeError(f"torch.{name} requires a tensor with at least {min_dim} dimension, but got a tensor with "
                           f"{input.dim()} dimensions!")
    if isinstance(sections, int) and input.shape[dim] % sections:
        raise RuntimeError(f"torch.{name} attempted to split along dimension {dim}, but the size of the dimension "
                           f"{input.shape[dim]} is not divisible by the split_size {sections}!")
    return tensor_split(input, sections, dim)


def hsplit(input, sections):
    """Split along dim 1 (dim 0 for 1-d tensors)."""
    return _split_along(input, sections, 1 if input.dim() > 1 else 0, "hsplit", 1)


def vsplit(input, sections):
    """Split along dim 0 of a tensor with at least 2 dims."""
    return _split_along(input, sections, 0, "vsplit", 2)


def dsplit(input, sections):
    """Split along dim 2 of a tensor with at least 3 dims."""
    return _split_along(input, sections, 2, "dsplit", 3)


def slice_scatter(input, src, dim=0, start=None, end=None, step=1):
    """A copy of ``input`` with ``input[..., start:end:step, ...]`` (along ``dim``) replaced by ``src``."""
    dim = wrap_dim(dim, input.dim())
    out = input.clone()
    key = (slice(None),) * dim + (slice(start, end, step),)
    out[key] = src
    return out


def select_scatter(input, src, dim, index):
    """A copy of ``input`` with ``input.select(dim, index)`` replaced by ``src``."""
    dim = wrap_dim(dim, input.dim())
    out = input.clone()
    out[(slice(None),) * dim + (index,)] = src
    return out


def is_same_size(input, other):
    """True when the two tensors have the same shape."""
    return tuple(input.shape) == tuple(other.shape)


def conj(input):
    """Complex conjugate (the tensor itself for real dtypes)."""
    return input.conj()


def conj_physical(input):
    """Complex conjugate as a new tensor (jitorch's ``conj`` copies too: there is no lazy conjugate bit)."""
    return input.conj()


def real(input):
    """Real part (the tensor itself for real dtypes)."""
    return input.real


def imag(input):
    """Imaginary part; an error for real tensors, as torch."""
    return input.imag


def view_as_real(input):
    """A real view ``[..., 2]`` of a complex tensor (no copy: writes reach ``input``)."""
    if not input.dtype.is_complex:
        raise RuntimeError(f"view_as_real is only supported for complex tensors, got {input.dtype}")
    return apply(C.VIEW_AS_REAL, input)


@autocast_policy(cpu="fp32")
def view_as_complex(input):
    """A complex view of a real tensor whose last dim has size 2 and stride 1."""
    if input.dtype.name not in ("float32", "float64"):
        raise RuntimeError(f"view_as_complex is only supported for float and double tensors, but got a tensor of "
                           f"scalar type: {input.dtype}")
    if input.dim() == 0 or input.shape[-1] != 2:
        raise RuntimeError(f"view_as_complex: Tensor must have a last dimension of size 2, got shape "
                           f"{list(input.shape)}")
    # torch's element strides, not NumPy's byte strides: NumPy zeroes every stride of an empty array.
    strides = input.stride()
    if strides[-1] != 1:
        raise RuntimeError(f"view_as_complex: Tensor must have a last dimension with stride 1, got strides "
                           f"{list(strides)}")
    if any(s % 2 for s in strides[:-1]):
        raise RuntimeError(f"view_as_complex: Tensor must have a stride divisible by 2 for all but last dimension, "
                           f"got strides {list(strides)}")
    return apply(C.VIEW_AS_COMPLEX, input)


def _fill_diagonal_(self, fill_value, wrap=False):
    """Fill the main diagonal in place (all dims equal for >2-d; ``wrap`` restarts it below a tall matrix)."""
    from .autograd.grad_mode import no_grad

    if self.dim() < 2:
        raise RuntimeError("dimensions must larger than 1")
    if self.dim() > 2 and len(set(self.shape)) != 1:
        raise RuntimeError("all dimensions of input must be of equal length")
    rows, cols = self.shape[0], self.shape[1]
    n = min(self.shape) if self.dim() > 2 else min(rows, cols)
    idx = np.arange(n)
    if self.dim() == 2 and wrap and rows > cols + 1:
        step = cols + 1
        flat_rows = np.arange(0, rows * cols, step) // cols
        keep = flat_rows < rows
        idx_r = flat_rows[keep]
        idx_c = (np.arange(0, rows * cols, step) % cols)[keep]
        key = (idx_r, idx_c)
    else:
        key = (idx,) * self.dim()
    from ._creation import tensor

    key = tuple(tensor(k) for k in key)
    if self.requires_grad and self.is_leaf:
        raise RuntimeError("a leaf Variable that requires grad is being used in an in-place operation.")
    ctx = no_grad() if not self.requires_grad else _nullcontext()
    with ctx:
        self[key] = fill_value
    return self


class _nullcontext:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


def _resize_(self, *sizes, size=None, memory_format=None):
    """Reshape in place to ``sizes``, keeping the leading elements; new elements are uninitialised (here: zeros)."""
    from ._shape import normalize_shape, sizes_or_keyword

    shape = normalize_shape(sizes_or_keyword(sizes, size, "resize_"), "resize_")
    if self.requires_grad:
        raise RuntimeError("cannot resize variables that require grad")
    numel = int(np.prod(shape, dtype=np.int64))
    flat = self._data.reshape(-1)
    if numel <= flat.size and self._data.flags.c_contiguous:
        self._data = flat[:numel].reshape(shape)
    else:
        xp = array_module_for(self.device.type)
        grown = xp.zeros(numel, dtype=self._data.dtype)
        keep = min(numel, flat.size)
        grown[:keep] = flat[:keep]
        self._data = grown.reshape(shape)
    return self


def _new(self, *args, **kwargs):
    """Legacy ``t.new(...)``: ``t``'s dtype and device; sizes give an uninitialised tensor, a sequence gives data."""
    from ._creation import empty, tensor

    if len(args) == 1 and not isinstance(args[0], (int, np.integer)):
        if isinstance(args[0], Tensor):
            raise TypeError(f"new(): expected a sequence or sizes, got a Tensor (use {args[0]!r}.clone())")
        return tensor(args[0], dtype=self.dtype, device=self.device)
    return empty(*args, dtype=self.dtype, device=self.device) if args else empty(0, dtype=self.dtype,
                                                                                  device=self.device)


_METHODS = dict(narrow_copy=narrow_copy, nonzero_static=nonzero_static,
                split_with_sizes=split_with_sizes, hsplit=hsplit, vsplit=vsplit, dsplit=dsplit,
                slice_scatter=slice_scatter, select_scatter=select_scatter, is_same_size=is_same_size,
                fill_diagonal_=_fill_diagonal_, resize_=_resize_, resize_as_=lambda self, other: _resize_(
                    self, tuple(other.shape)), new=_new, ndimension=lambda self: self.dim(),
                is_nonzero=lambda self: _is_nonzero(self),
                swapdims_=lambda self, dim0, dim1: self.transpose_(dim0, dim1),
                swapaxes_=lambda self, axis0, axis1: self.transpose_(axis0, axis1),
                cumsum_=lambda self, dim, *, dtype=None: self.copy_(self.cumsum(dim, dtype=dtype)),
                # cumprod saves its input for the backward: a recorded self is scanned through a copy it then overwrites
                cumprod_=lambda self, dim, *, dtype=None: self.copy_(
                    (self.clone() if self.requires_grad else self).cumprod(dim, dtype=dtype)),
                greater_=lambda self, other: self.gt_(other), greater_equal_=lambda self, other: self.ge_(other),
                less_=lambda self, other: self.lt_(other), less_equal_=lambda self, other: self.le_(other),
                not_equal_=lambda self, other: self.ne_(other),
                true_divide_=lambda self, other: self.div_(other),
                float_power_=lambda self, other: _float_power_(self, other),
                layout=property(lambda self: _dtype.strided))  # sparse_coo tensors override it (jitorch/sparse)


def _is_nonzero(self):
    if self.numel() != 1:
        raise RuntimeError(f"Boolean value of Tensor with {'no values' if self.numel() == 0 else 'more than one value'}"
                           " is ambiguous")
    return bool(self.reshape(()).item())


def _float_power_(self, other):
    wide = "complex128" if self.is_complex() or (
        other.is_complex() if isinstance(other, Tensor) else isinstance(other, complex)) else "float64"
    if self.dtype.name != wide:
        raise RuntimeError(f"the base given to float_power_ has dtype {TORCH_TYPE_NAMES[self.dtype.name]} but the "
                           f"operation's result requires dtype {TORCH_TYPE_NAMES[wide]}")
    refuse_operand_overlap(self, (other,))  # (torch's pow_ reads other while it writes self)
    return self.copy_(self.float_power(other))


for _name, _fn in _METHODS.items():
    setattr(Tensor, _name, _fn)
