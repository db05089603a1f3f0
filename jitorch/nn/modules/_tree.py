"""Tree-wide changes, bound onto ``Module`` in module.py: train/eval, ``requires_grad_``, ``zero_grad``, ``apply``
and the device/dtype conversions (``to``, ``cuda``, ``float``, ...).

Conversions swap each parameter's array in place (``param.data = ...``), so the ``Parameter`` objects an optimizer
holds stay the module's parameters; buffers are replaced.

>>> import jitorch
>>> from jitorch import nn
>>> m = nn.Module(); m.w = nn.Parameter(jitorch.zeros(2)); w = m.w
>>> m.to(jitorch.float64).w is w, w.dtype
(True, jitorch.float64)
"""
from __future__ import annotations

import warnings

from ... import _dtype
from ...autograd.grad_mode import no_grad
from . import _registration

# ``type_`` and ``float_`` avoid shadowing the builtins here; Module binds them as ``type`` and ``float``.
__all__ = ["train", "eval", "requires_grad_", "zero_grad", "apply", "_apply", "to", "cuda", "cpu", "type_", "float_",
           "double", "half", "bfloat16", "to_empty", "share_memory", "xpu", "ipu", "mtia"]


def train(self, mode=True):
    """Set training mode (``mode=False`` is evaluation mode) on this module and all its descendants."""
    if not isinstance(mode, bool):
        raise ValueError("training mode is expected to be boolean")
    self.training = mode
    for module in self.children():
        module.train(mode)
    return self


def eval(self):
    """Evaluation mode: ``train(False)``."""
    return self.train(False)


def requires_grad_(self, requires_grad=True):
    """Set ``requires_grad`` on every parameter (freeze with ``False``)."""
    for p in self.parameters():
        p.requires_grad_(requires_grad)
    return self


def zero_grad(self, set_to_none=True):
    """Reset the parameters' gradients: to None (default) or to zeros in place."""
    for p in self.parameters():
        if p.grad is None:
            continue
        if set_to_none:
            p.grad = None
        else:
            if p.grad.grad_fn is not None:
                p.grad.detach_()
            else:
                p.grad.requires_grad_(False)
            p.grad.zero_()


def apply(self, fn):
    """Call ``fn(module)`` on every child (recursively) and then on ``self``; returns ``self``."""
    for module in self.children():
        module.apply(fn)
    fn(self)
    return self


def _apply(self, fn, recurse=True):
    # Parameters keep their identity (optimizers hold references to them): their arrays are swapped in place.
    if recurse:
        for module in self.children():
            module._apply(fn)
    from ... import __future__ as future
    from ...utils import swap_tensors
    from ..parameter import Parameter

    swap, overwrite = future.get_swap_module_params_on_conversion(), future.get_overwrite_module_params_on_conversion()
    for key, param in self._parameters.items():
        if param is None:
            continue
        with no_grad():
            applied = fn(param)
            grad = None if param.grad is None else fn(param.grad)
        if swap:
            swap_tensors(param, Parameter(applied, requires_grad=param.requires_grad))
            if grad is not None:
                param.grad = grad
        elif overwrite:
            fresh = self._parameters[key] = Parameter(applied, requires_grad=param.requires_grad)
            if grad is not None:
                fresh.grad = grad.requires_grad_(param.grad.requires_grad)
        else:
            param.data = applied
            if grad is not None:
                param.grad.data = grad
    for key, buf in self._buffers.items():
        if buf is not None:
            self._buffers[key] = fn(buf)
    _registration.STATE_VERSION[0] += 1  # new buffer tensors (a captured step reading the old ones must see it)
    return self


# torch._C._nn._parse_to's overloads, tried in order: (name, accepts None) per parameter, keyword-only ones last.
_TO_OVERLOADS = (
    (("device", True), ("dtype", True), ("non_blocking", False), ("copy", False)),
    (("dtype", False), ("non_blocking", False), ("copy", False)),
    (("tensor", False), ("non_blocking", False), ("copy", False)),
)
_TO_SIGNATURES = (
    "(jitorch.device device = None, jitorch.dtype dtype = None, bool non_blocking = False, bool copy = False, *, "
    "jitorch.memory_format memory_format = None)",
    "(jitorch.dtype dtype, bool non_blocking = False, bool copy = False, *, jitorch.memory_format memory_format = "
    "None)",
    "(Tensor tensor, bool non_blocking = False, bool copy = False, *, jitorch.memory_format memory_format = None)",
)


def _to_accepts(name, value):
    from ..._device import device
    from ..._memory_format import memory_format
    from ..._tensor import Tensor

    if name == "device":
        return isinstance(value, (str, device)) or (isinstance(value, int) and not isinstance(value, bool))
    if name == "dtype":  # Python's number types name dtypes too (float is float64)
        return isinstance(value, _dtype.dtype) or value in (int, float, bool, complex)
    if name == "tensor":
        return isinstance(value, Tensor)
    if name == "memory_format":
        return isinstance(value, memory_format)
    return isinstance(value, bool)


def _to_type_name(value):
    from ..._device import device
    from ..._memory_format import memory_format
    from ..._tensor import Tensor

    for cls, name in ((Tensor, "Tensor"), (_dtype.dtype, "jitorch.dtype"), (device, "jitorch.device"),
                      (memory_format, "jitorch.memory_format")):
        if isinstance(value, cls):
            return name
    return type(value).__name__


def _bind_to(params, args, kwargs):
    if len(args) > len(params):
        return None
    bound = dict(zip((name for name, _ in params), args))
    for key, value in kwargs.items():
        if key in bound or key not in {name for name, _ in params} | {"memory_format"}:
            return None
        bound[key] = value
    for i, (name, nullable) in enumerate(params):
        value = bound.get(name)
        if value is None and name not in bound and i == 0 and not nullable:
            return None  # a required first parameter (dtype or tensor) is missing
        if value is None and name in bound and not (nullable or name == "memory_format"):
            return None
        if value is not None and not _to_accepts(name, value):
            return None
    fmt = bound.get("memory_format")
    return None if fmt is not None and not _to_accepts("memory_format", fmt) else bound


def _parse_module_to(args, kwargs):
    """(device, dtype, memory_format) of ``Module.to``'s arguments, with torch's errors for any other combination."""
    for params in _TO_OVERLOADS:
        bound = _bind_to(params, args, kwargs)
        if bound is not None:
            break
    else:
        got = [_to_type_name(a) for a in args] + [f"{k}={_to_type_name(v)}" for k, v in kwargs.items()]
        # torch's listing leaves a trailing ", " after keywords when there are no positional arguments
        listing = ", ".join(got) if args else "".join(f"{g}, " for g in got)
        raise TypeError(f"to() received an invalid combination of arguments - got ({listing}), but expected one "
                        "of:\n" + "".join(f" * {sig}\n" for sig in _TO_SIGNATURES))
    if bound.get("copy"):
        raise RuntimeError(".to() does not accept copy argument")
    tensor = bound.get("tensor")
    if tensor is not None:
        return tensor.device, tensor.dtype, bound.get("memory_format")
    return bound.get("device"), bound.get("dtype"), bound.get("memory_format")


def to(self, *args, **kwargs):
    """``to(device)``, ``to(dtype)``, ``to(tensor)``, ``to(device, dtype)``: move/cast in place; returns self.

    Only floating-point and complex parameters and buffers change dtype.
    """
    device, dtype, fmt = _parse_module_to(args, kwargs)
    if device is not None:
        from ..._device import device as _device

        device = _device(device)  # a bad device string raises before anything moves
    if dtype is not None:
        dtype = _dtype.to_dtype(dtype)
        if not (dtype.is_floating_point or dtype.is_complex):
            raise TypeError(f"nn.Module.to only accepts floating point or complex dtypes, but got desired "
                            f"dtype={dtype}")
        if dtype.is_complex:  # torch's wording (less its issue-tracker link), so filters on it keep matching
            warnings.warn("Complex modules are a new feature under active development whose design may change, and "
                          "some modules might not work as expected when using complex tensors as parameters or "
                          "buffers.", stacklevel=2)

    def convert(t):
        cast = dtype if t.is_floating_point() or t.is_complex() else None
        try:
            if fmt is not None and t.dim() in (4, 5):  # as torch: only 4-D and 5-D tensors take memory_format
                return t.to(device, cast, memory_format=fmt)
            return t.to(device, cast)
        except NotImplementedError as e:
            if str(e) == "Cannot copy out of meta tensor; no data!":
                raise NotImplementedError(f"{e} Please use jitorch.nn.Module.to_empty() instead of "
                                          "jitorch.nn.Module.to() when moving module from meta to a different "
                                          "device.") from None
            raise

    return self._apply(convert)


def cuda(self, device=None):
    """Move every parameter and buffer to a CUDA device."""
    return self._apply(lambda t: t.cuda(device))


def cpu(self):
    """Move every parameter and buffer to the CPU."""
    return self._apply(lambda t: t.cpu())


def _no_backend(message, error=AssertionError):
    def fail(t):
        raise error(message)
    return fail


# jitorch has no XPU, IPU or MTIA backend: as a CPU build of torch, moving a module with tensors there raises (a
# module without any is returned unchanged).
def xpu(self, device=None):
    """Move every parameter and buffer to an XPU device (none is available: raises when there is one to move)."""
    return self._apply(_no_backend("Torch not compiled with XPU enabled"))


def ipu(self, device=None):
    """Move every parameter and buffer to an IPU device (none is available: raises when there is one to move)."""
    return self._apply(_no_backend("PyTorch is not linked with support for ipu devices", RuntimeError))


def mtia(self, device=None):
    """Move every parameter and buffer to an MTIA device (none is available: raises when there is one to move)."""
    return self._apply(_no_backend("Torch not compiled with MTIA enabled"))


def type_(self, dst_type):
    """Cast every parameter and buffer to ``dst_type``."""
    return self._apply(lambda t: t.type(dst_type))


def float_(self):
    """Cast floating-point parameters and buffers to float32."""
    return self._apply(lambda t: t.float() if t.is_floating_point() else t)


def double(self):
    """Cast floating-point parameters and buffers to float64."""
    return self._apply(lambda t: t.double() if t.is_floating_point() else t)


def half(self):
    """Cast floating-point parameters and buffers to float16."""
    return self._apply(lambda t: t.half() if t.is_floating_point() else t)


def bfloat16(self):
    """Cast floating-point parameters and buffers to bfloat16."""
    return self._apply(lambda t: t.bfloat16() if t.is_floating_point() else t)


def to_empty(self, *, device, recurse=True):
    """Replace every parameter and buffer by an uninitialized tensor of the same shape on ``device``."""
    from ..._creation import empty_like

    return self._apply(lambda t: empty_like(t, device=device), recurse=recurse)


def share_memory(self):
    """``share_memory_()`` on every parameter and buffer."""
    return self._apply(lambda t: t.share_memory_())
