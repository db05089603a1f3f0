"""ATen's native forms that decomposition tables and older layer code call by name: ``native_batch_norm`` and
``native_group_norm`` (the output with the saved statistics) and ``conv_tbc`` (a convolution over
time-batch-channel input, fairseq's layout). Each is a composite of jitorch's own functions, so gradients flow.

>>> import jitorch
>>> out, mean, invstd = native_batch_norm(jitorch.ones(4, 2), None, None, None, None, True, 0.1, 1e-5)
>>> out.shape, mean.tolist()
(jitorch.Size([4, 2]), [1.0, 1.0])
"""
from __future__ import annotations

import math

__all__ = ["native_batch_norm", "native_group_norm", "conv_tbc"]


def native_batch_norm(input, weight, bias, running_mean, running_var, training, momentum, eps):
    """``(output, save_mean, save_invstd)`` of batch norm over every dim but 1; in training the batch statistics
    (and updates the running ones as ``batch_norm`` does), in evaluation two empty tensors.

    >>> import jitorch
    >>> native_batch_norm(jitorch.ones(3, 2), None, None, jitorch.zeros(2), jitorch.ones(2), False, 0.1, 1e-5)[1]
    tensor([])
    """
    import jitorch
    import jitorch.nn.functional as F

    out = F.batch_norm(input, running_mean, running_var, weight, bias, training, momentum, eps)
    if not training:
        empty = input.new_empty((0,))
        return out, empty, empty.clone()
    dims = [d for d in range(input.dim()) if d != 1]
    with jitorch.no_grad():  # torch's saved statistics carry no history (unlike group norm's)
        var, mean = jitorch.var_mean(input, dims, correction=0)
        return out, mean, jitorch.rsqrt(var + eps)


def native_group_norm(input, weight, bias, N, C, HxW, group, eps):
    """``(output, mean, rstd)`` of group norm; ``mean`` and ``rstd`` are (N, group).

    >>> import jitorch
    >>> native_group_norm(jitorch.ones(2, 4, 3), None, None, 2, 4, 3, 2, 1e-5)[1].shape
    jitorch.Size([2, 2])
    """
    import jitorch
    import jitorch.nn.functional as F

    if input.shape[0] != N or input.shape[1] != C or math.prod(input.shape[2:]) != HxW:
        raise RuntimeError(f"native_group_norm: input of shape {tuple(input.shape)} does not match N={N}, C={C}, "
                           f"HxW={HxW}")
    out = F.group_norm(input, group, weight, bias, eps)
    grouped = input.reshape(N, group, (C // group) * HxW)   # (-1 cannot be inferred for an empty batch)
    var, mean = jitorch.var_mean(grouped, -1, correction=0)
    return out, mean, jitorch.rsqrt(var + eps)


def conv_tbc(input, weight, bias, pad=0):
    """A 1-D convolution of ``input`` (time, batch, in_channels) with ``weight`` (kernel, in_channels,
    out_channels) and ``bias`` (out_channels), ``pad`` steps of zeros at both ends; (time', batch, out_channels).

    >>> import jitorch
    >>> conv_tbc(jitorch.ones(5, 2, 3), jitorch.ones(3, 3, 4), jitorch.zeros(4), 1).shape
    jitorch.Size([5, 2, 4])
    """
    import jitorch.nn.functional as F

    if input.dim() != 3 or weight.dim() != 3 or bias.dim() != 1:
        raise RuntimeError(f"conv_tbc: input must be 3-D (time, batch, channels), weight 3-D (kernel, in, out) and "
                           f"bias 1-D, got {tuple(input.shape)}, {tuple(weight.shape)} and {tuple(bias.shape)}")
    if input.shape[2] != weight.shape[1] or weight.shape[2] != bias.shape[0]:
        raise RuntimeError(f"conv_tbc: channels disagree: input {tuple(input.shape)}, weight {tuple(weight.shape)}, "
                           f"bias {tuple(bias.shape)}")
    # (T, B, C) -> (B, C, T); conv1d's weight is (out, in, kernel)
    out = F.conv1d(input.permute(1, 2, 0), weight.permute(2, 1, 0), bias, padding=pad)
    return out.permute(2, 0, 1)
