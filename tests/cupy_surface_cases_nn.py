"""The nn.functional, random-sampling, device-move, sparse and double-backward cases of the CuPy-surface sweep,
added to ``cupy_surface_cases.CASES`` on import (after the cases of that module, as before the split)."""
from __future__ import annotations

from jitorch import _dispatch
from jitorch.ops import OPS
from jitorch.ops import rnn_ops

from cupy_surface_cases import case


# nn.functional: convolutions, windows, padding, activations, normalization, losses.
_NN_PARTS = ("spatial_conv", "spatial_pool", "spatial_pad", "spatial_resample", "spatial_sample", "functional_loss",
             "functional_loss_extra", "functional_activation", "functional_core", "functional_norm",
             "functional_dropout", "functional_attention", "functional_sparse")


def _nn(name):
    """A ``jitorch.nn.functional`` function (from its implementation module while ``functional`` is being written)."""
    import importlib

    for module in ("jitorch.nn.functional", *(f"jitorch.nn._{part}" for part in _NN_PARTS)):
        try:
            found = getattr(importlib.import_module(module), name, None)
        except ImportError:
            continue
        if found is not None:
            return found
    raise AttributeError(f"no nn.functional.{name}")


case("conv", lambda t, m: (_nn("conv1d")(m.f(2, 2, 7), m.f(3, 2, 3), m.f(3), stride=2, padding=1),
                           _nn("conv2d")(m.f(1, 4, 5, 5), m.f(4, 2, 2, 3), groups=2, dilation=(2, 1)),
                           _nn("conv3d")(m.f(1, 1, 3, 4, 4), m.f(2, 1, 2, 2, 2), padding=1),
                           _nn("conv2d")(m.f(1, 2, 4, 4).half(), m.f(2, 2, 2, 2).half())))
case("conv_transpose", lambda t, m: (_nn("conv_transpose1d")(m.f(1, 2, 5), m.f(2, 3, 3), m.f(3), stride=2),
                                     _nn("conv_transpose2d")(m.f(2, 2, 3, 3), m.f(2, 1, 2, 2), stride=2, padding=1,
                                                             output_padding=1, groups=2)))
case("im2col_col2im", lambda t, m: (lambda cols: (cols, _nn("fold")(cols, (5, 5), 3, padding=1)))(
    _nn("unfold")(m.f(1, 2, 5, 5), 3, padding=1)))
case("max_pool", lambda t, m: (_nn("max_pool2d")(m.f(1, 2, 5, 5), 2, return_indices=True),
                               _nn("max_pool1d")(m.f(1, 2, 7), 3, 2, padding=1, ceil_mode=True),
                               _nn("max_pool3d")(m.f(1, 1, 4, 4, 4), 2, dilation=1),
                               _nn("max_pool2d")(m.i(1, 1, 4, 4).float(), 2)))
# max_pool_scatter: the disjoint-window gradient row (stride past the window, padding).
case("max_pool_scatter", lambda t, m: (_nn("max_pool2d")(m.f(2, 2, 7, 7), 2, 3, padding=1),))
case("adaptive_pool", lambda t, m: (_nn("adaptive_max_pool2d")(m.f(1, 2, 5, 7), (2, 3), return_indices=True),
                                    _nn("adaptive_max_pool1d")(m.f(2, 3, 5), 3),
                                    _nn("adaptive_avg_pool2d")(m.f(1, 2, 5, 5), 2),
                                    _nn("avg_pool2d")(m.f(1, 2, 5, 5), 2, padding=1)))
case("pad", lambda t, m: (_nn("pad")(m.f(1, 2, 3, 3), (1, 2, 0, 1)), _nn("pad")(m.f(2, 3), (-1, 1), value=2.0),
                          _nn("pad")(m.f(1, 2, 4), (2, 1), mode="reflect"),
                          _nn("pad")(m.f(1, 2, 3, 3), (1, 1, 1, 1), mode="replicate")))
case("activations", lambda t, m: (lambda x: tuple(_nn(n)(x) for n in (
    "relu6", "leaky_relu", "elu", "selu", "celu", "gelu", "silu", "mish", "softplus", "softsign", "hardtanh",
    "hardswish", "hardsigmoid", "logsigmoid", "tanhshrink", "softshrink", "hardshrink")) + (
    _nn("gelu")(x, approximate="tanh"), _nn("glu")(x, -1), _nn("threshold")(x, 0.1, -1.0),
    _nn("prelu")(x, m.f(1))))(m.f(3, 4)))
case("linear_softmax", lambda t, m: (_nn("linear")(m.f(2, 3), m.f(4, 3), m.f(4)), _nn("softmin")(m.f(2, 3), 1),
                                     _nn("bilinear")(m.f(2, 3), m.f(2, 2), m.f(4, 3, 2), m.f(4)),
                                     _nn("log_softmax")(m.f(2, 3), -1)))
case("linear_row", lambda t, m: (_nn("linear")(m.f(2, 3, 4), m.f(5, 4), m.f(5)), _nn("linear")(m.f(4), m.f(2, 4)),
                                 _nn("linear")(m.f(3, 4, dtype="float64"), m.f(2, 4, dtype="float64"))))
case("fused_rows", lambda t, m: (_nn("softmax")(m.f(2, 3, 4), 1), _nn("log_softmax")(m.f(3, 4), 0),
                                 _nn("layer_norm")(m.f(2, 3, 4), (3, 4), m.f(3, 4), m.f(3, 4)),
                                 _nn("layer_norm")(m.f(3, 4), (4,)),
                                 _nn("cross_entropy")(m.f(4, 5), m.i(4, hi=5), ignore_index=2),
                                 _nn("nll_loss")(m.f(4, 5), m.i(4, hi=5), reduction="none")))
# The recurrent scan rows and their backward rows (LSTM with a projection, reverse directions, GRU's b_hh, relu), in
# float64: float32 CPU arrays take the generated step kernels (rnn_native), which the surface run would not.
case("rnn_scan_rows", lambda t, m: (
    rnn_ops.scan("LSTM", m.d(3, 2, 8), (m.d(2, 1), m.d(2, 2)), m.d(8, 1), w_hr=m.d(1, 2), reverse=True),
    rnn_ops.scan("LSTM", m.d(3, 2, 8), (m.d(2, 2), m.d(2, 2)), m.d(8, 2)),
    rnn_ops.scan("GRU", m.d(3, 2, 6), (m.d(2, 2),), m.d(6, 2), b_hh=m.d(6)),
    rnn_ops.scan("GRU", m.d(3, 2, 6), (m.d(2, 2),), m.d(6, 2), reverse=True),
    rnn_ops.scan("RNN", m.d(3, 2, 2), (m.d(2, 2),), m.d(2, 2), relu=True, reverse=True),
    rnn_ops.scan("RNN", m.d(3, 2, 2), (m.d(2, 2),), m.d(2, 2))))
case("lstm_cell_row", lambda t, m: (
    rnn_ops.lstm_cell(m.d(2, 3), m.d(2, 4), m.d(2, 4), m.d(16, 3), m.d(16, 4), m.d(16), m.d(16)),
    rnn_ops.lstm_cell(m.d(2, 3), m.d(2, 4), m.d(2, 4), m.d(16, 3), m.d(16, 4))))
# A compiled training graph's convolution that also returns its window matrix (jitorch._compile.decompose).
case("convolution_cols", lambda t, m: _dispatch.apply(OPS["convolution_cols"], m.f(2, 3, 6, 6, grad=False),
                                                      m.f(4, 3, 3, 3, grad=False), m.f(4, grad=False),
                                                      stride=(1, 1), padding=(1, 1), dilation=(1, 1), groups=1))
# The range check a compiled nll_loss keeps on the host (jitorch._compile.decompose).
case("nll_check_targets", lambda t, m: _dispatch.apply(OPS["nll_check_targets"], m.i(4, hi=5), classes=5,
                                                       ignore_index=2))
case("norm_layers", lambda t, m: (_nn("layer_norm")(m.f(2, 3, 4), (4,), m.f(4), m.f(4)),
                                  _nn("batch_norm")(m.f(4, 3, 2), t.zeros(3), t.ones(3), m.f(3), m.f(3), training=True),
                                  _nn("group_norm")(m.f(2, 4, 3), 2, m.f(4), m.f(4)),
                                  _nn("instance_norm")(m.f(2, 3, 4)), _nn("normalize")(m.f(3, 4), dim=1),
                                  _nn("rms_norm")(m.f(2, 4), (4,), m.f(4))))
# bfloat16 batch norm in training: ATen's reduced-type rows (jitorch/ops/half_batch_norm.py), forward and backward.
case("half_batch_norm", lambda t, m: _nn("batch_norm")(m.f(4, 3, 2).to(t.bfloat16), t.zeros(3, dtype=t.bfloat16),
                                                       t.ones(3, dtype=t.bfloat16), m.f(3).to(t.bfloat16),
                                                       m.f(3).to(t.bfloat16), training=True))
case("losses", lambda t, m: (
    _nn("binary_cross_entropy")(m.f(2, 3, lo=0.05, hi=0.95), m.f(2, 3, lo=0, hi=1, grad=False)),
    _nn("binary_cross_entropy")(m.values([0.0, 1.0, 0.5]), m.values([0.0, 1.0, 1.0], grad=False), reduction="none"),
    _nn("binary_cross_entropy_with_logits")(m.f(2, 3), m.f(2, 3, lo=0, hi=1, grad=False)),
    _nn("cross_entropy")(m.f(4, 5), m.i(4), label_smoothing=0.1), _nn("nll_loss")(m.f(4, 5), m.i(4), reduction="sum"),
    _nn("cross_entropy")(m.f(2, 3, 4), m.i(2, 4, hi=3), ignore_index=1), _nn("mse_loss")(m.f(3), m.f(3)),
    _nn("l1_loss")(m.f(3), m.f(3)), _nn("smooth_l1_loss")(m.f(3), m.f(3)), _nn("huber_loss")(m.f(3), m.f(3)),
    _nn("kl_div")(m.f(2, 3), m.f(2, 3), reduction="batchmean", log_target=True),
    _nn("margin_ranking_loss")(m.f(3), m.f(3), m.values([1.0, -1.0, 1.0], grad=False)),
    _nn("multi_margin_loss")(m.f(3, 4), m.i(3, hi=4)), _nn("triplet_margin_loss")(m.f(2, 3), m.f(2, 3), m.f(2, 3))))
case("embedding_attention", lambda t, m: (
    _nn("embedding")(m.i(2, 3), m.f(5, 4)), _nn("embedding")(m.i(2, 3), m.f(5, 4), sparse=True),
    _nn("one_hot")(m.i(4), 5),
    _nn("embedding_bag")(m.i(6), m.f(5, 3), t.tensor([0, 2]), mode="max"),
    _nn("scaled_dot_product_attention")(m.f(2, 3, 4), m.f(2, 5, 4), m.f(2, 5, 4), is_causal=False),
    _nn("cosine_similarity")(m.f(3, 4), m.f(3, 4)), _nn("pairwise_distance")(m.f(3, 4), m.f(3, 4)),
    _nn("pdist")(m.f(4, 3))))
case("resample", lambda t, m: (_nn("interpolate")(m.f(1, 2, 3, 3), scale_factor=2, mode="nearest"),
                               _nn("interpolate")(m.f(1, 2, 3, 3), size=(4, 7), mode="nearest"),
                               _nn("interpolate")(m.f(1, 2, 3, 3), size=(4, 5), mode="bilinear", align_corners=False),
                               _nn("interpolate")(m.f(1, 2, 3), size=5, mode="linear"),
                               _nn("interpolate")(m.f(1, 2, 3, 3), scale_factor=2, mode="bicubic"),
                               _nn("interpolate")(m.f(1, 1, 2, 2, 2), size=3, mode="trilinear"),
                               _nn("pixel_shuffle")(m.f(1, 4, 2, 2), 2),
                               _nn("grid_sample")(m.f(1, 2, 4, 4), m.f(1, 3, 3, 2, lo=-1, hi=1), align_corners=True),
                               _nn("affine_grid")(m.f(1, 2, 3), (1, 1, 3, 3), align_corners=False)))
case("dropout", lambda t, m: (_nn("dropout")(m.f(4, 5), 0.3), _nn("dropout2d")(m.f(2, 3, 2, 2), 0.5),
                              _nn("alpha_dropout")(m.f(6), 0.2, training=True)))

# Random sampling that goes through rows, and a device move (a CPU-to-CPU copy is the only one here).
case("random", lambda t, m: (t.normal(m.f(3), m.f(3, lo=0.5)), t.bernoulli(m.f(4, lo=0, hi=1, grad=False)),
                             t.multinomial(m.f(2, 4, lo=0.1, hi=1, grad=False), 3),
                             t.nn.init.uniform_(t.empty(3)), m.f(3).new_empty(2).normal_(),
                             t.rand_like(m.f(2)) * m.f(2), t.poisson(m.f(3, lo=1, hi=3, grad=False)),
                             t.randperm(5), t.randint(0, 4, (3,))))
case("to_device_row", lambda t, m: _dispatch.apply(OPS["to_device"], m.f(2, 3), device_type="cpu", index=None,
                                                   source=("cpu", None)))
# Sparse products (scipy.sparse on the host, cupyx.scipy.sparse on CUDA): coalesced, uncoalesced and transposed.
case("sparse_mm", lambda t, m: (lambda s, d: (t.sparse.mm(s, d), t.sparse.mm(s.coalesce(), d), m.f(4, 2) @ s,
                                              s.to_dense()))(
    t.sparse_coo_tensor(t.tensor([[0, 1, 1, 0], [2, 0, 2, 2]]), m.f(4), (2, 3)), m.f(3, 2)))
case("autograd_double_backward", lambda t, m: (lambda x: t.autograd.grad((x.sin() * x).sum(), x,
                                                                        create_graph=True)[0] * x)(m.f(4)))
