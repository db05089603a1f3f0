"""Spatial-transformer and registration research code, written once against ``lib`` and run with torch and jitorch
(the 3-D U-Net is in ``test_sweep_volumetric.py``, optical flow in ``test_sweep_volumetric_flow.py``): a localization
net regressing ``theta`` from the identity (2-D and 3-D), ``F.affine_grid`` and ``F.grid_sample`` in every mode,
padding mode and ``align_corners`` setting with gradients to both the input and the grid under random upstream
gradients, float64 gradchecks, and VoxelMorph (a meshgrid buffer, coordinates normalized in place, channel order
reversed by fancy indexing, scaling-and-squaring integration, NCC by ``conv3d`` with a ones filter).""" 
from __future__ import annotations

import numpy as np
import pytest
import torch

import jitorch
from helpers import gradcheck_op
from sweep_helpers import LIBS, assert_runs_match, copy_weights

MODES_2D = [(m, p, a) for m in ("bilinear", "nearest", "bicubic") for p in ("zeros", "border", "reflection")
            for a in (False, True)]
MODES_3D = [(m, p, a) for (m, p, a) in MODES_2D if m != "bicubic"]


def sample_with_grads(lib, x, grid, seed=1, **kw):
    """grid_sample's output and the gradients of a random upstream gradient to the input and to the grid."""
    xt, gt = lib.tensor(x, requires_grad=True), lib.tensor(grid, requires_grad=True)
    out = lib.nn.functional.grid_sample(xt, gt, **kw)
    upstream = lib.tensor(np.random.default_rng(seed).normal(size=out.shape).astype(x.dtype))
    gx, gg = lib.autograd.grad(out, [xt, gt], upstream)
    return [out, gx, gg]


@pytest.mark.parametrize("mode,padding_mode,align_corners", MODES_2D)
def test_grid_sample_2d_values_and_both_gradients(mode, padding_mode, align_corners):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(2, 3, 6, 7)).astype(np.float32)
    grid = rng.uniform(-1.4, 1.4, (2, 5, 4, 2)).astype(np.float32)  # some points outside the image
    grid[0, 0, :2] = [[-1.0, -1.0], [1.0, 1.0]]  # the corners themselves
    kw = dict(mode=mode, padding_mode=padding_mode, align_corners=align_corners)
    assert_runs_match(*(sample_with_grads(lib, x, grid, **kw) for lib in LIBS), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("mode,padding_mode,align_corners", MODES_3D)
def test_grid_sample_3d_values_and_both_gradients(mode, padding_mode, align_corners):
    rng = np.random.default_rng(1)
    x = rng.normal(size=(2, 2, 4, 5, 6)).astype(np.float32)
    grid = rng.uniform(-1.3, 1.3, (2, 3, 4, 2, 3)).astype(np.float32)
    kw = dict(mode=mode, padding_mode=padding_mode, align_corners=align_corners)
    assert_runs_match(*(sample_with_grads(lib, x, grid, **kw) for lib in LIBS), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("mode,padding_mode", [("bilinear", "zeros"), ("bilinear", "border"),
                                               ("bilinear", "reflection"), ("bicubic", "zeros")])
@pytest.mark.parametrize("align_corners", [False, True])
def test_grid_sample_gradcheck_float64(mode, padding_mode, align_corners):
    rng = np.random.default_rng(2)
    x = rng.normal(size=(1, 2, 3, 4))
    # away from pixel centres and edges, where the sampler is not differentiable
    grid = rng.uniform(-0.9, 0.9, (1, 2, 3, 2)) + 0.013
    fn = lambda a, g: jitorch.nn.functional.grid_sample(a, g, mode=mode, padding_mode=padding_mode,  # noqa: E731
                                                        align_corners=align_corners)
    gradcheck_op(fn, [x, grid])


@pytest.mark.parametrize("align_corners", [False, True])
def test_affine_grid_3d_gradcheck_and_trilinear_sample_float64(align_corners):
    rng = np.random.default_rng(3)
    theta = np.eye(3, 4)[None] + 0.1 * rng.normal(size=(1, 3, 4))
    x = rng.normal(size=(1, 1, 3, 3, 4))
    F = jitorch.nn.functional
    grid = lambda t: F.affine_grid(t, (1, 1, 2, 3, 3), align_corners=align_corners)  # noqa: E731
    gradcheck_op(grid, [theta])
    gradcheck_op(lambda a, t: F.grid_sample(a, grid(t), align_corners=align_corners), [x, theta])


@pytest.mark.filterwarnings("ignore:Since version 1.3.0, affine_grid behavior has changed for unit-size grids")
@pytest.mark.parametrize("size", [(2, 3, 5, 4), (2, 1, 3, 4, 5), (2, 3, 1, 6)])
@pytest.mark.parametrize("align_corners", [False, True])
def test_affine_grid_matches_torch(size, align_corners):
    nd = len(size) - 2
    theta = np.random.default_rng(4).normal(size=(2, nd, nd + 1)).astype(np.float32)

    def run(lib):
        t = lib.tensor(theta, requires_grad=True)
        grid = lib.nn.functional.affine_grid(t, lib.Size(size), align_corners=align_corners)
        upstream = lib.tensor(np.random.default_rng(5).normal(size=grid.shape).astype(np.float32))
        return [grid, lib.autograd.grad(grid, t, upstream)[0]]
    assert_runs_match(run(torch), run(jitorch), rtol=1e-6, atol=1e-6)


def make_stn(lib, volumetric=False):
    nn, F = lib.nn, lib.nn.functional
    conv, pool, nd = (nn.Conv3d, nn.MaxPool3d, 3) if volumetric else (nn.Conv2d, nn.MaxPool2d, 2)

    class STN(nn.Module):
        """The PyTorch tutorial's spatial transformer in front of a small classifier."""

        def __init__(self):
            super().__init__()
            self.localization = nn.Sequential(conv(1, 4, 3), pool(2, stride=2), nn.ReLU(True), conv(4, 6, 3),
                                              nn.ReLU(True))
            self.fc_loc = nn.Sequential(nn.LazyLinear(16), nn.ReLU(True), nn.Linear(16, nd * (nd + 1)))
            self.fc_loc[2].weight.data.zero_()
            self.fc_loc[2].bias.data.copy_(lib.eye(nd, nd + 1).flatten())
            self.classifier = nn.Sequential(conv(1, 4, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.LazyLinear(3))

        def stn(self, x):
            xs = self.localization(x)
            theta = self.fc_loc(xs.flatten(1)).view(-1, nd, nd + 1)
            grid = F.affine_grid(theta, x.size(), align_corners=False)
            return F.grid_sample(x, grid, align_corners=False), theta

        def forward(self, x):
            x, theta = self.stn(x)
            return F.log_softmax(self.classifier(x), dim=1), theta

    return STN()


@pytest.mark.parametrize("volumetric", [False, True], ids=["2d", "3d"])
def test_spatial_transformer_training_matches_torch(volumetric):
    rng = np.random.default_rng(6)
    shape = (4, 1, 8, 9, 10) if volumetric else (4, 1, 12, 13)
    imgs, labels = rng.normal(size=shape).astype(np.float32), rng.integers(0, 3, 4)
    torch.manual_seed(0)
    ref = make_stn(torch, volumetric)
    ref(torch.tensor(imgs))  # materialize the lazy layers
    ref.fc_loc[2].weight.data.normal_(0, 0.05)  # a transform that is not yet the identity

    def run(lib):
        model = make_stn(lib, volumetric)
        model(lib.tensor(imgs))
        copy_weights(ref, model)
        opt = lib.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
        x, y, out = lib.tensor(imgs), lib.tensor(labels), {"losses": [], "thetas": []}
        for _ in range(3):
            opt.zero_grad()
            logp, theta = model(x)
            loss = lib.nn.functional.nll_loss(logp, y)
            loss.backward()
            opt.step()
            out["losses"].append(loss.detach())
            out["thetas"].append(theta.detach())
        out["params"] = [p.detach() for p in model.parameters()]
        return out
    assert_runs_match(run(torch), run(jitorch), rtol=2e-5, atol=1e-6)


def make_voxelmorph(lib, size=(8, 10, 12), int_steps=3, ch=4):
    """VoxelMorph (Balakrishnan et al.): a tiny 3-D U-Net predicting a velocity field, scaling-and-squaring
    integration, and the spatial transformer with its meshgrid buffer and in-place coordinate normalization."""
    nn, F = lib.nn, lib.nn.functional

    class SpatialTransformer(nn.Module):
        def __init__(self, size, mode="bilinear"):
            super().__init__()
            self.mode = mode
            vectors = [lib.arange(0, s) for s in size]
            grids = lib.meshgrid(vectors, indexing="ij")
            grid = lib.stack(grids).unsqueeze(0).type(lib.FloatTensor)
            self.register_buffer("grid", grid, persistent=False)

        def forward(self, src, flow):
            new_locs = self.grid + flow
            shape = flow.shape[2:]
            for i in range(len(shape)):
                new_locs[:, i, ...] = 2 * (new_locs[:, i, ...] / (shape[i] - 1) - 0.5)
            new_locs = new_locs.permute(0, 2, 3, 4, 1)
            new_locs = new_locs[..., [2, 1, 0]]
            return F.grid_sample(src, new_locs, align_corners=True, mode=self.mode)

    class VecInt(nn.Module):
        def __init__(self, size, nsteps):
            super().__init__()
            self.nsteps = nsteps
            self.scale = 1.0 / (2 ** nsteps)
            self.transformer = SpatialTransformer(size)

        def forward(self, vec):
            vec = vec * self.scale
            for _ in range(self.nsteps):
                vec = vec + self.transformer(vec, vec)
            return vec

    class VxmDense(nn.Module):
        def __init__(self):
            super().__init__()
            self.enc = nn.Sequential(nn.Conv3d(2, ch, 3, padding=1), nn.LeakyReLU(0.2),
                                     nn.Conv3d(ch, 2 * ch, 3, stride=2, padding=1), nn.LeakyReLU(0.2))
            self.dec = nn.Sequential(nn.Conv3d(2 * ch + ch, ch, 3, padding=1), nn.LeakyReLU(0.2))
            self.first = nn.Sequential(nn.Conv3d(2, ch, 3, padding=1), nn.LeakyReLU(0.2))
            self.flow = nn.Conv3d(ch, 3, 3, padding=1)
            self.flow.weight = nn.Parameter(lib.distributions.Normal(0, 1e-2).sample(self.flow.weight.shape))
            self.flow.bias = nn.Parameter(lib.zeros(self.flow.bias.shape))
            half = [s // 2 for s in size]
            self.integrate = VecInt(half, int_steps)
            self.transformer = SpatialTransformer(size)

        def forward(self, source, target):
            x = lib.cat([source, target], dim=1)
            skip = self.first(x)
            low = self.enc(x)
            up = F.interpolate(low, size=skip.shape[2:], mode="trilinear", align_corners=False)
            flow_field = self.flow(self.dec(lib.cat([up, skip], dim=1)))
            # ResizeTransform: half resolution, then the velocity integrated and the field rescaled back
            pos_flow = F.interpolate(flow_field, scale_factor=0.5, mode="trilinear", align_corners=True) * 0.5
            pos_flow = self.integrate(pos_flow)
            pos_flow = 2.0 * pos_flow
            pos_flow = F.interpolate(pos_flow, scale_factor=2.0, mode="trilinear", align_corners=True)
            return self.transformer(source, pos_flow), pos_flow

    return VxmDense()


def ncc_loss(lib, y_true, y_pred, win=5):
    """VoxelMorph's local normalized cross-correlation, the window sums as a conv3d with a ones filter."""
    F = lib.nn.functional
    ndims = 3
    sum_filt = lib.ones([1, 1, *[win] * ndims])
    pad = win // 2
    I, J = y_true, y_pred
    I2, J2, IJ = I * I, J * J, I * J
    I_sum = F.conv3d(I, sum_filt, stride=1, padding=pad)
    J_sum = F.conv3d(J, sum_filt, stride=1, padding=pad)
    I2_sum = F.conv3d(I2, sum_filt, stride=1, padding=pad)
    J2_sum = F.conv3d(J2, sum_filt, stride=1, padding=pad)
    IJ_sum = F.conv3d(IJ, sum_filt, stride=1, padding=pad)
    win_size = np.prod([win] * ndims)
    u_I, u_J = I_sum / win_size, J_sum / win_size
    cross = IJ_sum - u_J * I_sum - u_I * J_sum + u_I * u_J * win_size
    I_var = I2_sum - 2 * u_I * I_sum + u_I * u_I * win_size
    J_var = J2_sum - 2 * u_J * J_sum + u_J * u_J * win_size
    cc = cross * cross / (I_var * J_var + 1e-5)
    return -lib.mean(cc)


def grad_loss(lib, y_pred, penalty="l2"):
    dy = lib.abs(y_pred[:, :, 1:, :, :] - y_pred[:, :, :-1, :, :])
    dx = lib.abs(y_pred[:, :, :, 1:, :] - y_pred[:, :, :, :-1, :])
    dz = lib.abs(y_pred[:, :, :, :, 1:] - y_pred[:, :, :, :, :-1])
    if penalty == "l2":
        dy, dx, dz = dy * dy, dx * dx, dz * dz
    return (lib.mean(dx) + lib.mean(dy) + lib.mean(dz)) / 3.0


def test_voxelmorph_registration_matches_torch():
    zz, yy, xx = np.mgrid[:8, :10, :12].astype(np.float32)
    rng = np.random.default_rng(9)
    moving = np.exp(-((zz - 4) ** 2 + (yy - 5) ** 2 + (xx - 6) ** 2) / 8)[None, None].repeat(2, 0)
    fixed = np.exp(-((zz - 4.5) ** 2 + (yy - 4) ** 2 + (xx - 7) ** 2) / 9)[None, None].repeat(2, 0)
    moving = (moving + 0.05 * rng.normal(size=moving.shape)).astype(np.float32)
    fixed = fixed.astype(np.float32)
    torch.manual_seed(0)
    ref = make_voxelmorph(torch)

    def run(lib):
        model = make_voxelmorph(lib)
        copy_weights(ref, model)
        opt = lib.optim.Adam(model.parameters(), lr=1e-3)
        out = {"losses": [], "moved": [], "flows": []}
        for _ in range(3):
            opt.zero_grad()
            moved, flow = model(lib.tensor(moving), lib.tensor(fixed))
            loss = ncc_loss(lib, lib.tensor(fixed), moved) + 0.01 * grad_loss(lib, flow)
            loss.backward()
            opt.step()
            out["losses"].append(loss.detach())
            out["moved"].append(moved.detach())
            out["flows"].append(flow.detach())
        out["params"] = [p.detach() for p in model.parameters()]
        return out
    assert_runs_match(run(torch), run(jitorch), rtol=2e-4, atol=1e-6)
