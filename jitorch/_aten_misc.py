"""Top-level ``torch.*`` functions outside the op table: control flow (``cond``, ``while_loop``, run as Python),
``vmap``, tensors over Python buffers (``frombuffer``), index arithmetic (``unravel_index``), ``frexp``,
``binomial``, ``empty_permuted``, and process settings older scripts call (``set_default_tensor_type``,
``set_flush_denormal``, ``set_warn_always``, the deterministic debug mode).

>>> import jitorch
>>> unravel_index(jitorch.tensor([4, 7]), (2, 4))
(tensor([1, 1]), tensor([0, 3]))
>>> cond(jitorch.tensor(True), lambda x: x + 1, lambda x: x - 1, (jitorch.ones(2),))
tensor([2., 2.])
"""
from __future__ import annotations

import builtins
import math
import warnings

import numpy as np

from . import _dtype
from ._dispatch import _xp_of
from ._tensor import Tensor
from ._vmap import vmap

__all__ = ["vmap", "cond", "while_loop", "frombuffer", "unravel_index", "frexp", "binomial", "empty_permuted",
           "set_default_tensor_type", "set_flush_denormal", "set_warn_always", "is_warn_always_enabled",
           "set_deterministic_debug_mode", "get_deterministic_debug_mode",
           "is_deterministic_algorithms_warn_only_enabled", "is_storage", "get_device_module", "init_num_threads",
           "histogram", "histogramdd", "from_file", "is_distributed", "svd_lowrank", "pca_lowrank"]


def cond(pred, true_fn, false_fn, operands=()):
    """``true_fn(*operands)`` if ``pred`` (a bool or a one-element tensor) else ``false_fn(*operands)``."""
    if isinstance(pred, Tensor) and pred.numel() != 1:
        raise RuntimeError(f"cond: expected pred to be a bool or a tensor with a single element, got a tensor of "
                           f"shape {list(pred.shape)}")
    if not isinstance(operands, (tuple, list)):
        raise RuntimeError(f"cond: expected operands to be a tuple or list, got {type(operands).__name__}")
    return true_fn(*operands) if bool(pred) else false_fn(*operands)


def while_loop(cond_fn, body_fn, carried_inputs):
    """Apply ``body_fn`` to the carried values while ``cond_fn`` holds; the final carried values, as a tuple."""
    if not isinstance(carried_inputs, (tuple, list)):
        raise RuntimeError(f"while_loop: expected carried_inputs to be a tuple or list, got "
                           f"{type(carried_inputs).__name__}")
    carried = tuple(carried_inputs)
    while bool(cond_fn(*carried)):
        out = body_fn(*carried)
        carried = tuple(out) if isinstance(out, (tuple, list)) else (out,)
        if len(carried) != len(carried_inputs):
            raise RuntimeError(f"while_loop: body_fn returned {len(carried)} values for {len(carried_inputs)} "
                               "carried inputs")
    return carried


def frombuffer(buffer, *, dtype, count=-1, offset=0, requires_grad=False):
    """A 1-D tensor sharing the memory of a Python buffer (``bytearray``, ``memoryview``, ``array.array``...).

    >>> import jitorch
    >>> frombuffer(bytearray(b"\\x01\\x00\\x00\\x00\\x02\\x00\\x00\\x00"), dtype=jitorch.int32)
    tensor([1, 2], dtype=jitorch.int32)
    """
    from ._creation import from_numpy

    dt = _dtype.to_dtype(dtype)
    view = memoryview(buffer)
    if view.readonly:
        warnings.warn("The given buffer is not writable, and PyTorch does not support non-writable tensors. This "
                      "means you can write to the underlying (supposedly non-writable) buffer using the tensor.",
                      UserWarning, stacklevel=2)
    nbytes, item = view.nbytes, dt.itemsize
    if nbytes == 0 or count == 0:  # torch makes no empty tensor here
        raise ValueError(f"frombuffer: both buffer length ({nbytes}) and count ({count}) must not be 0")
    if not 0 <= offset < max(nbytes, 1) or (nbytes == 0 and offset):
        raise ValueError(f"both buffer length ({nbytes}) and offset ({offset}) must be greater than or equal to 0 "
                         "and offset must be smaller than the buffer length")
    if count > 0 and count * item > nbytes - offset:
        raise ValueError(f"requested buffer length ({count} * {item} bytes) after offset ({offset} bytes) must not "
                         f"be greater than actual buffer length ({nbytes} bytes)")
    if count <= 0 and (nbytes - offset) % item:
        raise ValueError(f"buffer length ({nbytes - offset} bytes) after offset ({offset} bytes) must be a multiple "
                         f"of element size ({item})")
    array = np.frombuffer(view, dtype=dt.np, count=count if count > 0 else -1, offset=offset)
    out = from_numpy(array)
    return out.requires_grad_() if requires_grad else out


def unravel_index(indices, shape):
    """The coordinates (one int64 tensor per dim of ``shape``) of flat ``indices`` into a row-major ``shape``."""
    from ._creation import as_tensor

    if isinstance(shape, int):
        shape = (shape,)
    shape = tuple(int(s) for s in shape)
    idx = indices if isinstance(indices, Tensor) else as_tensor(indices)
    if idx.dtype.is_floating_point or idx.dtype.is_complex or idx.dtype is _dtype.bool:
        raise TypeError(f"expected 'indices' to be integer dtype, but got {idx.dtype}")
    if any(s < 0 for s in shape):
        raise ValueError(f"'shape' cannot have negative values, but got {shape}")
    total = math.prod(shape)
    if idx.numel() and (bool((idx < -total).any()) or bool((idx >= total).any())):
        raise RuntimeError(f"unravel_index: indices must be in [-{total}, {total}) for shape {list(shape)}")
    flat = idx.long() % max(total, 1)
    out = []
    for size in reversed(shape):
        out.append(flat % size if size else flat * 0)
        flat = flat // size if size else flat
    return tuple(reversed(out))


def frexp(input, *, out=None):
    """``(mantissa, exponent)`` with ``input = mantissa * 2 ** exponent``, |mantissa| in [0.5, 1); exponent int32."""
    from .return_types import frexp as _result

    if not input.dtype.is_floating_point:
        raise RuntimeError(f"torch.frexp() only supports floating-point dtypes, got {input.dtype}")
    mantissa, exponent = _xp_of(input._data).frexp(input._data)
    result = (Tensor._make(mantissa.astype(input._data.dtype, copy=False)),
              Tensor._make(exponent.astype(np.int32, copy=False)))
    if out is not None:
        out[0].copy_(result[0])
        out[1].copy_(result[1])
        return _result(*out)
    return _result(*result)


Tensor.frexp = frexp


def binomial(count, prob, generator=None):
    """Samples of Binomial(count, prob), elementwise, in ``count``'s dtype."""
    from . import _random
    from ._creation import _finish

    if count.shape != prob.shape:
        raise RuntimeError(f"binomial: count and prob must have the same shape, got {list(count.shape)} and "
                           f"{list(prob.shape)}")
    from .distributions._torch_binomial import torch_binomial_replay

    replayed = torch_binomial_replay(count, prob.to(count.dtype), generator)
    if replayed is not None:  # small CPU draws: ATen's serial sampler on torch's stream, torch's counts
        return replayed
    draws = _random._rng(generator).binomial(count._host().astype(np.int64), prob._host())
    return _finish(np.asarray(draws).astype(count._data.dtype), False, count.device)


def empty_permuted(size, physical_layout, *, dtype=None, layout=None, device=None, requires_grad=False,
                   pin_memory=False):
    """An uninitialized tensor of ``size`` whose memory holds its dims in the order ``physical_layout``."""
    from ._creation import empty

    size, order = tuple(size), tuple(physical_layout)
    if sorted(order) != list(range(len(size))):
        raise RuntimeError(f"empty_permuted: physical_layout {list(order)} is not a permutation of the dims of a "
                           f"{len(size)}-D size")
    physical = empty(tuple(size[d] for d in order), dtype=dtype, device=device)
    inverse = [order.index(d) for d in range(len(size))]
    out = physical.permute(inverse)
    return out.requires_grad_() if requires_grad else out


def set_default_tensor_type(t):
    """Deprecated in PyTorch 2.1: sets the default floating dtype from a tensor type (``torch.DoubleTensor`` or
    ``"torch.DoubleTensor"``)."""
    from . import _misc

    warnings.warn("torch.set_default_tensor_type() is deprecated as of PyTorch 2.1, please use "
                  "torch.set_default_dtype() and torch.set_default_device() as alternatives.", UserWarning,
                  stacklevel=2)
    if isinstance(t, str):
        name = t.rsplit(".", 1)[-1]
        t = getattr(_misc, name, None)
        if t is None:
            raise TypeError(f"invalid type: '{name}'")
    if not t.dtype.is_floating_point:
        raise TypeError("only floating-point types are supported as the default type")
    _dtype.set_default_dtype(t.dtype)


def set_flush_denormal(mode):
    """False: NumPy's kernels keep denormals, and jitorch does not change the FPU's flush-to-zero mode."""
    return False


_warn_always = [False]


def set_warn_always(b):
    _warn_always[0] = bool(b)


def is_warn_always_enabled():
    return _warn_always[0]


_DEBUG_MODES = {"default": 0, "warn": 1, "error": 2}


def set_deterministic_debug_mode(debug_mode):
    """0/'default': off; 1/'warn': deterministic algorithms, warning only; 2/'error': deterministic algorithms."""
    from . import _misc

    mode = _DEBUG_MODES.get(debug_mode, debug_mode) if isinstance(debug_mode, str) else debug_mode
    if mode not in (0, 1, 2):
        raise RuntimeError(f"invalid value of debug_mode, expected one of 'default', 'warn', 'error' (or 0, 1, 2), "
                           f"but got {debug_mode!r}")
    _misc.use_deterministic_algorithms(mode > 0, warn_only=mode == 1)


def get_deterministic_debug_mode():
    from . import _misc

    if not _misc.are_deterministic_algorithms_enabled():
        return 0
    return 1 if _misc._deterministic_warn_only[0] else 2


def is_deterministic_algorithms_warn_only_enabled():
    from . import _misc

    return _misc._deterministic_warn_only[0]


def is_storage(obj):
    from ._storage import TypedStorage, UntypedStorage

    return isinstance(obj, (TypedStorage, UntypedStorage))


def get_device_module(device=None):
    """``jitorch.cuda`` for a CUDA device, ``jitorch.cpu`` for the CPU (the current accelerator's when None)."""
    from . import cpu, cuda
    from ._device import device as _device

    if device is None:
        return cuda if cuda.is_available() else cpu
    kind = device if isinstance(device, str) and ":" not in device else _device(device).type
    if kind == "cuda":
        return cuda
    if kind == "cpu":
        return cpu
    raise RuntimeError(f"Device '{kind}' does not have a corresponding module registered as 'torch.{kind}'.")


def init_num_threads():
    """Nothing to do: jitorch's thread pool starts on first use."""


def _histogram_input(name, input, weight):
    if not input.dtype.is_floating_point:
        raise RuntimeError(f"torch.{name}: input tensor and bins tensors should have the same dtype, but got input "
                           f"{input.dtype} (a floating dtype is required)")
    if type(input._data) is not np.ndarray:
        raise NotImplementedError(f"torch.{name} is implemented for CPU tensors only, as in PyTorch; got a tensor "
                                  f"on {input.device}")
    if weight is not None and tuple(weight.shape) != tuple(input.shape[:weight.dim()]):
        raise RuntimeError(f"torch.{name}: if weight tensor is provided it should have the same shape as the input "
                           f"tensor excluding its innermost dimension, but got input with shape "
                           f"{list(input.shape)} and weight with shape {list(weight.shape)}")
    return input._data, None if weight is None else weight._data


def histogram(input, bins, *, range=None, weight=None, density=False, out=None):
    """``(hist, bin_edges)`` of the values of a float CPU tensor: ``bins`` equal bins over ``range`` (default: the
    data's min and max) or the given increasing edges; the last bin includes its right edge.

    >>> import jitorch
    >>> histogram(jitorch.tensor([1.0, 2.0, 1.0, 4.0]), bins=3).hist
    tensor([2., 1., 1.])
    """
    from .return_types import histogram as _result

    data, w = _histogram_input("histogram", input, weight)
    if isinstance(bins, Tensor):
        bins = bins._host()
    else:
        bins = _equal_edges(data, int(bins), range)
    hist, edges = np.histogram(data.reshape(-1), bins=bins, range=range,
                               weights=None if w is None else w.reshape(-1), density=density)
    dt = data.dtype
    result = (Tensor._make(hist.astype(dt)), Tensor._make(np.asarray(edges).astype(dt)))
    if out is not None:
        return _result(*(o.resize_(r.shape).copy_(r) for o, r in zip(out, result)))
    return _result(*result)


def _equal_edges(data, bins, range, dim=0):
    """``bins + 1`` equal-width edges in the data's dtype by torch's ``linspace`` (its rounding, not NumPy's)."""
    from ._creation import linspace

    if bins <= 0:
        raise RuntimeError(f"torch.histogram(): bins must be > 0, but got {bins} for dimension 0")
    if range is not None:
        lo, hi = float(range[0]), float(range[1])
    elif data.size:
        lo, hi = float(data.min()), float(data.max())
    else:  # torch's default range for no data is [0, 1], not a widened [0, 0]
        lo, hi = 0.0, 1.0
    if not (math.isfinite(lo) and math.isfinite(hi)):
        raise RuntimeError(f"torch.histogramdd: dimension {dim}'s range [{lo:g}, {hi:g}] is not finite")
    if lo > hi:
        raise RuntimeError(f"torch.histogramdd: min should not exceed max, but got min {lo:g} max {hi:g} for "
                           f"dimension {dim}")
    if lo == hi:  # torch widens a degenerate range as NumPy does
        lo, hi = lo - 0.5, hi + 0.5
    return linspace(lo, hi, bins + 1, dtype=_dtype.FROM_NP[data.dtype])._host()


def histogramdd(input, bins, *, range=None, weight=None, density=False):
    """``(hist, bin_edges)`` over the last dim of ``input`` as coordinates: ``bins`` an int, one int per
    coordinate, or one tensor of edges per coordinate; ``range`` flat ``[min0, max0, min1, max1, ...]``."""
    from .return_types import histogramdd as _result

    data, w = _histogram_input("histogramdd", input, weight)
    points = data.reshape(-1, data.shape[-1])
    dims = points.shape[1]
    ranges = [None] * dims if range is None else [tuple(range[2 * i:2 * i + 2]) for i in builtins.range(dims)]
    if isinstance(bins, int):
        bins = [bins] * dims
    bins = [b._host() if isinstance(b, Tensor) else _equal_edges(points[:, i], int(b), ranges[i], i)
            for i, b in enumerate(bins)]
    hist, edges = np.histogramdd(points, bins=bins, weights=None if w is None else w.reshape(-1), density=density)
    dt = data.dtype
    return _result(Tensor._make(hist.astype(dt)), tuple(Tensor._make(np.asarray(e).astype(dt)) for e in edges))



def from_file(filename, shared=None, size=0, *, dtype=None, layout=None, device=None, pin_memory=False):
    """A CPU tensor of ``size`` elements read from a file: ``shared=True`` maps it (writes reach the file),
    otherwise a private copy."""
    from ._creation import from_numpy

    dt = _dtype.to_dtype(dtype) if dtype is not None else _dtype.get_default_dtype()
    count = int(size)
    if shared:
        array = np.memmap(filename, dtype=dt.np, mode="r+", shape=(count,))
    else:
        array = np.fromfile(filename, dtype=dt.np, count=count)
        if array.size != count:
            raise RuntimeError(f"from_file: {filename} holds {array.size} elements of {dt}, {count} were asked for")
    return from_numpy(np.asarray(array) if not shared else array)


def is_distributed(input):
    """False: jitorch tensors are never distributed tensors."""
    return False


def svd_lowrank(A, q=6, niter=2, M=None):
    """``(U, S, V)`` of the rank-``q`` truncated SVD of ``A`` (``A - M`` when given), ``A ~ U diag(S) V^H``.

    PyTorch approximates it by randomized subspace iteration; this takes the exact truncated SVD, the best rank-q
    approximation that iteration converges to (``niter`` is accepted for compatibility)."""
    from .linalg import svd

    if M is not None:
        A = A - M
    q = min(int(q), A.shape[-2], A.shape[-1])
    U, S, Vh = svd(A, full_matrices=False)
    return U[..., :q], S[..., :q], Vh[..., :q, :].mH


def pca_lowrank(A, q=None, center=True, niter=2):
    """``(U, S, V)`` of the rank-``q`` principal components of ``A`` (rows are samples), centered by default."""
    if q is None:
        q = min(6, A.shape[-2], A.shape[-1])
    if center:
        A = A - A.mean(dim=-2, keepdim=True)
    return svd_lowrank(A, q, niter)
