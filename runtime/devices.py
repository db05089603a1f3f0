"""Which array module backs a device, and which device an array lives on.

CPU arrays are NumPy arrays; CUDA arrays are CuPy arrays. CuPy is imported lazily so the CPU path never pays for it.
"""
from __future__ import annotations

import numpy as np

from .meta import META_MODULE, NO_DATA, MetaArray, as_meta

_cupy = None
_cupy_checked = False


def _load_cupy():
    global _cupy, _cupy_checked
    if not _cupy_checked:
        _cupy_checked = True
        try:
            import cupy

            _cupy = cupy if cupy.cuda.runtime.getDeviceCount() > 0 else None
        except Exception:  # no CuPy, no driver or no device: CUDA is simply unavailable
            _cupy = None
        if _cupy is not None:
            _install_allocator()
    return _cupy


def cuda_version():
    """The CUDA runtime version CuPy runs on, as ``torch.version.cuda`` spells it (``"13.0"``), or None without a
    usable device (torch's CPU builds say None)."""
    cupy = _load_cupy()
    if cupy is None:
        return None
    number = cupy.cuda.runtime.runtimeGetVersion()
    return f"{number // 1000}.{number % 1000 // 10}"


def _install_allocator():
    """Make CuPy allocate through jitorch's caching allocator, unless ``JITORCH_ALLOC_CONF`` says ``backend:cupy``."""
    from .alloc_config import AllocatorConfig
    from .cuda_memory import install

    if AllocatorConfig.from_env().backend == "native":
        install()


def is_cupy(xp) -> bool:
    """Whether ``xp`` is CuPy (anything else handed to kernels is NumPy or a NumPy stand-in)."""
    return getattr(xp, "__name__", "") == "cupy"


def cuda_available() -> bool:
    return _load_cupy() is not None


def device_count() -> int:
    cp = _load_cupy()
    return cp.cuda.runtime.getDeviceCount() if cp is not None else 0


class CudaUnavailableError(RuntimeError, AssertionError):
    """No usable CUDA device. CPU-only PyTorch raises an AssertionError here (``x.cuda()``, ``model.to("cuda")``),
    which scripts catch to fall back to the CPU; it is a RuntimeError too, as jitorch raised before."""


def array_module_for(device_type: str):
    """The array module (numpy or cupy) whose functions run on ``device_type``."""
    if device_type == "cpu":
        return np
    if device_type == "meta":
        return META_MODULE
    if device_type == "cuda":
        cp = _load_cupy()
        if cp is None:
            raise CudaUnavailableError(
                "Torch not compiled with CUDA enabled: jitorch found no usable CUDA device "
                "(install the 'cuda' extra and run on a machine with an NVIDIA GPU)"
            )
        return cp
    raise RuntimeError(f"unsupported device type {device_type!r}; expected 'cpu' or 'cuda'")


def is_cpu_array(arr) -> bool:
    return type(arr) is np.ndarray


def array_device(arr) -> tuple[str, int | None]:
    """(device type, index) of an array."""
    if type(arr) is np.ndarray:
        return ("cpu", None)
    if type(arr) is MetaArray:
        return ("meta", None)
    return ("cuda", int(arr.device.id))


def special_module(xp):
    """``scipy.special`` for NumPy arrays, ``cupyx.scipy.special`` for CuPy arrays (erf, erfinv, gammaln...)."""
    if not is_cupy(xp):
        import scipy.special

        return scipy.special
    import cupyx.scipy.special

    return cupyx.scipy.special


def fft_module(xp):
    """``scipy.fft`` for NumPy arrays, ``cupyx.scipy.fft`` for CuPy arrays: the same ``fftn``/``rfftn``/``irfftn``
    signatures over both. SciPy rather than ``numpy.fft``: it keeps float32 in single precision on every NumPy version
    and its complex transforms run several times faster."""
    if not is_cupy(xp):
        import scipy.fft

        return scipy.fft
    import cupyx.scipy.fft

    return cupyx.scipy.fft


def scatter_add(xp, out, index, values):
    """``out[index] += values`` with repeated indices accumulated (NumPy's ``add.at``, or its faster exact forms in
    `host_scatter`; CuPy's ``scatter_add``)."""
    if not is_cupy(xp):
        from .host_scatter import add_at

        add_at(out, index, values)
    else:
        import cupyx

        cupyx.scatter_add(out, index, values)


def ufunc_at(xp, name, out, index, values) -> bool:
    """``out[index] = <name>(out[index], values)`` with repeated positions combined (NumPy's ``ufunc.at``).

    Returns False, leaving ``out`` untouched, for CuPy: its ``ufunc.at`` exists only for the ufuncs backed by a scatter
    kernel (and not for every dtype), so callers combine repeated positions themselves there.
    """
    if is_cupy(xp):
        return False
    getattr(np, name).at(out, index, values)
    return True


def accumulate(xp, name, a, axis):
    """Inclusive scan of the binary ufunc ``name`` along ``axis`` (NumPy's ``ufunc.accumulate``), or None for CuPy,
    whose ``ufunc.accumulate`` covers only add and multiply: callers scan with plain elementwise calls there."""
    if is_cupy(xp):
        return None
    return getattr(np, name).accumulate(a, axis=axis)


def memory_owner(arr):
    """The array that owns ``arr``'s memory: views, reshapes and slices of one array share its owner (NumPy or CuPy).

    >>> import numpy as np
    >>> a = np.zeros((2, 3))
    >>> memory_owner(a.T[1:]) is a
    True
    """
    while True:
        base = getattr(arr, "base", None)
        if base is None or not hasattr(base, "dtype"):
            return arr
        arr = base


def strided_view(xp, arr, shape, strides, offset=0):
    """A writable view of ``arr``'s memory with element ``strides``, starting ``offset`` elements after ``arr[0...]``.

    The view is checked against the bounds of the memory that owns ``arr``: a bad geometry raises, never reads
    outside the allocation.
    """
    item = arr.itemsize
    shape, byte_strides = tuple(int(s) for s in shape), tuple(int(s) * item for s in strides)
    if any(s < 0 for s in shape):
        raise RuntimeError(f"as_strided: negative size in {shape}")
    if not is_cupy(xp):
        owner = memory_owner(arr)
        start = arr.__array_interface__["data"][0] - owner.__array_interface__["data"][0] + offset * item
        if not owner.flags.c_contiguous:
            # NumPy keeps the input's layout in results (conj of a transposed array is a dense block in permuted
            # order): the permutation that is C-contiguous spans the same memory, from the same first byte.
            dense = owner.transpose(sorted(range(owner.ndim), key=lambda d: -owner.strides[d]))
            if dense.flags.c_contiguous and min(owner.strides, default=0) >= 0:
                owner = dense
            else:
                owner = arr  # an externally created strided array: stay within its own span
                start = offset * item
        try:
            return np.ndarray(shape, arr.dtype, buffer=owner.reshape(-1).view(np.uint8) if owner.size else owner,
                              offset=start, strides=byte_strides)
        except (TypeError, ValueError) as e:
            raise RuntimeError(f"as_strided: size {list(shape)}, stride {list(strides)} and offset {offset} reach "
                               f"outside the tensor's storage ({e})") from None
    mem = arr.data
    lo = offset * item + sum((n - 1) * s for n, s in zip(shape, byte_strides) if n > 0 and s < 0)
    hi = offset * item + sum((n - 1) * s for n, s in zip(shape, byte_strides) if n > 0 and s > 0) + item
    base_off = mem.ptr - mem.mem.ptr
    if any(n == 0 for n in shape):
        lo = hi = 0
    if base_off + lo < 0 or base_off + hi > mem.mem.size:
        raise RuntimeError(f"as_strided: size {list(shape)}, stride {list(strides)} and offset {offset} reach outside "
                           "the tensor's storage")
    return xp.ndarray(shape, arr.dtype, memptr=mem + offset * item, strides=byte_strides)


def move_array(arr, device_type, index=None):
    """A copy of ``arr`` on ``device_type`` (the same array when it already lives there)."""
    if device_type == "cpu":
        return arr if type(arr) is np.ndarray else arr.get()
    if device_type == "meta" or type(arr) is MetaArray:
        if device_type != "meta":
            raise NotImplementedError(NO_DATA)
        return as_meta(arr)
    cp = array_module_for(device_type)  # "meta" and others: the unsupported-device error, not a CUDA one
    with cp.cuda.Device(index or 0):
        if type(arr) is not np.ndarray and arr.device.id == (index or 0):
            return arr
        return cp.asarray(arr)


def compute_capability(index: int = 0) -> tuple[int, int]:
    """(major, minor) compute capability of CUDA device ``index``, e.g. ``(9, 0)`` on an H100/H200: the SM arch
    generated code is compiled for (``sm_90``)."""
    cp = array_module_for("cuda")
    return _device_facts(cp, index)[:2]


def multiprocessor_count(index: int = 0) -> int:
    """The number of SMs of CUDA device ``index`` (132 on an H200): what launch grids are sized by."""
    cp = array_module_for("cuda")
    return _device_facts(cp, index)[2]


_FACTS: dict[int, tuple[int, int, int]] = {}


def _device_facts(cp, index):
    if index not in _FACTS:  # device properties never change while the process runs; the query is slow
        props = cp.cuda.runtime.getDeviceProperties(index)
        _FACTS[index] = (int(props["major"]), int(props["minor"]), int(props["multiProcessorCount"]))
    return _FACTS[index]
