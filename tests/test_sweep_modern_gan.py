"""Image-to-image and style GANs as their reference repositories write them, run with torch and jitorch from the same
weights and data: a CycleGAN ResNet generator (``ReflectionPad2d``, ``InstanceNorm2d`` with and without affine and
running stats, ``ConvTranspose2d(stride=2, padding=1, output_padding=1)``, ``Tanh``) with PatchGAN discriminators,
LSGAN and L1 cycle/identity losses, ``requires_grad`` toggling and the image-pool replay buffer, Adam(0.5, 0.999);
and a StyleGAN2-style generator (modulated/demodulated convolutions as grouped ``conv2d``/``conv_transpose2d`` with
``groups=batch``, upfirdn blur by ``F.pad`` + depthwise conv, equalized learning rate) with an R1 penalty through
``autograd.grad(create_graph=True)``."""
from __future__ import annotations

import functools
import itertools
import math

import numpy as np
import pytest
import torch

import jitorch
from sweep_helpers import assert_runs_match, copy_weights


def make_cyclegan(lib, track=False, ngf=8, ndf=8):
    nn = lib.nn
    norm = functools.partial(nn.InstanceNorm2d, affine=True, track_running_stats=track)

    class ResnetBlock(nn.Module):
        def __init__(self, dim):
            super().__init__()
            self.conv_block = nn.Sequential(nn.ReflectionPad2d(1), nn.Conv2d(dim, dim, 3, bias=False), norm(dim),
                                            nn.ReLU(True), nn.ReflectionPad2d(1), nn.Conv2d(dim, dim, 3, bias=False),
                                            norm(dim))

        def forward(self, x):
            return x + self.conv_block(x)

    def generator():
        layers = [nn.ReflectionPad2d(3), nn.Conv2d(3, ngf, 7, bias=False), norm(ngf), nn.ReLU(True)]
        for mult in (1, 2):
            layers += [nn.Conv2d(ngf * mult, ngf * mult * 2, 3, stride=2, padding=1, bias=False),
                       norm(ngf * mult * 2), nn.ReLU(True)]
        layers += [ResnetBlock(ngf * 4)]
        for mult in (4, 2):
            layers += [nn.ConvTranspose2d(ngf * mult, ngf * mult // 2, 3, stride=2, padding=1, output_padding=1,
                                          bias=False), norm(ngf * mult // 2), nn.ReLU(True)]
        return nn.Sequential(*layers, nn.ReflectionPad2d(3), nn.Conv2d(ngf, 3, 7), nn.Tanh())

    def patch_discriminator():
        return nn.Sequential(nn.Conv2d(3, ndf, 4, stride=2, padding=1), nn.LeakyReLU(0.2, True),
                             nn.Conv2d(ndf, ndf * 2, 4, stride=2, padding=1, bias=False), nn.InstanceNorm2d(ndf * 2),
                             nn.LeakyReLU(0.2, True), nn.Conv2d(ndf * 2, ndf * 4, 4, stride=1, padding=1, bias=False),
                             nn.InstanceNorm2d(ndf * 4), nn.LeakyReLU(0.2, True),
                             nn.Conv2d(ndf * 4, 1, 4, stride=1, padding=1))

    return generator(), generator(), patch_discriminator(), patch_discriminator()


class ImagePool:
    """pix2pix's history of generated images: half the time a query returns an older image instead."""

    def __init__(self, lib, size, seed):
        self.lib, self.size, self.rng, self.images = lib, size, np.random.default_rng(seed), []

    def query(self, images):
        out = []
        for image in images:
            image = self.lib.unsqueeze(image.data, 0)
            if len(self.images) < self.size:
                self.images.append(image)
                out.append(image)
            elif self.rng.uniform(0, 1) > 0.5:
                i = int(self.rng.integers(0, self.size))
                out.append(self.images[i].clone())
                self.images[i] = image
            else:
                out.append(image)
        return self.lib.cat(out, 0)


def cyclegan_run(lib, refs, track, steps=2):
    nets = make_cyclegan(lib, track)
    for ref, net in zip(refs, nets):
        copy_weights(ref, net)
    g_ab, g_ba, d_a, d_b = nets
    opt_g = lib.optim.Adam(itertools.chain(g_ab.parameters(), g_ba.parameters()), lr=2e-4, betas=(0.5, 0.999))
    opt_d = lib.optim.Adam(itertools.chain(d_a.parameters(), d_b.parameters()), lr=2e-4, betas=(0.5, 0.999))
    pool_a, pool_b = ImagePool(lib, 2, 5), ImagePool(lib, 2, 6)
    mse, l1 = lib.nn.MSELoss(), lib.nn.L1Loss()
    rng = np.random.default_rng(0)

    def gan_loss(pred, real):
        return mse(pred, lib.tensor(1.0 if real else 0.0).expand_as(pred))

    out = {"g": [], "d": [], "grads": []}
    for _ in range(steps):
        real_a, real_b = (lib.tensor(np.tanh(rng.normal(size=(2, 3, 32, 32))).astype(np.float32)) for _ in range(2))
        fake_b, fake_a = g_ab(real_a), g_ba(real_b)
        rec_a, rec_b = g_ba(fake_b), g_ab(fake_a)
        for p in itertools.chain(d_a.parameters(), d_b.parameters()):
            p.requires_grad = False
        opt_g.zero_grad()
        loss_g = (gan_loss(d_a(fake_b), True) + gan_loss(d_b(fake_a), True) + 10 * l1(rec_a, real_a)
                  + 10 * l1(rec_b, real_b) + 5 * l1(g_ab(real_b), real_b) + 5 * l1(g_ba(real_a), real_a))
        loss_g.backward()
        opt_g.step()
        for p in itertools.chain(d_a.parameters(), d_b.parameters()):
            p.requires_grad = True
        opt_d.zero_grad()
        loss_d_a = 0.5 * (gan_loss(d_a(real_b), True) + gan_loss(d_a(pool_b.query(fake_b).detach()), False))
        loss_d_a.backward()
        loss_d_b = 0.5 * (gan_loss(d_b(real_a), True) + gan_loss(d_b(pool_a.query(fake_a).detach()), False))
        loss_d_b.backward()
        opt_d.step()
        out["g"].append(loss_g.detach())
        out["d"].append((loss_d_a + loss_d_b).detach())
        out["grads"].append({n: p.grad.clone() for n, p in itertools.chain(
            g_ab.named_parameters(prefix="g_ab"), d_a.named_parameters(prefix="d_a"))})
    g_ab.eval()
    with lib.no_grad():
        out["eval"] = g_ab(real_a)
    out["buffers"] = dict(g_ab.named_buffers())
    return out


@pytest.mark.parametrize("track", [False, True])
def test_cyclegan_training_matches_torch(track):
    torch.manual_seed(0)
    refs = make_cyclegan(torch, track)
    th, jt = cyclegan_run(torch, refs, track), cyclegan_run(jitorch, refs, track)
    # bias=False in front of the norms: such biases get gradients that are zero up to rounding, which Adam's first
    # step turns into +-lr in either library (visible through running statistics in eval).
    assert_runs_match(th, jt, rtol=2e-4, atol=1e-5, what=f"cyclegan track_running_stats={track}")


def make_stylegan(lib, style_dim=16, c=8):
    nn, F = lib.nn, lib.nn.functional

    def upfirdn2d(x, kernel, pad):
        b, ch, h, w = x.shape
        x = F.pad(x.reshape(-1, 1, h, w), [pad[0], pad[1], pad[0], pad[1]])
        x = F.conv2d(x, lib.flip(kernel, [0, 1]).view(1, 1, *kernel.shape))
        return x.reshape(b, ch, x.shape[2], x.shape[3])

    class Blur(nn.Module):
        def __init__(self, pad, up=1):
            super().__init__()
            k = lib.tensor([1.0, 3.0, 3.0, 1.0])
            k = k[None, :] * k[:, None]
            self.register_buffer("kernel", k / k.sum() * up ** 2)
            self.pad = pad

        def forward(self, x):
            return upfirdn2d(x, self.kernel, self.pad)

    class EqualLinear(nn.Module):
        def __init__(self, i, o, bias_init=0.0, lr_mul=1.0):
            super().__init__()
            self.weight = nn.Parameter(lib.randn(o, i).div_(lr_mul))
            self.bias = nn.Parameter(lib.zeros(o).fill_(bias_init))
            self.scale, self.lr_mul = lr_mul / math.sqrt(i), lr_mul

        def forward(self, x):
            return F.linear(x, self.weight * self.scale, bias=self.bias * self.lr_mul)

    class ModulatedConv(nn.Module):
        def __init__(self, cin, cout, k, demodulate=True, upsample=False):
            super().__init__()
            self.k, self.cout, self.upsample, self.demodulate = k, cout, upsample, demodulate
            self.scale, self.padding = 1 / math.sqrt(cin * k ** 2), k // 2
            self.weight = nn.Parameter(lib.randn(1, cout, cin, k, k))
            self.modulation = EqualLinear(style_dim, cin, bias_init=1)
            if upsample:
                p = 4 - 2 - (k - 1)
                self.blur = Blur(((p + 1) // 2 + 1, p // 2 + 1), up=2)

        def forward(self, x, style):
            b, cin, h, w = x.shape
            weight = self.scale * self.weight * self.modulation(style).view(b, 1, cin, 1, 1)
            if self.demodulate:
                demod = lib.rsqrt(weight.pow(2).sum([2, 3, 4]) + 1e-8)
                weight = weight * demod.view(b, self.cout, 1, 1, 1)
            x = x.view(1, b * cin, h, w)
            if self.upsample:
                weight = weight.transpose(1, 2).reshape(b * cin, self.cout, self.k, self.k)
                out = F.conv_transpose2d(x, weight, padding=0, stride=2, groups=b)
                return self.blur(out.view(b, self.cout, out.shape[2], out.shape[3]))
            out = F.conv2d(x, weight.view(b * self.cout, cin, self.k, self.k), padding=self.padding, groups=b)
            return out.view(b, self.cout, out.shape[2], out.shape[3])

    class StyledConv(nn.Module):
        def __init__(self, cin, cout, upsample=False):
            super().__init__()
            self.conv = ModulatedConv(cin, cout, 3, upsample=upsample)
            self.noise_strength, self.bias = nn.Parameter(lib.zeros(1)), nn.Parameter(lib.zeros(cout))

        def forward(self, x, style, noise):
            x = self.conv(x, style) + self.noise_strength * noise
            return F.leaky_relu(x + self.bias.view(1, -1, 1, 1), 0.2) * math.sqrt(2)

    class Generator(nn.Module):
        def __init__(self):
            super().__init__()
            self.mapping = nn.Sequential(EqualLinear(style_dim, style_dim, lr_mul=0.01), nn.LeakyReLU(0.2),
                                         EqualLinear(style_dim, style_dim, lr_mul=0.01))
            self.const = nn.Parameter(lib.randn(1, c, 4, 4))
            self.convs = nn.ModuleList([StyledConv(c, c), StyledConv(c, c, upsample=True), StyledConv(c, c)])
            self.to_rgb = ModulatedConv(c, 3, 1, demodulate=False)
            self.rgb_bias = nn.Parameter(lib.zeros(1, 3, 1, 1))

        def forward(self, z, noises):
            w = self.mapping(z * lib.rsqrt(lib.mean(z ** 2, dim=1, keepdim=True) + 1e-8))
            x = self.const.repeat(z.shape[0], 1, 1, 1)
            for conv, noise in zip(self.convs, noises):
                x = conv(x, w, noise)
            return self.to_rgb(x, w) + self.rgb_bias

    class EqualConv2d(nn.Module):
        def __init__(self, i, o, k, stride=1):
            super().__init__()
            self.weight, self.bias = nn.Parameter(lib.randn(o, i, k, k)), nn.Parameter(lib.zeros(o))
            self.scale, self.stride = 1 / math.sqrt(i * k ** 2), stride

        def forward(self, x):
            return F.conv2d(x, self.weight * self.scale, bias=self.bias, stride=self.stride)

    class Discriminator(nn.Module):
        def __init__(self):
            super().__init__()
            self.c0, self.blur, self.c1 = EqualConv2d(3, c, 1), Blur((2, 2)), EqualConv2d(c, c, 3, stride=2)
            self.fc = EqualLinear((c + 1) * 9, 1)

        def forward(self, x):
            h = F.leaky_relu(self.c0(x), 0.2) * math.sqrt(2)
            h = F.leaky_relu(self.c1(self.blur(h)), 0.2) * math.sqrt(2)
            b, ch, hh, ww = h.shape  # minibatch standard deviation, groups of 2
            y = h.view(2, -1, 1, ch, hh, ww)
            y = lib.sqrt(y.var(0, unbiased=False) + 1e-8).mean([2, 3, 4], keepdim=True).squeeze(2)
            h = lib.cat([h, y.repeat(2, 1, hh, ww)], 1)
            return self.fc(F.adaptive_avg_pool2d(h, 3).flatten(1))

    return Generator(), Discriminator()


def stylegan_run(lib, refs, steps=3):
    gen, disc = make_stylegan(lib)
    copy_weights(refs[0], gen)
    copy_weights(refs[1], disc)
    F = lib.nn.functional
    opt_g = lib.optim.Adam(gen.parameters(), lr=2e-3, betas=(0.0, 0.99))
    opt_d = lib.optim.Adam(disc.parameters(), lr=2e-3, betas=(0.0, 0.99))
    rng = np.random.default_rng(0)
    out = {"g": [], "d": [], "r1": [], "grads": []}
    for _ in range(steps):
        z = lib.tensor(rng.normal(size=(4, 16)).astype(np.float32))
        noises = [lib.tensor(rng.normal(size=(4, 1, r, r)).astype(np.float32)) for r in (4, 8, 8)]
        real = lib.tensor(np.tanh(rng.normal(size=(4, 3, 8, 8))).astype(np.float32))
        disc.requires_grad_(True)
        d_loss = F.softplus(disc(gen(z, noises).detach())).mean() + F.softplus(-disc(real)).mean()
        real.requires_grad_(True)
        (grad_real,) = lib.autograd.grad(disc(real).sum(), real, create_graph=True)
        r1 = grad_real.pow(2).reshape(grad_real.shape[0], -1).sum(1).mean()
        disc.zero_grad()
        (d_loss + 5 * r1).backward()
        opt_d.step()
        disc.requires_grad_(False)
        g_loss = F.softplus(-disc(gen(z, noises))).mean()
        gen.zero_grad()
        g_loss.backward()
        opt_g.step()
        out["g"].append(g_loss.detach())
        out["d"].append(d_loss.detach())
        out["r1"].append(r1.detach())
        out["grads"].append({n: p.grad.clone() for n, p in itertools.chain(
            gen.named_parameters(prefix="g"), disc.named_parameters(prefix="d"))})
    out["state"] = dict(gen.state_dict()) | {"d." + k: v for k, v in disc.state_dict().items()}
    return out


def test_stylegan2_modulated_conv_with_r1_matches_torch():
    torch.manual_seed(0)
    refs = make_stylegan(torch)
    th, jt = stylegan_run(torch, refs), stylegan_run(jitorch, refs)
    assert_runs_match(th, jt, rtol=2e-4, atol=1e-5, what="stylegan2")
