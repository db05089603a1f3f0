"""Audio research code, written once against ``lib`` and run with torch and jitorch: ``stft``/``istft`` with hann and
hamming windows, magnitude/phase and ``view_as_real``, reflect padding, a mel filterbank product, a conv1d + GRU model
on spectrogram frames, spectral-convergence and log-magnitude losses with gradients through the STFT."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import jitorch
from sweep_helpers import LIBS, assert_runs_match, copy_weights

N_FFT, HOP, N_MELS = 64, 16, 12


def mel_filterbank(n_fft, n_mels, sr=8000):
    """Triangular filters (n_freq, n_mels) in NumPy, as audio code builds them once."""
    mel = lambda f: 2595 * np.log10(1 + f / 700)  # noqa: E731
    imel = lambda m: 700 * (10 ** (m / 2595) - 1)  # noqa: E731
    freqs = np.linspace(0, sr / 2, n_fft // 2 + 1)
    pts = imel(np.linspace(mel(0), mel(sr / 2), n_mels + 2))
    lo, mid, hi = pts[:-2, None], pts[1:-1, None], pts[2:, None]
    fb = np.maximum(0, np.minimum((freqs - lo) / (mid - lo), (hi - freqs) / (hi - mid)))
    return fb.T.astype(np.float32)


def spectrogram(lib, wav, window_name, center=True, pad_mode="reflect"):
    window = getattr(lib, f"{window_name}_window")(N_FFT)
    spec = lib.stft(wav, N_FFT, hop_length=HOP, window=window, center=center, pad_mode=pad_mode,
                    return_complex=True)
    return spec, window


def make_model(lib):
    nn = lib.nn

    class Enhancer(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv1d(N_MELS, 16, 3, padding=1)
            self.gru = nn.GRU(16, 16, batch_first=True, bidirectional=True)
            self.out = nn.Linear(32, N_FFT // 2 + 1)

        def forward(self, mel):  # (B, M, T)
            h = lib.relu(self.conv(lib.nn.functional.pad(mel, (2, 2), mode="reflect")))
            h, _ = self.gru(h.transpose(1, 2))
            return lib.sigmoid(self.out(h)).transpose(1, 2)  # a mask (B, F, T+4)

    return Enhancer()


def audio_run(lib, state=None, steps=3, window_name="hann"):
    rng = np.random.default_rng(0)
    t = np.arange(400) / 8000
    clean_np = (np.sin(2 * np.pi * 440 * t) * 0.5)[None].repeat(2, 0).astype(np.float32)
    noisy_np = (clean_np + 0.1 * rng.normal(size=clean_np.shape)).astype(np.float32)
    clean, noisy = lib.tensor(clean_np), lib.tensor(noisy_np)
    fb = lib.tensor(mel_filterbank(N_FFT, N_MELS))
    model = make_model(lib)
    if state is not None:
        copy_weights(state, model)
    opt = lib.optim.Adam(model.parameters(), lr=1e-3)
    out = {"loss": []}
    target_spec, window = spectrogram(lib, clean, window_name)
    target_mag = target_spec.abs()
    for _ in range(steps):
        opt.zero_grad()
        spec, _ = spectrogram(lib, noisy, window_name)
        mag, phase = spec.abs(), spec.angle()
        mel = lib.log(lib.matmul(mag.transpose(1, 2), fb).transpose(1, 2) + 1e-5)
        mask = model(mel)[..., 2:-2]
        est = lib.polar(mag * mask, phase)
        est_mag = (lib.view_as_real(est) ** 2).sum(-1).clamp_min(1e-10).sqrt()
        sc = (target_mag - est_mag).norm(p="fro") / target_mag.norm(p="fro")
        logmag = lib.nn.functional.l1_loss(lib.log(est_mag + 1e-7), lib.log(target_mag + 1e-7))
        wav = lib.istft(est, N_FFT, hop_length=HOP, window=window, center=True, length=clean.shape[-1])
        wav_loss = (wav - clean).abs().mean()
        loss = sc + logmag + wav_loss
        loss.backward()
        out["loss"].append(loss.item())
        out["grads"] = [p.grad.clone() for p in model.parameters()]
        opt.step()
        out["wav"], out["spec"], out["mel"] = wav, lib.view_as_real(spec), mel
        # atan2 is ill-conditioned on small bins, and a real bin's rounding-level imaginary part puts it at +pi or
        # -pi: compare the phase as a point on the circle where the magnitude is not small
        big = mag > 0.05 * mag.max()
        out["phase"] = lib.stack([phase.cos()[big], phase.sin()[big]])
    return out, model


@pytest.mark.parametrize("window_name", ["hann", "hamming"])
def test_enhancer_training_matches_torch(window_name):
    torch.manual_seed(0)
    th, th_model = audio_run(torch, window_name=window_name)
    torch.manual_seed(0)
    jt, _ = audio_run(jitorch, state=make_model(torch), window_name=window_name)
    assert_runs_match(th, jt, rtol=1e-5, atol=1e-6, what="audio")


@pytest.mark.parametrize("center,pad_mode", [(True, "reflect"), (True, "constant"), (False, "reflect")])
@pytest.mark.parametrize("normalized,onesided", [(False, True), (True, True), (False, False)])
def test_stft_gradients_and_roundtrip(center, pad_mode, normalized, onesided):
    rng = np.random.default_rng(3)
    x_np = rng.normal(size=(2, 300)).astype(np.float32)
    res = []
    for lib in LIBS:
        x = lib.tensor(x_np, requires_grad=True)
        w = lib.hamming_window(N_FFT, periodic=False)
        spec = lib.stft(x, N_FFT, HOP, window=w, center=center, pad_mode=pad_mode, normalized=normalized,
                        onesided=onesided, return_complex=True)
        g_rng = np.random.default_rng(4)  # the same upstream gradient in both libraries
        g = lib.tensor(g_rng.normal(size=tuple(lib.view_as_real(spec).shape)).astype(np.float32))
        (lib.view_as_real(spec) * g).sum().backward()
        back = lib.istft(spec.detach(), N_FFT, HOP, window=w, center=center, normalized=normalized,
                         onesided=onesided, length=300 if center else None)
        res.append([lib.view_as_real(spec), x.grad, back])
    assert_runs_match(*res, rtol=1e-5, atol=1e-5, what=f"stft {center} {pad_mode} {normalized} {onesided}")
