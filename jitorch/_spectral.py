"""Short-time Fourier transforms (``stft``, ``istft``, ``Tensor.stft``/``istft``) and the window functions.

Both are composites of the FFT rows, built as ATen builds them: ``stft`` pads (``center``), cuts the signal into
frames (``unfold``, a view), multiplies by the window and transforms each frame (r2c, one-sided for real inputs, or
c2c); ``istft`` inverts each frame (c2r or c2c), multiplies by the window, overlap-adds the frames and divides by
the overlap-added squared window. Gradients flow through every step.

>>> import jitorch
>>> x = jitorch.arange(16.0)
>>> spec = jitorch.stft(x, 8, hop_length=2, window=jitorch.hann_window(8), return_complex=True)
>>> spec.shape
jitorch.Size([5, 9])
>>> back = jitorch.istft(spec, 8, hop_length=2, window=jitorch.hann_window(8), length=16)
>>> bool((back - x).abs().max() < 1e-5)
True
"""
from __future__ import annotations

import math
import warnings

from . import _creation, _dtype, _movement
from ._dispatch import TORCH_TYPE_NAMES, apply
from ._movement_extra import view_as_real
from ._tensor import Tensor
from .ops import fft as F

__all__ = ["stft", "istft", "hann_window", "hamming_window", "blackman_window", "bartlett_window", "kaiser_window"]


def _describe(name, x, n_fft, hop, win, window):
    shape = list(x.shape)
    w = "None" if window is None else f"{window.dtype}{list(window.shape)}"
    return f"{name}({x.dtype}{shape}, n_fft={n_fft}, hop_length={hop}, win_length={win}, window={w})"


def _check(ok, where, message):
    if not ok:
        raise RuntimeError(f"{where}: {message}")


def _centered(window, n_fft):
    """``window`` zero-padded on both sides to ``n_fft`` (the odd zero on the right), as ATen centres it."""
    if window is None or window.shape[0] == n_fft:
        return window
    win = window.shape[0]
    left = (n_fft - win) // 2
    return _movement.cat([window.new_zeros(left), window, window.new_zeros(n_fft - win - left)])


def _pad(x, amount, mode):
    """``(B, L)`` padded by ``amount`` on both ends of L with ``mode`` (torch pads a ``(1, B, L)`` view)."""
    from .nn.functional import pad

    return pad(x.unsqueeze(0), [amount, amount], mode).squeeze(0)


def stft(input, n_fft, hop_length=None, win_length=None, window=None, center=True, pad_mode="reflect",
         normalized=False, onesided=None, return_complex=None, align_to_window=None):
    """Short-time Fourier transform of a 1-d signal or a batch ``(B, L)``: ``(B?, n_freq, n_frames)`` complex."""
    if center and align_to_window is not None:
        raise RuntimeError("stft align_to_window should only be set when center = false")
    hop = n_fft // 4 if hop_length is None else hop_length
    win = n_fft if win_length is None else win_length
    where = _describe("stft", input, n_fft, hop, win, window)
    if window is None:
        warnings.warn("stft: a window was not provided; a rectangular window will be applied, which is known to "
                      "cause spectral leakage (pass window=jitorch.hann_window(n_fft), or jitorch.ones(n_fft) to keep "
                      "the rectangular window without this warning)", UserWarning, stacklevel=2)
    elif window.device != input.device:
        raise RuntimeError(f"{where}: input and window must be on the same device but got input on {input.device} "
                           f"and window on {window.device}")
    if return_complex is None:
        return_complex = input.is_complex() or (window is not None and window.is_complex())
        if not return_complex:
            raise RuntimeError("stft requires the return_complex parameter be given for real inputs, and will further "
                               "require that return_complex=True in a future PyTorch release.")
    if not return_complex:
        warnings.warn("stft with return_complex=False is deprecated: call view_as_real on the complex output",
                      UserWarning, stacklevel=2)
    if input.dtype.category < _dtype.FLOAT:
        raise RuntimeError(f"{where}: expected a tensor of floating point or complex values")
    _check(input.dim() in (1, 2), where, f"expected a 1D or 2D tensor, got {input.dim()}D")
    x = input.unsqueeze(0) if input.dim() == 1 else input
    if center:
        x = _pad(x, n_fft // 2, pad_mode)
    length = x.shape[1]
    _check(0 < n_fft <= length, where, f"expected 0 < n_fft <= {length}, but got n_fft={n_fft}")
    _check(hop > 0, where, f"expected hop_length > 0, but got hop_length={hop}")
    _check(0 < win <= n_fft, where, f"expected 0 < win_length <= n_fft, but got win_length={win}")
    _check(window is None or (window.dim() == 1 and window.shape[0] == win), where,
           f"expected a 1D window tensor of size equal to win_length={win}, but got window with size "
           f"{None if window is None else list(window.shape)}")
    if window is None and win < n_fft:
        window = _creation.ones(win, dtype=input.dtype, device=input.device)
    window = _centered(window, n_fft)
    if align_to_window:
        x = _pad(x, (n_fft - win) // 2, pad_mode)
        frames = x.unfold(-1, n_fft, hop)
        frames = frames.narrow(1, 0, min(frames.shape[1], 1 + (length - win) // hop))
    else:
        frames = x.unfold(-1, n_fft, hop)  # (B, n_frames, n_fft), a view
    if window is not None:
        frames = frames * window
    complex_fft = frames.is_complex()
    onesided = not complex_fft if onesided is None else onesided
    if complex_fft and onesided:
        raise RuntimeError(f"{where}: Cannot have onesided output if window or input is complex")
    if frames.dtype not in (_dtype.float32, _dtype.float64, _dtype.complex64, _dtype.complex128):
        raise RuntimeError(f"{where}: Unsupported dtype {TORCH_TYPE_NAMES[frames.dtype.name]} (half-precision FFTs "
                           "are not supported; convert the input to float32)")
    norm = "sqrt" if normalized else "none"
    if complex_fft:
        out = apply(F.FFT_C2C, frames, dims=(2,), norm=norm, forward=True)
    else:
        out = apply(F.FFT_R2C, frames, dims=(2,), norm=norm, onesided=onesided)
    out = out.transpose(1, 2)
    if input.dim() == 1:
        out = out.squeeze(0)
    return out if return_complex else view_as_real(out)


def _overlap_add(frames, hop):
    """Frames ``(B, n_frames, n)`` summed into a ``(B, n + hop * (n_frames - 1))`` signal, frame ``f`` at ``f * hop``.

    Cut into hop-long blocks, block ``k`` of every frame lands on one contiguous run of output blocks: ``ceil(n / hop)``
    shifted adds instead of a scatter.
    """
    batch, count, n = frames.shape
    blocks = -(-n // hop)
    if blocks * hop != n:
        frames = _movement.cat([frames, frames.new_zeros(batch, count, blocks * hop - n)], 2)
    parts = frames.reshape(batch, count, blocks, hop)
    total = count + blocks - 1
    out = None
    for k in range(blocks):
        piece = parts.select(2, k)
        pieces = [piece]
        if k:
            pieces.insert(0, piece.new_zeros(batch, k, hop))
        if blocks - 1 - k:
            pieces.append(piece.new_zeros(batch, blocks - 1 - k, hop))
        placed = _movement.cat(pieces, 1) if len(pieces) > 1 else piece
        out = placed if out is None else out + placed
    return out.reshape(batch, total * hop).narrow(1, 0, n + hop * (count - 1))


def istft(input, n_fft, hop_length=None, win_length=None, window=None, center=True, normalized=False, onesided=None,
          length=None, return_complex=False):
    """Inverse of ``stft``: the least-squares signal of a ``(B?, n_freq, n_frames)`` complex spectrogram."""
    hop = n_fft // 4 if hop_length is None else hop_length
    win = n_fft if win_length is None else win_length
    where = _describe("istft", input, n_fft, hop, win, window)
    if window is None:
        warnings.warn("istft: a window was not provided; a rectangular window will be applied (pass the window "
                      "stft used, or jitorch.ones(n_fft))", UserWarning, stacklevel=2)
    if not input.is_complex():
        raise RuntimeError("istft requires a complex-valued input tensor matching the output from stft with "
                           f"return_complex=True, got {input.dtype}")
    _check(input.numel() != 0, where, "input tensor cannot be empty.")
    _check(input.dim() in (2, 3), where, f"expected a tensor with 2 or 3 dimensions of complex, but got {input.dim()}")
    fft_size, count = input.shape[-2], input.shape[-1]
    onesided = fft_size != n_fft if onesided is None else onesided
    expected = n_fft // 2 + 1 if onesided else n_fft
    _check(fft_size == expected, where, f"expected the frequency dimension (2nd to the last) of the input tensor to "
           f"match {'n_fft / 2 + 1' if onesided else 'n_fft'} when onesided={onesided}, but got {fft_size}")
    _check(0 < hop <= win, where, f"expected 0 < hop_length <= win_length, got hop_length={hop}")
    _check(0 < win <= n_fft, where, f"expected 0 < win_length <= n_fft, got win_length={win}")
    _check(window is None or (window.dim() == 1 and window.shape[0] == win), where,
           "Invalid window shape. window has to be 1D and length of `win_length`")
    real_dtype = input.dtype.to_real()
    if window is None:
        window = _creation.ones(win, dtype=real_dtype, device=input.device)
    window = _centered(window, n_fft)
    x = (input.unsqueeze(0) if input.dim() == 2 else input).transpose(1, 2)  # (B, n_frames, fft_size)
    norm = "sqrt" if normalized else "n"
    if return_complex:
        _check(not onesided, where, "Cannot have onesided output if window or input is complex")
        frames = apply(F.FFT_C2C, x, dims=(2,), norm=norm, forward=False)
    else:
        _check(not window.is_complex(), where, "Complex windows are incompatible with return_complex=False")
        if not onesided:
            x = x.narrow(2, 0, n_fft // 2 + 1)
        frames = apply(F.FFT_C2R, x, dims=(2,), norm=norm, last_dim_size=n_fft)
    signal = _overlap_add(frames * window, hop)
    envelope = _overlap_add((window * window).expand(1, count, n_fft), hop)
    total = n_fft + hop * (count - 1)
    start = n_fft // 2 if center else 0
    end = start + length if length is not None else (total - n_fft // 2 if center else total)
    stop = min(end, total)
    signal, envelope = signal.narrow(1, start, stop - start), envelope.narrow(1, start, stop - start)
    if bool((envelope.abs() < 1e-11).any()):
        raise RuntimeError(f"{where}: window overlap add min: the squared window sums to (nearly) zero somewhere; "
                           "use a window and hop_length whose overlap-add is nonzero everywhere")
    signal = signal / envelope
    if input.dim() == 2:
        signal = signal.squeeze(0)
    if end > total:
        warnings.warn("istft: the length of signal is shorter than the length parameter. Result is being padded with "
                      "zeros in the tail. Please check your center and hop_length settings.", UserWarning, stacklevel=2)
        signal = _movement.cat([signal, signal.new_zeros(signal.shape[:-1] + (end - total,))], -1)
    return signal


# -- windows ------------------------------------------------------------------------------------------------------
def _window(name, length, periodic, dtype, device, requires_grad, values):
    dtype = _dtype.get_default_dtype() if dtype is None else _dtype.to_dtype(dtype)
    if dtype.category != _dtype.FLOAT:
        raise RuntimeError(f"{name} expects floating point dtypes, got: {dtype}")
    if length < 0:
        raise RuntimeError(f"{name} requires non-negative window_length, got window_length={length}")
    if length <= 1:
        out = _creation.ones(length, dtype=dtype, device=device)
    else:
        n = length + 1 if periodic else length
        # torch computes in the window's dtype: the positions, then each formula's operations.
        out = values(_creation.arange(n, dtype=dtype, device=device), n)
        out = out.narrow(0, 0, length) if periodic else out
    return out.requires_grad_(True) if requires_grad else out


def hamming_window(window_length, periodic=True, alpha=0.54, beta=0.46, *, dtype=None, layout=None, device=None,
                   requires_grad=False, pin_memory=False):
    """``alpha - beta * cos(2 pi k / (N - 1))`` (N = window_length + 1 when ``periodic``, dropping the last)."""
    return _window("hamming_window", window_length, periodic, dtype, device, requires_grad,
                   lambda k, n: (k * (2 * math.pi / (n - 1))).cos() * -beta + alpha)


def hann_window(window_length, periodic=True, *, dtype=None, layout=None, device=None, requires_grad=False,
                pin_memory=False):
    """``0.5 - 0.5 cos(2 pi k / (N - 1))``: ``hamming_window`` with alpha = beta = 0.5."""
    return _window("hann_window", window_length, periodic, dtype, device, requires_grad,
                   lambda k, n: (k * (2 * math.pi / (n - 1))).cos() * -0.5 + 0.5)


def blackman_window(window_length, periodic=True, *, dtype=None, layout=None, device=None, requires_grad=False,
                    pin_memory=False):
    """``0.42 - 0.5 cos(2 pi k / (N - 1)) + 0.08 cos(4 pi k / (N - 1))``."""
    def values(k, n):
        w = k * (math.pi / (n - 1))
        return (w * 4).cos() * 0.08 - (w * 2).cos() * 0.5 + 0.42

    return _window("blackman_window", window_length, periodic, dtype, device, requires_grad, values)


def bartlett_window(window_length, periodic=True, *, dtype=None, layout=None, device=None, requires_grad=False,
                    pin_memory=False):
    """The triangle ``1 - |2 k / (N - 1) - 1|``."""
    def values(k, n):
        w = k * (2.0 / (n - 1))
        return w.where(k < (n - 1) // 2 + 1, 2 - w)

    return _window("bartlett_window", window_length, periodic, dtype, device, requires_grad, values)


def kaiser_window(window_length, periodic=True, beta=12.0, *, dtype=None, layout=None, device=None,
                  requires_grad=False, pin_memory=False):
    """``I0(beta sqrt(1 - ((k - a) / a)^2)) / I0(beta)``, a = (N - 1) / 2."""
    def values(k, n):
        from ._math_extra import i0

        a = (n - 1) / 2.0
        inner = (1 - ((k - a) / a) ** 2).clamp(min=0)
        return i0(inner.sqrt() * beta) / i0(_creation.tensor(beta, dtype=k.dtype, device=k.device))

    return _window("kaiser_window", window_length, periodic, dtype, device, requires_grad, values)


def _tensor_stft(self, n_fft, hop_length=None, win_length=None, window=None, center=True, pad_mode="reflect",
                 normalized=False, onesided=None, return_complex=None, align_to_window=None):
    return stft(self, n_fft, hop_length, win_length, window, center, pad_mode, normalized, onesided, return_complex,
                align_to_window)


def _tensor_istft(self, n_fft, hop_length=None, win_length=None, window=None, center=True, normalized=False,
                  onesided=None, length=None, return_complex=False):
    return istft(self, n_fft, hop_length, win_length, window, center, normalized, onesided, length, return_complex)


Tensor.stft, Tensor.istft = _tensor_stft, _tensor_istft
