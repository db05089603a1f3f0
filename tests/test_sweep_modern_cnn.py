"""Modern convolutional classifiers as reference implementations write them, run with torch and jitorch from the same
weights and data: a ConvNeXt (depthwise 7x7, ``permute`` + ``nn.LayerNorm`` + Linear + ``permute`` back, layer scale,
hand-written DropPath and channels-first LayerNorm) and a MobileNetV3/EfficientNet stack (inverted residuals,
Hardswish/Hardsigmoid/SiLU/ReLU6, squeeze-excitation by ``adaptive_avg_pool2d(x, 1)``, BatchNorm momentum/eps
variants) in row-major and channels-last, eager and compiled; and the layouts and refusals the sweep found."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import jitorch
from sweep_helpers import LIBS, arr, assert_runs_match, copy_weights


def drop_path(x, p, training, mask=None):
    """timm's stochastic depth: one Bernoulli draw per sample, scaled by ``1 / keep``."""
    if p == 0.0 or not training:
        return x
    keep = 1 - p
    shape = (x.shape[0],) + (1,) * (x.ndim - 1)
    if mask is None:
        mask = x.new_empty(shape).bernoulli_(keep)
    else:
        mask = x.new_tensor(mask).view(shape)
    if keep > 0.0:
        mask.div_(keep)
    return x * mask


def make_convnext(lib, dims=(8, 16), depths=(2, 1), drop_rate=0.2):
    nn = lib.nn

    class LayerNorm2d(nn.Module):
        def __init__(self, c, eps=1e-6):
            super().__init__()
            self.weight, self.bias, self.eps = nn.Parameter(lib.ones(c)), nn.Parameter(lib.zeros(c)), eps

        def forward(self, x):
            u = x.mean(1, keepdim=True)
            s = (x - u).pow(2).mean(1, keepdim=True)
            x = (x - u) / lib.sqrt(s + self.eps)
            return self.weight[:, None, None] * x + self.bias[:, None, None]

    class DropPath(nn.Module):
        def __init__(self, p):
            super().__init__()
            self.p, self.mask = p, None  # mask: the test's draw for the next call (the libraries' generators differ)

        def forward(self, x):
            return drop_path(x, self.p, self.training, self.mask)

    class Block(nn.Module):
        def __init__(self, dim, dp):
            super().__init__()
            self.dwconv = nn.Conv2d(dim, dim, 7, padding=3, groups=dim)
            self.norm = nn.LayerNorm(dim, eps=1e-6)
            self.pwconv1, self.act, self.pwconv2 = nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim)
            self.gamma = nn.Parameter(0.5 * lib.ones(dim))
            self.drop_path = DropPath(dp) if dp > 0 else nn.Identity()

        def forward(self, x):
            inp = x
            x = self.dwconv(x).permute(0, 2, 3, 1)
            x = self.pwconv2(self.act(self.pwconv1(self.norm(x))))
            x = (self.gamma * x).permute(0, 3, 1, 2)
            return inp + self.drop_path(x)

    class ConvNeXt(nn.Module):
        def __init__(self):
            super().__init__()
            self.downsample_layers = nn.ModuleList([nn.Sequential(nn.Conv2d(3, dims[0], 4, stride=4),
                                                                  LayerNorm2d(dims[0]))])
            for i in range(len(dims) - 1):
                self.downsample_layers.append(nn.Sequential(LayerNorm2d(dims[i]),
                                                            nn.Conv2d(dims[i], dims[i + 1], 2, stride=2)))
            rates = [r.item() for r in lib.linspace(0, drop_rate, sum(depths))]
            self.stages, cur = nn.ModuleList(), 0
            for i, depth in enumerate(depths):
                self.stages.append(nn.Sequential(*[Block(dims[i], rates[cur + j]) for j in range(depth)]))
                cur += depth
            self.norm, self.head = nn.LayerNorm(dims[-1], eps=1e-6), nn.Linear(dims[-1], 5)

        def forward(self, x):
            for down, stage in zip(self.downsample_layers, self.stages):
                x = stage(down(x))
            return self.head(self.norm(x.mean([-2, -1])))

    return ConvNeXt()


def make_mobilenet(lib):
    nn, F = lib.nn, lib.nn.functional

    class SqueezeExcite(nn.Module):
        def __init__(self, c, hard):
            super().__init__()
            self.fc1, self.fc2 = nn.Conv2d(c, max(8, c // 4), 1), nn.Conv2d(max(8, c // 4), c, 1)
            self.act = nn.ReLU(inplace=True) if hard else nn.SiLU(inplace=True)
            self.gate = nn.Hardsigmoid() if hard else nn.Sigmoid()

        def forward(self, x):
            return x * self.gate(self.fc2(self.act(self.fc1(F.adaptive_avg_pool2d(x, 1)))))

    class InvertedResidual(nn.Module):
        def __init__(self, cin, exp, cout, k, stride, se, act, bn):
            super().__init__()
            self.use_res = stride == 1 and cin == cout
            act_layer = {"hs": nn.Hardswish, "re": nn.ReLU6, "si": nn.SiLU}[act]
            layers = []
            if exp != cin:
                layers += [nn.Conv2d(cin, exp, 1, bias=False), nn.BatchNorm2d(exp, **bn), act_layer(inplace=True)]
            layers += [nn.Conv2d(exp, exp, k, stride, (k - 1) // 2, groups=exp, bias=False), nn.BatchNorm2d(exp, **bn),
                       act_layer(inplace=True)]
            if se:
                layers.append(SqueezeExcite(exp, hard=act != "si"))
            layers += [nn.Conv2d(exp, cout, 1, bias=False), nn.BatchNorm2d(cout, **bn)]
            self.block = nn.Sequential(*layers)

        def forward(self, x):
            y = self.block(x)
            return x + y if self.use_res else y

    tf_bn, torch_bn = dict(eps=1e-3, momentum=0.01), dict(eps=1e-3, momentum=0.1)
    stem = nn.Sequential(nn.Conv2d(3, 16, 3, 2, 1, bias=False), nn.BatchNorm2d(16, **tf_bn), nn.Hardswish())
    blocks = nn.Sequential(InvertedResidual(16, 16, 16, 3, 1, True, "re", tf_bn),
                           InvertedResidual(16, 48, 24, 3, 2, False, "re", tf_bn),
                           InvertedResidual(24, 72, 24, 5, 1, True, "hs", tf_bn),
                           InvertedResidual(24, 64, 32, 3, 2, True, "si", torch_bn))
    head = nn.Sequential(nn.Conv2d(32, 48, 1, bias=False), nn.BatchNorm2d(48, **torch_bn), nn.Hardswish(),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(1), nn.Linear(48, 32), nn.Hardswish(inplace=True),
                         nn.Dropout(0.0), nn.Linear(32, 5))
    return nn.Sequential(stem, blocks, head)


def _images(n=4, size=32, seed=0):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, 3, size, size)).astype(np.float32), rng.integers(0, 5, size=n)


def _upstream(shape, seed):
    return np.random.default_rng(100 + seed).normal(size=shape).astype(np.float32)


def convnext_run(lib, ref, channels_last=False, compiled=False, steps=3):
    model = make_convnext(lib)
    copy_weights(ref, model)
    fmt = lib.channels_last if channels_last else lib.contiguous_format
    model = model.to(memory_format=fmt)
    x_np, y_np = _images()
    x, y = lib.tensor(x_np).contiguous(memory_format=fmt), lib.tensor(y_np)
    drops = [m for m in model.modules() if type(m).__name__ == "DropPath"]
    opt = lib.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.5, 0.999), weight_decay=0.05)
    fn = jitorch.compile(model) if compiled else model
    out = {"loss": [], "logits": []}
    rng = np.random.default_rng(7)
    for step in range(steps):
        for m in drops:  # one mask per step, the same in both runs (compiled: a NumPy constant guarded by value)
            m.mask = (rng.uniform(size=x_np.shape[0]) < 1 - m.p).astype(np.float32)
        opt.zero_grad()
        logits = fn(x)
        loss = lib.nn.functional.cross_entropy(logits, y, label_smoothing=0.1)
        (loss + (logits * lib.tensor(_upstream(tuple(logits.shape), step))).sum()).backward()
        out["loss"].append(loss.detach())
        out["logits"].append(logits.detach())
        out["grads"] = {n: p.grad.clone() for n, p in model.named_parameters()}
        opt.step()
    model.eval()
    with lib.no_grad():
        out["eval"] = fn(x)
    out["params"] = dict(model.named_parameters())
    out["drop_masks_used"] = [m.mask for m in drops]
    return out


@pytest.mark.parametrize("channels_last", [False, True])
def test_convnext_adamw_training_matches_torch(channels_last):
    torch.manual_seed(0)
    ref = make_convnext(torch)
    th, jt = convnext_run(torch, ref, channels_last), convnext_run(jitorch, ref, channels_last)
    assert_runs_match(th, jt, rtol=2e-4, atol=1e-5, what=f"convnext channels_last={channels_last}")


def test_convnext_compiled_matches_eager():
    torch.manual_seed(1)
    ref = make_convnext(torch)
    eager, compiled = convnext_run(jitorch, ref, steps=2), convnext_run(jitorch, ref, compiled=True, steps=2)
    assert_runs_match(eager, compiled, rtol=1e-4, atol=1e-5, what="compiled convnext")


def test_drop_path_bernoulli_mask():
    """``x.new_empty(shape).bernoulli_(keep).div_(keep)``: torch's dtype, values in {0, 1/keep}, keep rate, and the
    gradient through ``x * mask`` is the mask (the draws themselves come from each library's generator)."""
    x_np = np.random.default_rng(3).normal(size=(4000, 3, 2, 2)).astype(np.float32)
    for lib in LIBS:
        lib.manual_seed(0)
        x = lib.tensor(x_np).requires_grad_(True)
        y = drop_path(x, 0.25, training=True)
        (g,) = lib.autograd.grad(y, x, lib.ones_like(y))
        mask = arr(y.detach() / x.detach())[:, 0, 0, 0]
        assert y.dtype == lib.float32 and g.dtype == lib.float32
        np.testing.assert_allclose(np.unique(np.round(mask, 4)), [0.0, 1.3333], atol=1e-4)
        assert abs((mask > 0).mean() - 0.75) < 0.03, lib.__name__
        np.testing.assert_allclose(arr(g)[:, 0, 0, 0], np.where(mask > 0, np.float32(1 / 0.75), 0), rtol=1e-6)
        assert drop_path(x, 0.25, training=False) is x


def mobilenet_run(lib, ref, channels_last, compiled=False, steps=3):
    model = make_mobilenet(lib)
    copy_weights(ref, model)
    if channels_last:
        model = model.to(memory_format=lib.channels_last)
    x_np, y_np = _images(seed=1)
    x, y = lib.tensor(x_np), lib.tensor(y_np)
    if channels_last:
        x = x.contiguous(memory_format=lib.channels_last)
    # SGD: BatchNorm makes the gradients of the biases feeding the next BatchNorm zero up to rounding, which Adam's
    # first steps would blow up to +-lr in either library.
    opt = lib.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, nesterov=True, weight_decay=4e-5)
    fn = jitorch.compile(model) if compiled else model
    out = {"loss": []}
    for step in range(steps):
        opt.zero_grad()
        logits = fn(x)
        loss = lib.nn.functional.cross_entropy(logits, y)
        (loss + (logits * lib.tensor(_upstream(tuple(logits.shape), step))).sum()).backward()
        out["loss"].append(loss.detach())
        out["grads"] = {n: p.grad.clone() for n, p in model.named_parameters()}
        out["grad_strides"] = {n: list(p.grad.stride()) for n, p in model.named_parameters()}
        opt.step()
    model.eval()
    with lib.no_grad():
        out["eval"] = fn(x)
        feats = model[1](model[0](x))
        out["feature_strides"] = [list(feats.stride()), list(model[2][:4](feats).stride())]
    out["state"] = dict(model.state_dict())
    return out


@pytest.mark.parametrize("channels_last", [False, True])
def test_mobilenet_sgd_training_matches_torch(channels_last):
    torch.manual_seed(0)
    ref = make_mobilenet(torch)
    th, jt = mobilenet_run(torch, ref, channels_last), mobilenet_run(jitorch, ref, channels_last)
    assert_runs_match(th, jt, rtol=2e-4, atol=1e-5, what=f"mobilenet channels_last={channels_last}")


def test_mobilenet_compiled_matches_eager():
    torch.manual_seed(2)
    ref = make_mobilenet(torch)
    eager = mobilenet_run(jitorch, ref, True, steps=2)
    compiled = mobilenet_run(jitorch, ref, True, compiled=True, steps=2)
    assert_runs_match(eager, compiled, rtol=1e-4, atol=1e-5, what="compiled mobilenet")
