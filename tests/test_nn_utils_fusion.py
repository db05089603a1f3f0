"""nn.utils.fusion, the weight memory-format converters, skip_init, torch.utils.hooks and torch.types against torch."""
import copy

import numpy as np
import pytest
import torch

import jitorch


def _load(dst, src):
    dst.load_state_dict({k: jitorch.tensor(v.detach().numpy()) for k, v in src.state_dict().items()})


def _trained_bn(m, bn):
    # Non-trivial running statistics and affine parameters, the same in both libraries.
    rng = np.random.default_rng(3)
    with m.no_grad():
        bn.running_mean.copy_(m.tensor(rng.standard_normal(bn.num_features).astype(np.float32)))
        bn.running_var.copy_(m.tensor(rng.uniform(0.5, 2.0, bn.num_features).astype(np.float32)))
        if bn.weight is not None:
            bn.weight.copy_(m.tensor(rng.uniform(0.5, 1.5, bn.num_features).astype(np.float32)))
            bn.bias.copy_(m.tensor(rng.standard_normal(bn.num_features).astype(np.float32)))
    return bn


@pytest.mark.parametrize("kind", ["conv", "conv_nobias", "conv_transpose", "linear", "bn_no_affine"])
def test_fusions_match_torch_and_the_unfused_pair(kind):
    x = np.random.default_rng(0).standard_normal((2, 3, 6, 6) if kind != "linear" else (4, 5)).astype(np.float32)
    outs = []
    for m in (torch, jitorch):
        m.manual_seed(0)
        if kind == "linear":
            layer, bn = m.nn.Linear(5, 4), m.nn.BatchNorm1d(4)
        elif kind == "conv_transpose":
            layer, bn = m.nn.ConvTranspose2d(3, 4, 3), m.nn.BatchNorm2d(4)
        else:
            layer = m.nn.Conv2d(3, 4, 3, bias=kind != "conv_nobias")
            bn = m.nn.BatchNorm2d(4, affine=kind != "bn_no_affine")
        outs.append((layer, _trained_bn(m, bn)))
    (t_layer, t_bn), (j_layer, j_bn) = outs
    _load(j_layer, t_layer)
    _load(j_bn, t_bn)
    results = []
    for m, layer, bn in ((torch, t_layer, t_bn), (jitorch, j_layer, j_bn)):
        layer.eval(), bn.eval()
        if kind == "linear":
            fused = m.nn.utils.fusion.fuse_linear_bn_eval(layer, bn)
        else:
            fused = m.nn.utils.fusion.fuse_conv_bn_eval(layer, bn, transpose=kind == "conv_transpose")
        with m.no_grad():
            results.append((fused(m.tensor(x)).numpy(), bn(layer(m.tensor(x))).numpy(), fused))
        assert isinstance(fused.weight, m.nn.Parameter) and fused is not layer
    np.testing.assert_allclose(results[1][0], results[0][0], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(results[1][0], results[1][1], rtol=1e-5, atol=1e-5)


def test_fusion_refuses_training_mode():
    with pytest.raises(AssertionError, match="Fusion only for eval"):
        jitorch.nn.utils.fuse_conv_bn_eval(jitorch.nn.Conv2d(1, 2, 1), jitorch.nn.BatchNorm2d(2))


def test_weight_memory_format_converters_and_skip_init():
    for m in (torch, jitorch):
        net = m.nn.Sequential(m.nn.Conv2d(3, 4, 3), m.nn.Sequential(m.nn.ConvTranspose2d(4, 2, 3)), m.nn.Linear(2, 2))
        out = m.nn.utils.convert_conv2d_weight_memory_format(net, m.channels_last)
        assert out is net
        assert net[0].weight.is_contiguous(memory_format=m.channels_last)
        assert net[1][0].weight.is_contiguous(memory_format=m.channels_last)
        net3 = m.nn.utils.convert_conv3d_weight_memory_format(m.nn.Conv3d(2, 2, 2), m.channels_last_3d)
        assert net3.weight.is_contiguous(memory_format=m.channels_last_3d)
        lin = m.nn.utils.skip_init(m.nn.Linear, 3, 5)
        assert tuple(lin.weight.shape) == (5, 3) and isinstance(lin.weight, m.nn.Parameter)


def test_utils_hooks_and_types_modules():
    from collections import OrderedDict

    import jitorch.types as jt
    import jitorch.utils.hooks as jh

    hooks = OrderedDict()
    with jh.RemovableHandle(hooks) as handle:
        hooks[handle.id] = print
        assert len(hooks) == 1
    assert not hooks
    # the optimizer's hook registration hands out the same handle class
    opt = jitorch.optim.SGD([jitorch.nn.Parameter(jitorch.zeros(1))], lr=0.1)
    assert isinstance(opt.register_step_pre_hook(lambda *a: None), jh.RemovableHandle)
    assert jh.unserializable_hook(lambda g: g).__torch_unserializable__
    for name in ("Number", "Device", "FileLike", "_size", "_int", "_bool"):
        assert hasattr(jt, name) and hasattr(torch.types, name)
    assert jt._dtype is type(jitorch.float32)
    assert copy.copy(jt.Number) == jt.Number
