"""A 2-D Fourier neural operator (after neuraloperator/neuraloperator's fourier_2d.py, Li et al. 2020):
SpectralConv2d keeps the lowest Fourier modes of torch.fft.rfft2, multiplies them by complex weights
(nn.Parameter of dtype cfloat, initialised as scale * torch.rand) through einsum, and returns through irfft2 with
s=; a grid channel from linspace/repeat; Adam with StepLR; the relative L2 loss (LpLoss) of the repo.

Data and weights come from NumPy; training is deterministic, so metrics must match torch.
"""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class SpectralConv2d(nn.Module):
    def __init__(self, in_channels, out_channels, modes1, modes2):
        super().__init__()
        self.in_channels, self.out_channels, self.modes1, self.modes2 = in_channels, out_channels, modes1, modes2
        self.scale = 1 / (in_channels * out_channels)
        shape = (in_channels, out_channels, modes1, modes2)
        self.weights1 = nn.Parameter(self.scale * torch.rand(*shape, dtype=torch.cfloat))
        self.weights2 = nn.Parameter(self.scale * torch.rand(*shape, dtype=torch.cfloat))

    def compl_mul2d(self, input, weights):
        return torch.einsum("bixy,ioxy->boxy", input, weights)

    def forward(self, x):
        batchsize = x.shape[0]
        x_ft = torch.fft.rfft2(x)
        out_ft = torch.zeros(batchsize, self.out_channels, x.size(-2), x.size(-1) // 2 + 1, dtype=torch.cfloat,
                             device=x.device)
        m1, m2 = self.modes1, self.modes2
        out_ft[:, :, :m1, :m2] = self.compl_mul2d(x_ft[:, :, :m1, :m2], self.weights1)
        out_ft[:, :, -m1:, :m2] = self.compl_mul2d(x_ft[:, :, -m1:, :m2], self.weights2)
        return torch.fft.irfft2(out_ft, s=(x.size(-2), x.size(-1)))


class FNO2d(nn.Module):
    def __init__(self, modes1, modes2, width):
        super().__init__()
        self.width = width
        self.p = nn.Linear(3, width)
        self.convs = nn.ModuleList([SpectralConv2d(width, width, modes1, modes2) for _ in range(2)])
        self.ws = nn.ModuleList([nn.Conv2d(width, width, 1) for _ in range(2)])
        self.q1, self.q2 = nn.Linear(width, 32), nn.Linear(32, 1)

    def forward(self, x):
        grid = self.get_grid(x.shape, x.device)
        x = torch.cat((x, grid), dim=-1)
        x = self.p(x).permute(0, 3, 1, 2)
        for i, (conv, w) in enumerate(zip(self.convs, self.ws)):
            x = conv(x) + w(x)
            if i < len(self.convs) - 1:
                x = F.gelu(x)
        x = x.permute(0, 2, 3, 1)
        return self.q2(F.gelu(self.q1(x)))

    def get_grid(self, shape, device):
        batchsize, size_x, size_y = shape[0], shape[1], shape[2]
        gridx = torch.tensor(np.linspace(0, 1, size_x), dtype=torch.float)
        gridx = gridx.reshape(1, size_x, 1, 1).repeat([batchsize, 1, size_y, 1])
        gridy = torch.tensor(np.linspace(0, 1, size_y), dtype=torch.float)
        gridy = gridy.reshape(1, 1, size_y, 1).repeat([batchsize, size_x, 1, 1])
        return torch.cat((gridx, gridy), dim=-1).to(device)


class LpLoss:
    def __init__(self, p=2, size_average=True):
        self.p, self.size_average = p, size_average

    def __call__(self, x, y):
        num_examples = x.size()[0]
        diff_norms = torch.norm(x.reshape(num_examples, -1) - y.reshape(num_examples, -1), self.p, 1)
        y_norms = torch.norm(y.reshape(num_examples, -1), self.p, 1)
        return torch.mean(diff_norms / y_norms) if self.size_average else torch.sum(diff_norms / y_norms)


def make_data(rng, n, s):
    """Input fields and their smoothed, squared responses (a fixed nonlinear operator)."""
    a = rng.randn(n, s, s).astype(np.float32)
    a_hat = np.fft.rfft2(a)
    ky = np.fft.fftfreq(s)[:, None]
    kx = np.fft.rfftfreq(s)[None, :]
    a = np.fft.irfft2(a_hat * np.exp(-40 * (kx ** 2 + ky ** 2)), s=(s, s)).astype(np.float32)
    u = np.fft.irfft2(np.fft.rfft2(a) / (1 + 30 * (kx ** 2 + ky ** 2)), s=(s, s)) + 0.3 * a ** 2
    return torch.from_numpy(a[..., None]), torch.from_numpy(u.astype(np.float32)[..., None])


rng = np.random.RandomState(0)
model = FNO2d(modes1=4, modes2=4, width=8)
with torch.no_grad():
    for n, p in model.named_parameters():
        if p.is_complex():
            w = (rng.rand(*p.shape) + 1j * rng.rand(*p.shape)) * (1 / 64)
            p.copy_(torch.from_numpy(w.astype(np.complex64)))
        else:
            p.copy_(torch.from_numpy((rng.randn(*p.shape) * 0.3).astype(np.float32)))
n_complex = sum(p.numel() for p in model.parameters() if p.is_complex())
n_params = sum(p.numel() * (2 if p.is_complex() else 1) for p in model.parameters())
x_train, y_train = make_data(rng, 8, 16)
x_test, y_test = make_data(rng, 4, 16)
optimizer = torch.optim.Adam(model.parameters(), lr=5e-3, weight_decay=1e-4)
scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=10, gamma=0.5)
myloss = LpLoss(size_average=False)
losses = []
for ep in range(25):
    model.train()
    for i in range(0, 8, 4):
        x, y = x_train[i:i + 4], y_train[i:i + 4]
        optimizer.zero_grad()
        out = model(x).reshape(4, 16, 16)
        mse = F.mse_loss(out.view(4, -1), y.view(4, -1), reduction="mean")
        l2 = myloss(out.view(4, -1), y.view(4, -1))
        l2.backward()
        optimizer.step()
    scheduler.step()
    losses.append(l2.item() / 4)
model.eval()
with torch.no_grad():
    test_l2 = myloss(model(x_test).view(4, -1), y_test.view(4, -1)).item() / 4
    spec = torch.fft.fft2(model(x_test).squeeze(-1)).abs()
    w_angle = torch.angle(model.convs[0].weights1).mean().item()
print(f"n_params={n_params}")
print(f"n_complex={n_complex}")
print(f"initial_loss={losses[0]:.6f}")
print(f"final_loss={losses[-1]:.6f}")
print(f"mse_last={mse.item():.6f}")
print(f"test_l2={test_l2:.6f}")
print(f"spec_dc={spec[:, 0, 0].sum().item():.5f}")
print(f"w_angle={w_angle:.6f}")
print(f"lr_final={scheduler.get_last_lr()[0]:.8f}")
