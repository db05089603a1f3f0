"""A small VQ-VAE on 8x8 images (nearest-codebook quantization with a straight-through estimator, commitment loss,
codebook perplexity), a gradient-reversal layer as a custom torch.autograd.Function, and Grad-CAM of the encoder
through forward and full backward hooks.

Weights and data come from NumPy, so every printed metric is the same under every backend.
"""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

rng = np.random.default_rng(17)
N = 64
stripes = np.zeros((N, 1, 8, 8), np.float32)
kind = rng.integers(0, 4, N)
for i, k in enumerate(kind):
    if k == 0:
        stripes[i, 0, ::2] = 1
    elif k == 1:
        stripes[i, 0, :, ::2] = 1
    elif k == 2:
        stripes[i, 0, :4, :4] = 1
    else:
        stripes[i, 0] = np.eye(8)
images = torch.from_numpy(stripes + 0.1 * rng.normal(size=stripes.shape).astype(np.float32))
labels = torch.from_numpy(kind)


class VectorQuantizer(nn.Module):
    def __init__(self, num_codes, dim, beta=0.25):
        super().__init__()
        self.embedding = nn.Embedding(num_codes, dim)
        self.embedding.weight.data.uniform_(-1 / num_codes, 1 / num_codes)
        self.beta = beta

    def forward(self, z):
        z = z.permute(0, 2, 3, 1).contiguous()
        flat = z.view(-1, z.shape[-1])
        d = (flat.pow(2).sum(1, keepdim=True) - 2 * flat @ self.embedding.weight.t()
             + self.embedding.weight.pow(2).sum(1))
        idx = torch.argmin(d, dim=1)
        one_hot = torch.zeros(idx.shape[0], self.embedding.num_embeddings).scatter_(1, idx.unsqueeze(1), 1)
        zq = (one_hot @ self.embedding.weight).view(z.shape)
        loss = F.mse_loss(zq, z.detach()) + self.beta * F.mse_loss(zq.detach(), z)
        zq = z + (zq - z).detach()  # straight-through
        probs = one_hot.mean(0)
        perplexity = torch.exp(-torch.sum(probs * torch.log(probs + 1e-10)))
        return zq.permute(0, 3, 1, 2).contiguous(), loss, perplexity, idx


class VQVAE(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = nn.Sequential(nn.Conv2d(1, 16, 4, 2, 1), nn.ReLU(), nn.Conv2d(16, 8, 3, 1, 1))
        self.vq = VectorQuantizer(16, 8)
        self.decoder = nn.Sequential(nn.Conv2d(8, 16, 3, 1, 1), nn.ReLU(), nn.ConvTranspose2d(16, 1, 4, 2, 1))

    def forward(self, x):
        zq, vq_loss, perplexity, idx = self.vq(self.encoder(x))
        return self.decoder(zq), vq_loss, perplexity, idx


def numpy_init(module, seed, scale=0.2):
    g = np.random.default_rng(seed)
    with torch.no_grad():
        for name, p in module.named_parameters():
            p.copy_(torch.from_numpy(g.normal(scale=scale, size=tuple(p.shape)).astype(np.float32)))


model = VQVAE()
numpy_init(model, 0)
optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
with torch.no_grad():
    recon, vq_loss, _, _ = model(images)
    initial = (F.mse_loss(recon, images) + vq_loss).item()
for epoch in range(15):
    for i in range(0, N, 32):
        x = images[i:i + 32]
        recon, vq_loss, perplexity, _ = model(x)
        loss = F.mse_loss(recon, x) + vq_loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
with torch.no_grad():
    recon, vq_loss, perplexity, idx = model(images)
    final = (F.mse_loss(recon, images) + vq_loss).item()
print(f"initial_loss={initial:.6f}")
print(f"final_loss={final:.6f}")
print(f"perplexity={perplexity.item():.5f}")
print(f"codes_used={torch.unique(idx).numel()}")
print(f"code_hist_max={torch.bincount(idx, minlength=16).max().item()}")


class GradReverse(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, lambd):
        ctx.lambd = lambd
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad_output):
        return grad_output.neg() * ctx.lambd, None


# Domain-adversarial head: the features receive the reversed domain gradient.
feat = model.encoder(images).flatten(1)
domain_head = nn.Linear(feat.shape[1], 1)
numpy_init(domain_head, 3)
domain = (labels >= 2).float().unsqueeze(1)
d_loss = F.binary_cross_entropy_with_logits(domain_head(GradReverse.apply(feat, 0.5)), domain)
feat.retain_grad()
d_loss.backward()
direct = torch.autograd.grad(F.binary_cross_entropy_with_logits(domain_head(feat.detach().requires_grad_()), domain),
                             domain_head.weight)[0]
print(f"grl_feat_grad_sum={feat.grad.sum().item():.6f}")
print(f"domain_head_grad_match={float(torch.allclose(direct, domain_head.weight.grad)):.1f}")

# Grad-CAM on a classifier over the trained encoder, hooking the last conv.
classifier = nn.Sequential(model.encoder, nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 4))
numpy_init(classifier[4], 5)
store = {}
target_layer = model.encoder[2]
h1 = target_layer.register_forward_hook(lambda m, inp, out: store.__setitem__("act", out))
h2 = target_layer.register_full_backward_hook(lambda m, gin, gout: store.__setitem__("grad", gout[0]))
model.zero_grad()
scores = classifier(images[:8])
scores.gather(1, labels[:8, None]).sum().backward()
h1.remove()
h2.remove()
weights = store["grad"].mean(dim=(2, 3), keepdim=True)
cam = F.relu((weights * store["act"]).sum(1, keepdim=True))
cam = F.interpolate(cam, size=(8, 8), mode="bilinear", align_corners=False)
cam = cam / cam.flatten(1).max(1).values.clamp(min=1e-8)[:, None, None, None]
print(f"gradcam_sum={cam.sum().item():.5f}")
print(f"gradcam_shape_ok={int(cam.shape == (8, 1, 8, 8))}")
print(f"hooks_cleared={int(len(target_layer._forward_hooks) == 0 and len(target_layer._backward_hooks) == 0)}")
