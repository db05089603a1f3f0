"""Meta arrays: the storage of the ``meta`` device, shapes, dtypes and strides with no data.

A :class:`MetaArray` is a NumPy array (a subclass, so every attribute and view of NumPy's works) laid over one huge
read-only anonymous mapping that is never written: its pages are the kernel's shared zero page, so an array of any
size costs no memory, and a view (slice, transpose, ``as_strided``) computes its strides and offset as NumPy does,
which are torch's. Every meta array starts at byte 0 of the mapping, so its address there is its storage offset.

Computing on meta arrays never touches their elements where a rule gives the result: ufuncs (elementwise, ``matmul``,
reductions, scans) and the C-level functions and methods the kernels call answer a fresh meta array of the result's
shape and dtype, the dtype found by running the same call on one-element stand-ins. Anything else runs NumPy's own
code on the zero pages (correct, but proportional to the size) and its result becomes a meta array: :func:`as_meta`.
Writes (``a[...] = b``, ``out=``, ``fill``, ``copyto``) are dropped.

>>> a = empty((3, 4), np.float32)
>>> b = np.matmul(a, empty((4, 5), np.float32)).sum(axis=0)
>>> type(b).__name__, b.shape, b.dtype, a.T.strides
('MetaArray', (5,), dtype('float32'), (4, 16))
"""
from __future__ import annotations

import mmap

import numpy as np

__all__ = ["MetaArray", "empty", "as_meta", "as_meta_all", "offset_of", "data_dependent",
           "dense_strides_like", "contiguous_strides", "MetaRNG", "NO_DATA", "META_MODULE"]

NO_DATA = "Cannot copy out of meta tensor; no data!"
_zero = None  # the mapping as a uint8 array, made on first use


def _zero_pages():
    global _zero
    if _zero is None:
        for bits in (44, 40, 36, 32):  # 16 TiB of address space; a smaller one where the system refuses it
            try:
                pages = mmap.mmap(-1, 1 << bits, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS, prot=mmap.PROT_READ)
            except (OSError, OverflowError, ValueError):
                continue
            _zero = np.frombuffer(pages, np.uint8)
            break
    return _zero


def contiguous_strides(shape):
    """Row-major strides, in elements, of ``shape`` (a size-0 or size-1 dimension counts as 1, as torch's)."""
    strides, n = [], 1
    for s in reversed(shape):
        strides.append(n)
        n *= max(s, 1)
    return tuple(reversed(strides))


def empty(shape, dtype, strides=None, offset=0):
    """A meta array of ``shape`` and ``dtype``, laid out by ``strides`` in elements (default: contiguous)."""
    dtype = np.dtype(dtype)
    shape = tuple(int(s) for s in shape)
    strides = contiguous_strides(shape) if strides is None else tuple(int(s) for s in strides)
    item = dtype.itemsize
    zero = _zero_pages()
    span = 0 if 0 in shape else (offset + 1 + sum((n - 1) * s for n, s in zip(shape, strides))) * item
    if span > zero.size:  # beyond the mapping: one element seen through zero strides (the strides are lost)
        arr = np.lib.stride_tricks.as_strided(zero[:item].view(dtype), shape, (0,) * len(shape), writeable=False)
    else:
        arr = np.ndarray(shape, dtype, buffer=zero, offset=offset * item, strides=tuple(s * item for s in strides))
    return arr.view(MetaArray)


def offset_of(arr) -> int:
    """The storage offset of a meta array, in its elements."""
    return (arr.__array_interface__["data"][0] - _zero_pages().__array_interface__["data"][0]) // arr.itemsize


def _over_mapping(arr):
    zero = _zero_pages()
    start = zero.__array_interface__["data"][0]
    return start <= arr.__array_interface__["data"][0] < start + zero.size


def as_meta(x):
    """``x`` as a meta array: itself (or a view) when it lies over the mapping (a view NumPy made of a meta array,
    ``broadcast_to`` one), else a fresh one of its shape and dtype (in its dims' stride order, as torch lays out
    results) whose memory, if any, is dropped."""
    if isinstance(x, np.ndarray) and _over_mapping(x):
        return x if type(x) is MetaArray else x.view(MetaArray)
    x = np.asarray(x)
    return empty(x.shape, x.dtype, dense_strides_like(x))


def dense_strides_like(x):
    """Contiguous strides in the order of ``x``'s own (outermost first), as a copy of ``x`` in layout 'K'."""
    if x.ndim < 2 or x.flags.c_contiguous:
        return None
    order = sorted(range(x.ndim), key=lambda d: -abs(x.strides[d]))
    strides, n = [0] * x.ndim, 1
    for d in reversed(order):
        strides[d] = n
        n *= max(x.shape[d], 1)
    return strides


def _tiny(x):
    """A one-element stand-in of an operand: same dtype and rank, every size 1 (Python numbers stay)."""
    if isinstance(x, np.ndarray):
        return np.zeros((1,) * x.ndim, x.dtype)
    if isinstance(x, (tuple, list)) and any(isinstance(v, np.ndarray) for v in x):
        return type(x)(_tiny(v) for v in x)
    return x


def _real(x):
    """A meta operand as a plain array over the zero pages, for NumPy's own code (the fallback)."""
    if isinstance(x, MetaArray):
        return x.view(np.ndarray)
    if isinstance(x, (tuple, list)):
        return type(x)(_real(v) for v in x)
    return x


def _dtypes_of(ufunc, method, inputs, kwargs):
    with np.errstate(all="ignore"):
        out = getattr(ufunc, method)(*[_tiny(x) for x in inputs], **kwargs)
    return [np.asarray(o).dtype for o in (out if isinstance(out, tuple) else (out,))]


def _shape_of(x):
    return x.shape if isinstance(x, np.ndarray) else np.shape(x)


def _matmul_shape(a, b):
    a1, b1 = len(a) == 1, len(b) == 1
    ma, mb = ((1,) + a if a1 else a), (b + (1,) if b1 else b)
    if not a or not b or ma[-1] != mb[-2]:
        raise ValueError("matmul: Input operand 1 has a mismatch in its core dimension 0, with gufunc signature "
                         f"(n?,k),(k,m?)->(n?,m?) (size {mb[-2] if b else 0} is different from "
                         f"{ma[-1] if a else 0})")
    return np.broadcast_shapes(ma[:-2], mb[:-2]) + ma[-2:-1] * (not a1) + mb[-1:] * (not b1)


def _reduced_shape(shape, axis, keepdims):
    nd = len(shape)
    axes = range(nd) if axis is None else [a % nd if nd else 0 for a in np.atleast_1d(axis).tolist()]
    return tuple(1 if i in axes else n for i, n in enumerate(shape) if keepdims or i not in axes)


def _like_layout(shape, inputs):
    """Strides of an elementwise result: those of the first operand of the result's shape that is laid out in
    another dim order (a transposed input gives a transposed result, as torch's TensorIterator)."""
    for x in inputs:
        if isinstance(x, np.ndarray) and x.shape == shape:
            return dense_strides_like(x)
    return None


class MetaArray(np.ndarray):
    """A NumPy array with no data of its own (see the module docstring)."""

    def __array_ufunc__(self, ufunc, method, *inputs, out=None, **kwargs):
        if method == "at":
            return None
        if out is not None:  # the write is dropped: ``out`` holds the result's shape already
            return out[0] if len(out) == 1 else out
        if method == "__call__" and (ufunc.signature is None or ufunc is np.matmul):
            shapes = [_shape_of(x) for x in inputs if isinstance(x, np.ndarray)]
            shape = _matmul_shape(*shapes) if ufunc is np.matmul else np.broadcast_shapes(*shapes)
            strides = _like_layout(shape, inputs)
        elif method in ("reduce", "accumulate") and isinstance(inputs[0], np.ndarray):
            kwargs.pop("initial", None)  # the stand-in's axes are never empty
            kwargs.pop("where", None)
            x = inputs[0]
            axis = kwargs.get("axis", 0)
            if method == "reduce":
                shape, strides = _reduced_shape(x.shape, axis, kwargs.get("keepdims", False)), None
            else:
                shape, strides = x.shape, dense_strides_like(x)
        elif method == "outer":
            shape, strides = _shape_of(inputs[0]) + _shape_of(inputs[1]), None
        else:
            return as_meta_all(getattr(ufunc, method)(*_real(inputs), **kwargs))
        dtypes = _dtypes_of(ufunc, method, inputs, kwargs)
        outs = tuple(empty(shape, dt, strides) for dt in dtypes)
        return outs[0] if len(outs) == 1 else outs

    def __array_function__(self, func, types, args, kwargs):
        rule = _RULES.get(func)
        if rule is not None:
            return rule(*args, **kwargs)
        return as_meta_all(func(*_real(args), **{k: _real(v) for k, v in kwargs.items()}))

    # -- C-level methods that would read or write the elements --------------------------------------------------
    def astype(self, dtype, order="K", casting="unsafe", subok=True, copy=True):
        if not copy and np.dtype(dtype) == self.dtype:
            return self
        return empty(self.shape, dtype, dense_strides_like(self) if order == "K" else None)

    def copy(self, order="C"):
        return empty(self.shape, self.dtype, dense_strides_like(self) if order == "K" else None)

    def __copy__(self):
        return self.copy()

    def __deepcopy__(self, memo):
        return self.copy(order="K")

    def __setitem__(self, key, value):
        pass

    def __getitem__(self, key):
        for k in key if isinstance(key, tuple) else (key,):
            if isinstance(k, np.ndarray) and k.dtype == np.bool_ and k.ndim:
                data_dependent("nonzero")
        return super().__getitem__(key)

    def nonzero(self):
        data_dependent("nonzero")

    def fill(self, value):
        pass

    def sort(self, axis=-1, kind=None, order=None, stable=None):
        pass

    def argsort(self, axis=-1, kind=None, order=None, stable=None):
        return empty(self.shape if axis is not None else (self.size,), np.intp)

    def _arg(self, axis=None, out=None, keepdims=False):
        return empty(_reduced_shape(self.shape, axis, keepdims), np.intp)

    argmax = argmin = _arg

    def get(self):  # CuPy's name for the copy to the host, which jitorch calls for any array not on the CPU
        raise NotImplementedError(NO_DATA)

    def tolist(self):
        raise NotImplementedError(NO_DATA)

    def item(self, *args):
        raise NotImplementedError(NO_DATA)

    def __reduce__(self):
        return (empty, (self.shape, self.dtype))


def as_meta_all(result):
    if isinstance(result, (tuple, list)):
        return type(result)(as_meta_all(r) for r in result)
    if isinstance(result, (np.ndarray, np.generic)):
        return as_meta(result)
    return result


def _concatenate(arrays, axis=0, out=None, dtype=None, casting="same_kind"):
    if out is not None:
        return out
    arrays = list(arrays)
    tiny = np.concatenate([_tiny(a) for a in arrays], axis=axis, dtype=dtype, casting=casting)
    if axis is None:
        return empty((sum(np.size(a) for a in arrays),), tiny.dtype)
    first = _shape_of(arrays[0])
    ax = axis % len(first)
    shape = first[:ax] + (sum(_shape_of(a)[ax] for a in arrays),) + first[ax + 1:]
    for a in arrays:
        s = _shape_of(a)
        if len(s) != len(first) or s[:ax] + s[ax + 1:] != first[:ax] + first[ax + 1:]:
            return as_meta(np.concatenate(_real(arrays), axis=axis))  # NumPy's error
    return empty(shape, tiny.dtype)


def data_dependent(name, *args, **kwargs):
    raise NotImplementedError(f"{name}: cannot run on meta tensors: the shape of its result depends on the values, "
                              "which meta tensors do not have")


def _where(cond, *xy):
    if not xy:
        data_dependent("nonzero")
    shape = np.broadcast_shapes(*[_shape_of(v) for v in (cond, *xy)])
    return empty(shape, np.where(True, *[_tiny(v) for v in xy]).dtype)


def _empty_like(prototype, dtype=None, order="K", subok=True, shape=None, **kw):
    shape = prototype.shape if shape is None else tuple(np.atleast_1d(shape).tolist())
    keep = order == "K" and shape == prototype.shape
    return empty(shape, prototype.dtype if dtype is None else dtype, dense_strides_like(prototype) if keep
                 else None)


def _dot(a, b, out=None):
    sa, sb = _shape_of(a), _shape_of(b)
    dt = np.dot(_tiny(a), _tiny(b)).dtype
    if not sa or not sb:
        return empty(np.broadcast_shapes(sa, sb), dt)
    k = sb[-2] if len(sb) >= 2 else sb[0]
    if sa[-1] != k:
        raise ValueError(f"shapes {sa} and {sb} not aligned: {sa[-1]} (dim {len(sa) - 1}) != {k} (dim "
                         f"{max(len(sb) - 2, 0)})")
    return empty(sa[:-1] + sb[:-2] + sb[-1:] * (len(sb) >= 2), dt)


def _einsum(*operands, out=None, dtype=None, **kw):
    from numpy._core.einsumfunc import _parse_einsum_input

    inputs, output, arrays = _parse_einsum_input(operands)
    sizes = {}
    for subs, a in zip(inputs.split(","), arrays):
        for letter, n in zip(subs, _shape_of(a)):
            if sizes.get(letter, 1) not in (1, n) and n != 1:
                return as_meta(np.einsum(*_real(operands), dtype=dtype))  # NumPy's error
            sizes[letter] = n if sizes.get(letter, 1) == 1 else sizes[letter]
    dt = np.result_type(*[a.dtype for a in arrays]) if dtype is None else np.dtype(dtype)
    return empty(tuple(sizes[c] for c in output), dt)


def _no_write(*args, **kwargs):
    return None


_RULES = {np.concatenate: _concatenate, np.where: _where, np.empty_like: _empty_like, np.dot: _dot,
          np.einsum: _einsum, np.copyto: _no_write, np.put: _no_write, np.put_along_axis: _no_write,
          np.place: _no_write, np.putmask: _no_write, np.nonzero: lambda *a: data_dependent("nonzero"),
          np.argwhere: lambda *a: data_dependent("nonzero"), np.flatnonzero: lambda *a: data_dependent("nonzero"),
          np.unique: lambda *a, **k: data_dependent("unique")}


class MetaRNG:
    """A stand-in for NumPy's ``Generator`` on the meta device: each draw is a meta array of the asked size (the
    last positional argument or ``size=``), nothing is drawn and no generator advances."""

    def __getattr__(self, name):
        def draw(*args, size=None, dtype=None, **kw):
            if name == "permutation":
                return empty((int(args[0]),), np.int64)
            size = args[-1] if size is None and args else size
            shape = () if size is None else (size,) if isinstance(size, (int, np.integer)) else tuple(size)
            default = np.int64 if name in ("integers", "binomial", "poisson", "geometric") else np.float64
            return empty(shape, default if dtype is None or isinstance(dtype, dict) else dtype)
        return draw


class _MetaModule:
    """The array module of the ``meta`` device: NumPy's names, with the creation functions making meta arrays."""

    __name__ = "numpy"  # kernels test ``is_cupy(xp)`` by name: meta arrays take NumPy's paths

    def __getattr__(self, name):
        return getattr(np, name)

    @staticmethod
    def empty(shape, dtype=float, order="C", **kw):
        return empty(np.atleast_1d(shape).tolist() if np.ndim(shape) else (shape,), dtype)

    @staticmethod
    def full(shape, fill_value, dtype=None, order="C", **kw):
        return _MetaModule.empty(shape, np.asarray(fill_value).dtype if dtype is None else dtype)

    @staticmethod
    def asarray(x, dtype=None, **kw):
        x = as_meta(x) if isinstance(x, np.ndarray) else empty(np.shape(x), np.asarray(x, dtype).dtype)
        return x if dtype is None else x.astype(dtype, copy=False)

    @staticmethod
    def arange(start, stop=None, step=1, dtype=None, **kw):
        start, stop = (0, start) if stop is None else (start, stop)
        n = max(0, int(np.ceil((stop - start) / step)))
        return empty((n,), np.arange(start, start + step, step, dtype=dtype).dtype)

    @staticmethod
    def linspace(start, stop, num=50, endpoint=True, retstep=False, dtype=None, **kw):
        return empty((int(num),), np.linspace(start, stop, 2, dtype=dtype).dtype)

    zeros = ones = empty
    array = asarray


META_MODULE = _MetaModule()
