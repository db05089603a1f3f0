"""A tiny NeRF (after yenchenlin/nerf-pytorch and bmild/nerf): sinusoidal positional encoding of points and view
directions, rays from a pinhole camera via meshgrid(indexing="xy"), stratified samples along rays with linspace,
volume rendering with cumprod of transmittance (exclusive via torch.cat of ones), and hierarchical importance
sampling of the fine network's depths by inverting the weights' CDF with searchsorted.

Data and weights come from NumPy; the jitter is deterministic (perturb=0 plus fixed uniform u), so metrics must
match torch.
"""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class Embedder:
    def __init__(self, multires, include_input=True):
        freq_bands = 2.0 ** torch.linspace(0.0, multires - 1, steps=multires)
        self.embed_fns = [lambda x: x] if include_input else []
        for freq in freq_bands:
            for p_fn in (torch.sin, torch.cos):
                self.embed_fns.append(lambda x, p_fn=p_fn, freq=freq: p_fn(x * freq))
        self.out_dim = 3 * len(self.embed_fns)

    def __call__(self, inputs):
        return torch.cat([fn(inputs) for fn in self.embed_fns], -1)


class NeRF(nn.Module):
    def __init__(self, D=4, W=32, input_ch=27, input_ch_views=15, skips=(2,)):
        super().__init__()
        self.skips = skips
        self.pts_linears = nn.ModuleList(
            [nn.Linear(input_ch, W)] + [nn.Linear(W + input_ch, W) if i in skips else nn.Linear(W, W)
                                        for i in range(1, D)])
        self.views_linears = nn.ModuleList([nn.Linear(input_ch_views + W, W // 2)])
        self.feature_linear, self.alpha_linear = nn.Linear(W, W), nn.Linear(W, 1)
        self.rgb_linear = nn.Linear(W // 2, 3)
        self.input_ch, self.input_ch_views = input_ch, input_ch_views

    def forward(self, x):
        input_pts, input_views = torch.split(x, [self.input_ch, self.input_ch_views], dim=-1)
        h = input_pts
        for i, layer in enumerate(self.pts_linears):
            if i in self.skips:
                h = torch.cat([input_pts, h], -1)
            h = F.relu(layer(h))
        alpha = self.alpha_linear(h)
        h = torch.cat([self.feature_linear(h), input_views], -1)
        for layer in self.views_linears:
            h = F.relu(layer(h))
        return torch.cat([self.rgb_linear(h), alpha], -1)


def get_rays(H, W, focal, c2w):
    i, j = torch.meshgrid(torch.linspace(0, W - 1, W), torch.linspace(0, H - 1, H), indexing="xy")
    dirs = torch.stack([(i - W * 0.5) / focal, -(j - H * 0.5) / focal, -torch.ones_like(i)], -1)
    rays_d = torch.sum(dirs[..., np.newaxis, :] * c2w[:3, :3], -1)
    rays_o = c2w[:3, -1].expand(rays_d.shape)
    return rays_o, rays_d


def raw2outputs(raw, z_vals, rays_d):
    raw2alpha = lambda raw, dists, act_fn=F.relu: 1.0 - torch.exp(-act_fn(raw) * dists)
    dists = z_vals[..., 1:] - z_vals[..., :-1]
    dists = torch.cat([dists, torch.Tensor([1e10]).expand(dists[..., :1].shape)], -1)
    dists = dists * torch.norm(rays_d[..., None, :], dim=-1)
    rgb = torch.sigmoid(raw[..., :3])
    alpha = raw2alpha(raw[..., 3], dists)
    weights = alpha * torch.cumprod(torch.cat([torch.ones((alpha.shape[0], 1)), 1.0 - alpha + 1e-10], -1), -1)[:, :-1]
    rgb_map = torch.sum(weights[..., None] * rgb, -2)
    depth_map = torch.sum(weights * z_vals, -1)
    disp_map = 1.0 / torch.max(1e-10 * torch.ones_like(depth_map), depth_map / torch.sum(weights, -1))
    acc_map = torch.sum(weights, -1)
    return rgb_map, disp_map, acc_map, weights, depth_map


def sample_pdf(bins, weights, u):
    weights = weights + 1e-5
    pdf = weights / torch.sum(weights, -1, keepdim=True)
    cdf = torch.cumsum(pdf, -1)
    cdf = torch.cat([torch.zeros_like(cdf[..., :1]), cdf], -1)
    u = u.contiguous()
    inds = torch.searchsorted(cdf, u, right=True)
    below = torch.max(torch.zeros_like(inds - 1), inds - 1)
    above = torch.min((cdf.shape[-1] - 1) * torch.ones_like(inds), inds)
    inds_g = torch.stack([below, above], -1)
    matched_shape = [inds_g.shape[0], inds_g.shape[1], cdf.shape[-1]]
    cdf_g = torch.gather(cdf.unsqueeze(1).expand(matched_shape), 2, inds_g)
    bins_g = torch.gather(bins.unsqueeze(1).expand(matched_shape), 2, inds_g)
    denom = cdf_g[..., 1] - cdf_g[..., 0]
    denom = torch.where(denom < 1e-5, torch.ones_like(denom), denom)
    t = (u - cdf_g[..., 0]) / denom
    return bins_g[..., 0] + t * (bins_g[..., 1] - bins_g[..., 0])


def render(rays_o, rays_d, coarse, fine, embed, embed_dirs, N_samples=16, N_importance=16, near=2.0, far=6.0):
    N_rays = rays_o.shape[0]
    viewdirs = rays_d / torch.norm(rays_d, dim=-1, keepdim=True)
    t_vals = torch.linspace(0.0, 1.0, steps=N_samples)
    z_vals = (near * (1.0 - t_vals) + far * t_vals).expand([N_rays, N_samples])

    def run(net, z):
        pts = rays_o[..., None, :] + rays_d[..., None, :] * z[..., :, None]
        dirs = viewdirs[:, None].expand(pts.shape)
        h = torch.cat([embed(pts.reshape(-1, 3)), embed_dirs(dirs.reshape(-1, 3))], -1)
        return net(h).reshape(*pts.shape[:-1], 4)

    rgb0, _, _, weights, _ = raw2outputs(run(coarse, z_vals), z_vals, rays_d)
    z_mid = 0.5 * (z_vals[..., 1:] + z_vals[..., :-1])
    u = torch.from_numpy(np.linspace(0.02, 0.98, N_importance, dtype=np.float32)).expand(N_rays, N_importance)
    z_samples = sample_pdf(z_mid, weights[..., 1:-1], u).detach()
    z_vals, _ = torch.sort(torch.cat([z_vals, z_samples], -1), -1)
    rgb, disp, acc, _, depth = raw2outputs(run(fine, z_vals), z_vals, rays_d)
    return rgb0, rgb, disp, acc, depth


rng = np.random.RandomState(0)
embed, embed_dirs = Embedder(4), Embedder(2)
coarse = NeRF(input_ch=embed.out_dim, input_ch_views=embed_dirs.out_dim)
fine = NeRF(input_ch=embed.out_dim, input_ch_views=embed_dirs.out_dim)
with torch.no_grad():
    for p in list(coarse.parameters()) + list(fine.parameters()):
        p.copy_(torch.from_numpy((rng.randn(*p.shape) * 0.2).astype(np.float32)))
H = W = 8
c2w = torch.tensor([[1.0, 0, 0, 0.1], [0, 0.8, -0.6, -2.0], [0, 0.6, 0.8, 3.5]])
rays_o, rays_d = get_rays(H, W, focal=10.0, c2w=c2w)
rays_o, rays_d = rays_o.reshape(-1, 3), rays_d.reshape(-1, 3)
target = torch.from_numpy(rng.uniform(0.2, 0.8, size=(H * W, 3)).astype(np.float32))
opt = torch.optim.Adam(list(coarse.parameters()) + list(fine.parameters()), lr=5e-3, betas=(0.9, 0.999))
img2mse = lambda x, y: torch.mean((x - y) ** 2)
mse2psnr = lambda x: -10.0 * torch.log(x) / torch.log(torch.Tensor([10.0]))
losses = []
for it in range(25):
    rgb0, rgb, disp, acc, depth = render(rays_o, rays_d, coarse, fine, embed, embed_dirs)
    loss = img2mse(rgb, target) + img2mse(rgb0, target)
    opt.zero_grad()
    loss.backward()
    opt.step()
    losses.append(loss.item())
    for g in opt.param_groups:  # nerf-pytorch's exponential decay
        g["lr"] = 5e-3 * (0.1 ** ((it + 1) / 250))
with torch.no_grad():
    rgb0, rgb, disp, acc, depth = render(rays_o, rays_d, coarse, fine, embed, embed_dirs)
print(f"initial_loss={losses[0]:.6f}")
print(f"final_loss={losses[-1]:.6f}")
print(f"psnr={mse2psnr(img2mse(rgb, target)).item():.5f}")
print(f"depth_mean={depth.mean().item():.5f}")
print(f"disp_mean={disp.mean().item():.5f}")
print(f"acc_mean={acc.mean().item():.6f}")
print(f"rays_d_sum={rays_d.sum().item():.5f}")
