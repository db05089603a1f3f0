"""The dispatch choke point: every op on tensors passes through ``apply`` (or ``apply_inplace``).

It decides, in one place, whether to hand the op to an active mode (tracing, capture), and otherwise runs the row's
eager kernel, promotes dtypes as ``torch.result_type``, checks devices, wraps outputs, marks views, and records the
autograd node when grad mode is on and an input requires grad. The mode stack (`_dispatch_modes.py`), the recording
(`_dispatch_record.py`), in-place ops (`_dispatch_inplace.py`) and the fast paths (`_dispatch_fast.py`) are split
from here; their names stay importable from this module.

>>> import jitorch
>>> from jitorch._dispatch import apply
>>> from jitorch.ops.table import OPS
>>> apply(OPS["add"], jitorch.tensor([1, 2]), 0.5)
tensor([1.5000, 2.5000])
"""
from __future__ import annotations

import numpy as np

from . import _dtype
from ._dispatch_modes import MODES, is_compiling, pop_mode, push_mode, run_below  # noqa: F401 - re-exported
from ._memory_format import preserve_copy
from ._dispatch_record import _edge, _mark_view, _only_saved, record, sync_view, sync_views  # noqa: F401
from ._tensor import Tensor
from .autograd.grad_mode import GradState
from .runtime import array_module_for
from .runtime.meta import MetaArray

__all__ = ["apply", "apply_inplace", "push_mode", "pop_mode", "run_below", "MODES", "NO_STRIDED_DATA", "Rerouted"]

# The array module kernels receive for CPU arrays. Tests swap in a NumPy restricted to CuPy's names, so a kernel that
# would break on the GPU fails on the CPU first.
CPU_XP = np

_FROM_NP = _dtype.FROM_NP
_new = object.__new__
_BOOL_NP = np.dtype(np.bool_)
_BF16_NP = _dtype.bfloat16.np
TORCH_TYPE_NAMES = {
    "bool": "Bool", "uint8": "Byte", "int8": "Char", "int16": "Short", "int32": "Int", "int64": "Long",
    "float16": "Half", "bfloat16": "BFloat16", "float32": "Float", "float64": "Double",
    "complex64": "ComplexFloat", "complex128": "ComplexDouble", "uint16": "UInt16", "uint32": "UInt32",
    "uint64": "UInt64",
}


# ``_data`` types of tensors that have no strided memory, each mapped to ``answer(op, args, attrs) -> exception``: a
# sparse_coo tensor's payload (sparse/_coo_refusals.py registers it). A row handed such a tensor raises that exception
# rather than compute on the placeholder: the refusal naming the op, or `Rerouted` with the result of the tensor's own
# implementation (``dense.add(sparse)``). Checked only off the host-array path (CuPy, mixed types): free on the CPU.
NO_STRIDED_DATA: dict = {}


class Rerouted(Exception):  # noqa: N818 - not an error: the answer, raised through the kernel call
    """Raised from a kernel call that a tensor without strided memory answers itself: `eager` returns ``result``,
    `apply_inplace` writes it into ``self`` (a ``try`` costs nothing while nothing is raised)."""

    def __init__(self, result):
        super().__init__()
        self.result = result


def _xp_of(data):
    return np if type(data) is np.ndarray else array_module_for("cuda")


def _device_error(op, args, attrs=None):
    for a in args:
        answer = NO_STRIDED_DATA.get(type(getattr(a, "_data", None)))
        if answer is not None:
            return answer(op, args, attrs or {})
    devices = [str(a.device) for a in args if isinstance(a, Tensor)]
    seen = list(dict.fromkeys(devices))
    return RuntimeError(
        f"{op.name}: Expected all tensors to be on the same device, but found at least two devices, "
        f"{seen[0]} and {seen[1]}! Move them with .to(device) first."
    )


def _raise_broadcast_error(op, datas, error):
    """Turn NumPy's broadcast ValueError into PyTorch's RuntimeError naming the op and the shapes."""
    if "broadcast" in str(error):
        shapes = " and ".join(str(tuple(d.shape)) for d in datas if hasattr(d, "shape"))
        raise RuntimeError(f"{op.name}: shapes {shapes} are not broadcastable") from None


def _cast_operand(d, cnp, masks):
    if isinstance(d, np.generic):  # NumPy scalars are weak operands, like Python scalars
        d = d.item()
    if type(d) is int and cnp.kind in "iu" and -(1 << 63) <= d < 1 << 64:  # beyond 64 bits torch refuses: NumPy too
        # torch casts an integer scalar to the integer dtype it computes in, wrapping (uint8 < -2 compares with 254,
        # int8 == 156 with -100); NumPy would compare the exact values.
        bits = cnp.itemsize * 8
        d &= (1 << bits) - 1
        return d - (1 << bits) if cnp.kind == "i" and d >= 1 << (bits - 1) else d
    if not hasattr(d, "dtype") or d.dtype == cnp or (masks and d.dtype == _BOOL_NP):
        return d
    return _cast_array(d, cnp)


def _cast_array(d, cnp):
    """``d`` cast to NumPy dtype ``cnp`` for a kernel, as TensorIterator casts a CPU operand: ``.to(dtype)``, whose
    copy of a broadcast operand (an ``expand``) is dense with the dims in their logical order. The array modules'
    ``astype`` would put the broadcast dims innermost and the kernel's output would follow: ``arange(7).expand(6, 7)
    * 0.5`` had strides ``(1, 6)``, where torch's ``(7, 1)`` lets ``.view(-1)`` work."""
    if 0 in d.strides and type(d) is not MetaArray and d.size > 1:
        return preserve_copy(_xp_of(d), d, cnp)
    return d.astype(cnp)


def _compute_dtype(op, args):
    """The dtype the op computes in, following ``torch.result_type`` (slow path: mixed dtypes or scalars)."""
    dims, zeros, scalars = [], [], []
    for a in args:
        if isinstance(a, Tensor):
            d = a._data
            (dims if d.ndim else zeros).append(_FROM_NP[d.dtype])
        elif a is not None:
            scalars.append(_dtype.scalar_dtype(a))
    return _dtype.result_type_of(dims, zeros, scalars)


def _run_kernel(op, args, attrs):
    """Unwrap, promote and run the row's kernel. Returns (output arrays tuple, out dtype or None)."""
    promotion = op.promotion
    datas = []
    first = None
    same = True
    has_scalar = False
    for a in args:
        if isinstance(a, Tensor):
            d = a._data
            if first is None:
                first = d
            elif type(d) is not type(first):
                if type(d) is MetaArray or type(first) is MetaArray:
                    return _meta.mixed(op, args, attrs, _run_kernel)
                raise _device_error(op, args, attrs)
            elif d.dtype != first.dtype:
                same = False
            datas.append(d)
        else:
            has_scalar = has_scalar or a is not None
            datas.append(a)
    if first is None:
        raise TypeError(f"{op.name}: expected at least one Tensor argument")
    if op.complex_error is not None:
        for d in datas:
            if getattr(d, "dtype", None) is not None and d.dtype.kind == "c":
                raise op.complex_error(d.dtype.name)
            if type(d) is complex:  # a Python complex makes the compute dtype complex (``t < 1j``): refused too
                raise op.complex_error(_compute_dtype(op, args).name)
    if type(first) is np.ndarray:
        xp, kernel = CPU_XP, op.kernel
    elif type(first) is MetaArray:
        xp, kernel = np, _meta.kernel_of(op)
    else:
        answer = NO_STRIDED_DATA.get(type(first))
        if answer is not None:
            raise answer(op, args, attrs)
        xp, kernel = _xp_of(first), op.kernel
    out_np = None
    if promotion != "keep":
        compute = _FROM_NP[first.dtype] if same and not has_scalar else _compute_dtype(op, args)
        if promotion == "float" and compute.category < _dtype.FLOAT:
            compute = _dtype.get_default_dtype()
        elif promotion == "integral" and compute.category >= _dtype.FLOAT:
            raise NotImplementedError(f'"{op.name}" not implemented for \'{TORCH_TYPE_NAMES[compute.name]}\' '
                                      "(it takes integer or bool tensors)")
        cnp = compute.np
        if not same or cnp != first.dtype or has_scalar:
            datas = [_cast_operand(d, cnp, op.masks) for d in datas]
            if promotion == "compare" and cnp is _BF16_NP:  # torch compares with the number rounded to bfloat16;
                datas = [float(cnp.type(d)) if type(d) is float else d for d in datas]  # ml_dtypes would widen
        out_np = _BOOL_NP if promotion == "compare" else cnp
    try:
        out = kernel(xp, *datas, **attrs)
    except ValueError as e:
        _raise_broadcast_error(op, datas, e)
        raise
    except OverflowError:
        # PyTorch wraps an out-of-range Python int into the tensor's dtype (uint8 + -2 -> 254 + x).
        datas = [xp.asarray(d).astype(out_np if out_np is not None and out_np != _BOOL_NP else first.dtype)
                 if type(d) is int else d for d in datas]
        out = kernel(xp, *datas, **attrs)
    if op.nout == 1:
        out = (out,)
    fixed = []
    for o in out:
        if type(o) is not np.ndarray and (xp is np or not isinstance(o, xp.ndarray)) and type(o) is not MetaArray:
            o = xp.asarray(o)
        if out_np is not None and o.dtype != out_np:
            o = o.astype(out_np)
        fixed.append(o)
    return fixed


def apply(op, *args, **attrs):
    """Run ``op`` on ``args`` (tensors and Python scalars); returns a Tensor or a tuple for multi-output ops."""
    if MODES:
        return MODES[-1].dispatch(op, args, attrs)
    return eager(op, args, attrs)


def eager(op, args, attrs):
    """Run one op eagerly: kernel, output wrapping, view marking and autograd recording."""
    if op.single_keep and len(args) == 1 and type(args[0]._data) is np.ndarray:
        # Views, reductions and casts of one CPU tensor: no promotion or device checks to do.
        a = args[0]
        if a._base is not None and a._view_ver != a._ver_owner._ver:
            sync_view(a)
        if op.complex_error is not None and a._data.dtype.kind == "c":
            raise op.complex_error(a._data.dtype.name)
        out = op.kernel(CPU_XP, a._data, **attrs)
        if type(out) is not np.ndarray and type(out) is not MetaArray:  # ``to("meta")`` makes a meta array
            out = np.asarray(out)
        t = _new(Tensor)
        t._data = out
        if GradState.inference:  # what Tensor._make does for the other paths
            t._inference = True
        if op.view:
            _mark_view(t, a, op, attrs)
        if a._requires_grad and GradState.enabled and op.differentiable:
            record(op, args, attrs, (t,))
        return t
    if op.promotion == "keep":
        out = fast_keep(op, args, attrs)
        if out is not None:
            return out
    for a in args:
        if isinstance(a, Tensor):
            if a._base is not None and a._view_ver != a._ver_owner._ver:
                sync_view(a)
        elif type(a) is np.ndarray:  # ``ndarray + tensor`` reaches Tensor.__radd__: the array acts as a tensor
            args = tuple(Tensor._make(x) if type(x) is np.ndarray else x for x in args)
            break
    try:
        datas = _run_kernel(op, args, attrs)
    except Rerouted as answer:  # a sparse operand's own implementation answered (``dense.mul(sparse)``)
        return answer.result
    outs = [Tensor._make(d) for d in datas]
    if op.view:
        src = args[0]
        for o in outs:
            _mark_view(o, src, op, attrs)
    if GradState.enabled and op.differentiable:
        for a in args:
            if isinstance(a, Tensor) and a._requires_grad:
                record(op, args, attrs, outs)
                break
    return outs[0] if op.nout == 1 else tuple(outs)


_NO_ATTRS: dict = {}
# Tensor and its subclasses that take the fast paths as tensors (nn.Parameter registers itself here).
TENSOR_TYPES = {Tensor}

# The per-op shortcuts of the hottest calls (pointwise rows on float CPU arrays), and in-place ops; split from here
# for size (they import this module).
from ._dispatch_fast import fast_binary, fast_keep, fast_unary  # noqa: E402,F401
from ._dispatch_inplace import apply_inplace  # noqa: E402,F401
from . import _meta  # noqa: E402 - the meta device's kernels (it imports the op rows, which import this module)
