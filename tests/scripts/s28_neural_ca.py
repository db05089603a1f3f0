"""Growing neural cellular automata (after Mordvintsev et al., "Growing Neural Cellular Automata", and its
PyTorch ports): perception by a fixed identity / Sobel-x / Sobel-y depthwise conv (F.conv2d with groups and
circular padding via F.pad(mode="circular")), an update MLP as 1x1 convs with a zero-initialised last layer,
stochastic cell updates from a fire-rate mask, alive masking with F.max_pool2d on the alpha channel, a sample
pool with in-place replacement of the worst samples chosen by argsort, and gradient normalisation per parameter.

The seed state and weights come from NumPy, the fire-rate masks from torch.manual_seed's stream (which jitorch
reproduces), so metrics must match torch.
"""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

CHANNELS, SIZE = 8, 12


class CAModel(nn.Module):
    def __init__(self, channel_n, fire_rate, hidden_size=32):
        super().__init__()
        self.channel_n, self.fire_rate = channel_n, fire_rate
        self.fc0 = nn.Conv2d(channel_n * 3, hidden_size, 1)
        self.fc1 = nn.Conv2d(hidden_size, channel_n, 1, bias=False)
        with torch.no_grad():
            self.fc1.weight.zero_()
        ident = torch.tensor([[0.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 0.0]])
        sobel_x = torch.tensor([[-1.0, 0.0, 1.0], [-2.0, 0.0, 2.0], [-1.0, 0.0, 1.0]]) / 8.0
        kernel = torch.stack([ident, sobel_x, sobel_x.T])  # (3, 3, 3)
        self.register_buffer("kernel", kernel.repeat(channel_n, 1, 1).unsqueeze(1))  # (3C, 1, 3, 3)

    def alive(self, x):
        return F.max_pool2d(x[:, 3:4, :, :], kernel_size=3, stride=1, padding=1) > 0.1

    def perceive(self, x):
        return F.conv2d(F.pad(x, (1, 1, 1, 1), mode="circular"), self.kernel, groups=self.channel_n)

    def update(self, x, fire_rate):
        pre_life_mask = self.alive(x)
        dx = self.fc1(F.relu(self.fc0(self.perceive(x))))
        stochastic = torch.rand(x.size(0), 1, x.size(2), x.size(3)) <= fire_rate
        x = x + dx * stochastic.float()
        post_life_mask = self.alive(x)
        return x * (pre_life_mask & post_life_mask).float()

    def forward(self, x, steps):
        for _ in range(steps):
            x = self.update(x, self.fire_rate)
        return x


def make_seed(n):
    seed = torch.zeros(n, CHANNELS, SIZE, SIZE)
    seed[:, 3:, SIZE // 2, SIZE // 2] = 1.0
    return seed


torch.manual_seed(0)
rng = np.random.RandomState(0)
yy, xx = np.mgrid[:SIZE, :SIZE]
disk = ((yy - SIZE / 2 + 0.5) ** 2 + (xx - SIZE / 2 + 0.5) ** 2 < (SIZE / 3) ** 2).astype(np.float32)
target = torch.from_numpy(np.stack([disk * 0.9, disk * 0.3, disk * (xx / SIZE), disk]).astype(np.float32))
ca = CAModel(CHANNELS, fire_rate=0.5)
with torch.no_grad():
    ca.fc0.weight.copy_(torch.from_numpy((rng.randn(*ca.fc0.weight.shape) * 0.2).astype(np.float32)))
    ca.fc0.bias.zero_()
    ca.fc1.weight.copy_(torch.from_numpy((rng.randn(*ca.fc1.weight.shape) * 0.02).astype(np.float32)))
opt = torch.optim.Adam(ca.parameters(), lr=2e-3, betas=(0.5, 0.5))
sched = torch.optim.lr_scheduler.MultiStepLR(opt, [15], 0.3)
pool = make_seed(16)
losses = []
for it in range(20):
    batch_idx = torch.from_numpy(rng.choice(16, 4, replace=False))
    x0 = pool[batch_idx]
    with torch.no_grad():
        per_sample = F.mse_loss(x0[:, :4], target.expand(4, -1, -1, -1), reduction="none").mean(dim=(1, 2, 3))
        worst = per_sample.argsort(descending=True)
        x0[worst[:1]] = make_seed(1)
    x = ca(x0, steps=int(rng.randint(8, 12)))
    loss = F.mse_loss(x[:, :4], target.expand(4, -1, -1, -1))
    opt.zero_grad()
    loss.backward()
    for p in ca.parameters():
        p.grad.data = p.grad.data / (p.grad.data.norm() + 1e-8)
    opt.step()
    sched.step()
    pool[batch_idx] = x.detach()
    losses.append(loss.item())
with torch.no_grad():
    grown = ca(make_seed(1), steps=10)
print(f"initial_loss={losses[0]:.6f}")
print(f"loss_10={losses[10]:.6f}")
print(f"final_loss={losses[-1]:.6f}")
print(f"alive_cells={int(ca.alive(grown).sum().item())}")
print(f"grown_alpha_sum={grown[:, 3].sum().item():.5f}")
print(f"pool_mean={pool.mean().item():.6f}")
print(f"fc1_norm={ca.fc1.weight.norm().item():.6f}")
