"""The dispatcher mode behind ``autocast``: casts the inputs of listed op-table rows, as PyTorch's Autocast key does.

Within an enabled region every primitive passes through ``AutocastMode.dispatch``; it looks the row up in its device's
policy and, before running it with the mode popped (so the next mode, or eager, runs it):

- ``lower``: matmul-family rows (``matmul`` behind ``mm``/``bmm``/``@``, ``linear``, ``convolution``,
  ``convolution_transpose``, ``einsum``) get their floating inputs cast to the autocast dtype;
- ``fp32``: rows PyTorch keeps in float32 (on CPU: ``nll_loss``, ``binary_cross_entropy``, ``prod`` and the
  decompositions of ``linalg``) get their lower-precision floating inputs cast to float32;
- every other row runs as called, so mixed inputs follow ordinary type promotion (``bf16 + fp32 -> fp32``).

An op PyTorch runs as one kernel but jitorch composes from rows carries PyTorch's rule for it on its public function
(``autocast_policy``): ``trace``, ``cdist``, ``quantile`` and the 3-d pools go to float32 on CPU, ``linalg.vecdot``
lowers, ``index_copy`` promotes, and ``mv``, ``dot`` or adaptive average pooling, on no CPU list, run as called
although they are made of matmul rows.

float64 tensors are never cast, and only tensors on the mode's device are. The casts are ordinary ``to`` ops recorded
by autograd, so gradients reach the float32 leaves in float32. Within one region, the cast of a float32 leaf that
requires grad (a weight) is made once and reused while the leaf is unchanged (PyTorch's cast cache).

>>> import jitorch
>>> with jitorch.autocast("cpu", dtype=jitorch.bfloat16):
...     y = jitorch.ones(2, 3) @ jitorch.ones(3, 2)
...     z = y + jitorch.ones(2, 2)
>>> y.dtype, z.dtype
(jitorch.bfloat16, jitorch.float32)
"""
from __future__ import annotations

import functools

import numpy as np

from .. import _dtype
from .._dispatch import MODES, apply, apply_inplace, pop_mode, push_mode
from .._tensor import Tensor

__all__ = ["AutocastMode", "POLICIES", "active_mode", "autocast_float32", "autocast_lower", "autocast_policy"]

_LOWER = frozenset({"matmul", "linear", "convolution", "convolution_transpose", "einsum"})
# The rows of PyTorch's CPU float32 list (aten/src/ATen/autocast_mode.cpp); ops jitorch builds from several rows
# carry the rule on their public function instead (``autocast_policy``: trace, cdist, quantile, 3-d pooling...).
# det/slogdet are not on it: torch refuses them in bfloat16 under autocast too.
_CPU_FP32 = frozenset({"nll_loss", "binary_cross_entropy", "prod", "linalg_cholesky", "linalg_inv", "linalg_solve",
                       "linalg_qr", "linalg_svd", "linalg_svdvals", "linalg_eigh", "linalg_eigvalsh"})
# CUDA's float32 list is longer (PyTorch keeps pointwise transcendental functions, norms and reductions in float32
# there); the rows jitorch has of it:
_CUDA_FP32 = _CPU_FP32 | frozenset({"acos", "asin", "cosh", "erfinv", "exp", "expm1", "log", "log10", "log2", "log1p",
                                    "reciprocal", "rsqrt", "sinh", "tan", "pow", "softmax", "log_softmax",
                                    "native_layer_norm", "cumsum", "cumprod", "sum", "vector_norm"})


def _policy(fp32):
    table = {name: "lower" for name in _LOWER}
    table.update({name: "fp32" for name in fp32})
    return table


POLICIES = {"cpu": _policy(_CPU_FP32), "cuda": _policy(_CUDA_FP32)}
_LOW = (np.dtype(np.float16), _dtype.bfloat16.np, np.dtype(np.float32))  # castable: floating, not float64


class AutocastMode:
    """A dispatcher mode casting row inputs for one device type; reads the current autocast state at each op, so
    nested ``autocast(enabled=False)`` or another dtype takes effect without a mode of its own."""

    def __init__(self, device_type):
        from .autocast_mode import _state

        self.device_type = device_type
        self.policy = POLICIES.get(device_type, POLICIES["cuda"])
        self._state = _state
        self.cache = {}  # id(leaf) -> (leaf, version, dtype, cast): the casts of weights within the region

    def _on_device(self, data):
        return (type(data) is np.ndarray) == (self.device_type == "cpu")

    def _cast(self, a, target):
        if not isinstance(a, Tensor):
            return a
        data = a._data
        if data.dtype == target.np or data.dtype not in _LOW or not self._on_device(data):
            return a
        cacheable = (self._state.cache_enabled and a._requires_grad and a.grad_fn is None
                     and target is not _dtype.float32)
        if cacheable:
            hit = self.cache.get(id(a))
            if hit is not None and hit[0] is a and hit[1] == a._version and hit[2] is target:
                return hit[3]
        out = a.to(target)
        if cacheable:
            self.cache[id(a)] = (a, a._version, target, out)
        return out

    def _target(self, op):
        """The dtype ``op``'s floating inputs are cast to now, or None."""
        rule = self.policy.get(op.name)
        if rule is None or not self._state.enabled.get(self.device_type, False):
            return None
        if rule == "fp32":
            return _dtype.float32
        from .autocast_mode import get_autocast_dtype

        return get_autocast_dtype(self.device_type)

    def enabled(self):
        return self._state.enabled.get(self.device_type, False)

    def dispatch(self, op, args, attrs):
        pop_mode()
        try:
            target = self._target(op)
            if target is None:
                return apply(op, *args, **attrs)
            args = tuple(self._cast(a, target) for a in args)
            out = apply(op, *args, **attrs)
            if isinstance(out, Tensor) and out._data.dtype != target.np and out._data.dtype in _LOW and all(
                    not isinstance(a, Tensor) or a._data.dtype == target.np or a._data.dtype not in _LOW
                    for a in args):
                # A row whose NumPy kernel computes half inputs in float32 and keeps that: round once, as PyTorch's
                # lower-precision kernels accumulate in float32 and round the result.
                out = out.to(target)
            return out
        finally:
            push_mode(self)

    def dispatch_inplace(self, op, self_tensor, args, attrs):
        # In-place ops keep their destination's dtype: PyTorch's lists hold no in-place op.
        pop_mode()
        try:
            return apply_inplace(op, self_tensor, *args, **attrs)
        finally:
            push_mode(self)


def active_mode(device_type):
    """The innermost ``AutocastMode`` of ``device_type`` on the dispatcher's mode stack, or None."""
    for mode in reversed(MODES):
        if isinstance(mode, AutocastMode) and mode.device_type == device_type:
            return mode
    return None


# -- composite ops PyTorch lists by name (its losses, ``addmm``...): cast at the public function -----------------------
def _region_mode(args, kwargs):
    """The innermost enabled ``AutocastMode`` for the device of the first tensor argument, or None."""
    first = next((a for a in (*args, *kwargs.values()) if isinstance(a, Tensor)), None)
    if first is None:
        return None
    for mode in reversed(MODES):
        if isinstance(mode, AutocastMode) and mode._on_device(first._data) and mode.enabled():
            return mode
    return None


def _promoted(lower, args, kwargs):
    """ATen's promote policy (``autocast::prioritize``): float32 when a floating argument is float32, else the
    autocast dtype ``lower``; float64 arguments take no part (and are not cast)."""
    if any(isinstance(a, Tensor) and a._data.dtype == np.float32 for a in (*args, *kwargs.values())):
        return _dtype.float32
    return lower


def _policy_decorator(rules):
    def decorate(fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            mode = _region_mode(args, kwargs) if MODES else None
            rule = None if mode is None else rules.get(mode.device_type, rules.get("cuda"))
            if rule is None:  # not one op on this device: its rows autocast one by one
                return fn(*args, **kwargs)
            from .autocast_mode import get_autocast_dtype

            target = {"lower": lambda: get_autocast_dtype(mode.device_type), "fp32": lambda: _dtype.float32,
                      "promote": lambda: _promoted(get_autocast_dtype(mode.device_type), args, kwargs),
                      "unlisted": lambda: None}[rule]()
            if target is not None:
                args = tuple(mode._cast(a, target) for a in args)
                kwargs = {k: mode._cast(v, target) for k, v in kwargs.items()}
            # One op to PyTorch: its parts run with autocast off, as ATen's kernel runs below the Autocast key.
            enabled = mode._state.enabled
            enabled[mode.device_type] = False
            try:
                return fn(*args, **kwargs)
            finally:
                enabled[mode.device_type] = True
        return wrapper
    return decorate


def autocast_policy(cpu=None, cuda=None):
    """Decorator for a function that is one ATen op, with PyTorch's autocast rule for it on CPU and on CUDA (whose
    rule other device types follow): ``"lower"`` casts its floating tensor arguments to the autocast dtype,
    ``"fp32"`` to float32, ``"promote"`` to the widest floating dtype among them, and ``"unlisted"`` casts nothing;
    in all four ``fn`` then runs with autocast off, so the rows it is made of (a ``mv`` made of a matmul row) do not
    autocast on their own. ``None``: the op is not one kernel on that device, its rows autocast as usual.

    >>> import jitorch
    >>> first_dot = autocast_policy(cpu="unlisted", cuda="promote")(lambda a, b: a @ b)
    >>> with jitorch.autocast("cpu"):
    ...     first_dot(jitorch.ones(2), jitorch.ones(2)).dtype, (jitorch.ones(2) @ jitorch.ones(2)).dtype
    (jitorch.float32, jitorch.bfloat16)
    """
    return _policy_decorator({"cpu": cpu, "cuda": cuda})


def autocast_float32(fn):
    """Decorator: under autocast, ``fn``'s floating tensor arguments are cast to float32 and ``fn`` runs with autocast
    off (PyTorch's float32 list: the losses). A no-op outside autocast.

    >>> import jitorch
    >>> half_mean = autocast_float32(lambda x: x.mean())
    >>> with jitorch.autocast("cpu"):
    ...     half_mean(jitorch.ones(2, dtype=jitorch.bfloat16)).dtype
    jitorch.float32
    """
    return _policy_decorator({"cpu": "fp32", "cuda": "fp32"})(fn)


def autocast_lower(fn):
    """Decorator: under autocast, ``fn``'s floating tensor arguments are cast to the autocast dtype and ``fn`` runs
    with autocast off (PyTorch's lower-precision list: ``addmm``, ``scaled_dot_product_attention``...)."""
    return _policy_decorator({"cpu": "lower", "cuda": "lower"})(fn)
