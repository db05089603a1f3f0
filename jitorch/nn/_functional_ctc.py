"""``ctc_loss``: the connectionist temporal classification loss as a composite of jitorch ops.

The forward (alpha) recursion runs over time in log space, batched over the sequences and the extended label states
(blanks between and around the target labels); autograd through it gives the backward (beta) pass. Log-sum-exps read
a safe pivot where every term is ``-inf`` (unreachable states), so those states carry zero gradient instead of NaN.

ATen's CTC backward returns ``exp(log_probs) - posterior`` for ``log_probs``: the gradient for the logits under a
``log_softmax``, not the loss's own derivative ``-posterior``. A zero-valued term whose derivative is
``exp(log_probs)`` reproduces it, so gradients match PyTorch's whether or not a ``log_softmax`` sits in front.
Where a sequence's loss is infinite (no alignment fits in its frames) that formula is ``exp(log_probs) - exp(-inf +
inf)``: ATen's gradient is NaN over the sequence's frames unless ``zero_infinity`` zeroes loss and gradient.

>>> import jitorch
>>> import jitorch.nn.functional as F
>>> lp = jitorch.full((2, 1, 2), 0.5).log()
>>> F.ctc_loss(lp, jitorch.tensor([[1]]), [2], [1], reduction="sum")
tensor(0.2877)
"""
from __future__ import annotations

import math

from .. import _creation, _dtype, _movement
from .._dispatch import TORCH_TYPE_NAMES
from .._pointwise import maximum, where
from ..amp._cast_mode import autocast_policy
from ..autograd.function import Function

__all__ = ["ctc_loss"]


def _lengths(lengths, batch, name):
    """Host list of per-sequence lengths from a tensor, a sequence or (unbatched) an int."""
    if hasattr(lengths, "is_floating_point") and (lengths.is_floating_point() or lengths.is_complex()):
        raise RuntimeError(f"{name} must be integral (ctc_loss got a {lengths.dtype} tensor; pass int32 or int64 "
                           "lengths)")
    values = lengths.reshape(-1).tolist() if hasattr(lengths, "tolist") else (
        [lengths] if isinstance(lengths, int) else list(lengths))
    if len(values) != batch:
        raise RuntimeError(f"ctc_loss: expected {name} to have {batch} entries (one per sequence), got {len(values)}")
    if any(v < 0 for v in values):
        raise RuntimeError(f"ctc_loss: {name} must be non-negative, got {values}")
    return [int(v) for v in values]


def _logsumexp(*terms):
    top = terms[0]
    for t in terms[1:]:
        top = maximum(top, t)
    reachable = top > -math.inf
    pivot = where(reachable, top, 0.0).detach()
    total = terms[0].sub(pivot).exp()
    for t in terms[1:]:
        total = total + t.sub(pivot).exp()
    return where(reachable, where(reachable, total, 1.0).log() + pivot, -math.inf)


class _InfeasibleGradient(Function):
    """Zero in value (one entry per sequence); its gradient is NaN over the frames ``mask`` (T, N) marks: those of
    the sequences whose loss is infinite, where ATen's backward divides by the zero probability of every path."""

    @staticmethod
    def forward(ctx, log_probs, mask):
        ctx.save_for_backward(mask)
        ctx.classes = log_probs.shape[2]
        return log_probs.new_zeros(log_probs.shape[1])

    @staticmethod
    def backward(ctx, grad):
        (mask,) = ctx.saved_tensors
        steps, batch = mask.shape
        nan, zero = grad.new_full((), math.nan), grad.new_zeros(())
        return where(mask.unsqueeze(2), nan, zero).expand(steps, batch, ctx.classes).contiguous(), None


def _padded_targets(targets, target_lengths, batch, width):
    """(N, width) int64 labels; entries past a sequence's length are 0 (masked by the caller)."""
    if targets.dim() == 2:
        if targets.shape[1] < width:
            raise RuntimeError(f"ctc_loss: expected targets to have size at least {width} (the longest target "
                               f"length) at dimension 1, but got {tuple(targets.shape)}")
        return targets[:, :width].long()
    if targets.dim() != 1 or sum(target_lengths) != targets.shape[0]:
        raise RuntimeError(f"ctc_loss: expected concatenated targets of size {sum(target_lengths)} (the sum of "
                           f"target_lengths {target_lengths}), but got {tuple(targets.shape)}")
    starts = [sum(target_lengths[:b]) for b in range(batch)]
    index = [[starts[b] + min(s, max(target_lengths[b] - 1, 0)) for s in range(width)] for b in range(batch)]
    flat = targets.reshape(-1).long()
    if flat.numel() == 0:
        return _creation.zeros((batch, width), dtype=_dtype.int64, device=targets.device)
    return flat[_creation.tensor(index, dtype=_dtype.int64, device=targets.device).reshape(batch, width)]


@autocast_policy(cpu="fp32")  # on PyTorch's CPU autocast float32 list (not on CUDA's)
def ctc_loss(log_probs, targets, input_lengths, target_lengths, blank=0, reduction="mean", zero_infinity=False):
    """CTC loss of ``log_probs`` ``(T, N, C)`` (or unbatched ``(T, C)``) against padded ``(N, S)`` or concatenated
    targets; ``reduction="mean"`` divides each sequence's loss by its target length before averaging."""
    if reduction not in ("none", "mean", "sum"):
        raise ValueError(f"{reduction} is not a valid value for reduction")
    unbatched = log_probs.dim() == 2
    if unbatched:
        log_probs = log_probs.unsqueeze(1)  # the targets read as one concatenated sequence, as ATen's
    if log_probs.dim() != 3:
        raise RuntimeError(f"ctc_loss: expected log_probs of shape (T, N, C) or (T, C), got {tuple(log_probs.shape)}")
    steps, batch, classes = log_probs.shape
    if not log_probs.is_floating_point() or log_probs.dtype in (_dtype.float16, _dtype.bfloat16) and \
            log_probs.device.type == "cpu":  # (torch's CPU kernel takes float32 and float64 only)
        raise NotImplementedError(f"\"ctc_loss_cpu\" not implemented for '{TORCH_TYPE_NAMES[log_probs.dtype.name]}': "
                                  "log_probs must be float32 or float64 (the log_softmax of the logits; cast with "
                                  ".float())")
    if log_probs.numel() == 0:
        raise RuntimeError(f"ctc_loss: log_probs tensor must not be empty, got shape {tuple(log_probs.shape)}")
    if not 0 <= blank < classes:
        raise RuntimeError(f"ctc_loss: blank must be in label range [0, {classes}), got {blank}")
    in_len = _lengths(input_lengths, batch, "input_lengths")
    tg_len = _lengths(target_lengths, batch, "target_lengths")
    if any(v > steps for v in in_len):
        raise RuntimeError(f"ctc_loss: expected input_lengths to have value at most {steps}, but got {in_len}")
    width = max(tg_len, default=0)
    dev, states = log_probs.device, 2 * width + 1

    position = _creation.arange(width, device=dev)
    tg_len_t = _creation.tensor(tg_len, dtype=_dtype.int64, device=dev).unsqueeze(1)
    labels = where(position < tg_len_t, _padded_targets(targets, tg_len, batch, width), blank)
    blanks = _creation.full((batch, width + 2), blank, dtype=_dtype.int64, device=dev)
    ext = _movement.cat([_movement.stack([blanks[:, :width], labels], 2).reshape(batch, 2 * width),
                         blanks[:, :1]], 1)
    # A label state may skip the blank before it unless the label two states back is the same (ATen's test, which
    # reads the label, not whether it is the blank: targets holding the blank index follow the same rule).
    odd = (_creation.arange(states, device=dev) % 2 == 1).unsqueeze(0)
    skip = odd & (ext != _movement.cat([blanks[:, :2], ext[:, :-2]], 1)[:, :states])
    emit = log_probs.gather(2, ext.unsqueeze(0).expand(steps, batch, states))

    state = _creation.arange(states, device=dev).unsqueeze(0)
    neg_inf = log_probs.new_full((batch, states), -math.inf)
    in_len_t = _creation.tensor(in_len, dtype=_dtype.int64, device=dev).unsqueeze(1)
    empty_path = where(state == 0, log_probs.new_zeros(()), neg_inf)  # no frames: only the empty labelling
    alpha = where((state < 2) & (state < 2 * tg_len_t + 1), emit[0], neg_inf)
    alpha = where(in_len_t > 0, alpha, empty_path)
    for t in range(1, max(in_len, default=0)):
        one = _movement.cat([neg_inf[:, :1], alpha[:, :-1]], 1)
        two = where(skip, _movement.cat([neg_inf[:, :2], alpha[:, :-2]], 1), neg_inf)
        alpha = where(t < in_len_t, _logsumexp(alpha, one, two) + emit[t], alpha)

    last = alpha.gather(1, 2 * tg_len_t)
    before = where(tg_len_t > 0, alpha.gather(1, (2 * tg_len_t - 1).clamp_min(0)), -math.inf)
    loss = -_logsumexp(last, before).squeeze(1)
    if log_probs.requires_grad:
        frames = _creation.arange(steps, device=dev).unsqueeze(1) < in_len_t.squeeze(1)
        probs = log_probs.exp()
        loss = loss + where(frames.unsqueeze(2), probs - probs.detach(), 0.0).sum((0, 2))
        if not zero_infinity:
            loss = loss + _InfeasibleGradient.apply(log_probs, frames & (loss.detach() == math.inf).unsqueeze(0))
    if zero_infinity:
        loss = where(loss == math.inf, 0.0, loss)
    if reduction == "mean":
        return (loss / tg_len_t.squeeze(1).clamp_min(1).to(loss.dtype)).mean()
    if reduction == "sum":
        return loss.sum()
    return loss.squeeze(0) if unbatched else loss
