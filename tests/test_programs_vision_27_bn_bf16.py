"""Pure bfloat16 batch norm (a model cast with ``.to(torch.bfloat16)``) in training, bit for bit against torch's CPU.

Found by tests/scripts: a bfloat16 convnet's BatchNorm drifted from torch one bfloat16 step at a time. ATen keeps
the batch's mean, sum of squared deviations and the momentum in bfloat16 and updates the running statistics in c10
``BFloat16`` arithmetic; the normalizing variance is ``BFloat16 / int64_t`` (the count rounded too).
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

import jitorch

SHAPES = [(16, 8, 6, 6), (16, 8, 17, 17), (3, 5, 7, 11), (2, 3, 5), (64, 4, 3, 3)]


def _run(lib, x, affine, channels_last, momentum=0.1, steps=3, grad=None):
    channels = x.shape[1]
    bn = (lib.nn.BatchNorm1d if x.ndim == 3 else lib.nn.BatchNorm2d)(channels, affine=affine, momentum=momentum)
    bn = bn.to(lib.bfloat16)
    with lib.no_grad():
        bn.running_mean.copy_(lib.linspace(-0.2, 0.3, channels))
        bn.running_var.copy_(lib.linspace(0.7, 1.9, channels))
        if affine:
            bn.weight.copy_(lib.linspace(0.5, 1.5, channels))
            bn.bias.copy_(lib.linspace(-0.3, 0.3, channels))
    inp = lib.from_numpy(x).to(lib.bfloat16)
    if channels_last:
        inp = inp.to(memory_format=lib.channels_last)
    outs = [bn(inp) for _ in range(steps)]
    bn.eval()
    evaluated = bn(inp)
    return ([o.float().detach().numpy() for o in outs], evaluated.float().detach().numpy(),
            bn.running_mean.float().numpy(), bn.running_var.float().numpy())


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("affine", [True, False])
def test_bfloat16_batch_norm_training_matches_torch_bit_for_bit(shape, affine):
    x = (np.random.default_rng(0).normal(size=shape) * 2 + 0.7).astype(np.float32)
    got, want = _run(jitorch, x, affine, False), _run(torch, x, affine, False)
    for g, w in zip(got[0], want[0]):
        np.testing.assert_array_equal(g, w)
    for g, w in zip(got[1:], want[1:]):  # eval output from the updated statistics, running mean, running var
        np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize("shape", [(16, 8, 6, 6), (3, 5, 7, 11)])
def test_bfloat16_batch_norm_channels_last_matches_torch(shape):
    x = (np.random.default_rng(1).normal(size=shape) - 0.4).astype(np.float32)
    got, want = _run(jitorch, x, True, True), _run(torch, x, True, True)
    for g, w in zip(got[0] + list(got[1:]), want[0] + list(want[1:])):
        np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize("momentum", [None, 0.3, 0.01])
def test_bfloat16_batch_norm_momentum_is_rounded_as_torch(momentum):
    # momentum=None: the cumulative average's factor 1/num_batches_tracked, rounded to bfloat16 each step.
    x = (np.random.default_rng(2).normal(size=(6, 4, 9, 5)) * 3).astype(np.float32)
    got, want = _run(jitorch, x, True, False, momentum, steps=5), _run(torch, x, True, False, momentum, steps=5)
    np.testing.assert_array_equal(got[2], want[2])
    np.testing.assert_array_equal(got[3], want[3])


def test_bfloat16_batch_norm_functional_without_running_stats():
    x = (np.random.default_rng(3).normal(size=(16, 8, 17, 17)) + 0.5).astype(np.float32)
    outs = [lib.nn.functional.batch_norm(lib.from_numpy(x).to(lib.bfloat16), None, None, training=True)
            for lib in (jitorch, torch)]
    np.testing.assert_array_equal(outs[0].float().numpy(), outs[1].float().numpy())
    assert outs[0].dtype == jitorch.bfloat16


def test_float32_and_half_running_stats_unchanged():
    # The bfloat16 emulation must not leak into float16 (ATen updates it from float32) or float32 statistics.
    x = (np.random.default_rng(4).normal(size=(8, 3, 5, 5)) + 0.2).astype(np.float32)
    for dtype in ("float16", "float32"):
        stats = []
        for lib in (jitorch, torch):
            bn = lib.nn.BatchNorm2d(3).to(getattr(lib, dtype))
            for _ in range(3):
                bn(lib.from_numpy(x).to(getattr(lib, dtype)))
            stats.append((bn.running_mean.float().numpy(), bn.running_var.float().numpy()))
        np.testing.assert_allclose(stats[0][0], stats[1][0], rtol=1e-6, atol=1e-7)
        np.testing.assert_allclose(stats[0][1], stats[1][1], rtol=1e-6, atol=1e-7)
