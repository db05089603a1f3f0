"""Convolutions and sliding-window copies: ``conv1d/2d/3d``, ``conv_transpose1d/2d/3d``, ``unfold`` and ``fold``.

Each is one row of ``jitorch.ops.conv_ops`` (im2col into one BLAS matmul) plus PyTorch's argument checks and
messages; the convolution row adds the bias itself, transposed convolutions add it as a broadcast add.

>>> import jitorch
>>> from jitorch.nn._spatial_conv import conv2d
>>> conv2d(jitorch.ones(1, 1, 4, 4), jitorch.ones(2, 1, 3, 3), padding="same").shape
jitorch.Size([1, 2, 4, 4])
"""
from __future__ import annotations

import math

from .._dispatch import MODES, apply
from ..amp._cast_mode import autocast_lower
from ..autograd.grad_mode import is_grad_enabled
from ..ops.conv_layouts import STASH
from ..ops.conv_ops import COL2IM, CONSTANT_PAD, CONVOLUTION, CONVOLUTION_TRANSPOSE, IM2COL, conv_output_size, \
    windows_kept_under
from ._spatial_args import batchify, check_input_dims, layout_as, lower_type_name, ntuple, torch_type_name

__all__ = ["conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d", "unfold", "fold"]

_KEEP_WINDOWS_BYTES = 16 << 20  # training memory for time: beyond this the backward copies the windows again
_AXES = {1: ("width",), 2: ("height", "width"), 3: ("depth", "height", "width")}


def _check_weight_and_bias(input, weight, bias, groups, transposed):
    nd = weight.dim() - 2
    if weight.dim() != input.dim():
        raise RuntimeError(f"Expected {weight.dim()}-dimensional input for {weight.dim()}-dimensional weight "
                           f"{list(weight.shape)}, but got {input.dim()}-dimensional input of size "
                           f"{list(input.shape)} instead")
    if groups <= 0:
        raise RuntimeError("non-positive groups is not supported")
    if not transposed and weight.shape[0] % groups:
        raise RuntimeError(f"Given groups={groups}, expected weight to be divisible by {groups} at dimension 0, but "
                           f"got weight of size [{list(weight.shape)}] instead")
    expected = weight.shape[0] if transposed else weight.shape[1] * groups
    if input.shape[1] != expected:
        flag = "transposed=1, " if transposed else f"groups={groups}, "
        raise RuntimeError(f"Given {flag}weight of size {list(weight.shape)}, expected input{list(input.shape)} to "
                           f"have {expected} channels, but got {input.shape[1]} channels instead")
    if input.dtype != weight.dtype:
        raise RuntimeError(f"expected scalar type {torch_type_name(input.dtype)} but found "
                           f"{torch_type_name(weight.dtype)}")
    out_channels = weight.shape[1] * groups if transposed else weight.shape[0]
    if bias is not None:
        if bias.dim() != 1 or bias.shape[0] != out_channels:
            raise RuntimeError(f"Given weight of size {list(weight.shape)}, expected bias to be 1-dimensional with "
                               f"{out_channels} elements, but got bias of size {list(bias.shape)} instead")
        if bias.dtype != input.dtype:
            raise RuntimeError(f"Input type ({lower_type_name(input.dtype)}) and bias type "
                               f"({lower_type_name(bias.dtype)}) should be the same")
    return nd


def _check_geometry(stride, padding, dilation):
    if any(s <= 0 for s in stride):
        raise RuntimeError("non-positive stride is not supported")
    if any(p < 0 for p in padding):
        raise RuntimeError("negative padding is not supported")
    if any(d <= 0 for d in dilation):
        raise RuntimeError("dilation should be greater than zero")


def _same_padding(input, nd, kernel, stride, dilation):
    """(input padded on the right where the total is odd, symmetric padding): PyTorch's ``padding='same'``."""
    if any(s != 1 for s in stride):
        raise RuntimeError("padding='same' is not supported for strided convolutions")
    left, extra = [], []
    for d, k in zip(dilation, kernel):
        total = d * (k - 1)
        left.append(total // 2)
        extra.append(total - 2 * (total // 2))
    if any(extra):
        pads = ((0, 0), (0, 0)) + tuple((0, e) for e in extra)
        input = apply(CONSTANT_PAD, input, pads=pads, value=0)
    return input, tuple(left)


def _add_bias(out, bias, nd):
    return out if bias is None else out + bias.reshape((1, -1) + (1,) * nd)


def _convnd(name, nd, input, weight, bias, stride, padding, dilation, groups):
    check_input_dims(input, nd, name)
    input, unbatched = batchify(input, nd)
    _check_weight_and_bias(input, weight, bias, groups, transposed=False)
    kernel = tuple(weight.shape[2:])
    stride, dilation = ntuple(stride, nd, "stride"), ntuple(dilation, nd, "dilation")
    if isinstance(padding, str):
        if padding == "valid":
            padding = (0,) * nd
        elif padding == "same":
            _check_geometry(stride, (0,) * nd, dilation)
            input, padding = _same_padding(input, nd, kernel, stride, dilation)
        else:
            raise RuntimeError(f"Invalid padding string: '{padding}'")
    padding = ntuple(padding, nd, "padding")
    _check_geometry(stride, padding, dilation)
    padded = [s + 2 * p for s, p in zip(input.shape[2:], padding)]
    reach = [d * (k - 1) + 1 for d, k in zip(dilation, kernel)]
    if any(r > p for r, p in zip(reach, padded)):
        raise RuntimeError(f"Calculated padded input size per channel: ({' x '.join(map(str, padded))}). Kernel size: "
                           f"({' x '.join(map(str, reach))}). Kernel size can't be greater than actual input size")
    # The bias goes into the convolution row (added in place there; its gradient comes with the weight's).
    keep = _keep_windows(input, weight, kernel)
    if keep:
        STASH.want = True
    try:
        out = apply(CONVOLUTION, input, weight, bias, stride=stride, padding=padding, dilation=dilation, groups=groups)
    finally:
        if keep:
            STASH.want = False
            cols, STASH.cols = STASH.cols, None
    if keep and cols is not None and out.grad_fn is not None:
        out.grad_fn.conv_cols = cols  # the backward's weight gradient reuses the forward's window matrix
    return out.squeeze(0) if unbatched else layout_as(out, input, weight)


def _keep_windows(input, weight, kernel):
    """Whether the forward's window matrix should be kept for the weight gradient: eager autograd or a CPU graph
    capture (`conv_ops.windows_kept_under`), and small enough (it is ``prod(kernel)`` times the input)."""
    return (weight.requires_grad and is_grad_enabled() and windows_kept_under(MODES)
            and input.numel() * math.prod(kernel) * 4 <= _KEEP_WINDOWS_BYTES)


@autocast_lower
def conv1d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """1-D cross-correlation of ``(N, C_in, L)`` (or ``(C_in, L)``) with ``weight`` ``(C_out, C_in/groups, k)``."""
    return _convnd("conv1d", 1, input, weight, bias, stride, padding, dilation, groups)


@autocast_lower
def conv2d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """2-D cross-correlation; ``padding`` may be ints or ``'valid'``/``'same'`` (odd totals pad right, as torch)."""
    return _convnd("conv2d", 2, input, weight, bias, stride, padding, dilation, groups)


@autocast_lower
def conv3d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """3-D cross-correlation of ``(N, C_in, D, H, W)`` with ``(C_out, C_in/groups, kD, kH, kW)``."""
    return _convnd("conv3d", 3, input, weight, bias, stride, padding, dilation, groups)


def _check_output_padding(nd, output_padding, stride, dilation):
    if all(op < s or op < d for op, s, d in zip(output_padding, stride, dilation)):
        return
    axes = _AXES[nd]
    parts = [f"output_padding_{a}: {v}" for a, v in zip(axes, output_padding)]
    parts += [f"stride_{a}: {v}" for a, v in zip(axes, stride)]
    parts += [f"dilation_{a}: {v}" for a, v in zip(axes, dilation)]
    raise RuntimeError("output padding must be smaller than either stride or dilation, but got " + " ".join(parts))


def _conv_transposend(name, nd, input, weight, bias, stride, padding, output_padding, groups, dilation):
    if isinstance(padding, str):
        raise TypeError(f"{name}(): argument 'padding' must be tuple of ints, not str")
    check_input_dims(input, nd, name)
    input, unbatched = batchify(input, nd)
    _check_weight_and_bias(input, weight, bias, groups, transposed=True)
    if weight.shape[0] % groups:
        raise RuntimeError(f"Given groups={groups}, expected weight to be divisible by {groups} at dimension 0, but "
                           f"got weight of size [{list(weight.shape)}] instead")
    kernel = tuple(weight.shape[2:])
    stride, dilation = ntuple(stride, nd, "stride"), ntuple(dilation, nd, "dilation")
    padding, output_padding = ntuple(padding, nd, "padding"), ntuple(output_padding, nd, "output_padding")
    _check_geometry(stride, padding, dilation)
    _check_output_padding(nd, output_padding, stride, dilation)
    spatial = tuple((i - 1) * s - 2 * p + d * (k - 1) + op + 1
                    for i, s, p, d, k, op in zip(input.shape[2:], stride, padding, dilation, kernel, output_padding))
    if any(s <= 0 for s in spatial):
        raise RuntimeError(f"Given input size per channel: ({' x '.join(map(str, input.shape[2:]))}). Calculated "
                           f"output size per channel: ({' x '.join(map(str, spatial))}). Output size is too small")
    out = apply(CONVOLUTION_TRANSPOSE, input, weight, spatial=spatial, stride=stride, padding=padding,
                dilation=dilation, groups=groups)
    out = _add_bias(out, bias, nd)
    return out.squeeze(0) if unbatched else layout_as(out, input, weight)


@autocast_lower
def conv_transpose1d(input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1):
    """1-D transposed convolution; ``weight`` is ``(C_in, C_out/groups, k)``."""
    return _conv_transposend("conv_transpose1d", 1, input, weight, bias, stride, padding, output_padding, groups,
                             dilation)


@autocast_lower
def conv_transpose2d(input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1):
    """2-D transposed convolution (the gradient of ``conv2d`` in its input); ``weight`` ``(C_in, C_out/groups, kH,
    kW)``."""
    return _conv_transposend("conv_transpose2d", 2, input, weight, bias, stride, padding, output_padding, groups,
                             dilation)


@autocast_lower
def conv_transpose3d(input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1):
    """3-D transposed convolution; ``weight`` is ``(C_in, C_out/groups, kD, kH, kW)``."""
    return _conv_transposend("conv_transpose3d", 3, input, weight, bias, stride, padding, output_padding, groups,
                             dilation)


def _window_args(kernel_size, dilation, padding, stride):
    return (ntuple(kernel_size, 2, "kernel_size"), ntuple(dilation, 2, "dilation"), ntuple(padding, 2, "padding"),
            ntuple(stride, 2, "stride"))


def unfold(input, kernel_size, dilation=1, padding=0, stride=1):
    """Sliding local blocks (im2col): ``(N, C, H, W) -> (N, C * kH * kW, L)``; 3-D input is one unbatched image."""
    if input.dim() not in (3, 4):
        raise RuntimeError(f"Expected 3D or 4D (batch mode) tensor for input with possibly 0 batch size and non-zero "
                           f"dimensions for input, but got: {list(input.shape)}")
    kernel, dilation, padding, stride = _window_args(kernel_size, dilation, padding, stride)
    x, unbatched = batchify(input, 2)
    blocks = [conv_output_size(s, k, st, p, d) for s, k, st, p, d in zip(x.shape[2:], kernel, stride, padding,
                                                                        dilation)]
    if any(b < 1 for b in blocks):
        raise RuntimeError(f"Given input with spatial size {tuple(x.shape[2:])}, kernel_size={kernel}, "
                           f"dilation={dilation}, padding={padding}, calculated shape of the array of sliding blocks "
                           f"as {tuple(blocks)}, but its components must be at least one.")
    out = apply(IM2COL, x, kernel=kernel, stride=stride, padding=padding, dilation=dilation)
    return out.squeeze(0) if unbatched else out


def fold(input, output_size, kernel_size, dilation=1, padding=0, stride=1):
    """Sum sliding local blocks back into an image (col2im): ``(N, C * kH * kW, L) -> (N, C, *output_size)``."""
    if input.dim() not in (2, 3):
        raise RuntimeError(f"Expected 2D or 3D (batch mode) tensor for input with possibly 0 batch size and non-zero "
                           f"dimensions for input, but got: {list(input.shape)}")
    output_size = ntuple(output_size, 2, "output_size")
    kernel, dilation, padding, stride = _window_args(kernel_size, dilation, padding, stride)
    x, unbatched = (input.unsqueeze(0), True) if input.dim() == 2 else (input, False)
    k = math.prod(kernel)
    if x.shape[1] % k:
        raise RuntimeError(f"Expected size of input's dimension 1 to be divisible by the product of kernel_size, but "
                           f"got input.size(1)={x.shape[1]} and kernel_size={kernel}.")
    blocks = [conv_output_size(s, kk, st, p, d) for s, kk, st, p, d in zip(output_size, kernel, stride, padding,
                                                                          dilation)]
    if x.shape[2] != math.prod(blocks) or any(b < 1 for b in blocks):
        raise RuntimeError(f"Given output_size={output_size}, kernel_size={kernel}, dilation={dilation}, "
                           f"padding={padding}, stride={stride}, expected size of input's dimension 2 to match the "
                           f"calculated number of sliding blocks {blocks[0]} * {blocks[1]} = {math.prod(blocks)}, but "
                           f"got input.size(2)={x.shape[2]}.")
    out = apply(COL2IM, x, spatial=output_size, kernel=kernel, stride=stride, padding=padding, dilation=dilation)
    return out.squeeze(0) if unbatched else out
