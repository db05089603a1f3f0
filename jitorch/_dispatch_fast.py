"""The dispatcher's fast paths: ``fast_binary``/``fast_unary`` wrap a pointwise row as a ``(a, b) -> Tensor`` that
skips promotion and device checks for same-dtype float CPU tensors (or a Python number) and records the autograd node
inline; anything else goes to `jitorch._dispatch.eager`, or to the innermost mode. ``fast_keep`` is `eager`'s own
shortcut for the rows that keep their inputs' dtypes (the fused nn rows, linear) on CPU tensors. ``plain_arrays`` is
the backward formulas' shortcut: their arrays, when nothing records the formula's ops.

>>> import jitorch
>>> from jitorch.ops.table import OPS
>>> fast_binary(OPS["mul"])(jitorch.tensor([1.0, 2.0]), 3)
tensor([3., 6.])
"""
from __future__ import annotations

import numpy as np

from . import _dispatch as _d  # ``_d.CPU_XP`` is read through the module: tests swap in a CuPy-surface NumPy there
from . import _dtype
from ._dispatch import MODES, _NO_ATTRS, TENSOR_TYPES, _new, _only_saved, _raise_broadcast_error, eager, record, \
    sync_view
from ._dispatch import _cast_array
from ._tensor import Tensor
from .autograd.grad_mode import GradState
from .autograd.graph import _SAVED_HOOKS, _record as _record_in_region, _recording as _RECORDING
from .ops import bf16_unary, half_cast
from .ops.native_broadcast import MIN_SIZE as _BROADCAST_MIN, ROWS as BROADCAST_ROWS, broadcast_binary
from .runtime.host_cache import THRESHOLD as _HOST_MIN
from .runtime.host_cache import empty as _host_empty
from .ops.first_layout import in_first_layout

__all__ = ["fast_binary", "fast_unary", "fast_keep", "keep_result", "nothing_records", "plain_arrays", "plain_tensor",
           "plain_binary"]

# Eager overhead is what users feel on small tensors, so the hottest case (floating NumPy arrays of one dtype, or a
# Python number) skips promotion and device checks and calls the row's kernel directly. Anything else takes ``eager``.
_ndarray = np.ndarray
# Pairs torch refuses (a limited unsigned type with another integer) are absent: x is floating here, so never asked.
_PROMOTE_NP = {(a.np, b.np): c.np for (a, b), c in _dtype._PROMOTE.items() if c is not None}
_SCALARS = (float, int)
_OPERANDS = (Tensor, int, float, complex, np.generic, np.ndarray)  # what an operator's other operand may be


_F32 = np.dtype(np.float32)
_IN_FLOAT32 = {"dtype": np.float32, "casting": "unsafe"}  # a ufunc computing in float32, rounded into out


def _edge_inline(a):
    if not a._requires_grad:
        return None
    fn = a.grad_fn
    return (fn, a._output_nr) if fn is not None else (a, 0)


def _record_pointwise(op, args, t):
    """``record`` for a pointwise op whose inputs already have the output's shape and dtype (no meta needed)."""
    edges = []
    for a in args:
        if type(a) in TENSOR_TYPES and a._requires_grad:
            fn = a.grad_fn
            edges.append((fn, a._output_nr) if fn is not None else (a, 0))
        else:
            edges.append(None)
    # Node.__init__, inline: a class call with an __init__ costs more than the node's two fields.
    node = _new(op.node_cls)
    node.next = tuple(edges)
    node.attrs = _NO_ATTRS
    if _RECORDING:
        _record_in_region(node)
    saves = op.saves
    if saves is not None:
        if saves != "outputs":
            node.save_inputs(args if op.save_if is None else _only_saved(op, args, edges))
        if saves != "inputs":
            if _SAVED_HOOKS:
                node.save_output((t,))  # the hooks pack it
            else:
                # ``t`` was just created: it owns its memory and is at version 0.
                counter = t._vc = [0]
                node._saved_out = ((t._data, counter, 0),)
    t.grad_fn = node
    t._requires_grad = True


def fast_binary(op, reflected=False, operator=False, array_fn=None):
    """A ``(a, b) -> Tensor`` for a pointwise row: ``apply`` with a shortcut for same-dtype float CPU tensors.
    ``operator``: the ``__add__``-style method, which gives NotImplemented for an operand no op takes (None, a list),
    so Python raises its TypeError as for torch's tensors. ``array_fn``: what the shortcut calls on NumPy arrays in
    place of the row's ufunc, for a caller that knows its operands (``x ** 2`` as ``x * x``: NumPy's ``power`` runs
    a ``powf`` loop, 4x slower)."""
    kernel = op.kernel if op.promotion != "integral" else None
    # The row's NumPy ufunc, called directly: for float inputs it is exactly the kernel, one Python frame cheaper.
    ufunc = array_fn if array_fn is not None else getattr(np, op.ufunc) if op.ufunc else None
    differentiable = op.differentiable
    promotion = op.promotion
    saves, node_cls = op.saves, op.node_cls
    half_scalar_opmath = getattr(op.kernel, "half_scalar_opmath", False)
    broadcast_rows = op.name in BROADCAST_ROWS and array_fn is None
    half_in_float32 = ufunc in half_cast.EXACT_IN_FLOAT32  # float16 operands: widened and narrowed natively

    def run(a, b):
        if reflected:
            a, b = b, a
        if kernel is not None and not MODES:
            x = a._data if type(a) in TENSOR_TYPES else None
            if x is not None and type(x) is _ndarray and x.dtype.kind == "f":
                tb = type(b)
                if tb in TENSOR_TYPES:
                    tb = Tensor
                    y = b._data
                    ok = type(y) is _ndarray
                    if ok and y.dtype != x.dtype:
                        # Mixed dtypes of two dimensioned arrays (a float grad times a bool mask, say): the
                        # plain promotion table applies; 0-d operands need result_type's category rules.
                        ok = x.ndim > 0 and y.ndim > 0 and promotion != "keep"
                        if ok:
                            common = _PROMOTE_NP[x.dtype, y.dtype]
                            # a complex result goes through the kernel, which rejects what torch has no kernel for
                            ok = common.kind != "c"
                        if ok:
                            if promotion == "float" and common.kind not in "fc":
                                common = _dtype.get_default_dtype().np
                            if x.dtype != common:
                                x = _cast_array(x, common) if 0 in x.strides else x.astype(common)
                            if y.dtype != common:
                                y = _cast_array(y, common) if 0 in y.strides else y.astype(common)
                else:
                    y = b
                    ok = tb in _SCALARS
                if ok:
                    if a._base is not None and a._view_ver != a._ver_owner._ver:
                        sync_view(a)
                    if tb is Tensor and b._base is not None and b._view_ver != b._ver_owner._ver:
                        sync_view(b)
                    # float16 times or over a scalar computes in float32 (the row's kernel says how).
                    opmath = half_scalar_opmath and tb is not Tensor and x.itemsize == 2
                    try:
                        if ufunc is None or _d.CPU_XP is not np:
                            out = kernel(_d.CPU_XP, x, y)
                        elif broadcast_rows and tb is Tensor and x.shape != y.shape and (
                                x.size >= _BROADCAST_MIN or y.size >= _BROADCAST_MIN) and (
                                native := broadcast_binary(op, x, y)) is not None:
                            out = native  # a row, column or outer broadcast: NumPy's stride-0 loops are slow
                        elif half_in_float32 and x.itemsize == 2 and (
                                half := half_cast.binary(ufunc, x, y, opmath)) is not None:
                            out = half  # NumPy converts float16 in software, an element at a time
                        elif x.nbytes >= _HOST_MIN and x.flags.c_contiguous and (
                                tb is not Tensor or y.shape == x.shape[x.ndim - y.ndim:]):
                            # A large output into a cached buffer whose pages are already mapped (host_cache).
                            # Same dtype as x: one float dtype, or a weak Python scalar; y has x's shape or
                            # broadcasts along leading dims (a bias), so the result has x's shape and layout.
                            out = ufunc(x, y, out=_host_empty(x.shape, x.dtype), **(_IN_FLOAT32 if opmath else {}))
                        elif tb is Tensor and not x.flags.c_contiguous and x.ndim > 1 and x.shape == y.shape and \
                                x.strides != y.strides and (first := in_first_layout(ufunc, x, y)) is not None:
                            out = first  # two layouts: the result takes the first operand's, as torch's
                        else:
                            out = kernel(_d.CPU_XP, x, y) if opmath else ufunc(x, y)
                    except ValueError as e:
                        _raise_broadcast_error(op, (x, y), e)
                        raise
                    if type(out) is not _ndarray:
                        out = np.asarray(out)
                    t = _new(Tensor)
                    t._data = out
                    if GradState.inference:
                        t._inference = True
                    if GradState.enabled and differentiable and (a._requires_grad or (tb is Tensor and
                                                                                      b._requires_grad)):
                        if tb is Tensor and (x.shape != y.shape or a._data.dtype != b._data.dtype):
                            record(op, (a, b), {}, (t,))
                        elif saves is None:
                            # The hottest autograd case (add/sub of same-shape tensors): the node inline.
                            node = _new(node_cls)
                            node.next = (_edge_inline(a), _edge_inline(b) if tb is Tensor else None)
                            node.attrs = _NO_ATTRS
                            t.grad_fn = node
                            t._requires_grad = True
                        else:
                            _record_pointwise(op, (a, b), t)
                    return t
        if operator and not isinstance(a if reflected else b, _OPERANDS):
            return NotImplemented
        return eager(op, (a, b), {}) if not MODES else MODES[-1].dispatch(op, (a, b), {})
    run.__name__ = op.name
    return run


def fast_unary(op):
    """A ``(a) -> Tensor`` for a pointwise row with the same float shortcut; a row computed natively on float32
    (`native_eager.native_from`) calls its kernel directly for the sizes one held call takes."""
    from .ops.native_eager import unary_launcher  # (the op modules import this one)

    kernel = op.kernel if op.promotion != "integral" else None
    ufunc = getattr(np, op.ufunc) if op.ufunc else None
    differentiable = op.differentiable
    native = unary_launcher(op)
    halves = op.name in bf16_unary.ROWS  # bfloat16/float16 inputs: one native pass (`bf16_unary`) where it applies

    def run(a):
        if kernel is not None and not MODES and type(a) in TENSOR_TYPES:
            x = a._data
            if type(x) is _ndarray and (x.dtype.kind == "f" or halves and x.dtype is bf16_unary.BF16):
                if a._base is not None and a._view_ver != a._ver_owner._ver:
                    sync_view(a)
                if native is not None and x.dtype is _F32 and (out := native(x)) is not None:
                    pass  # what the row's kernel computes for it (`native_eager.pointwise`), one call
                elif halves and x.itemsize == 2 and (out := bf16_unary.pointwise(op, x)) is not None:
                    pass  # widened as it loads, rounded once
                elif x.dtype.kind != "f":
                    out = kernel(_d.CPU_XP, x)  # (bfloat16 the native pass declined)
                elif ufunc is None or _d.CPU_XP is not np:
                    out = kernel(_d.CPU_XP, x)
                elif x.nbytes >= _HOST_MIN and x.flags.c_contiguous:
                    out = ufunc(x, out=_host_empty(x.shape, x.dtype))  # see fast_binary
                else:
                    out = ufunc(x)
                if type(out) is not _ndarray:
                    out = np.asarray(out)
                t = _new(Tensor)
                t._data = out
                if GradState.inference:
                    t._inference = True
                if GradState.enabled and differentiable and a._requires_grad:
                    _record_pointwise(op, (a,), t)
                return t
        return eager(op, (a,), {}) if not MODES else MODES[-1].dispatch(op, (a,), {})
    run.__name__ = op.name
    return run


def fast_keep(op, args, attrs):
    """`eager` for a row with ``promotion="keep"`` whose arguments are CPU tensors, Nones and Python floats (a
    row's parameters), or None where the general path is needed (other scalars, device arrays, views). Nothing to
    promote and one device, so the row's kernel gets the arrays as they are; F.layer_norm on 8x32 spent as long in
    the general path's checks as in its kernel. A row refusing complex inputs raises its error here, as
    `_run_kernel` would (``max(dim)`` and the other ordering rows came this way)."""
    if op.view:
        return None
    datas = []
    grad = seen = False
    for a in args:
        if a is None or type(a) is float:  # (a row's number parameter: nothing to promote either)
            datas.append(a)
            continue
        if type(a) not in TENSOR_TYPES or type(a._data) is not _ndarray:
            return None
        if a._base is not None and a._view_ver != a._ver_owner._ver:
            sync_view(a)
        grad = grad or a._requires_grad
        seen = True
        datas.append(a._data)
    if not seen:  # the general path names the op in its error
        return None
    if op.complex_error is not None:
        for d in datas:
            if d is not None and type(d) is not float and d.dtype.kind == "c":
                raise op.complex_error(d.dtype.name)
    try:
        out = op.kernel(_d.CPU_XP, *datas, **attrs)
    except ValueError as e:
        _raise_broadcast_error(op, datas, e)
        raise
    if op.nout == 1:
        return keep_result(op, args, attrs, out if type(out) is _ndarray else np.asarray(out), grad)
    inference = GradState.inference
    outs = []
    for o in out:
        if type(o) is not _ndarray:
            o = np.asarray(o)
        t = _new(Tensor)
        t._data = o
        if inference:
            t._inference = True
        outs.append(t)
    if grad and GradState.enabled and op.differentiable:
        record(op, args, attrs, outs)
    return tuple(outs)


def keep_result(op, args, attrs, out, grad):
    """The Tensor of a one-output row's array ``out`` (computed from ``args`` by `fast_keep` or F.linear's shortcut,
    their views synced), marked in inference mode, with its autograd node when ``grad`` (an input requires one)."""
    t = _new(Tensor)
    t._data = out
    if GradState.inference:
        t._inference = True
    if grad and GradState.enabled and op.differentiable:
        record(op, args, attrs, (t,))
    return t


def nothing_records():
    """Whether ops run now would leave no trace to keep: grad mode off (in the engine: no ``create_graph``), no
    inference mode to mark their outputs, no mode (a tracer) to see them, and kernels on plain NumPy. The condition
    of every shortcut that computes a backward's result on the arrays directly (`plain_arrays`, the sum gradient's
    ``_plain_filled``)."""
    return not (GradState.enabled or MODES or GradState.inference) and _d.CPU_XP is np


def plain_arrays(*tensors):
    """The NumPy arrays of ``tensors`` when a backward formula may compute its gradient on them directly, else None.

    Only while `nothing_records`, so the result needs no history, and only for host float arrays of one dtype and
    shape with at least one dimension, where a ufunc gives exactly what the ops' own shortcut above would (the
    formula's jitorch ops then cost about 2 us each in dispatch, the arithmetic well under 1 on a thousand
    elements)."""
    if not nothing_records():
        return None
    t = tensors[0]
    first = t._data if type(t) in TENSOR_TYPES else None
    if type(first) is not _ndarray or first.dtype.kind != "f" or not first.ndim:
        return None
    dtype, shape = first.dtype, first.shape
    arrays = [first]
    for t in tensors[1:]:
        if type(t) not in TENSOR_TYPES:
            return None
        x = t._data
        if type(x) is not _ndarray or x.dtype is not dtype or x.shape != shape:
            return None
        arrays.append(x)
    return arrays


def plain_tensor(out):
    """A result of a `plain_arrays` computation as a tensor (no history: nothing records)."""
    t = _new(Tensor)
    t._data = out
    return t


def plain_binary(ufunc, g, other):
    """``ufunc(g, other)`` straight on the arrays in a first-order backward (`plain_arrays`; ``other`` a tensor of
    g's shape or a Python number), else None. A number with a half-precision gradient goes through the row, which
    computes such products in float32."""
    if type(other) in TENSOR_TYPES:
        arrays = plain_arrays(g, other)
    elif type(other) is float or type(other) is int:
        arrays = plain_arrays(g)
        if arrays is None or arrays[0].itemsize == 2:
            return None
        arrays.append(other)
    else:
        return None
    return None if arrays is None else plain_tensor(ufunc(*arrays))

