"""``jitorch.amp.autocast``: the autocast context manager/decorator and its per-device state.

jitorch keeps the same autocast state torch does (enabled flag and dtype per device type, nesting, cache flag), so
``is_autocast_enabled``/``get_autocast_dtype`` read the same inside and outside a region. An enabled region pushes a
dispatcher mode (``_cast_mode.AutocastMode``) that casts as PyTorch does: matmul-family ops run in the autocast dtype,
a listed set (losses, ``linalg`` decompositions) in float32, the rest by ordinary promotion.

>>> import jitorch
>>> import jitorch.amp
>>> with jitorch.amp.autocast("cpu"):
...     jitorch.amp.autocast_mode.is_autocast_enabled("cpu"), jitorch.amp.autocast_mode.get_autocast_dtype("cpu")
(True, jitorch.bfloat16)
>>> jitorch.amp.autocast_mode.is_autocast_enabled("cpu")
False
"""
from __future__ import annotations

import functools
import threading
import warnings

from .._dispatch import MODES, push_mode

__all__ = ["autocast", "is_autocast_available", "is_autocast_enabled", "set_autocast_enabled", "get_autocast_dtype",
           "set_autocast_dtype", "is_autocast_cache_enabled", "set_autocast_cache_enabled", "clear_autocast_cache",
           "autocast_increment_nesting", "autocast_decrement_nesting", "get_autocast_cpu_dtype",
           "get_autocast_gpu_dtype", "is_autocast_cpu_enabled", "custom_fwd", "custom_bwd"]

# Device types torch accepts for autocast, and the device strings it parses at all (others are a device error).
_AUTOCAST_DEVICES = ("cpu", "cuda", "xpu", "ipu", "hpu", "xla", "mps", "mtia", "maia", "privateuseone")
_KNOWN_DEVICES = ("cpu", "cuda", "ipu", "xpu", "mkldnn", "opengl", "opencl", "ideep", "hip", "ve", "fpga", "maia",
                  "xla", "lazy", "vulkan", "mps", "meta", "hpu", "mtia", "privateuseone")


class _State(threading.local):
    """Autocast state is thread-local in torch (DataParallel threads start with autocast off)."""

    def __init__(self):
        self.enabled = {}
        self.dtype = {}
        self.nesting = 0
        self.cache_enabled = True
        self.manual_modes = {}  # device type -> the AutocastMode set_autocast_enabled(device, True) pushed


_state = _State()


def _default_dtype(device_type):
    from .. import _dtype

    return _dtype.bfloat16 if device_type in ("cpu", "mps", "xpu", "hpu", "xla", "mtia", "maia") else _dtype.float16


def _check_device(device_type):
    if device_type.split(":")[0] not in _KNOWN_DEVICES:
        raise RuntimeError(f"Expected one of {', '.join(_KNOWN_DEVICES)} device type at start of device string: "
                           f"{device_type}")


def is_autocast_available(device_type: str) -> bool:
    """Whether autocast can be used for ``device_type`` (``"cpu"`` and ``"cuda"`` yes, ``"meta"`` no)."""
    _check_device(device_type)
    return device_type in _AUTOCAST_DEVICES


def is_autocast_enabled(device_type: str | None = None) -> bool:
    """Whether autocast is on for ``device_type``; with no argument torch means CUDA."""
    return _state.enabled.get("cuda" if device_type is None else device_type, False)


def set_autocast_enabled(device_type, enabled=None) -> None:
    """``set_autocast_enabled(device_type, enabled)``; the one-argument form sets CUDA, as in torch.

    Scripts also call it instead of entering ``autocast`` (``set_autocast_enabled("cpu", True)`` for bfloat16
    inference): the casts need a dispatcher mode, so one is pushed here when no region has one, and removed when
    autocast is switched off again this way.
    """
    if enabled is None:
        device_type, enabled = "cuda", device_type
    _state.enabled[device_type] = bool(enabled)
    from ._cast_mode import AutocastMode, active_mode

    mode = _state.manual_modes.pop(device_type, None)
    if enabled:
        if mode is not None or active_mode(device_type) is not None:
            if mode is not None:
                _state.manual_modes[device_type] = mode
            return
        if device_type == "cpu" or (device_type == "cuda" and _cuda_available()):
            mode = _state.manual_modes[device_type] = AutocastMode(device_type)
            push_mode(mode)
    elif mode is not None:
        _remove_mode(mode)


def _cuda_available():
    from ..runtime import cuda_available

    return cuda_available()


def _remove_mode(mode):
    # By identity: a mode pushed after this one and left open must not be popped in its place.
    for i in range(len(MODES) - 1, -1, -1):
        if MODES[i] is mode:
            del MODES[i]
            break


def get_autocast_dtype(device_type: str):
    """The dtype autocast uses on ``device_type``: bfloat16 for CPU, float16 for CUDA unless changed."""
    return _state.dtype.get(device_type) or _default_dtype(device_type)


def set_autocast_dtype(device_type: str, dtype) -> None:
    _state.dtype[device_type] = dtype


def is_autocast_cpu_enabled() -> bool:
    """Deprecated torch alias of ``is_autocast_enabled("cpu")``."""
    return is_autocast_enabled("cpu")


def get_autocast_cpu_dtype():
    return get_autocast_dtype("cpu")


def get_autocast_gpu_dtype():
    return get_autocast_dtype("cuda")


def is_autocast_cache_enabled() -> bool:
    return _state.cache_enabled


def set_autocast_cache_enabled(enabled: bool) -> None:
    _state.cache_enabled = bool(enabled)


def clear_autocast_cache() -> None:
    """Forget the casts of weights kept within autocast regions (done when the outermost region exits)."""
    from ._cast_mode import active_mode

    for device_type in ("cpu", "cuda"):
        mode = active_mode(device_type)
        if mode is not None:
            mode.cache.clear()


def autocast_increment_nesting() -> int:
    _state.nesting += 1
    return _state.nesting


def autocast_decrement_nesting() -> int:
    _state.nesting -= 1
    return _state.nesting


class autocast:
    """``autocast(device_type, dtype=None, enabled=True, cache_enabled=None)``: context manager and decorator.

    Disables itself with torch's warning for CUDA without a GPU, or for a dtype the device cannot autocast to.

    >>> import jitorch, jitorch.amp
    >>> @jitorch.amp.autocast("cpu", dtype=jitorch.bfloat16)
    ... def f():
    ...     return jitorch.amp.autocast_mode.is_autocast_enabled("cpu")
    >>> f()
    True
    """

    def __init__(self, device_type: str, dtype=None, enabled: bool = True, cache_enabled: bool | None = None):
        from .. import _dtype

        if not isinstance(device_type, str):
            raise ValueError(f"Expected `device_type` of type `str`, got: `{type(device_type)}`")
        self.fast_dtype = get_autocast_dtype(device_type) if dtype is None else dtype
        self.device = device_type
        if not is_autocast_available(device_type):
            raise RuntimeError(f"User specified an unsupported autocast device_type '{device_type}'")
        self._cache_enabled = is_autocast_cache_enabled() if cache_enabled is None else cache_enabled
        supported = [_dtype.bfloat16, _dtype.float16]
        name = device_type.upper()
        if enabled:
            if device_type == "cuda":
                from ..runtime import cuda_available

                if not cuda_available():
                    warnings.warn("CUDA is not available or torch_xla is imported. Disabling autocast.", stacklevel=2)
                    enabled = False
            elif self.fast_dtype not in supported:
                warnings.warn(f"In {name} autocast, but the target dtype is not supported. Disabling autocast.\n"
                              f"{name} Autocast only supports dtypes of " + ", ".join(map(_torch_name, supported))
                              + " currently.", stacklevel=2)
                enabled = False
        self._enabled = enabled

    def __enter__(self):
        self.prev_cache_enabled = is_autocast_cache_enabled()
        self.prev = is_autocast_enabled(self.device)
        self.prev_fastdtype = get_autocast_dtype(self.device)
        _state.enabled[self.device] = self._enabled  # (not set_autocast_enabled: the region pushes its own mode)
        set_autocast_dtype(self.device, self.fast_dtype)
        autocast_increment_nesting()
        set_autocast_cache_enabled(self._cache_enabled)
        self._mode = None
        if self._enabled:
            from ._cast_mode import AutocastMode

            top = MODES[-1] if MODES else None
            if not (isinstance(top, AutocastMode) and top.device_type == self.device):  # else that one casts
                self._mode = AutocastMode(self.device)
                push_mode(self._mode)
        return self

    def __exit__(self, exc_type, exc_val, exc_tb):
        if autocast_decrement_nesting() == 0:
            clear_autocast_cache()
        mode = getattr(self, "_mode", None)
        if mode is not None:
            self._mode = None
            _remove_mode(mode)
        _state.enabled[self.device] = self.prev
        set_autocast_dtype(self.device, self.prev_fastdtype)
        set_autocast_cache_enabled(self.prev_cache_enabled)
        return False

    def __call__(self, func):
        if not callable(func):
            raise TypeError(f"autocast()(func) requires a callable, but got {type(func).__name__}. "
                            f"Did you mean to use autocast as a context manager? For example:\n"
                            f"    with torch.autocast(device_type=...):\n"
                            f"        output = model(input)")

        @functools.wraps(func)
        def decorate_autocast(*args, **kwargs):
            with self:
                return func(*args, **kwargs)

        return decorate_autocast


def _torch_name(dtype) -> str:
    # torch prints dtypes as "torch.bfloat16"; keep its warning text identical.
    return "torch." + str(dtype).rsplit(".", 1)[-1]


def _cast(value, device_type, dtype):
    """``value`` with its floating tensors on ``device_type`` (float64 excepted) cast to ``dtype``, through lists,
    tuples and dicts, as torch's ``amp.autocast_mode._cast``."""
    import collections.abc

    import numpy as np

    from .._tensor import Tensor

    if isinstance(value, Tensor):
        eligible = value.is_floating_point() and value.device.type == device_type and value.dtype.name != "float64"
        return value.to(dtype) if eligible else value
    if isinstance(value, (str, bytes, np.ndarray)):
        return value
    if isinstance(value, collections.abc.Mapping):
        return {_cast(k, device_type, dtype): _cast(v, device_type, dtype) for k, v in value.items()}
    if isinstance(value, collections.abc.Iterable):
        items = (_cast(v, device_type, dtype) for v in value)
        return type(value)(items) if isinstance(value, (list, tuple)) else items
    return value


def custom_fwd(fwd=None, *, device_type: str, cast_inputs=None):
    """Decorator for a custom ``autograd.Function.forward`` (as torch's): with ``cast_inputs``, inside an enabled
    autocast region of ``device_type`` the floating inputs are cast to that dtype and ``forward`` runs with autocast
    off; without it, ``forward`` runs under the caller's autocast. Either way ``ctx`` records the state for
    ``custom_bwd``.

    >>> import jitorch
    >>> class Square(jitorch.autograd.Function):
    ...     @staticmethod
    ...     @custom_fwd(device_type="cpu", cast_inputs=jitorch.float32)
    ...     def forward(ctx, a):
    ...         return a @ a
    ...     @staticmethod
    ...     @custom_bwd(device_type="cpu")
    ...     def backward(ctx, g):
    ...         return g
    >>> with jitorch.autocast("cpu"):
    ...     Square.apply(jitorch.ones(2, 2, dtype=jitorch.bfloat16)).dtype
    jitorch.float32
    """
    if not isinstance(device_type, str):
        raise ValueError(f"Expected `device_type` of type `str`, got: `{type(device_type)}`")
    if fwd is None:
        return functools.partial(custom_fwd, device_type=device_type, cast_inputs=cast_inputs)

    @functools.wraps(fwd)
    def decorate_fwd(*args, **kwargs):
        ctx = args[0]
        ctx._dtype = get_autocast_dtype(device_type)
        if cast_inputs is None:
            ctx._fwd_used_autocast = is_autocast_enabled(device_type)
            return fwd(*args, **kwargs)
        ctx._fwd_used_autocast = False  # the forward ran in cast_inputs: its backward runs without autocast
        if not is_autocast_enabled(device_type):
            return fwd(*args, **kwargs)
        with autocast(device_type=device_type, enabled=False):
            return fwd(*_cast(args, device_type, cast_inputs), **_cast(kwargs, device_type, cast_inputs))
    return decorate_fwd


def custom_bwd(bwd=None, *, device_type: str):
    """Decorator for a custom ``autograd.Function.backward``: it runs under the autocast state (enabled, dtype) its
    ``custom_fwd`` forward ran under, as torch's, wherever the backward pass is started."""
    if not isinstance(device_type, str):
        raise ValueError(f"Expected `device_type` of type `str`, got: `{type(device_type)}`")
    if bwd is None:
        return functools.partial(custom_bwd, device_type=device_type)

    @functools.wraps(bwd)
    def decorate_bwd(*args, **kwargs):
        ctx = args[0]
        with autocast(device_type=device_type, enabled=ctx._fwd_used_autocast, dtype=ctx._dtype):
            return bwd(*args, **kwargs)
    return decorate_bwd
