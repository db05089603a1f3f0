"""``torch.gradient``: central finite differences along each requested dim, one-sided (first or second order) at the
edges, for unit, scalar or coordinate spacing, as a composite of slices and arithmetic (so it has a backward).

>>> import jitorch
>>> jitorch.gradient(jitorch.tensor([1.0, 4.0, 9.0, 16.0]))
(tensor([3., 4., 6., 7.]),)
>>> jitorch.gradient(jitorch.tensor([1.0, 4.0, 9.0]), spacing=(jitorch.tensor([0.0, 1.0, 3.0]),))
(tensor([3.0000, 2.8333, 2.5000]),)
"""
from __future__ import annotations

import numbers

from . import _dtype
from ._shape import wrap_dim
from ._tensor import Tensor

__all__ = ["gradient"]


def _dims(input, dim):
    if dim is None:
        return list(range(input.dim()))
    dims = [dim] if isinstance(dim, numbers.Integral) else list(dim)
    wrapped = [wrap_dim(d, input.dim(), "gradient") for d in dims]
    if len(set(wrapped)) != len(wrapped):
        raise RuntimeError(f"torch.gradient expected each dim to appear once, but got dim={list(dims)}")
    return wrapped


def _spacings(spacing, dims, all_dims):
    """One spacing per dim: a Python number (uniform) or a 1-D tensor of coordinates."""
    if isinstance(spacing, (numbers.Number, Tensor)) and not (isinstance(spacing, Tensor) and spacing.dim() == 1):
        value = spacing.item() if isinstance(spacing, Tensor) else spacing
        return [value] * len(dims)
    spacing = list(spacing)
    if len(spacing) != len(dims) and all_dims:
        raise RuntimeError(f"torch.gradient expected spacing to be unspecified, a scalar, or a list of length equal "
                           f"to 'self.dim() = {len(dims)}', since dim argument was not given, but got a list of "
                           f"length {len(spacing)}")
    if len(spacing) != len(dims):
        raise RuntimeError(f"torch.gradient expected spacing to be unspecified, a scalar or it's spacing and dim "
                           f"arguments to have the same length, but got a spacing argument of length {len(spacing)} "
                           f"and a dim argument of length {len(dims)}.")
    return [s.item() if isinstance(s, Tensor) and s.dim() == 0 else s for s in spacing]


def _uniform(f, d, h, edge_order):
    n = f.shape[d]
    interior = (f.narrow(d, 2, n - 2) - f.narrow(d, 0, n - 2)) / (2 * h)
    f0, f1, fl, fm = f.narrow(d, 0, 1), f.narrow(d, 1, 1), f.narrow(d, n - 1, 1), f.narrow(d, n - 2, 1)
    if edge_order == 1:
        first, last = (f1 - f0) / h, (fl - fm) / h
    else:
        f2, fn3 = f.narrow(d, 2, 1), f.narrow(d, n - 3, 1)
        first = (-1.5 * f0 + 2.0 * f1 - 0.5 * f2) / h
        last = (0.5 * fn3 - 2.0 * fm + 1.5 * fl) / h
    return first, interior, last


def _coordinates(f, d, x, edge_order):
    """Second-order accurate differences on the grid ``x`` (numpy.gradient's weights)."""
    n = f.shape[d]
    shape = [1] * f.dim()
    shape[d] = -1
    dx = (x[1:] - x[:-1]).to(f.dtype)
    hl, hr = dx[:-1].reshape(shape), dx[1:].reshape(shape)
    a = -hr / (hl * (hl + hr))
    b = (hr - hl) / (hl * hr)
    c = hl / (hr * (hl + hr))
    interior = a * f.narrow(d, 0, n - 2) + b * f.narrow(d, 1, n - 2) + c * f.narrow(d, 2, n - 2)
    f0, f1, fl, fm = f.narrow(d, 0, 1), f.narrow(d, 1, 1), f.narrow(d, n - 1, 1), f.narrow(d, n - 2, 1)
    if edge_order == 1:
        return (f1 - f0) / dx[0], interior, (fl - fm) / dx[-1]
    f2, fn3 = f.narrow(d, 2, 1), f.narrow(d, n - 3, 1)
    h1, h2 = dx[0], dx[1]
    first = (-(2 * h1 + h2) / (h1 * (h1 + h2)) * f0 + (h1 + h2) / (h1 * h2) * f1 - h1 / (h2 * (h1 + h2)) * f2)
    h1, h2 = dx[-2], dx[-1]
    last = (h2 / (h1 * (h1 + h2)) * fn3 - (h2 + h1) / (h1 * h2) * fm + (2 * h2 + h1) / (h2 * (h1 + h2)) * fl)
    return first, interior, last


def gradient(input, *, spacing=1, dim=None, edge_order=1):
    """Estimates of ``d input / d x_dim`` for each dim of ``dim`` (all dims when None), as a tuple."""
    from ._movement import cat

    if edge_order not in (1, 2):
        raise RuntimeError("torch.gradient only supports edge_order=1 and edge_order=2.")
    dims = _dims(input, dim)
    spacings = _spacings(spacing, dims, dim is None)
    f = input if input.is_floating_point() or input.is_complex() else input.to(_dtype.get_default_dtype())
    results = []
    for d, h in zip(dims, spacings):
        if f.shape[d] < edge_order + 1:
            raise RuntimeError("torch.gradient expected each dimension size to be at least edge_order+1")
        if isinstance(h, Tensor):
            if h.dim() != 1 or h.shape[0] != f.shape[d]:
                raise RuntimeError(f"torch.gradient expected each tensor of spacing to be 1-D with as many "
                                   f"coordinates as dim {d} has elements ({f.shape[d]}), but got shape "
                                   f"{list(h.shape)}")
            parts = _coordinates(f, d, h, edge_order)
        else:
            parts = _uniform(f, d, h, edge_order)
        results.append(cat(parts, d))
    return tuple(results)
