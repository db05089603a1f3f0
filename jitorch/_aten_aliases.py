"""The ``torch.*`` spellings of ``nn.functional`` ops and other top-level functions, with ATen's signatures: losses
take ``reduction`` as an int (0 none, 1 mean, 2 sum), pools their ATen argument lists, cells their weights. Each is
a thin composite over the functional op, so gradients, autocast and compile work as for that op.

>>> import jitorch
>>> kl_div(jitorch.zeros(2).log_softmax(0), jitorch.full((2,), 0.5), 2)  # reduction=2: sum
tensor(0.)
>>> conv3d(jitorch.ones(1, 1, 2, 2, 2), jitorch.ones(1, 1, 2, 2, 2)).shape
jitorch.Size([1, 1, 1, 1, 1])
"""
from __future__ import annotations

import warnings

from . import _dtype
from ._tensor import Tensor
from .nn import functional as F
from .nn._functional_loss import reduce_loss
from .nn._spatial_sample import affine_grid_generator
from .nn.utils.weight_norm import norm_except_dim, weight_norm_of

__all__ = ["adaptive_avg_pool1d", "adaptive_max_pool1d", "alpha_dropout", "alpha_dropout_", "avg_pool1d", "bilinear",
           "binary_cross_entropy_with_logits", "celu_", "channel_shuffle", "native_channel_shuffle", "constant_pad_nd",
           "conv3d", "conv_transpose3d", "convolution", "cosine_embedding_loss", "ctc_loss", "dropout_",
           "feature_alpha_dropout", "feature_alpha_dropout_", "feature_dropout", "feature_dropout_",
           "hinge_embedding_loss", "kl_div", "margin_ranking_loss", "max_pool1d", "max_pool1d_with_indices",
           "max_pool2d", "max_pool3d", "native_layer_norm", "native_dropout", "poisson_nll_loss", "rms_norm",
           "rrelu_", "selu_", "threshold_", "triplet_margin_loss", "rsub", "fill", "nuclear_norm", "frobenius_norm",
           "is_neg", "grid_sampler", "grid_sampler_2d", "grid_sampler_3d", "affine_grid_generator", "gru_cell",
           "lstm_cell", "rnn_tanh_cell", "rnn_relu_cell", "unsafe_chunk", "unsafe_split", "norm_except_dim",
           "_weight_norm"]

_REDUCTIONS = ("none", "mean", "sum")


def _reduction(op, value):
    if isinstance(value, str):  # F's spelling, which some callers pass here too
        return value
    if value not in (0, 1, 2):
        raise ValueError(f"{op}: reduction must be 0 (none), 1 (mean) or 2 (sum), got {value!r}")
    return _REDUCTIONS[value]


# -- pools and convolutions -------------------------------------------------------------------------------------------
adaptive_avg_pool1d = F.adaptive_avg_pool1d

def adaptive_max_pool1d(input, output_size):
    """``(output, indices)``, as ATen's op (``F.adaptive_max_pool1d`` returns indices only on request)."""
    return F.adaptive_max_pool1d(input, output_size, return_indices=True)


avg_pool1d = F.avg_pool1d

def _pool_stride(stride):
    return None if stride is None or (isinstance(stride, (list, tuple)) and len(stride) == 0) else stride


def max_pool1d(input, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False):
    return F.max_pool1d(input, kernel_size, _pool_stride(stride), padding, dilation, ceil_mode)


def max_pool1d_with_indices(input, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False):
    return F.max_pool1d(input, kernel_size, _pool_stride(stride), padding, dilation, ceil_mode, return_indices=True)


def max_pool2d(input, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False):
    return F.max_pool2d(input, kernel_size, _pool_stride(stride), padding, dilation, ceil_mode)


def max_pool3d(input, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False):
    return F.max_pool3d(input, kernel_size, _pool_stride(stride), padding, dilation, ceil_mode)


conv3d = F.conv3d

conv_transpose3d = F.conv_transpose3d

def convolution(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups):
    """ATen's generic convolution: 1, 2 or 3 spatial dims from the weight, transposed or not."""
    spatial = weight.dim() - 2
    if spatial not in (1, 2, 3):
        raise RuntimeError(f"convolution: expected a 3-D, 4-D or 5-D weight, got {weight.dim()}-D of shape "
                           f"{list(weight.shape)}")
    if transposed:
        fn = (F.conv_transpose1d, F.conv_transpose2d, F.conv_transpose3d)[spatial - 1]
        return fn(input, weight, bias, stride, padding, output_padding, groups, dilation)
    fn = (F.conv1d, F.conv2d, F.conv3d)[spatial - 1]
    return fn(input, weight, bias, stride, padding, dilation, groups)


def constant_pad_nd(input, pad, value=0):
    return F.pad(input, tuple(pad), mode="constant", value=value)


bilinear = F.bilinear

channel_shuffle = F.channel_shuffle
native_channel_shuffle = F.native_channel_shuffle


def grid_sampler(input, grid, interpolation_mode, padding_mode, align_corners):
    """ATen's ``grid_sampler``, modes as ints: 0 bilinear, 1 nearest, 2 bicubic; 0 zeros, 1 border, 2 reflection."""
    modes, paddings = ("bilinear", "nearest", "bicubic"), ("zeros", "border", "reflection")
    if interpolation_mode not in (0, 1, 2) or padding_mode not in (0, 1, 2):
        raise RuntimeError(f"grid_sampler: interpolation_mode {interpolation_mode} / padding_mode {padding_mode} "
                           "out of range: each is 0, 1 or 2")
    return F.grid_sample(input, grid, modes[interpolation_mode], paddings[padding_mode], align_corners)


def _grid_sampler_nd(nd, input, grid, interpolation_mode, padding_mode, align_corners):
    if input.dim() != nd + 2 or grid.dim() != nd + 2:
        raise RuntimeError(f"grid_sampler(): expected {nd + 2}D input and grid with same number of dimensions, but "
                           f"got input with sizes {list(input.shape)} and grid with sizes {list(grid.shape)}")
    return grid_sampler(input, grid, interpolation_mode, padding_mode, align_corners)


def grid_sampler_2d(input, grid, interpolation_mode, padding_mode, align_corners):
    """ATen's ``grid_sampler_2d``: ``grid_sampler`` for 4-D input and grid only."""
    return _grid_sampler_nd(2, input, grid, interpolation_mode, padding_mode, align_corners)


def grid_sampler_3d(input, grid, interpolation_mode, padding_mode, align_corners):
    """ATen's ``grid_sampler_3d``: ``grid_sampler`` for 5-D input and grid only (no bicubic mode)."""
    return _grid_sampler_nd(3, input, grid, interpolation_mode, padding_mode, align_corners)


# -- losses -------------------------------------------------------------------------------------------------------
def binary_cross_entropy_with_logits(input, target, weight=None, pos_weight=None, reduction=1):
    return F.binary_cross_entropy_with_logits(input, target, weight, reduction=_reduction(
        "binary_cross_entropy_with_logits", reduction), pos_weight=pos_weight)


def cosine_embedding_loss(input1, input2, target, margin=0.0, reduction=1):
    return F.cosine_embedding_loss(input1, input2, target, margin, reduction=_reduction("cosine_embedding_loss",
                                                                                        reduction))


def ctc_loss(log_probs, targets, input_lengths, target_lengths, blank=0, reduction=1, zero_infinity=False):
    return F.ctc_loss(log_probs, targets, input_lengths, target_lengths, blank,
                      _reduction("ctc_loss", reduction), zero_infinity)


def hinge_embedding_loss(input, target, margin=1.0, reduction=1):
    return F.hinge_embedding_loss(input, target, margin, reduction=_reduction("hinge_embedding_loss", reduction))


def kl_div(input, target, reduction=1, *, log_target=False):
    """ATen's ``kl_div``: ``reduction=1`` is the mean over elements (F's ``'mean'``, without F's warning that it is
    not ``'batchmean'``: the ATen op does not give it)."""
    pointwise = F.kl_div(input, target, reduction="none", log_target=log_target)
    return reduce_loss(pointwise, _reduction("kl_div", reduction))


def margin_ranking_loss(input1, input2, target, margin=0.0, reduction=1):
    return F.margin_ranking_loss(input1, input2, target, margin, reduction=_reduction("margin_ranking_loss",
                                                                                      reduction))


def poisson_nll_loss(input, target, log_input, full, eps, reduction):
    return F.poisson_nll_loss(input, target, log_input, full, eps=eps, reduction=_reduction("poisson_nll_loss",
                                                                                            reduction))


def triplet_margin_loss(anchor, positive, negative, margin=1.0, p=2.0, eps=1e-6, swap=False, reduction=1):
    return F.triplet_margin_loss(anchor, positive, negative, margin, p, eps, swap,
                                 reduction=_reduction("triplet_margin_loss", reduction))


# -- normalization and dropout --------------------------------------------------------------------------------------
rms_norm = F.rms_norm

def native_layer_norm(input, normalized_shape, weight, bias, eps):
    """``(output, mean, rstd)``, the statistics shaped as the input with the normalized dims kept as 1s; as in ATen
    they are not differentiable outputs (the output's gradient already accounts for them)."""
    dims = tuple(range(input.dim() - len(tuple(normalized_shape)), input.dim()))
    x = (input.float() if input.dtype in (_dtype.float16, _dtype.bfloat16) else input).detach()
    # Summed shifted by each row's first element, as the row kernels: a constant row's mean is exactly its value.
    first = x[(Ellipsis,) + (slice(0, 1),) * len(dims)]
    offset = x - first
    shift = offset.mean(dims, keepdim=True)
    mean, centered = first + shift, offset - shift
    rstd = ((centered * centered).mean(dims, keepdim=True) + eps).rsqrt()
    out = F.layer_norm(input, tuple(normalized_shape), weight, bias, eps)
    return out, mean, rstd


def native_dropout(input, p, train):
    """``(output, mask)``: the kept elements scaled by 1 / (1 - p), and the boolean mask (all True when not
    training)."""
    from ._creation import ones_like

    if train is False or p == 0 and train is None:
        return input.clone(), ones_like(input, dtype=_dtype.bool)
    if p == 1:
        from ._creation import zeros_like

        return input * 0, zeros_like(input, dtype=_dtype.bool)
    keep = F.dropout(ones_like(input), p, training=True) != 0
    return input * keep / (1 - p), keep


alpha_dropout = F.alpha_dropout  # (input, p, train): F's positional order


feature_alpha_dropout = F.feature_alpha_dropout  # (input, p, train): F's positional order


def feature_dropout(input, p, train):
    """Dropout of whole channels (dim 1) of an input with at least 2 dims, as ``dropout2d`` without its rank
    checks."""
    if not train or p == 0:
        return input.clone() if input.requires_grad else input
    if input.dim() < 2:
        raise RuntimeError(f"feature_dropout: expected an input with at least 2 dims (batch, channels, ...), got "
                           f"{input.dim()}-D")
    from ._creation import ones

    mask_shape = tuple(input.shape[:2]) + (1,) * (input.dim() - 2)
    mask = F.dropout(ones(mask_shape, dtype=input.dtype, device=input.device), p, training=True)
    return input * mask


def dropout_(input, p, train):
    return F.dropout(input, p, train, inplace=True)


def alpha_dropout_(input, p, train):
    return F.alpha_dropout(input, p, train, inplace=True)


def feature_alpha_dropout_(input, p, train):
    return F.feature_alpha_dropout(input, p, train, inplace=True)


def feature_dropout_(input, p, train):
    return input.copy_(feature_dropout(input, p, train))


def celu_(input, alpha=1.0):
    return F.celu(input, alpha, inplace=True)


def selu_(input):
    return F.selu(input, inplace=True)


def rrelu_(input, lower=1.0 / 8, upper=1.0 / 3, training=False, generator=None):
    return F.rrelu(input, lower, upper, training, inplace=True)


def threshold_(input, threshold, value):
    return F.threshold(input, threshold, value, inplace=True)


# -- recurrent cells (ATen's: weights passed in) -----------------------------------------------------------------------
def _gates(input, hx, w_ih, w_hh, b_ih, b_hh):
    return F.linear(input, w_ih, b_ih) + F.linear(hx, w_hh, b_hh)


def rnn_tanh_cell(input, hx, w_ih, w_hh, b_ih=None, b_hh=None):
    return _gates(input, hx, w_ih, w_hh, b_ih, b_hh).tanh()


def rnn_relu_cell(input, hx, w_ih, w_hh, b_ih=None, b_hh=None):
    return _gates(input, hx, w_ih, w_hh, b_ih, b_hh).relu()


def lstm_cell(input, hx, w_ih, w_hh, b_ih=None, b_hh=None):
    """``(h, c)`` of one LSTM step; ``hx`` is ``(h, c)``; gates in PyTorch's order (input, forget, cell, output)."""
    h, c = hx
    i, f, g, o = _gates(input, h, w_ih, w_hh, b_ih, b_hh).chunk(4, -1)
    c = f.sigmoid() * c + i.sigmoid() * g.tanh()
    return o.sigmoid() * c.tanh(), c


def gru_cell(input, hx, w_ih, w_hh, b_ih=None, b_hh=None):
    """One GRU step in PyTorch's gate order (reset, update, new), the reset gate applied to ``W_hn h + b_hn``."""
    r_i, z_i, n_i = F.linear(input, w_ih, b_ih).chunk(3, -1)
    r_h, z_h, n_h = F.linear(hx, w_hh, b_hh).chunk(3, -1)
    r, z = (r_i + r_h).sigmoid(), (z_i + z_h).sigmoid()
    n = (n_i + r * n_h).tanh()
    return (1 - z) * n + z * hx


# -- other top-level functions ------------------------------------------------------------------------------------
def rsub(input, other, alpha=1):
    """``other - alpha * input``."""
    return other - input * alpha if alpha != 1 else other - input


def fill(input, value):
    """A new tensor like ``input`` holding ``value`` (a number or a 0-d tensor) everywhere."""
    if isinstance(value, Tensor) and value.dim() != 0:
        raise RuntimeError(f"fill only supports 0-dimension value tensor but got tensor with {value.dim()} "
                           "dimensions.")
    return input.clone().fill_(value)


def nuclear_norm(input, dim=None, keepdim=False):
    from .linalg import matrix_norm

    warnings.warn("at::nuclear_norm is deprecated and it is just left for JIT compatibility. It will be removed in a "
                  "future PyTorch release. Please use `linalg.matrix_norm(A, 'nuc', dim, keepdim)` instead",
                  UserWarning, stacklevel=2)
    if isinstance(dim, bool):  # nuclear_norm(input, keepdim) positionally
        dim, keepdim = None, dim
    return matrix_norm(input, "nuc", dim=(-2, -1) if dim is None else tuple(dim), keepdim=keepdim)


def frobenius_norm(input, dim, keepdim=False):
    from .linalg import vector_norm

    warnings.warn("at::frobenius_norm is deprecated and it is just left for JIT compatibility. It will be removed in "
                  "a future PyTorch release. Please use `linalg.vector_norm(A, 2., dim, keepdim)` instead",
                  UserWarning, stacklevel=2)
    dims = (dim,) if isinstance(dim, int) else tuple(dim)
    return vector_norm(input, 2, dim=dims, keepdim=keepdim)


def is_neg(input):
    """False: jitorch has no lazy negation bit (every negation is computed)."""
    return False


def _writable_pieces(views):
    # The unsafe_ variants exist to take in-place writes: their views are not marked as multi-output ones.
    for v in views:
        if v._nograd_view is not None and v._nograd_view.kind == "multi":
            v._nograd_view = None
    return views


def unsafe_chunk(input, chunks, dim=0):
    return _writable_pieces(input.chunk(chunks, dim))


def unsafe_split(tensor, split_size_or_sections, dim=0):
    return _writable_pieces(tensor.split(split_size_or_sections, dim))



def _weight_norm(v, g, dim=0):
    """``v * (g / norm_except_dim(v, 2, dim))``: the weight that ``nn.utils.weight_norm`` rebuilds before each call."""
    return weight_norm_of(v, g, dim)
