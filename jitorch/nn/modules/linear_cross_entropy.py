"""The chunked ``linear_cross_entropy`` (``options`` given): the loss and its gradients a row chunk at a time.

A vocabulary head's logits ``(N, C)`` dwarf its input ``(N, F)`` and weight ``(C, F)``. Here each chunk of ``B`` rows
computes its ``(B, C)`` logits, their log-sum-exp and, while the chunk is at hand, its share of every gradient:
with ``s`` the row's scale (class weight, ``0`` on ignored rows, ``1/total weight`` for ``'mean'``) the gradient of
the loss wrt the chunk's logits is ``G = s * (softmax - onehot(target))``, so ``grad_input[chunk] = G @ W``,
``grad_weight += G.T @ x[chunk]`` and ``grad_bias += G.sum(0)``. Peak memory is one chunk's logits.

As PyTorch's op: ``'mean'``/``'sum'`` compute the gradients during the forward and the backward scales them by the
upstream gradient (once, unless ``allow_retain_graph``); ``'none'`` computes only the row losses and its backward
makes a second chunked pass with the upstream gradients folded into ``s``. The gradients carry no history: no double
backward. Nothing here is public (PyTorch's module exports nothing either); ``nn.functional.linear_cross_entropy``
calls ``chunked_linear_cross_entropy``.
"""
from __future__ import annotations

import math

from ... import _creation, _dtype
from ..._pointwise import where
from ...autograd.function import Function
from ...autograd.grad_mode import GradState, no_grad

__all__ = []

_TWICE = ("linear_cross_entropy chunked backward called twice; retain_graph=True / double backward are not "
          "supported.")


class _Plan:
    """One call's operands with what every chunked pass needs: the acc-dtype copies of the weight and bias, the
    targets with ignored rows pointed at class 0 (so gathers stay in bounds), and the rows' class weights."""

    def __init__(self, input, linear_weight, target, linear_bias, weight, ignore_index, chunk, policy, acc_dtype):
        num_classes = linear_weight.shape[0]
        self.input, self.dtype, self.acc_dtype, self.chunk, self.policy = input, input.dtype, acc_dtype, chunk, policy
        self.weight = linear_weight.to(acc_dtype)
        self.bias = None if linear_bias is None else linear_bias.to(acc_dtype)
        ignored = target == ignore_index
        self.target = where(ignored, 0, target)
        _check_targets(self.target, num_classes)
        if weight is None:
            self.row_weights = (~ignored).to(acc_dtype)
        else:
            self.row_weights = where(ignored, 0, weight.index_select(0, self.target).to(acc_dtype))

    def chunks(self):
        """(row slice, the chunk's input in acc dtype, its targets as a column, exp(shifted logits), their row sums,
        the rows' losses log-sum-exp - target logit) per chunk of rows."""
        n = self.input.shape[0]
        for start in range(0, n, self.chunk):
            stop = min(start + self.chunk, n)
            x = self.input[start:stop].to(self.acc_dtype)
            target = self.target[start:stop].unsqueeze(1)
            logits = x.matmul(self.weight.t())
            if self.bias is not None:
                logits.add_(self.bias)
            logits.sub_(logits.amax(1, keepdim=True))  # the log-sum-exp's shift: exp stays finite
            target_logit = logits.gather(1, target).squeeze(1)
            exps = logits.exp_()
            sums = exps.sum(1)
            yield slice(start, stop), x, target, exps, sums, sums.log().sub_(target_logit)


def _check_targets(target, num_classes):
    outside = (target < 0) | (target >= num_classes)
    if outside.any():
        value = int(target[outside][0])
        raise RuntimeError(f"linear_cross_entropy: index {value} is out of bounds for dimension 1 with size "
                           f"{num_classes}: targets must be class indices in [0, {num_classes}) or ignore_index")


def _row_losses(plan):
    """Each row's loss ``w[target] * (log-sum-exp - target logit)`` (0 on ignored rows), in the input dtype."""
    out = _creation.empty((plan.input.shape[0],), dtype=plan.dtype, device=plan.input.device)
    for rows, _, _, _, _, losses in plan.chunks():
        out[rows] = losses.mul_(plan.row_weights[rows])
    return out


def _loss_and_grads(plan, scales, need_input, need_weight, need_bias):
    """``sum(scales * row losses)`` and its gradients wrt input, linear weight and bias (None where not needed)."""
    n, features = plan.input.shape
    classes, device, acc = plan.weight.shape[0], plan.input.device, plan.acc_dtype
    # "compact" keeps no acc-dtype (C, F) accumulator: the weight gradient sums in the input dtype.
    weight_acc_dtype = plan.dtype if plan.policy == "compact" else acc
    # "accurate" keeps the input gradient in acc dtype until the end; the others round each chunk.
    input_acc_dtype = acc if plan.policy == "accurate" else plan.dtype
    grad_input = _creation.empty((n, features), dtype=input_acc_dtype, device=device) if need_input else None
    grad_weight = _creation.zeros((classes, features), dtype=weight_acc_dtype, device=device) if need_weight else None
    grad_bias = _creation.zeros((classes,), dtype=acc, device=device) if need_bias else None
    total = _creation.zeros((), dtype=acc, device=device)
    need_grads = need_input or need_weight or need_bias
    for rows, x, target, exps, sums, losses in plan.chunks():
        s = scales[rows]
        total.add_(losses.mul_(s).sum())
        if not need_grads:
            continue
        logit_grad = exps.mul_((s / sums).unsqueeze(1))  # s * softmax ...
        logit_grad.scatter_add_(1, target, s.neg().unsqueeze(1))  # ... - s * onehot(target)
        if need_bias:
            grad_bias.add_(logit_grad.sum(0))
        if need_input:
            grad_input[rows] = logit_grad.matmul(plan.weight)
        if need_weight:
            grad_weight.add_(logit_grad.t().matmul(x).to(weight_acc_dtype))
    return total.to(plan.dtype), grad_input, grad_weight, grad_bias


def _mean_scales(row_weights):
    total = row_weights.sum()
    return row_weights / where(total == 0, math.nan, total)  # every row NaN when no row counts, as the reference


class _ChunkedReducedLoss(Function):
    """``'mean'``/``'sum'``: loss and gradients in one chunked pass; the backward scales the stored gradients."""

    @staticmethod
    def forward(ctx, input, linear_weight, linear_bias, plan, reduction, needs, allow_retain_graph):
        scales = _mean_scales(plan.row_weights) if reduction == "mean" else plan.row_weights
        loss, *grads = _loss_and_grads(plan, scales, *needs)
        if reduction == "mean" and input.shape[0] == 0:
            loss.fill_(math.nan)  # an empty mean is 0/0
        ctx.grads = [None if g is None else g.to(operand.dtype)
                     for g, operand in zip(grads, (input, linear_weight, linear_bias))]
        ctx.allow_retain_graph = allow_retain_graph
        return loss

    @staticmethod
    def backward(ctx, grad_loss):
        grads = ctx.grads
        if grads is None:
            raise RuntimeError(_TWICE)
        with no_grad():
            if ctx.allow_retain_graph:
                scaled = [None if g is None else g * grad_loss for g in grads]
            else:
                ctx.grads = None  # PyTorch's op consumes its buffers in place: a second backward raises
                scaled = [None if g is None else g.mul_(grad_loss) for g in grads]
        return scaled[0], scaled[1], scaled[2], None, None, None, None


class _ChunkedRowLosses(Function):
    """``'none'``: the rows' losses; the backward recomputes the gradients with the upstream ones as row scales."""

    @staticmethod
    def forward(ctx, input, linear_weight, linear_bias, plan):
        ctx.plan = plan
        ctx.save_for_backward(input, linear_weight, linear_bias)  # (their versions: no in-place writes since)
        return _row_losses(plan)

    @staticmethod
    def backward(ctx, grad_rows):
        input, linear_weight, linear_bias = ctx.saved_tensors
        need_input, need_weight, need_bias = ctx.needs_input_grad[:3]
        plan = ctx.plan
        with no_grad():
            _, gi, gw, gb = _loss_and_grads(plan, plan.row_weights * grad_rows.to(plan.acc_dtype), need_input,
                                            need_weight, need_bias and linear_bias is not None)
            return (None if gi is None else gi.to(input.dtype), None if gw is None else gw.to(linear_weight.dtype),
                    None if gb is None else gb.to(linear_bias.dtype), None)


# PyTorch's grad_fn names (a custom op's generated backward).
_ChunkedReducedLoss._backward_cls.__name__ = \
    "GeneratedBackwardFor_torch_nn__linear_cross_entropy_batch_chunked_defaultBackward"
_ChunkedRowLosses._backward_cls.__name__ = \
    "GeneratedBackwardFor_torch_nn__linear_cross_entropy_batch_chunked_no_reduction_defaultBackward"


def _check_acc_dtype(dtype, acc_dtype):
    if dtype != acc_dtype and not (dtype in (_dtype.float16, _dtype.bfloat16) and acc_dtype == _dtype.float32):
        raise RuntimeError(f"linear_cross_entropy supports float32 acc_dtype with float16/bfloat16 inputs, but got "
                           f"{acc_dtype} acc_dtype and {dtype} inputs.")


def chunked_linear_cross_entropy(input, linear_weight, target, linear_bias, weight, reduction, ignore_index, options):
    """The loss of 2-D ``input`` ``(N, F)``, ``linear_weight`` ``(C, F)`` and int64 ``target`` ``(N,)`` with
    ``options`` resolved by ``LinearCrossEntropyOptions._adjust``."""
    if linear_weight.dtype != input.dtype:
        raise RuntimeError(f"linear_cross_entropy: expected input and linear_weight to have the same dtype, but got "
                           f"{input.dtype} and {linear_weight.dtype}; cast one of them")
    if tuple(target.shape) != tuple(input.shape[:1]):
        raise RuntimeError(f"linear_cross_entropy: expected target of shape {tuple(input.shape[:1])} for input of "
                           f"shape {tuple(input.shape)}, got {tuple(target.shape)}")
    num_classes = linear_weight.shape[0]
    if weight is not None and tuple(weight.shape) != (num_classes,):
        raise RuntimeError(f"weight tensor should be defined either for all {num_classes} classes or no classes but "
                           f"got weight tensor of shape: {list(weight.shape)}")
    _check_acc_dtype(input.dtype, options.acc_dtype)
    plan = _Plan(input, linear_weight, target, linear_bias, weight, ignore_index, options.batch_chunk_size,
                 options.acc_policy, options.acc_dtype)
    if reduction == "none":
        return _ChunkedRowLosses.apply(input, linear_weight, linear_bias, plan)
    on = GradState.enabled
    needs = (on and input.requires_grad, on and linear_weight.requires_grad,
             on and linear_bias is not None and linear_bias.requires_grad)
    return _ChunkedReducedLoss.apply(input, linear_weight, linear_bias, plan, reduction, needs,
                                     options.allow_retain_graph)
