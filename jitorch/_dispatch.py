"""The dispatch choke point: every op on tensors passes through ``apply`` (or ``apply_inplace``).

It decides, in one place, whether to hand the op to an active mode (tracing, capture), and otherwise runs the row's
eager kernel, promotes dtypes as ``torch.result_type``, checks devices, wraps outputs, marks views, and records the
autograd node when grad mode is on and an input requires grad.

>>> import jitorch
>>> from jitorch._dispatch import apply
>>> from jitorch.ops.table import OPS
>>> apply(OPS["add"], jitorch.tensor([1, 2]), 0.5)
tensor([1.5000, 2.5000])
"""
from __future__ import annotations

import numpy as np

from . import _device, _dtype
from ._tensor import Tensor
from .autograd.grad_mode import GradState
from .autograd.graph import _record as _record_in_region, _recording as _RECORDING
from .autograd.saved_hooks import _stack as _SAVED_HOOKS
from .autograd.view_creation import INFERENCE_VIEW, NO_GRAD_VIEW
from .runtime import array_module_for
from .runtime.meta import MetaArray

__all__ = ["apply", "apply_inplace", "push_mode", "pop_mode", "run_below", "MODES"]

# Active interpreters of ops (tracers, capture recorders); the innermost one sees each op first.
MODES: list = []
# The array module kernels receive for CPU arrays. Tests swap in a NumPy restricted to CuPy's names, so a kernel that
# would break on the GPU fails on the CPU first.
CPU_XP = np

_FROM_NP = _dtype.FROM_NP
_new = object.__new__
_BOOL_NP = np.dtype(np.bool_)
_CPU = _device.device("cpu")
TORCH_TYPE_NAMES = {
    "bool": "Bool", "uint8": "Byte", "int8": "Char", "int16": "Short", "int32": "Int", "int64": "Long",
    "float16": "Half", "bfloat16": "BFloat16", "float32": "Float", "float64": "Double",
    "complex64": "ComplexFloat", "complex128": "ComplexDouble", "uint16": "UInt16", "uint32": "UInt32",
    "uint64": "UInt64",
}


def is_compiling():
    """Whether ``jitorch.compile`` is tracing, recording or replaying the code running now (``torch.compiler.
    is_compiling``): code may choose a form the compiler handles, as a checkpointed block does.

    >>> is_compiling()
    False
    """
    return any(getattr(m, "compiling", False) for m in MODES)


def push_mode(mode):
    MODES.append(mode)


def pop_mode():
    return MODES.pop()


def run_below(mode, fn, *args, **kwargs):
    """Call ``fn`` with ``mode`` (the innermost) popped, so the ops it runs reach the modes beneath; then restore it.

    Modes assign it as a method: ``_run = run_below`` gives ``self._run(apply, op, *args)``.
    """
    pop_mode()
    try:
        return fn(*args, **kwargs)
    finally:
        push_mode(mode)


def _xp_of(data):
    return np if type(data) is np.ndarray else array_module_for("cuda")


def _device_error(op, args):
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
                raise _device_error(op, args)
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
    if type(first) is np.ndarray:
        xp, kernel = CPU_XP, op.kernel
    elif type(first) is MetaArray:
        xp, kernel = np, _meta.kernel_of(op)
    else:
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


def _edge(a):
    if isinstance(a, Tensor) and a._requires_grad:
        return (a.grad_fn, a._output_nr) if a.grad_fn is not None else (a, 0)
    return None


def sync_views(args):
    """`sync_view` every argument that is a view whose base changed in place since it was taken."""
    for a in args:
        if isinstance(a, Tensor) and a._base is not None and a._view_ver != a._ver_owner._ver:
            sync_view(a)


def sync_view(v):
    """Regenerate a view's history when its base changed in place since (PyTorch does this lazily, as here).

    Without it, ``v = y[:2]; y.mul_(2); v.sum().backward()`` would skip the ``mul_``.
    """
    root = v._ver_owner
    base = v._base
    if v._nograd_view is not None:
        # A view made without history (or by a custom Function), or a view of one: torch never regenerates its
        # history, and refuses it once its base changed in place while gradients are being recorded.
        if GradState.enabled and (base._requires_grad or v.grad_fn is not None):
            raise v._nograd_view.error(indirect=True)
        return
    v._view_ver = root._ver
    if base._requires_grad or v.grad_fn is not None:
        from .autograd.grad_mode import enable_grad
        from .ops.inplace_views import replay_view

        with enable_grad():
            regenerated = replay_view(v._view_chain, base)
        v.grad_fn, v._output_nr, v._requires_grad = regenerated.grad_fn, 0, regenerated._requires_grad


def _only_saved(op, args, edges):
    if len(args) == 2:  # the common binary case, without generators
        k0, k1 = op.save_if((edges[0] is not None, edges[1] is not None))
        return (args[0] if k0 else None, args[1] if k1 else None)
    keep = op.save_if(tuple([e is not None for e in edges]))
    return tuple([a if k else None for a, k in zip(args, keep)])


def _mark_view(out, src, op, attrs):
    out._base = src._base if src._base is not None else src
    root = out._ver_owner = src._ver_owner if src._ver_owner is not None else src
    out._view_ver = root._ver
    step = ((op, attrs),)
    # A view of a dtype view (no chain to replay) has none either.
    chain = src._view_chain if src._base is not None else ()
    out._view_chain = None if chain is None else chain + step
    if out._inference is not src._inference:  # a view is an inference tensor when its base is, whatever the mode
        out._inference = src._inference
    if not GradState.enabled:
        out._nograd_view = INFERENCE_VIEW if GradState.inference else NO_GRAD_VIEW
    elif src._nograd_view is not None:
        out._nograd_view = src._nograd_view.of_view(op.grad_name.removesuffix("Backward0"))


# Reductions whose ``dtype=`` may ask for an integer result from a tensor that requires grad.
_INTEGER_RESULT_REFUSED = frozenset({"sum", "prod", "cumsum", "cumprod"})


def record(op, args, attrs, outs):
    """Attach an autograd node for ``op`` to the output tensors ``outs``."""
    edges = []
    for a in args:
        if isinstance(a, Tensor) and a._requires_grad:
            fn = a.grad_fn
            edges.append((fn, a._output_nr) if fn is not None else (a, 0))
        else:
            edges.append(None)
    node = _new(op.node_cls)  # Node.__init__, inline (as in _record_pointwise)
    node.next = tuple(edges)
    node.attrs = attrs
    if _RECORDING:
        _record_in_region(node)
    saves = op.saves
    if saves == "inputs" or saves == "both":
        node.save_inputs(args if op.save_if is None else _only_saved(op, args, edges))
    if op.meta:
        # Input shapes and dtypes; pointwise rows skip them when no broadcast or promotion happened (the common case).
        metas = []
        differs = not op.pointwise
        out = outs[0]._data
        for a in args:
            if isinstance(a, Tensor):
                d = a._data
                metas.append((d.shape, d.dtype))
                differs = differs or d.shape != out.shape or d.dtype != out.dtype
            else:
                metas.append(None)
        if differs:
            node.in_meta = tuple(metas)
    if op.nout == 1:
        o = outs[0]
        if o._data.dtype.kind in "iub":  # integer and bool results are not differentiable
            if op.name in _INTEGER_RESULT_REFUSED:
                # torch refuses a differentiable reduction asked for an integer dtype rather than drop the graph.
                raise RuntimeError(f"Autograd not support dtype: {TORCH_TYPE_NAMES[o._data.dtype.name]}")
            return node
        # _output_nr too: a CopySlices recorded on output 1 of a multi-output node must not keep pointing at slot 1.
        o.grad_fn, o._output_nr = node, 0
        o._requires_grad = True
    else:
        metas = []
        for o in outs:  # (shape, dtype, device), without Tensor.device's lookup for host arrays
            d = o._data
            metas.append((d.shape, _FROM_NP[d.dtype], _CPU if type(d) is np.ndarray else o.device))
        node._out_meta = tuple(metas)
        for nr, o in enumerate(outs):
            if nr not in op.nondiff_outputs and o._data.dtype.kind not in "iub":
                o.grad_fn = node
                o._output_nr = nr
                o._requires_grad = True
    if saves == "outputs" or saves == "both":
        node.save_output(outs)
    return node


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
    datas = _run_kernel(op, args, attrs)
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


def _check_inplace_allowed(op, self):
    if self.grad_fn is None and self._requires_grad:
        raise RuntimeError(f"{op.name}_: a leaf Variable that requires grad is being used in an in-place operation.")
    base = self._base
    if base is not None and base.grad_fn is None and base._requires_grad:
        raise RuntimeError(f"{op.name}_: a view of a leaf Variable that requires grad is being used in an in-place "
                           "operation.")


def _check_cast(op, result, self):
    rd, sd = _FROM_NP[result.dtype], _FROM_NP[self._data.dtype]
    if rd.category > sd.category:
        raise RuntimeError(f"{op.name}_: result type {TORCH_TYPE_NAMES[rd.name]} can't be cast to the desired output "
                           f"type {TORCH_TYPE_NAMES[sd.name]}")
    if result.shape != self._data.shape:
        raise RuntimeError(f"{op.name}_: output with shape {list(self._data.shape)} doesn't match the broadcast "
                           f"shape {list(result.shape)}")


def _detach_history_inplace(self):
    """After a non-differentiable in-place op (``eq_``...), gradients through ``self`` are zero, as in PyTorch."""
    from .ops.inplace_views import ZERO_GRAD, rebase_view

    if self._base is None:
        record(ZERO_GRAD, (self,), _NO_ATTRS, (self,))
    else:
        stand_in = Tensor._make(self._data)
        record(ZERO_GRAD, (self,), _NO_ATTRS, (stand_in,))
        rebase_view(self, stand_in)


def apply_inplace(op, self, *args, cast_check=True, **attrs):
    """Run ``op(self, *args)`` and write the result into ``self``; records autograd as PyTorch does for in-place ops.

    Writing into a view of a tensor in a graph rebases the base's history (PyTorch's ``CopySlices``).
    """
    if MODES:
        return MODES[-1].dispatch_inplace(op, self, args, attrs)
    if not getattr(self._data.flags, "writeable", True):
        from .ops.inplace_views import writable_expanded

        writable_expanded(op, self)
    if self._inference and not GradState.inference:
        raise RuntimeError("Inplace update to inference tensor outside InferenceMode is not allowed.You can make a "
                           "clone to get a normal tensor before doing inplace update.See "
                           "https://github.com/pytorch/rfcs/pull/17 for more details.")
    grad_needed = GradState.enabled and op.differentiable and (
        self._requires_grad or any(isinstance(a, Tensor) and a._requires_grad for a in args))
    if (self._nograd_view is not None and self._base is not None and GradState.enabled
            and (grad_needed or self._base._requires_grad or any(isinstance(a, Tensor) and a._requires_grad
                                                                  for a in args))):
        # torch cannot rebase a write into a view made without history (or by a custom Function): refused,
        # before the leaf checks, as torch's check_inplace does.
        raise self._nograd_view.error()
    if self._base is not None and self._view_ver != self._ver_owner._ver:
        sync_view(self)
    if GradState.enabled and self._requires_grad:
        _check_inplace_allowed(op, self)
    if not grad_needed:
        if GradState.enabled and self._base is not None and self._base._requires_grad:
            _check_inplace_allowed(op, self)
        result = _run_kernel(op, (self,) + args, attrs)[0]
        if cast_check:
            _check_cast(op, result, self)
        self._data[...] = result
        self._bump_version()
        if GradState.enabled and not op.differentiable and self.grad_fn is not None:
            _detach_history_inplace(self)
        return self
    if self._base is not None:
        _check_inplace_allowed(op, self)
    first = self
    if _SAVED_HOOKS and (op.saves == "inputs" or op.saves == "both"):
        # The hooks pack what the row saves before the write below: they must get the old value, not ``self``.
        first = Tensor._make(self._data.copy())
        first.grad_fn, first._output_nr, first._requires_grad = self.grad_fn, self._output_nr, self._requires_grad
    result = eager(op, (first,) + args, attrs)
    if cast_check:
        _check_cast(op, result._data, self)
    node = result.grad_fn
    if node is not None and node._saved_in is not None and node._saved_in[0] is self:
        # The row saved ``self``, which is about to be overwritten: keep its old value instead.
        old = Tensor._make(self._data.copy())
        old.grad_fn, old._output_nr, old._requires_grad = self.grad_fn, self._output_nr, self._requires_grad
        node.save_inputs((old,) + node._saved_in[1:])
    self._data[...] = result._data
    self._bump_version()
    if node is not None and node._saved_out is not None:
        node.save_output((self,))
    if self._base is None:
        old_fn, self.grad_fn, self._output_nr, self._requires_grad = self.grad_fn, node, 0, True
        if self._retains_grad:
            from .ops.inplace_views import move_retain_grad

            move_retain_grad(self, old_fn)
    else:
        from .ops.inplace_views import rebase_view

        rebase_view(self, result)
    return self


_NO_ATTRS: dict = {}
# Tensor and its subclasses that take the fast paths as tensors (nn.Parameter registers itself here).
TENSOR_TYPES = {Tensor}

# The per-op shortcuts of the hottest calls (pointwise rows on float CPU arrays); split from here for size.
from ._dispatch_fast import fast_binary, fast_keep, fast_unary  # noqa: E402,F401
from . import _meta  # noqa: E402 - the meta device's kernels (it imports the op rows, which import this module)
