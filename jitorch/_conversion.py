"""dtype and device conversions: ``to``, ``type``, ``float()``/``long()``/..., ``cpu()``, ``cuda()``.

>>> import jitorch
>>> x = jitorch.tensor([1.5, -2.5])
>>> x.long(), x.to(jitorch.float64).dtype, x.to("cpu") is x
(tensor([ 1, -2]), jitorch.float64, True)
"""
from __future__ import annotations


from . import _dtype
from . import _memory_format as MF
from ._device import device as _device
from ._dispatch import TORCH_TYPE_NAMES, apply
from ._tensor import Tensor
from .autograd.grad_mode import no_grad
from .ops import complex_ops as C
from .ops import movement as M

__all__ = ["to"]


def _parse_to(args, kwargs, with_format=False):
    """(dtype, device, copy) of ``to``'s arguments, and the memory format when ``with_format``."""
    dtype = kwargs.pop("dtype", None)
    device = kwargs.pop("device", None)
    copy = kwargs.pop("copy", False)
    kwargs.pop("non_blocking", None)
    fmt = kwargs.pop("memory_format", None)
    for a in args:
        if isinstance(a, Tensor):
            dtype, device = a.dtype, a.device
        elif isinstance(a, _dtype.dtype):
            dtype = a
        elif isinstance(a, (str, _device, int)) and not isinstance(a, bool):
            device = a
        elif a is None:
            continue
        elif isinstance(a, bool):
            continue  # non_blocking / copy given positionally
        else:
            dtype = _dtype.to_dtype(a)
    if kwargs:
        raise TypeError(f"to() got unexpected keyword arguments {sorted(kwargs)}")
    return (dtype, device, copy, fmt) if with_format else (dtype, device, copy)


def to(self, *args, **kwargs):
    """``to(dtype)``, ``to(device)``, ``to(device, dtype)``, ``to(other)``, ``memory_format=``; returns ``self``
    when nothing changes (conversions keep the layout: ``preserve_format``)."""
    if not kwargs and len(args) == 1 and type(args[0]) is _dtype.dtype:  # ``x.to(torch.long)``: the dtype alone
        return _cast(self, args[0])
    dtype, device, copy, fmt = _parse_to(args, dict(kwargs), with_format=True)
    out = self
    if device is not None:
        dev = _device(device)
        cur = self.device
        if dev.type != cur.type or (dev.type == "cuda" and (dev.index or 0) != (cur.index or 0)):
            out = apply(M.TO_DEVICE, out, device_type=dev.type, index=dev.index, source=(cur.type, cur.index))
    if dtype is not None:
        out = _cast(out, _dtype.to_dtype(dtype))
    if fmt is not None and fmt is not MF.preserve_format:
        MF.check_rank(fmt, out._data.ndim)
        # As at::to: no copy when the layout already suggests the format (a transposed matrix is "contiguous_format"
        # there); a converted copy is laid out in it.
        if (MF.suggest_memory_format(out) is not fmt) if out is self else not MF.has_strides_of(out._data, fmt):
            out = apply(M.CONTIGUOUS, out, fmt=None if fmt is MF.contiguous_format else fmt)
    if copy and out is self:
        out = apply(M.CLONE, self)
    return out


def _cast(self, dt):
    """``self`` as dtype ``dt``: itself when it already is."""
    if dt.np == self._data.dtype:
        return self
    if dt.category < _dtype.FLOAT and self._requires_grad:  # integer and bool results never carry gradients
        with no_grad():
            return apply(M.CAST, self, dtype=dt.np)
    return apply(M.CAST, self, dtype=dt.np)


def type_(self, dtype=None, non_blocking=False, **kwargs):
    """``t.type()`` names the legacy type (``'torch.FloatTensor'``); ``t.type(dtype)`` converts."""
    if dtype is None:
        from ._dispatch import TORCH_TYPE_NAMES

        prefix = "torch.cuda." if self.is_cuda else "torch."
        return f"{prefix}{TORCH_TYPE_NAMES[self.dtype.name]}Tensor"
    if isinstance(dtype, str):  # a legacy type name: 'torch.IntTensor', 'torch.cuda.FloatTensor', 'torch.Tensor'
        module, _, name = dtype.rpartition(".")
        dt = _dtype.get_default_dtype() if name == "Tensor" else _LEGACY.get(name)
        if dt is None or module not in ("torch", "torch.cuda", "jitorch", "jitorch.cuda"):
            raise ValueError(f"invalid type: {dtype!r} (expected a dtype or a name such as 'torch.FloatTensor')")
        return _to_legacy(self, dt, module.endswith("cuda"))
    if dtype is Tensor:  # t.type(torch.Tensor): the default dtype, as torch
        return to(self, _dtype.get_default_dtype())
    if isinstance(dtype, type) and isinstance(getattr(dtype, "_dtype", None), _dtype.dtype):  # torch.IntTensor
        return _to_legacy(self, dtype._dtype, dtype.is_cuda)
    if dtype in (int, float, bool, complex):  # torch takes dtypes and tensor types only
        raise ValueError(f"invalid type: {dtype.__name__!r} (expected a dtype or a name such as 'torch.FloatTensor')")
    return to(self, _dtype.to_dtype(dtype))


def _to_legacy(self, dt, cuda):
    """A legacy tensor type names the device too: torch.cuda.FloatTensor moves a CPU tensor to the current GPU."""
    want = "cuda" if cuda else "cpu"
    return to(self, dt, device=None if self.device.type == want else want)


_LEGACY = {
    "FloatTensor": _dtype.float32, "DoubleTensor": _dtype.float64, "HalfTensor": _dtype.float16,
    "BFloat16Tensor": _dtype.bfloat16, "LongTensor": _dtype.int64, "IntTensor": _dtype.int32,
    "ShortTensor": _dtype.int16, "CharTensor": _dtype.int8, "ByteTensor": _dtype.uint8, "BoolTensor": _dtype.bool,
}


def _as(dt):
    def method(self, memory_format=None):
        return _cast(self, dt) if memory_format is None else to(self, dt, memory_format=memory_format)
    method.__name__ = dt.name
    return method


def _view_dtype(self, dtype):
    """Reinterpret the bytes as another dtype of the same size (no copy)."""
    dt = _dtype.to_dtype(dtype)
    if dt.itemsize > self._data.itemsize:  # NumPy's refusal names neither the dtypes nor the sizes
        names = f"{TORCH_TYPE_NAMES[self.dtype.name]} as {TORCH_TYPE_NAMES[dt.name]} (different element sizes)"
        ratio = dt.itemsize // self._data.itemsize
        if self._data.ndim == 0:
            raise RuntimeError(f"view(dtype): self.dim() cannot be 0 to view {names}")
        if self._data.shape[-1] % ratio:
            raise RuntimeError(f"view(dtype): self.size(-1) must be divisible by {ratio} to view {names}, but got "
                               f"{self._data.shape[-1]}")
    if dt.itemsize != self._data.itemsize and not self._data.flags.c_contiguous:
        raise RuntimeError(f"view(dtype): a non-contiguous tensor of {self.dtype} cannot be viewed as {dt}")
    t = Tensor._make(self._data.view(dt.np))
    t._ver_owner = self._root()
    t._base = self._base if self._base is not None else self
    return t


def _real(self):
    if not self.is_complex():
        return self
    return apply(C.REAL, self)


def _imag(self):
    if not self.is_complex():
        raise RuntimeError("imag is not implemented for tensors with non-complex dtypes.")
    return apply(C.IMAG, self)


def _conj(self):
    return apply(C.CONJ, self) if self.is_complex() else self


def _share_memory_(self):
    from .multiprocessing._shared import share_memory_

    return share_memory_(self)


def _is_shared(self):
    from .multiprocessing._shared import is_shared

    return is_shared(self)


_METHODS = {
    "to": to, "type": type_, "float": _as(_dtype.float32), "double": _as(_dtype.float64),
    "half": _as(_dtype.float16), "bfloat16": _as(_dtype.bfloat16), "long": _as(_dtype.int64),
    "int": _as(_dtype.int32), "short": _as(_dtype.int16), "char": _as(_dtype.int8), "byte": _as(_dtype.uint8),
    "bool": _as(_dtype.bool), "cfloat": _as(_dtype.complex64), "cdouble": _as(_dtype.complex128),
    "cpu": lambda self, memory_format=None: to(self, "cpu"),
    "cuda": lambda self, device=None, non_blocking=False, memory_format=None: to(
        self, _device("cuda", device) if isinstance(device, int) or device is None else device),
    "type_as": lambda self, other: to(self, other.dtype), "_view_dtype": _view_dtype,
    "real": property(_real), "imag": property(_imag),
    "conj": _conj, "conj_physical": _conj,
    "resolve_conj": lambda self: self, "resolve_neg": lambda self: self, "is_conj": lambda self: False,
    "pin_memory": lambda self, device=None: self, "is_pinned": lambda self, device=None: False,
    "share_memory_": _share_memory_, "is_shared": _is_shared,
    "get_device": lambda self: -1 if not self.is_cuda else self.device.index or 0,
}
for _name, _fn in _METHODS.items():
    setattr(Tensor, _name, _fn)
