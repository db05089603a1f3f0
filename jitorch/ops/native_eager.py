"""Eager CPU kernels that NumPy or SciPy run slowly, as generated LLVM kernels of the rows' own fusion expressions.

SciPy's float32 ``erf`` takes about 30 ns an element (exact GELU, ``nn.GELU()``'s default, is built on it); the
inline polynomial takes about 1. A row whose NumPy code takes several passes (the stable sigmoid: five; GELU's
backward: eight) is memory-bound on each of them, where one generated pass reads each input once. So a row's kernel
asks `pointwise` first, which compiles the row's ``Pointwise`` expression (the same string the fuser reads, so the
eager and the fused answer are one formula) and keeps its NumPy/SciPy code for everything this does not take:
other dtypes, device arrays, small, broadcast or non-contiguous inputs. Kernels are size-generic and come from the
disk cache once per row: the machine code takes the size as an argument, so every size runs the same kernel; large
inputs are split over jitorch's threads.

>>> import numpy as np
>>> from jitorch.ops.table import OPS
>>> x = np.linspace(-3, 3, 5000, dtype=np.float32)
>>> bool(np.abs(pointwise(OPS["erf"], x) - __import__("scipy").special.erf(x)).max() < 1e-6)
True
>>> pointwise(OPS["erf"], x[:10], min_size=256) is None  # below min_size: the caller's NumPy code
True
"""
from __future__ import annotations

import copy
import ctypes
from _thread import get_ident

import numpy as np

from ..codegen.ir import Buffer, Kernel, Store, load
from ..codegen.ir_params import LITERAL_CONSTANTS, arguments, bits
from ..codegen.llvm_compile import compile_kernel
from ..codegen.llvm_objcache import default_cache
from ..codegen.llvm_pool import shared_pool, trampoline_address, worth_splitting
from ..runtime import host_cache
from ..runtime.host_pointer import ARRAY_DATA_OFFSET, data_address
from ..runtime.threads import get_num_threads, on_change, parallel_for
from .native_call import int64

__all__ = ["pointwise", "pointwise_constants", "constants_checked", "native_from", "unary_launcher", "argument_roles",
           "expression_kernel", "launch", "launch_arrays", "memory_order", "dense_operands",
           "in_memory_order"]

on_change(shared_pool)  # programs read their pool from a cell that set_num_threads now repoints

# Below this SciPy/NumPy's loops are as fast as a kernel call (erf, GELU at 1000: 12 -> 4 us).
MIN_SIZE = 256
PARALLEL_MIN = 1 << 16  # elements below which no kernel is split (cheap ones wait for `llvm_pool.SPLIT_WORK`)
_GRAIN = 1 << 15
_GENERIC_SIZE = 1 << 20  # the size kernels are compiled for (over 1: a size-1 loop would be compiled as such)
_F32 = np.dtype(np.float32)
_kernels: dict = {}
# Below this many elements a kernel of `launch_arrays` runs through `_held_call`, keeping the GIL: a few microseconds.
HELD_MAX = 1 << 14
_ZERO = int64(0)  # a held call's range start
_HELD_THREADS_MAX = 64  # threads a kernel keeps a held call for
# Row name -> the size from which `pointwise` runs the row's kernel (`native_from`), where it is not MIN_SIZE.
_MIN_SIZES: dict = {}


def native_from(row, min_size):
    """Run ``row``'s expression natively from ``min_size`` elements, in `pointwise` and in `fast_unary`'s direct call
    (`unary_launcher`), which then skips the row's NumPy kernel. A row whose NumPy code is several passes (sigmoid:
    three, GELU: SciPy's erf and three more) is faster as one kernel call at every size: 1 (and one answer at every
    size: the native kernel's)."""
    _MIN_SIZES[row.name] = min_size
    return row


def _kernel_of(row, nargs):
    key = (row.name, nargs)
    kernel = _kernels.get(key)
    if kernel is None:
        # One kernel per row for every size: the machine code takes the size as an argument (`ir_params`), and
        # each call runs it over ``range(size)`` (the ``extent`` of `launch_arrays`).
        kernel = _kernels[key] = expression_kernel(row.fusion.expr, nargs)
    return kernel


def unary_launcher(row):
    """For `fast_unary`: a ``(x) -> out`` computing `pointwise(row, x)` for a float32 NumPy ``x`` (the caller checked)
    with the held call inline, or None from it where that does not apply (the row's kernel then decides); None for a
    row not given to `native_from`. The layers of the row's kernel (its checks, `pointwise`, `launch_arrays`) cost
    twice the kernel's own call on 32x32."""
    min_size = _MIN_SIZES.get(row.name)
    if min_size is None or ARRAY_DATA_OFFSET is None:
        return None
    kernel = None

    def run(x):
        nonlocal kernel
        size = x.size
        if size < min_size or size >= HELD_MAX or not x.flags.c_contiguous:
            return None
        if kernel is None:
            kernel = _kernel_of(row, 1)
        slots, ctx, fn, _ = _held_call(kernel, 2)
        out = np.empty(x.shape, _F32)
        slots[1] = id(x)
        slots[2] = id(out)
        fn(_ZERO, int64(size), ctx)
        return out
    return run


def expression_kernel(expr, nargs, dtype="f32", numbers=0):
    """The size-generic kernel (IR ``dtype``) writing fusion expression ``expr`` over inputs ``{0}``... into the
    buffer after them, compiled through the disk cache; run it with `launch_arrays`. The inputs are ``nargs``
    arrays, then ``numbers`` numbers, each read from a one-element array (stride 0): a new value costs no compile.

    >>> k = expression_kernel("{0} * {1} + 1.0", 2)
    >>> a, out = np.arange(4, dtype=np.float32), np.empty(4, np.float32)
    >>> launch_arrays(k, [a, a, out], 4, _GRAIN, 4); out.tolist()
    [1.0, 2.0, 5.0, 10.0]
    """
    from .._compile.expr import parse_expr  # the compiler package imports the op rows: load it on first use

    n = nargs + numbers
    value = parse_expr(expr, [load(i, dtype) for i in range(n)], dtype)
    buffers = (Buffer(dtype, (1,)),) * nargs + (Buffer(dtype, (0,)),) * numbers + (Buffer(dtype, (1,)),)
    return compile_kernel(Kernel((_GENERIC_SIZE,), buffers, (Store(n, value),)), cache=default_cache())


def pointwise(row, *arrays, min_size=None):
    """Row ``row``'s ``Pointwise`` expression over same-shape C-contiguous float32 NumPy arrays, as one native
    kernel, or None when this path does not apply (the caller computes it its own way). ``min_size``: the size from
    which the kernel call (about a microsecond) beats the row's NumPy code, which for a row of several passes (the
    fused backward rows) is a few elements; by default the row's `native_from`, else MIN_SIZE."""
    first = arrays[0]
    if type(first) is not np.ndarray or first.dtype is not _F32:
        return None
    size = first.size
    if size < (min_size if min_size is not None else _MIN_SIZES.get(row.name, MIN_SIZE)):
        return None
    shape = first.shape
    for a in arrays:
        if a is not first and (type(a) is not np.ndarray or a.dtype is not _F32 or a.shape != shape):
            return None
        if not a.flags.c_contiguous:
            return None
    return _launch_new(_kernels.get((row.name, len(arrays))) or _kernel_of(row, len(arrays)), arrays)


def _launch_new(kernel, arrays):
    """``kernel`` over same-shape float32 ``arrays`` (checked) into a new array of their shape."""
    first = arrays[0]
    shape = first.shape
    out = np.empty(shape, _F32) if first.nbytes < host_cache.THRESHOLD else host_cache.empty(shape, _F32)
    launch_arrays(kernel, [*arrays, out], first.size, _GRAIN, first.size)
    return out


_constant_templates: dict = {}  # (row, expression, inputs, literal constants) -> (kernel, argument roles) or None
_constant_kernels: dict = {}  # (template key, constants) -> the template's kernel with those argument values
_CONSTANT_KERNELS_MAX = 512  # kernels kept for distinct (row, constants) pairs; a full table starts over
# Sentinel values the templates are compiled with, which tell the constants' arguments apart (float32 numbers:
# the compiled kernel's values are the constants rounded to the expression's type).
_SENTINELS = tuple(float(2 ** 57 * (9 + i)) for i in range(8))


def pointwise_constants(row, arrays, constants, min_size=None, expr=None):
    """`pointwise` of a row whose expression also reads scalar parameters: ``{len(arrays)}``... are ``constants``,
    as float32 numbers (as ATen casts a Scalar to the tensor's type). The kernel is compiled once per row and
    expression, its constants run-time arguments (`ir_params`; a constant LLVM folds, such as 0 or 1, gets its
    own template), so a new value costs no compile: a clip range that changes every step stays fast. None where
    `pointwise` would be, or for a constant that is not a finite number (the caller's NumPy code handles those).
    ``expr``: another expression of the row's value (a form for some of its parameters: ``clamp`` with one bound),
    in place of the row's own.

    >>> from jitorch.ops.table import OPS
    >>> x = np.linspace(-2, 2, 1000, dtype=np.float32)
    >>> out = pointwise_constants(OPS["leaky_relu"], [x], (0.25,))
    >>> float(out[0]), float(out[-1])
    (-0.5, 2.0)
    """
    if not constants and expr is None:
        return pointwise(row, *arrays, min_size=min_size)
    first = arrays[0]
    if type(first) is not np.ndarray or first.dtype is not _F32 or \
            first.size < (min_size if min_size is not None else _MIN_SIZES.get(row.name, MIN_SIZE)):
        return None
    for c in constants:
        if type(c) is not float and type(c) is not int:  # bool/None/tensor params
            return None
    shape = first.shape
    for a in arrays:
        if type(a) is not np.ndarray or a.dtype is not _F32 or a.shape != shape or not a.flags.c_contiguous:
            return None
    return constants_checked(row, arrays, constants, expr)


def constants_checked(row, arrays, constants, expr=None):
    """`pointwise_constants` of arrays its caller checked (same-shape C-contiguous float32 NumPy arrays, not empty;
    numbers ``constants``): a row whose own fast path checked them skips the checks (lerp on 32x32: 1 us of 3)."""
    if not constants and expr is None:  # `pointwise`'s kernel
        return _launch_new(_kernels.get((row.name, len(arrays))) or _kernel_of(row, len(arrays)), arrays)
    # Keyed by the constants as given: equal numbers give one float32 value (an int equal to a float is exactly that
    # double), but for a zero's sign, which its repr adds to the key. Only finite constants are stored, so inf and
    # nan (nan equals nothing) miss and are refused below. (A miss costs a template copy, no compile.)
    key = (row.name, expr, len(arrays), constants) if 0.0 not in constants else \
        (row.name, expr, len(arrays), constants, tuple(map(repr, constants)))
    kernel = _constant_kernels.get(key)
    if kernel is None:
        for c in constants:
            if not abs(c) < float("inf"):  # inf, nan
                return None
        # An integer constant converts to float32 directly (as ATen's cast), not through a double's rounding.
        values = tuple(_int_as_float32(c) if type(c) is int else float(c) for c in constants)
        if len(_constant_kernels) >= _CONSTANT_KERNELS_MAX:
            _constant_kernels.clear()
        kernel = _constant_kernels[key] = _kernel_with(row, expr, len(arrays), values)
    return _launch_new(kernel, arrays)


def _int_as_float32(c):
    """An integer's float32 value as C's int64 -> float cast rounds it (NumPy's scalar goes through a double)."""
    if -2 ** 63 <= c < 2 ** 63:
        return float(np.array(c, np.int64).astype(np.float32))
    return float(np.float32(float(c)))


def _kernel_with(row, expr, n, values):
    """The kernel of ``row``'s expression over ``n`` inputs with ``values`` as its constants: its template's machine
    code with these argument values (a copy of the compiled kernel, whose cached call contexts hold values)."""
    literal = tuple(float.hex(v) if v in LITERAL_CONSTANTS else None for v in values)
    tkey = (row.name, expr, n, literal)
    template = _constant_templates.get(tkey, False)
    if template is False:
        if len(values) > len(_SENTINELS):
            template = None
        else:
            stand_ins = [v if lit is not None else _SENTINELS[i] for i, (v, lit) in enumerate(zip(values, literal))]
            compiled = _expression(row, expr, n, stand_ins)
            roles = argument_roles(compiled, _SENTINELS)
            found = {r for r in roles if r is not None}
            # Each sentinel must be one argument of its own (an expression folding it into another number is
            # compiled per value instead), and no other argument may come from one: ``-{1}`` (hardshrink's bound)
            # parses to a constant of its own, which would keep the sentinel's negation for every value.
            wanted = {i for i, lit in enumerate(literal) if lit is None}
            derived = any(r is None and type(v) is float and abs(v) >= _SENTINELS[0] / 4
                          for v, r in zip(compiled.values, roles))
            template = (compiled, roles) if found == wanted and roles.count(None) + len(found) == len(roles) \
                and all(roles.count(i) == 1 for i in found) and not derived else None
        _constant_templates[tkey] = template
    if template is None:
        return _expression(row, expr, n, values)
    compiled, roles = template
    kernel = copy.copy(compiled)
    for cached in ("_held_calls", "_pool_call"):  # (call contexts hold the values)
        kernel.__dict__.pop(cached, None)
    kernel.values = tuple(v if r is None else values[r] for v, r in zip(compiled.values, roles))
    return kernel


def argument_roles(compiled, sentinels):
    """For each run-time value of a compiled template (`llvm_compile.CompiledKernel.values`): the index of the
    sentinel it is (same type and value: a float constant 1009.0 is not the size 1009), or None.

    >>> from types import SimpleNamespace
    >>> argument_roles(SimpleNamespace(values=(1009, 7, 1009.0, 2.5)), (2.5, 1009))
    (1, None, None, 0)
    """
    return tuple(next((i for i, s in enumerate(sentinels) if type(v) is type(s) and v == s), None)
                 for v in compiled.values)


def _expression(row, expr, n, constants):
    # (``{dtype}``, a row's cast to its own type, stays for the parser: the kernel's type)
    text = (expr or row.fusion.expr).format(*(f"{{{i}}}" for i in range(n)), *(f"({c!r})" for c in constants),
                                            dtype="{dtype}")
    return expression_kernel(text, n)


def launch(kernel, addresses, numel, grain, extent=None):
    """Run a compiled kernel over its outer range (or ``range(extent)`` of it: kernels compiled for a span, such as the
    fused optimizers'), split over jitorch's threads when its work pays for the hand-off
    (`llvm_pool.worth_splitting`): through the native pool (`codegen.llvm_pool`) where the platform has it, else the
    Python pool."""
    threads = get_num_threads()
    n = kernel.outer if extent is None else extent
    if numel >= PARALLEL_MIN and threads > 1 and n > 1 and worth_splitting(kernel, numel):
        pool = shared_pool(threads)
        if pool is not None:
            pool.run_kernel(kernel, addresses, grain, extent=n)
        else:
            parallel_for(lambda start, stop: kernel(start, stop, *addresses), n, grain=grain)
    else:
        kernel(0, n, *addresses)


def launch_arrays(kernel, arrays, numel, grain, extent=None):
    """`launch` on the NumPy arrays themselves, one per kernel buffer, for kernels whose work is about ``numel``
    (pointwise and row kernels; ``extent`` as in `launch`): a short one runs through `_held_call`, its trampoline
    reading the data pointers from the array objects (``id(a)``, a builtin, where `data_address` is a Python call
    each)."""
    if numel < HELD_MAX and ARRAY_DATA_OFFSET is not None:
        slots, ctx, fn, nbuf = _held_call(kernel, len(arrays))
        i = 1
        for a in arrays:  # through a memoryview: a ctypes array's own item assignment costs 0.25 us each
            slots[i] = id(a)
            i += 1
        fn(_ZERO, int64(kernel.outer if extent is None else extent), ctx)
    else:
        launch(kernel, [data_address(a) for a in arrays], numel, grain, extent)


_trampolines: dict = {}


def _held_call(kernel, nbuf):
    """This thread's (ctx as int64 slots, the ctx array, trampoline, buffer count), made on first use: the kernel
    called through its signature's pool trampoline (`llvm_pool.emit_trampoline`) with every argument in one int64
    array, filled once but for the arrays' ``id``. A ctypes call costs about 0.13 us an argument: a row kernel's 14
    (range, buffers, sizes, floats) took 3 us, the trampoline's 3 take 0.7; declared without argument types and
    called with ctypes objects (`native_call`: the range as `int64`, the ctx array itself), 0.5. Each thread fills
    its own array (``kernel._held_calls``, by thread id): a thread switch between the writes of the ``id`` slots and
    the call let another thread's call overwrite them, and a kernel ran on a dead array (a segfault with two
    threads). The call keeps the GIL (PYFUNCTYPE); only short kernels come here (`HELD_MAX`)."""
    calls = kernel.__dict__.get("_held_calls")
    if calls is not None:
        call = calls.get(get_ident())
        if call is not None and call[3] == nbuf:
            return call
    types = ("array",) * nbuf + tuple(arguments(kernel.kernel))
    fn = _trampolines.get(types)
    if fn is None:
        address = trampoline_address(types, default_cache(), ARRAY_DATA_OFFSET)
        fn = _trampolines[types] = ctypes.PYFUNCTYPE(None)(address)  # f(int64 start, int64 stop, ctx)
    ctx = (ctypes.c_int64 * (1 + len(types)))(kernel.address, *[0] * nbuf,
                                               *[bits(v, ty) for v, ty in zip(kernel.values, types[nbuf:])])
    # ``ctx`` stays alive through the memoryview's hold on its buffer.
    call = (memoryview(ctx).cast("B").cast("q"), ctx, fn, nbuf)
    if calls is None or len(calls) >= _HELD_THREADS_MAX:  # (a dead thread's entry goes with the others)
        calls = kernel._held_calls = {}
    calls[get_ident()] = call
    return call


def memory_order(a):
    """The axes of ``a`` from outermost to innermost in memory (largest stride first; ties keep the axes' order), or
    None when that is the C order: an elementwise result laid out in it keeps ``a``'s layout, as ATen's does.

    >>> memory_order(np.zeros((3, 4)).T), memory_order(np.zeros((3, 4)))
    ([1, 0], None)
    """
    if a.ndim < 2 or a.flags.c_contiguous:
        return None
    order = sorted(range(a.ndim), key=lambda d: -abs(a.strides[d]))
    return None if order == list(range(a.ndim)) else order


def dense_operands(arrays):
    """Same-shape C-contiguous copies of ``arrays`` (broadcast, transposed or sliced ones; a C-contiguous one as it
    is) laid out in the memory order of the first one that has the result's shape and no stride 0 (the layout ATen's
    result keeps; the C order where none has), and the axes that put a result back into that layout (None: the C
    order).

    >>> (dense,), back = dense_operands([np.ones((2, 3)).T])
    >>> dense.flags.c_contiguous, back.tolist()
    (True, [1, 0])
    """
    shape = arrays[0].shape
    dense = True
    for a in arrays:
        if a.shape != shape:
            shape = np.broadcast_shapes(*(a.shape for a in arrays))
            dense = False
            break
        dense = dense and a.flags.c_contiguous
    if dense:  # the common case, without the layout's few microseconds
        return arrays, None
    axes = None
    for a in arrays:
        if a.shape == shape and 0 not in a.strides:
            axes = memory_order(a)
            break
    views = [a if a.shape == shape else np.broadcast_to(a, shape) for a in arrays]
    if axes is None:
        return [np.ascontiguousarray(v) for v in views], None
    return [np.ascontiguousarray(v.transpose(axes)) for v in views], np.argsort(axes)


def in_memory_order(fn, arrays):
    """``fn`` of `dense_operands`' copies of ``arrays`` (C-contiguous arrays in, a new C-ordered array or None out),
    its result put back into their layout (a transposed or channels_last input gives a transposed or channels_last
    result, as torch's; a later ``.view`` relies on it).

    >>> out = in_memory_order(lambda arrays: arrays[0] * 2, [np.ones((2, 3)).T])
    >>> out.strides == np.ones((2, 3)).T.strides
    True
    """
    dense, back = dense_operands(arrays)
    out = fn(dense)
    return out if back is None or out is None else out.transpose(back)
