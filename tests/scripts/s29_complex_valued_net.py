"""Complex-valued neural networks (after wavefrontshaping/complexPyTorch and Trabelsi et al.'s "Deep Complex
Networks"): complex Linear layers with nn.Parameter of dtype torch.cfloat initialised via torch.complex(real, imag),
modReLU (ReLU on |z| + b with the phase kept through torch.polar / torch.angle), a complex "CReLU" on
view_as_real, complex batch-free normalisation by |z| statistics, the magnitude-phase classifier head, Wirtinger
gradients of real losses through conj / abs / angle / complex matmul and torch.linalg.vector_norm, a complex
Adam step (torch.optim.Adam handles complex params as real pairs), plus channel estimation by complex least squares
(torch.linalg.lstsq on cfloat) and an FFT-domain equaliser.

Signals are NumPy-made QPSK symbols through a fixed multipath channel; no randomness in training: metrics must match.
"""
import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class ComplexLinear(nn.Module):
    def __init__(self, n_in, n_out):
        super().__init__()
        scale = 1 / math.sqrt(2 * n_in)
        self.weight = nn.Parameter(torch.complex(torch.randn(n_out, n_in) * scale, torch.randn(n_out, n_in) * scale))
        self.bias = nn.Parameter(torch.zeros(n_out, dtype=torch.cfloat))

    def forward(self, z):
        return z @ self.weight.T + self.bias


class ModReLU(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.b = nn.Parameter(torch.full((n,), -0.1))

    def forward(self, z):
        return torch.polar(F.relu(z.abs() + self.b), z.angle())


def crelu(z):
    return torch.view_as_complex(F.relu(torch.view_as_real(z)).contiguous())


class Equalizer(nn.Module):
    def __init__(self, taps=5, hidden=12, n_cls=4):
        super().__init__()
        self.l1, self.act1 = ComplexLinear(taps, hidden), ModReLU(hidden)
        self.l2 = ComplexLinear(hidden, hidden)
        self.head = nn.Linear(2 * hidden, n_cls)

    def forward(self, z):
        h = self.act1(self.l1(z))
        h = crelu(self.l2(h))
        h = h / (h.abs().pow(2).mean(-1, keepdim=True).sqrt() + 1e-6)
        return self.head(torch.cat([h.abs(), torch.cos(h.angle()) * h.abs()], -1)), h


rng = np.random.RandomState(0)
n, taps = 400, 5
bits = rng.randint(0, 4, n + taps)
qpsk = np.exp(1j * (np.pi / 4 + np.pi / 2 * bits)).astype(np.complex64)
channel = np.array([1.0, 0.4 - 0.3j, 0.15j], np.complex64)
noise = (0.05 * (rng.randn(n + taps) + 1j * rng.randn(n + taps))).astype(np.complex64)
rx = np.convolve(qpsk, channel)[: n + taps] + noise
rx_t = torch.from_numpy(rx.astype(np.complex64))
windows = rx_t.unfold(0, taps, 1)[:n]  # n, taps (complex)
labels = torch.from_numpy(bits[taps // 2: taps // 2 + n]).long()
target_sym = torch.from_numpy(qpsk[taps // 2: taps // 2 + n])

torch.manual_seed(0)
model = Equalizer()
opt = torch.optim.Adam(model.parameters(), lr=1e-2)
losses = []
for epoch in range(30):
    logits, h = model(windows)
    loss = F.cross_entropy(logits, labels) + 1e-3 * torch.linalg.vector_norm(model.l1.weight) ** 2
    opt.zero_grad()
    loss.backward()
    opt.step()
    losses.append(loss.item())
acc = (logits.argmax(1) == labels).float().mean().item()

# Wirtinger gradient check of a real loss against its closed form: d/dz* |Az - b|^2 = A^H (Az - b).
A = torch.from_numpy((rng.randn(6, 3) + 1j * rng.randn(6, 3)).astype(np.complex64))
b = torch.from_numpy((rng.randn(6) + 1j * rng.randn(6)).astype(np.complex64))
z = torch.zeros(3, dtype=torch.cfloat, requires_grad=True)
(A @ z - b).abs().pow(2).sum().backward()
wirtinger_err = (z.grad - 2 * A.conj().T @ (A @ z.detach() - b)).abs().max().item()

# Least-squares channel estimate (complex lstsq) and a one-tap FFT equaliser.
conv_matrix = torch.stack([torch.roll(torch.from_numpy(qpsk[:64]), s) for s in range(3)], 1)
h_est = torch.linalg.lstsq(conv_matrix, torch.from_numpy(rx[:64])).solution
H = torch.fft.fft(h_est, 64)
eq = torch.fft.ifft(torch.fft.fft(torch.from_numpy(rx[:64])) * H.conj() / (H.abs() ** 2 + 0.01))
print(f"initial_loss={losses[0]:.6f}")
print(f"final_loss={losses[-1]:.6f}")
print(f"accuracy={acc:.6f}")
print(f"bias_grad_dtype_ok={float(model.l1.bias.dtype == torch.complex64)}")
print(f"weight_abs_mean={model.l1.weight.detach().abs().mean().item():.6f}")
print(f"weight_phase_mean={model.l2.weight.detach().angle().mean().item():.6f}")
print(f"wirtinger_ok={float(wirtinger_err < 1e-4)}")
print(f"h_est_err={(h_est - torch.from_numpy(channel)).abs().max().item():.6f}")
print(f"eq_mse={(eq - torch.from_numpy(qpsk[:64])).abs().pow(2).mean().item():.6f}")
print(f"h_power={h.abs().pow(2).mean().item():.6f}")
