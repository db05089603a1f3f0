"""Audio front ends and losses as vocoder / enhancement repos write them (after ParallelWaveGAN's
stft_loss.py, HiFi-GAN's mel loss and Conv-TasNet / Demucs utilities): torch.stft with return_complex=True and a
registered hann_window buffer, magnitude via .abs() clamped before log, spectral convergence with torch.norm(p="fro"),
multi-resolution STFT loss, a mel filterbank built with torch.linspace / torch.clamp and applied by matmul,
istft reconstruction, SI-SNR, pre-emphasis via F.conv1d, and a small 1-D conv denoiser trained on those losses.

Everything runs in float64 via torch.set_default_dtype. Signals and conv weights come from NumPy, biases from
torch.manual_seed's stream (which jitorch reproduces); training is deterministic, so metrics must match torch.
"""
import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


def stft(x, fft_size, hop_size, win_length, window):
    x_stft = torch.stft(x, fft_size, hop_size, win_length, window, return_complex=True)
    return torch.sqrt(torch.clamp(x_stft.real ** 2 + x_stft.imag ** 2, min=1e-7)).transpose(2, 1)


class STFTLoss(nn.Module):
    def __init__(self, fft_size=64, shift_size=16, win_length=48):
        super().__init__()
        self.fft_size, self.shift_size, self.win_length = fft_size, shift_size, win_length
        self.register_buffer("window", torch.hann_window(win_length))

    def forward(self, x, y):
        x_mag = stft(x, self.fft_size, self.shift_size, self.win_length, self.window)
        y_mag = stft(y, self.fft_size, self.shift_size, self.win_length, self.window)
        sc_loss = torch.norm(y_mag - x_mag, p="fro") / torch.norm(y_mag, p="fro")
        mag_loss = F.l1_loss(torch.log(y_mag), torch.log(x_mag))
        return sc_loss, mag_loss


class MultiResolutionSTFTLoss(nn.Module):
    def __init__(self, fft_sizes=(32, 64, 128), hop_sizes=(8, 16, 32), win_lengths=(24, 48, 96)):
        super().__init__()
        self.stft_losses = nn.ModuleList([STFTLoss(f, s, w) for f, s, w in zip(fft_sizes, hop_sizes, win_lengths)])

    def forward(self, x, y):
        sc, mag = 0.0, 0.0
        for f in self.stft_losses:
            s, m = f(x, y)
            sc, mag = sc + s, mag + m
        return sc / len(self.stft_losses), mag / len(self.stft_losses)


def hz_to_mel(f):
    return 2595.0 * math.log10(1.0 + f / 700.0)


def mel_filterbank(sr, n_fft, n_mels, fmin=0.0, fmax=None):
    fmax = fmax or sr / 2
    mels = torch.linspace(hz_to_mel(fmin), hz_to_mel(fmax), n_mels + 2)
    hz = 700.0 * (10 ** (mels / 2595.0) - 1.0)
    fft_freqs = torch.linspace(0, sr / 2, n_fft // 2 + 1)
    lower = (fft_freqs[None, :] - hz[:-2, None]) / (hz[1:-1, None] - hz[:-2, None])
    upper = (hz[2:, None] - fft_freqs[None, :]) / (hz[2:, None] - hz[1:-1, None])
    return torch.clamp(torch.minimum(lower, upper), min=0.0)


def log_mel(x, fb, n_fft=128, hop=32):
    spec = torch.stft(F.pad(x.unsqueeze(1), ((n_fft - hop) // 2, (n_fft - hop) // 2), mode="reflect").squeeze(1),
                      n_fft, hop_length=hop, window=torch.hann_window(n_fft), center=False, return_complex=True)
    return torch.log(torch.clamp(fb @ spec.abs(), min=1e-5))


def si_snr(est, ref, eps=1e-8):
    est, ref = est - est.mean(-1, keepdim=True), ref - ref.mean(-1, keepdim=True)
    proj = (est * ref).sum(-1, keepdim=True) * ref / (ref.pow(2).sum(-1, keepdim=True) + eps)
    noise = est - proj
    return 10 * torch.log10(proj.pow(2).sum(-1) / (noise.pow(2).sum(-1) + eps) + eps)


class Denoiser(nn.Module):
    def __init__(self, ch=8):
        super().__init__()
        self.net = nn.Sequential(nn.Conv1d(1, ch, 9, padding=4), nn.PReLU(ch),
                                 nn.Conv1d(ch, ch, 9, padding=8, dilation=2), nn.Tanh(), nn.Conv1d(ch, 1, 9, padding=4))

    def forward(self, x):
        return x + self.net(x.unsqueeze(1)).squeeze(1)


torch.set_default_dtype(torch.float64)  # log-magnitude losses: float32 noise in near-zero bins makes training chaotic
torch.manual_seed(0)  # the biases keep torch's default init
rng = np.random.RandomState(0)
sr, n = 8000, 1024
t = np.arange(n) / sr
clean = np.stack([0.5 * np.sin(2 * np.pi * f * t) * np.exp(-3 * t) for f in (220, 440, 330, 523)])
clean = clean + 0.02 * rng.randn(*clean.shape)  # a recording's noise floor
noisy = clean + 0.1 * rng.randn(*clean.shape)
clean_t = torch.from_numpy(clean).to(torch.get_default_dtype())
noisy_t = torch.as_tensor(noisy, dtype=torch.get_default_dtype())
model = Denoiser()
with torch.no_grad():
    for p in model.parameters():
        if p.dim() > 1:
            p.copy_(torch.from_numpy(rng.randn(*p.shape) * 0.05))
mr_stft = MultiResolutionSTFTLoss()
fb = mel_filterbank(sr, 128, 20)
opt = torch.optim.Adam(model.parameters(), lr=2e-3)
losses = []
for step in range(10):  # Adam on log-magnitude losses is chaotic: later steps amplify rounding 20x per step
    est = model(noisy_t)
    sc, mag = mr_stft(est, clean_t)
    mel_l1 = F.l1_loss(log_mel(est, fb), log_mel(clean_t, fb))
    loss = sc + mag + 0.5 * mel_l1 - 0.01 * si_snr(est, clean_t).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    losses.append(loss.item())
with torch.no_grad():
    est = model(noisy_t)
    win = torch.hann_window(64)
    spec = torch.stft(est, 64, 16, window=win, return_complex=True)
    recon = torch.istft(spec, 64, 16, window=win, length=n)
    emph = F.conv1d(est.unsqueeze(1), torch.tensor([[[-0.97, 1.0]]]), padding=0).squeeze(1)
print(f"initial_loss={losses[0]:.6f}")
print(f"loss_5={losses[5]:.6f}")
print(f"final_loss={losses[-1]:.6f}")
print(f"si_snr_noisy={si_snr(noisy_t, clean_t).mean().item():.5f}")
print(f"si_snr_est={si_snr(est, clean_t).mean().item():.5f}")
print(f"istft_err={(recon - est).abs().max().item() < 1e-4:d}")
print(f"fb_sum={fb.sum().item():.5f}")
print(f"emph_energy={emph.pow(2).mean().item():.6f}")
print(f"spec_mag_mean={spec.abs().mean().item():.6f}")
