"""Small torch.* utilities: DLPack interop, legacy tensor types, threads, determinism flags.

>>> import numpy as np, jitorch
>>> jitorch.from_dlpack(np.arange(3.0))
tensor([0., 1., 2.], dtype=jitorch.float64)
>>> jitorch.LongTensor([1, 2]).dtype, isinstance(jitorch.zeros(2), jitorch.FloatTensor)
(jitorch.int64, True)
"""
from __future__ import annotations


import numpy as np

from . import _dtype
from ._printing import set_printoptions  # noqa: F401 - torch.set_printoptions
from ._tensor import Tensor
from .runtime import threads

__all__ = [
    "from_dlpack", "to_dlpack", "FloatTensor", "DoubleTensor", "HalfTensor", "BFloat16Tensor", "LongTensor",
    "IntTensor", "ShortTensor", "CharTensor", "ByteTensor", "BoolTensor", "get_num_threads", "set_num_threads",
    "get_num_interop_threads", "set_num_interop_threads", "set_printoptions", "use_deterministic_algorithms",
    "are_deterministic_algorithms_enabled", "set_float32_matmul_precision", "get_float32_matmul_precision",
    "is_nonzero", "is_same_size", "typename", "clear_autocast_cache",
]


def from_dlpack(ext_tensor):
    """Zero-copy import of any object with ``__dlpack__`` (NumPy, torch, CuPy arrays)."""
    if isinstance(ext_tensor, Tensor):
        return ext_tensor
    device_type, _ = ext_tensor.__dlpack_device__()
    if int(device_type) == 1:  # kDLCPU
        return Tensor._make(np.from_dlpack(ext_tensor))
    from .runtime import array_module_for

    return Tensor._make(array_module_for("cuda").from_dlpack(ext_tensor))


def to_dlpack(tensor):
    """A DLPack capsule sharing ``tensor``'s memory (``tensor.__dlpack__()``), for libraries that take capsules.

    >>> import jitorch, numpy as np
    >>> type(jitorch.to_dlpack(jitorch.arange(3))).__name__
    'PyCapsule'
    """
    if not isinstance(tensor, Tensor):
        raise TypeError(f"to_dlpack: expected a Tensor, got {type(tensor).__name__}")
    return tensor.detach().__dlpack__()   # as torch's: the capsule carries values, never history


class _LegacyTensorType(type):
    def __instancecheck__(cls, obj):
        return isinstance(obj, Tensor) and obj.dtype is cls._dtype and obj.is_cuda == cls.is_cuda

    def __call__(cls, *args, device=None):
        from . import _creation
        from ._tensor import Size

        if device is None and cls.is_cuda:
            device = "cuda"
        if not args:  # empty and 1-D, as torch.FloatTensor()
            return _creation.empty(0, dtype=cls._dtype, device=device)
        if len(args) == 1 and not isinstance(args[0], (int, Size)):  # FloatTensor(x.size()) is sizes, not data
            return _creation.tensor(args[0], dtype=cls._dtype, device=device)
        return _creation.empty(*args, dtype=cls._dtype, device=device)


def _legacy(name, dt, cuda=False):
    return _LegacyTensorType(name, (), {"_dtype": dt, "dtype": dt, "is_cuda": cuda,
                                        "__module__": "jitorch.cuda" if cuda else __name__,
                                        "__doc__": f"Legacy constructor for {dt} {'CUDA ' if cuda else ''}tensors."})


FloatTensor = _legacy("FloatTensor", _dtype.float32)
DoubleTensor = _legacy("DoubleTensor", _dtype.float64)
HalfTensor = _legacy("HalfTensor", _dtype.float16)
BFloat16Tensor = _legacy("BFloat16Tensor", _dtype.bfloat16)
LongTensor = _legacy("LongTensor", _dtype.int64)
IntTensor = _legacy("IntTensor", _dtype.int32)
ShortTensor = _legacy("ShortTensor", _dtype.int16)
CharTensor = _legacy("CharTensor", _dtype.int8)
ByteTensor = _legacy("ByteTensor", _dtype.uint8)
BoolTensor = _legacy("BoolTensor", _dtype.bool)
# torch.cuda.FloatTensor and the rest: their instances are CUDA tensors (exported by jitorch.cuda).
CUDA_LEGACY_TYPES = {t.__name__: _legacy(t.__name__, t._dtype, cuda=True) for t in (
    FloatTensor, DoubleTensor, HalfTensor, BFloat16Tensor, LongTensor, IntTensor, ShortTensor, CharTensor, ByteTensor,
    BoolTensor)}

def get_num_threads() -> int:
    """Threads jitorch's own kernels split across (``JITORCH_NUM_THREADS``, else the CPUs this process may run on).

    >>> get_num_threads() >= 1
    True
    """
    return threads.get_num_threads()


def set_num_threads(n: int) -> None:
    """Threads for jitorch's own kernels (and BLAS, through threadpoolctl when it is installed).

    >>> old = get_num_threads(); set_num_threads(2); get_num_threads()
    2
    >>> set_num_threads(old)
    """
    if int(n) < 1:
        raise ValueError(f"set_num_threads expects a positive integer, got {n}")
    threads.set_num_threads(int(n))
    try:
        from threadpoolctl import threadpool_limits

        threadpool_limits(int(n))
    except ImportError:
        pass


def get_num_interop_threads() -> int:
    return 1


def set_num_interop_threads(n: int) -> None:
    pass


_deterministic = [False]
_deterministic_warn_only = [False]
_fill_uninitialized = [True]  # `jitorch.utils.deterministic.fill_uninitialized_memory`
# Whether ``empty`` and its kin fill their memory (NaN, the largest integer, True), as torch's deterministic mode does:
# read by every uninitialized allocation, so kept as one flag.
FILL_EMPTY = [False]


def use_deterministic_algorithms(mode, *, warn_only=False):
    _deterministic[0] = bool(mode)
    _deterministic_warn_only[0] = bool(warn_only)
    FILL_EMPTY[0] = _deterministic[0] and _fill_uninitialized[0]


def set_fill_uninitialized_memory(mode):
    _fill_uninitialized[0] = bool(mode)
    FILL_EMPTY[0] = _deterministic[0] and _fill_uninitialized[0]


def are_deterministic_algorithms_enabled() -> bool:
    return _deterministic[0]


_matmul_precision = ["highest"]


def set_float32_matmul_precision(precision: str) -> None:
    if precision not in ("highest", "high", "medium"):
        raise RuntimeError(f"Invalid precision {precision!r}; expected 'highest', 'high' or 'medium'")
    _matmul_precision[0] = precision


def get_float32_matmul_precision() -> str:
    return _matmul_precision[0]


def is_nonzero(input) -> bool:
    return bool(input)


def is_same_size(input, other) -> bool:
    return input.shape == other.shape


def typename(obj) -> str:
    return obj.type() if isinstance(obj, Tensor) else type(obj).__name__


def clear_autocast_cache() -> None:
    pass
