"""Fake tensors for ``make_fx(fn, tracing_mode="fake")``: shapes, dtypes and strides of the inputs, never their data.

Each input tensor is replaced by a *fake* twin with the same shape, dtype, device, strides (storage offset 0),
``requires_grad`` and leaf-ness, whose storage is a zero-filled buffer of the needed extent. ``np.zeros`` of a large
size is ``calloc``-backed, so pages nobody touches cost no memory: a 1 GiB input costs nothing until an op reads it
(and reading untouched pages maps the kernel's shared zero page). The op-table kernels then run on these buffers: the
values are meaningless but deterministic, and zeros keep gathers and index checks in range.

:class:`FakeTensorMode` is a dispatcher mode that sits *under* make_fx's recording mode. It taints everything computed
from a fake tensor (by the root buffer of its array, so ``detach()`` and other aliases stay fake) and refuses what a
graph of zeros would get wrong:

- rows whose output *shape* depends on values (``nonzero``, ``unique``, ``bincount``, a boolean-mask index...) raise
  :class:`DynamicOutputShapeException`;
- host reads of a fake value (``item``, ``bool``, ``int``, ``tolist``, ``numpy``...) raise
  :class:`DataDependentOutputException`: Python control flow on zeros would bake a branch no real input chose.
  A few library reads that only guard an input-validation error (``Target 7 is out of bounds``) are let through:
  as torch's fake kernels, the check is not done;
- an in-place write of a fake value into a real tensor from outside (a module buffer) lands in a private copy that
  is dropped when the trace ends, so the user's tensors are never written.

>>> import jitorch
>>> with FakeTensorMode() as mode:
...     x = mode.from_real(jitorch.full((2, 3), float("nan")))
...     y = (x * 2).sum(1)
>>> tuple(y.shape), y.dtype
((2,), jitorch.float32)
"""
from __future__ import annotations

import os
import sys
import threading

import numpy as np

from .._dispatch import apply, apply_inplace, MODES, pop_mode, push_mode, run_below
from .._dispatch import record as record_autograd
from .._tensor import Tensor
from ..autograd.grad_mode import GradState
from ..ops.table import OPS, Opaque
from ..runtime.devices import memory_owner, strided_view

__all__ = ["FakeTensorMode", "DataDependentOutputException", "DynamicOutputShapeException", "DATA_DEPENDENT_ROWS",
           "HOST_READS", "read_site", "guard_host_reads", "restore_tensor_methods"]


class DataDependentOutputException(RuntimeError):
    """A value of a fake tensor was needed (a host read, or an op whose output depends on the data)."""


class DynamicOutputShapeException(DataDependentOutputException):
    """An op's output shape depends on the values of a fake tensor (``nonzero``, ``unique``, a boolean mask)."""


# Rows whose output shape is decided by the values of their first input. The op table marks most of them with
# ``Opaque("data-dependent shape")``; ``bincount`` (length max + 1) is only an ``Opaque("histogram")``.
DATA_DEPENDENT_ROWS = frozenset({"bincount"} | {name for name, op in OPS.items()
                                                if isinstance(op.fusion, Opaque) and "data-dependent" in op.fusion.why})
# Tensor methods that hand a value to Python.
HOST_READS = ("item", "tolist", "numpy", "__bool__", "__int__", "__float__", "__index__", "__complex__", "__array__",
              "__dlpack__")
# Library functions whose reads only decide whether to raise an input-validation error: (file, function), or
# (file, function, method) where the function also reads values it needs. On zeros the check passes, so the trace
# goes on as torch's fake kernels do (they skip such checks).
VALIDATION_READS = frozenset({
    ("_functional_loss.py", "_class_targets"),
    ("_functional_loss_extra.py", "gaussian_nll_loss"), ("_functional_loss_extra.py", "multi_margin_loss"),
    ("_functional_loss_extra.py", "multilabel_margin_loss"), ("_math_extra.py", "_quantile"),
    ("_sorting.py", "histc"),
})
# Rows whose kernel refuses some values (an integer division by zero, a singular matrix): on fake data the refused
# operand is swapped for harmless values of the same shape (ones, identity matrices) just for the kernel call.
_SUBSTITUTE = {"floor_divide": (1, "ones"), "remainder": (1, "ones"), "fmod": (1, "ones"), "div": (1, "ones"),
               "linalg_inv": (0, "eye"), "linalg_cholesky": (0, "eye"), "linalg_solve": (0, "eye")}
_PKG = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_HERE = os.path.abspath(__file__)
# The public functions' wrappers (the override hand-over, out=): not the entry the user called.
_WRAPPERS = (os.path.join(_PKG, "_overrides.py"), os.path.join(_PKG, "_out_variants.py"))
_lock = threading.RLock()
_active: list = []  # the FakeTensorMode whose host-read guards are installed (innermost last)


def fake_array(arr):
    """A zero-filled array with ``arr``'s shape, dtype, device and strides (storage offset 0); ``arr`` is not read.

    >>> a = fake_array(np.ones((3, 4), np.float32).T)
    >>> a.shape, a.strides, float(a.sum())
    ((4, 3), (4, 16), 0.0)
    """
    xp = np if type(arr) is np.ndarray else sys.modules[type(arr).__module__.split(".")[0]]
    shape, item = arr.shape, arr.itemsize
    if 0 in shape or any(s % item for s in arr.strides):
        return xp.zeros(shape, arr.dtype)  # nothing to lay out, or strides no element grid can hold
    strides = [s // item for s in arr.strides]
    lo = sum((n - 1) * s for n, s in zip(shape, strides) if s < 0)
    hi = sum((n - 1) * s for n, s in zip(shape, strides) if s > 0)
    out = strided_view(xp, xp.zeros(hi - lo + 1, arr.dtype), shape, strides, offset=-lo)
    if xp is np and not arr.flags.writeable:
        out.flags.writeable = False  # an expanded input stays read-only: in-place ops on it must still refuse
    return out


def _tensors(values):
    for v in values:
        if isinstance(v, Tensor):
            yield v
        elif isinstance(v, (tuple, list)):
            yield from _tensors(v)


def _caller():
    """``(public jitorch function, user's file:line)`` of the read being made: where the error message points."""
    frame, entry = sys._getframe(2), None
    while frame is not None:
        path = os.path.abspath(frame.f_code.co_filename)
        if not path.startswith(_PKG + os.sep):
            return entry, f"{frame.f_code.co_filename}:{frame.f_lineno}"
        if path != _HERE and path not in _WRAPPERS:
            entry = frame.f_code.co_name
        frame = frame.f_back
    return entry, ""


def read_site(frame, name):
    """``(allowed, shown, inside)`` for a host read ``name`` (``item``, ``__bool__``...) made by the code of ``frame``:
    whether it only guards an input-validation error (`VALIDATION_READS`), the read as the user would write it, and
    `` inside fn()`` when a jitorch function made it."""
    path = os.path.abspath(frame.f_code.co_filename)
    site = (os.path.basename(path), frame.f_code.co_name)
    library = path.startswith(_PKG + os.sep)
    allowed = library and (site in VALIDATION_READS or (*site, name) in VALIDATION_READS)
    shown = name.strip("_") + "()" if name.startswith("_") else f"Tensor.{name}()"
    return allowed, shown, f" inside {site[1]}()" if library else ""


def _advice(where):
    at = f" (at {where})" if where else ""
    return (f"{at}. Fake tensors carry only shapes and dtypes; trace with make_fx(fn, tracing_mode='real') to "
            "specialize the graph to the example inputs' values.")


class FakeTensorMode:
    """A dispatcher mode running ops on fake tensors; a context manager (it installs the host-read guards)."""

    def __init__(self):
        self._fake: dict[int, object] = {}  # id(root array) -> the root, kept alive so ids are not reused
        self._local: dict[int, object] = {}  # roots of real arrays made during the trace (the rest is the user's)
        self._swapped: list = []  # (real tensor from outside, its array): restored when the trace ends

    # -- which tensors are fake ---------------------------------------------------------------------------------
    def is_fake(self, t):
        return id(memory_owner(t._data)) in self._fake

    def _mark(self, t, table=None):
        root = memory_owner(t._data)
        (self._fake if table is None else table)[id(root)] = root

    def made(self, t):
        """Note a tensor created while tracing (``Tensor._make``): writing into it cannot touch the user's memory."""
        self._mark(t, self._local)

    def from_real(self, t):
        """A fake twin of ``t``: same shape, dtype, device, strides, ``requires_grad`` and leaf-ness; ``t`` unread."""
        fake = Tensor._make(fake_array(t._data))
        if t._requires_grad:
            if t.grad_fn is None:
                fake._requires_grad = True
            else:  # a non-leaf: one identity step (clone's backward) from a hidden leaf over the same buffer
                leaf = Tensor._make(fake._data)
                leaf._requires_grad = True
                record_autograd(OPS["clone"], (leaf,), {}, (fake,))
        self._mark(fake)
        return fake

    # -- the mode -----------------------------------------------------------------------------------------------
    _run = run_below  # ``self._run(fn, *args)``: fn runs with this mode popped

    def _any_fake(self, args, attrs):
        return any(self.is_fake(t) for t in _tensors((*args, *attrs.values())))

    def dispatch(self, op, args, attrs):
        fake = self._any_fake(args, attrs)
        if fake:
            self._check_static_shape(op, args)
        # Real values in, real values out (a parameter's transpose): those are computed, not faked.
        out = self._run_fake(apply, op, args, attrs) if fake else self._run(apply, op, *args, **attrs)
        # A view shares its input's buffer, which keeps its status: a view of a module's buffer is still the user's.
        inputs = {id(memory_owner(t._data)) for t in _tensors(args)}
        for o in out if isinstance(out, tuple) else (out,):
            if isinstance(o, Tensor) and id(memory_owner(o._data)) not in inputs:
                self._mark(o, None if fake else self._local)
        return out

    def dispatch_inplace(self, op, t, args, attrs):
        fake = self._any_fake(args, attrs)
        if fake or self.is_fake(t):
            self._check_static_shape(op, (t, *args))
        root = memory_owner(t._data)
        if id(root) not in self._fake and id(root) not in self._local:
            self._privatize(op, t)
        if not fake and not self.is_fake(t):
            return self._run(apply_inplace, op, t, *args, **attrs)
        out = self._run_fake(apply_inplace, op, (t, *args), attrs)
        self._mark(t)
        return out

    def _privatize(self, op, t):
        """Point a tensor from outside the trace (a module's buffer) that an in-place op is about to write at a
        private copy, restored when the trace ends: a fake trace leaves the user's tensors as they were."""
        if t._base is not None:
            raise DataDependentOutputException(
                f"make_fx(tracing_mode='fake'): in-place {op.name}_() writes into a view of a tensor of shape "
                f"{tuple(t._base.shape)} made outside the traced function, which a fake trace must not modify"
                f"{_advice(_caller()[1])}")
        self._swapped.append((t, t._data))
        t._data = t._data.copy()
        self._mark(t, self._local)

    def _run_fake(self, fn, op, args, attrs):
        try:
            return self._run(fn, op, *args, **attrs)
        except DataDependentOutputException:
            raise
        except Exception as error:  # noqa: BLE001 - only the refusals of _SUBSTITUTE rows are retried
            if op.name not in _SUBSTITUTE or not isinstance(args[_SUBSTITUTE[op.name][0]], Tensor):
                raise
            return self._substituted(fn, op, args, attrs, error)

    def _substituted(self, fn, op, args, attrs, error):
        pos, kind = _SUBSTITUTE[op.name]
        real = args[pos]
        xp = np if type(real._data) is np.ndarray else sys.modules[type(real._data).__module__.split(".")[0]]
        shape, dtype = real._data.shape, real._data.dtype
        if kind == "eye" and len(shape) >= 2 and shape[-1] == shape[-2]:
            values = xp.broadcast_to(xp.eye(shape[-1], dtype=dtype), shape)
        elif kind == "ones":
            values = xp.broadcast_to(xp.ones((), dtype=dtype), shape)
        else:
            raise error
        stand_in = Tensor._make(values)
        stand_in._requires_grad = real._requires_grad
        out = self._run(fn, op, *args[:pos], stand_in, *args[pos + 1:], **attrs)
        for o in out if isinstance(out, tuple) else (out,):
            saved = getattr(o.grad_fn, "_saved_in", None) or ()
            if GradState.enabled and any(s is stand_in for s in saved):
                raise DataDependentOutputException(
                    f"make_fx(tracing_mode='fake'): {op.name} refused the fake tensors' placeholder values ({error}) "
                    f"and its backward needs the real input of shape {tuple(shape)}{_advice(_caller()[1])}") from error
        return out

    def _check_static_shape(self, op, args):
        name = op.name
        if name in DATA_DEPENDENT_ROWS and isinstance(args[0], Tensor) and self.is_fake(args[0]):
            why = f"{name}() of a fake tensor of shape {tuple(args[0].shape)}: its output shape depends on the values"
        elif name in ("index", "index_put") and any(t._data.dtype == np.bool_ and self.is_fake(t)
                                                     for t in _tensors(args[1 if name == "index" else 2:])):
            values = args[1] if name == "index_put" else None
            if name == "index_put" and (not isinstance(values, Tensor) or values.numel() <= 1):
                return  # masked_fill: one value broadcast to every selected element, whatever the mask holds
            why = f"{name}() with a fake boolean mask: the number of selected elements depends on the mask's values"
        else:
            return
        entry, where = _caller()
        inside = f" (in {entry}())" if entry and entry != name else ""
        raise DynamicOutputShapeException(f"make_fx(tracing_mode='fake'): {why}{inside}{_advice(where)}")

    # -- host reads -----------------------------------------------------------------------------------------------
    def host_read(self, name, t, original, args, kwargs, frame):
        if self.is_fake(t):
            allowed, shown, inside = read_site(frame, name)
            if not allowed:
                raise DataDependentOutputException(
                    f"make_fx(tracing_mode='fake'): {shown}{inside} reads the value of a fake tensor of shape "
                    f"{tuple(t._data.shape)}, dtype {t.dtype}; a graph made from that value would depend on data "
                    f"the trace does not have{_advice(_caller()[1])}")
        return original(t, *args, **kwargs)

    def __enter__(self):
        with _lock:
            if not _active:
                _install()
            _active.append(self)
        self._errstate = np.errstate(all="ignore")  # zeros divide by zero, log zero...: meaningless, not an error
        self._errstate.__enter__()
        push_mode(self)
        return self

    def __exit__(self, *exc):
        if MODES and MODES[-1] is self:
            pop_mode()
        self._errstate.__exit__(*exc)
        for t, data in reversed(self._swapped):
            t._data = data
        self._swapped.clear()
        with _lock:
            _active.remove(self)
            if not _active:
                _uninstall()
        return False


_originals: dict = {}


def _install():
    make = _originals["_make"] = Tensor.__dict__["_make"]

    def make_noting(data):
        t = make.__func__(data)
        if _active:
            _active[-1].made(t)
        return t
    Tensor._make = staticmethod(make_noting)
    guard_host_reads(_originals, _active, lambda name, t, original, args, kwargs, frame:
                     _active[-1].host_read(name, t, original, args, kwargs, frame))
    for name in ("__repr__", "__str__"):  # printing shows what a fake tensor has: no values
        original = _originals[name] = Tensor.__dict__[name]

        def fake_repr(self, *args, _original=original, **kwargs):
            if _active and _active[-1].is_fake(self):
                grad = ", requires_grad=True" if self._requires_grad else ""
                return f"FakeTensor(..., size={tuple(self._data.shape)}, dtype={self.dtype}{grad})"
            return _original(self, *args, **kwargs)
        setattr(Tensor, name, fake_repr)


def _uninstall():
    restore_tensor_methods(_originals)


def guard_host_reads(originals, active, read):
    """Replace Tensor's `HOST_READS` methods (originals kept in ``originals``) by ones that, while the list ``active``
    is not empty, return ``read(name, tensor, original, args, kwargs, frame)``, ``frame`` being the code that asked
    for the value; fake tracing and make_fx's value-read refusal share this."""
    for name in HOST_READS:
        original = Tensor.__dict__.get(name)
        if original is None:
            continue
        originals[name] = original

        def guarded(self, *args, _name=name, _original=original, **kwargs):
            if active:
                return read(_name, self, _original, args, kwargs, sys._getframe(1))
            return _original(self, *args, **kwargs)
        guarded.__name__ = name
        setattr(Tensor, name, guarded)


def restore_tensor_methods(originals):
    """Put back the Tensor methods `guard_host_reads` (and the fake mode) replaced."""
    for name, original in originals.items():
        setattr(Tensor, name, original)
    originals.clear()
