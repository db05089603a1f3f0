"""``LinearCrossEntropyOptions``: how the chunked ``linear_cross_entropy`` splits its batch (PyTorch 2.13's class).

Passing an instance as ``options=`` to :func:`jitorch.nn.functional.linear_cross_entropy` (or
:class:`jitorch.nn.LinearCrossEntropyLoss`) computes the loss a row chunk at a time, so the ``(N, C)`` logits are never
held whole. ``"auto"`` fields are resolved per call by ``_adjust`` from the input's shape, dtype and device, with
PyTorch's table of defaults, so a configuration picks the same chunk sizes in both libraries.

>>> from jitorch.nn import LinearCrossEntropyOptions
>>> opts = LinearCrossEntropyOptions(batch_chunk_size=64)
>>> opts._adjust(num_batches=1000, in_features=16, num_classes=512, dtype=None).batch_chunk_size
64
>>> LinearCrossEntropyOptions(chunking_method="aspect_ratio")._adjust(1000, 16, 512, None).batch_chunk_size
32
"""
from __future__ import annotations

import dataclasses
from typing import Literal, NamedTuple

from ... import _dtype

__all__ = ["LinearCrossEntropyOptions"]


class _AutoDefault(NamedTuple):
    acc_policy: str
    chunking_method: str


# PyTorch's picks for ``"auto"`` by (device type, input dtype); other pairs take ``_AUTO_FALLBACK``. CPU half inputs
# choose "accurate" because its weight-gradient product is the one that runs in float32 there.
_AUTO_DEFAULTS: dict[tuple[str, object], _AutoDefault] = {
    ("cuda", _dtype.bfloat16): _AutoDefault("compact", "aspect_ratio:2"),
    ("cuda", _dtype.float16): _AutoDefault("compact", "aspect_ratio:2"),
    ("cpu", _dtype.bfloat16): _AutoDefault("accurate", "aspect_ratio"),
    ("cpu", _dtype.float16): _AutoDefault("accurate", "aspect_ratio"),
}
_AUTO_FALLBACK = _AutoDefault("compact", "aspect_ratio:2")

_ACC_POLICIES = ("auto", "accurate", "balanced", "compact")
_ACC_DTYPES = (_dtype.float16, _dtype.bfloat16, _dtype.float32, _dtype.float64)


def _ceil_div(a, b):
    return -(-a // b)


@dataclasses.dataclass(slots=True, frozen=True)
class LinearCrossEntropyOptions:
    """Configuration of the chunked :func:`~jitorch.nn.functional.linear_cross_entropy` (``options=None`` selects
    the reference path: one ``linear`` then ``cross_entropy``).

    - ``allow_retain_graph``: the ``'mean'``/``'sum'`` backward scales gradients computed during the forward and
      consumes them, so a second backward raises; ``True`` keeps them (one more gradient-sized buffer).
      ``'none'`` recomputes its gradients in the backward and ignores this field.
    - ``batch_chunk_size``: rows per chunk (``None``: one chunk, or what ``chunking_method`` picks). Setting both
      to different sizes raises ``ValueError`` at call time.
    - ``chunking_method``: ``"auto"``, ``"aspect_ratio"`` (a chunk's ``(B, C)`` logits as large as the ``(N, F)``
      input, ``B`` rounded up to a power of two), ``"aspect_ratio:K"`` (that size divided by ``K``) or ``None``.
    - ``acc_policy``: ``"accurate"`` (every intermediate in ``acc_dtype``), ``"balanced"`` (the input gradient in
      the input dtype), ``"compact"`` (also no ``acc_dtype`` copy of the weight gradient: it accumulates in the
      input dtype), or ``"auto"``. Only visible when ``acc_dtype`` differs from the input dtype.
    - ``acc_dtype``: the dtype the chunks compute in; ``None`` picks float32 for float16/bfloat16 inputs under
      ``"auto"`` (on CPU), the input dtype otherwise.

    Unsupported calls (K-dimensional weights, label smoothing, probability targets, other reductions) warn and take
    the reference path. The chunked path has no double backward: its gradients carry no history.
    """

    allow_retain_graph: bool = False
    batch_chunk_size: int | None = None
    chunking_method: str | None = "auto"
    acc_policy: Literal["accurate", "balanced", "compact", "auto"] = "auto"
    acc_dtype: object = None

    def __post_init__(self):
        if self.acc_policy not in _ACC_POLICIES:
            raise ValueError(f"invalid acc_policy: {self.acc_policy!r}")
        if self.chunking_method is not None and self.chunking_method != "auto":
            name, sep, factor = self.chunking_method.partition(":")
            factor = factor if sep else "1"
            if not (name == "aspect_ratio" and factor.isdigit() and int(factor) > 0):
                raise ValueError(f"invalid chunking_method: {self.chunking_method!r}")
        size = self.batch_chunk_size
        if not (size is None or (isinstance(size, int) and size > 0)):
            raise ValueError(f"batch_chunk_size must be positive int or None, got {size!r}")
        if self.acc_dtype is not None and self.acc_dtype not in _ACC_DTYPES:
            raise ValueError(
                "acc_dtype must be one of {None, torch.float16, torch.bfloat16, torch.float32, torch.float64}, got "
                f"{self.acc_dtype!r}. Pass acc_dtype=None to let the op pick automatically.")

    @staticmethod
    def _ceil_div(a: int, b: int) -> int:
        return _ceil_div(a, b)

    @staticmethod
    def _resolve_auto_acc_dtype(dtype, device):
        """float32 for half inputs where a mixed-precision product exists (CPU; CUDA from compute capability 7.0
        for float16, 8.0 for bfloat16); None (the input dtype) otherwise."""
        if device is None or dtype not in (_dtype.float16, _dtype.bfloat16):
            return None
        if device.type == "cpu":
            return _dtype.float32
        if device.type == "cuda":
            from ... import cuda

            if not cuda.is_available():
                return None
            major, _ = cuda.get_device_capability(device)
            return _dtype.float32 if major >= (8 if dtype == _dtype.bfloat16 else 7) else None
        return None

    def _compute_batch_chunk_size(self, num_batches, in_features, num_classes, method=None):
        """Rows per chunk that ``method`` (default: this instance's ``chunking_method``) picks for these sizes."""
        method = str(method if method is not None else self.chunking_method)
        _, _, factor = method.partition(":")
        # One chunk's (B, C) logits hold about as many elements as the (N, F) input.
        rows = _ceil_div(num_batches, _ceil_div(num_classes, in_features))
        power_of_two = 1 << (rows - 1).bit_length()
        return min(power_of_two // int(factor or 1), num_batches)

    def _adjust(self, num_batches, in_features, num_classes, dtype, device=None):
        """A copy with every ``"auto"``/``None`` field resolved for one call (``device=None``: the fallback picks).

        Raises ``ValueError`` when ``batch_chunk_size`` and ``chunking_method`` ask for different sizes."""
        policy, method = self.acc_policy, self.chunking_method
        if method == "auto" and self.batch_chunk_size is not None:
            method = None  # an explicit size wins over the automatic heuristic
        if "auto" in (policy, method):
            picks = _AUTO_FALLBACK if device is None else _AUTO_DEFAULTS.get((device.type, dtype), _AUTO_FALLBACK)
            policy = picks.acc_policy if policy == "auto" else policy
            method = picks.chunking_method if method == "auto" else method
        size = num_batches if self.batch_chunk_size is None else min(self.batch_chunk_size, num_batches)
        if method is not None:
            size = self._compute_batch_chunk_size(num_batches, in_features, num_classes, method)
            if self.batch_chunk_size is not None and self.batch_chunk_size != size:
                raise ValueError(
                    f"batch_chunk_size (={self.batch_chunk_size}) and chunking_method ('{method}') give different "
                    f"chunk sizes ({self.batch_chunk_size} vs {size}); pass only one.")
        acc_dtype = self.acc_dtype
        if acc_dtype is None:
            auto = self._resolve_auto_acc_dtype(dtype, device) if self.acc_policy == "auto" else None
            acc_dtype = dtype if auto is None else auto
        return dataclasses.replace(self, acc_policy=policy, chunking_method=method, batch_chunk_size=max(1, size),
                                   acc_dtype=acc_dtype)
