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
    for param in self._parameters.values():
        if param is None:
            continue
        with no_grad():
            param.data = fn(param)
        grad = param.grad
        if grad is not None:
            with no_grad():
                grad.data = fn(grad)
    for key, buf in self._buffers.items():
        if buf is not None:
            self._buffers[key] = fn(buf)
    return self


def to(self, *args, **kwargs):
    """``to(device)``, ``to(dtype)``, ``to(tensor)``, ``to(device, dtype)``: move/cast in place; returns self.

    Only floating-point and complex parameters and buffers change dtype.
    """
    from ..._conversion import _parse_to

    dtype, device, _, fmt = _parse_to(args, dict(kwargs), with_format=True)
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
        if fmt is not None and t.dim() in (4, 5):  # as torch: only 4-D and 5-D tensors take memory_format
            return t.to(device, cast, memory_format=fmt)
        return t.to(device, cast)

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
