"""``stft``/``istft`` (and ``Tensor.stft``/``istft``) and the window functions against torch: spectrograms of real and
complex signals for each framing option, round trips, gradients with random complex upstream gradients, gradcheck,
and torch's errors."""
import numpy as np
import pytest
import torch
from helpers import check_error, check_op, gradcheck_op, make_array

import jitorch

pytestmark = pytest.mark.filterwarnings("ignore:.*window was not provided", "ignore:.*return_complex=False",
                                        "ignore:.*shorter than the length", "ignore:ComplexHalf support")

# (n_fft, keyword arguments): default hop, uneven hops, a window shorter than n_fft, odd n_fft, no centering, padding
# modes, normalization, two-sided output, the window aligned to the frame start.
FRAMINGS = {
    "default": (16, {}),
    "hop5_win11": (16, {"hop_length": 5, "win_length": 11}),
    "odd_normalized": (15, {"hop_length": 4, "normalized": True}),
    "not_centered": (16, {"center": False, "hop_length": 3}),
    "constant_pad": (12, {"pad_mode": "constant"}),
    "replicate_pad": (12, {"pad_mode": "replicate", "hop_length": 6}),
    "two_sided": (16, {"onesided": False}),
    "align_to_window": (16, {"center": False, "win_length": 10, "align_to_window": True}),
    "hop_past_window": (8, {"hop_length": 10}),
}


def _stft(lib, n_fft, kwargs, window):
    def run(x, *w):
        win = w[0] if w else (None if window is None else getattr(lib, window)(kwargs.get("win_length", n_fft)))
        return lib.stft(x, n_fft, window=win, return_complex=True, **kwargs)
    return run


@pytest.mark.parametrize("window", [None, "hann_window"])
@pytest.mark.parametrize("shape", [(50,), (2, 41)])
@pytest.mark.parametrize("framing", list(FRAMINGS))
def test_stft_matches_torch(framing, shape, window):
    n_fft, kwargs = FRAMINGS[framing]
    check_op(_stft(jitorch, n_fft, kwargs, window), _stft(torch, n_fft, kwargs, window),
             [make_array(shape, "float32", np.random.default_rng(len(framing)))], atol=2e-5, rtol=2e-5)


@pytest.mark.parametrize("dtypes", [("complex128", "float64"), ("float64", "complex128"), ("float32", "float64"),
                                    ("complex64", "complex64")])
def test_stft_of_complex_signals_and_windows(dtypes):
    # A complex signal or window gives the two-sided transform; gradients reach the window too.
    rng = np.random.default_rng(5)
    check_op(_stft(jitorch, 16, {"hop_length": 4}, None), _stft(torch, 16, {"hop_length": 4}, None),
             [make_array((2, 40), dtypes[0], rng), make_array((16,), dtypes[1], rng)], atol=2e-5, rtol=2e-5)


def test_tensor_stft_method_and_return_complex_false():
    x = make_array((30,), "float64")
    check_op(lambda a: a.stft(8, window=jitorch.hann_window(8, dtype=jitorch.float64), return_complex=False),
             lambda a: a.stft(8, window=torch.hann_window(8, dtype=torch.float64), return_complex=False), [x],
             atol=1e-12, rtol=1e-12)


def _istft(lib, n_fft, kwargs, window, **extra):
    def run(spec):
        win = None if window is None else getattr(lib, window)(kwargs.get("win_length", n_fft), dtype=lib.float64)
        return lib.istft(spec, n_fft, window=win, **{**kwargs, **extra})
    return run


ISTFT_FRAMINGS = ("default", "hop5_win11", "odd_normalized", "not_centered", "two_sided")


@pytest.mark.parametrize("window", [None, "hann_window"])
@pytest.mark.parametrize("length", [None, 37, 70])
@pytest.mark.parametrize("framing", ISTFT_FRAMINGS)
def test_istft_matches_torch(framing, length, window):
    n_fft, kwargs = FRAMINGS[framing]
    if window is None and framing == "not_centered":
        kwargs = {**kwargs, "hop_length": 16}  # a rectangular window needs no overlap to be invertible
    frames = 9 if framing != "not_centered" else 3
    bins = n_fft if kwargs.get("onesided") is False else n_fft // 2 + 1
    spec = make_array((2, bins, frames), "complex128", np.random.default_rng(len(framing)))
    check_op(_istft(jitorch, n_fft, kwargs, window, length=length), _istft(torch, n_fft, kwargs, window, length=length),
             [spec], atol=1e-10, rtol=1e-10)


def test_istft_return_complex_and_tensor_method():
    spec = make_array((16, 7), "complex128")
    check_op(lambda s: s.istft(16, window=jitorch.hann_window(16, dtype=jitorch.float64), return_complex=True),
             lambda s: s.istft(16, window=torch.hann_window(16, dtype=torch.float64), return_complex=True), [spec],
             atol=1e-10, rtol=1e-10)


@pytest.mark.parametrize("framing", ["default", "hop5_win11", "odd_normalized", "two_sided"])
@pytest.mark.parametrize("dtype", ["float32", "float64", "complex128"])
def test_round_trip(framing, dtype):
    n_fft, kwargs = FRAMINGS[framing]
    x = jitorch.tensor(make_array((3, 64), dtype))
    window = jitorch.hann_window(kwargs.get("win_length", n_fft), periodic=True)
    complex_signal = dtype.startswith("complex")
    spec = jitorch.stft(x, n_fft, window=window, return_complex=True, **kwargs)
    if complex_signal:
        kwargs = {**kwargs, "onesided": False}
    back = jitorch.istft(spec, n_fft, window=window, length=64, return_complex=complex_signal, **kwargs)
    assert back.dtype == x.dtype
    np.testing.assert_allclose(back.numpy(), x.numpy(), atol=1e-5 if dtype == "float32" else 1e-12)


def test_gradcheck_through_stft_and_istft():
    def spectral_roundtrip(x, w):
        spec = jitorch.stft(x, 8, hop_length=3, window=w, return_complex=True)
        fixed = jitorch.hann_window(8, dtype=jitorch.float64) + 0.5  # not w: gradcheck perturbs w's storage in place
        return jitorch.istft(spec * spec.abs(), 8, hop_length=3, window=fixed, length=20)

    rng = np.random.default_rng(8)
    gradcheck_op(spectral_roundtrip, [make_array((20,), "float64", rng), make_array((8,), "float64", rng, 0.5, 1.0)])


def test_spectrogram_loss_gradient_matches_torch():
    def loss(lib, pred, target):
        w = lib.hann_window(32)
        spec = lambda s: lib.stft(s, 32, hop_length=8, window=w, return_complex=True).abs()  # noqa: E731
        return (spec(pred) - spec(target)).pow(2).mean() + (spec(pred) + 1e-3).log().mean()

    rng = np.random.default_rng(9)
    check_op(lambda a, b: loss(jitorch, a, b), lambda a, b: loss(torch, a, b),
             [make_array((2, 200), "float32", rng), make_array((2, 200), "float32", rng)], atol=1e-5, rtol=1e-4)


STFT_ERRORS = {
    "no_return_complex": ((50,), "float32", {}, "return_complex"),
    "integer_signal": ((50,), "int64", {"return_complex": True}, "floating point or complex"),
    "three_dims": ((2, 2, 50), "float32", {"return_complex": True}, "1D or 2D"),
    "n_fft_too_long": ((10,), "float32", {"return_complex": True, "center": False}, "n_fft"),
    "hop_zero": ((50,), "float32", {"return_complex": True, "hop_length": 0}, "hop_length"),
    "win_longer_than_n_fft": ((50,), "float32", {"return_complex": True, "win_length": 20}, "win_length"),
    "onesided_complex": ((50,), "complex64", {"return_complex": True, "onesided": True}, "onesided"),
    "align_with_center": ((50,), "float32", {"return_complex": True, "align_to_window": True}, "align_to_window"),
    "half": ((50,), "float16", {"return_complex": True}, "Half"),
}


@pytest.mark.parametrize("case", list(STFT_ERRORS))
def test_stft_errors_match_torch(case):
    shape, dtype, kwargs, match = STFT_ERRORS[case]
    check_error(lambda x: jitorch.stft(x, 16, **kwargs), lambda x: torch.stft(x, 16, **kwargs),
                [make_array(shape, dtype)], match=match)


def test_stft_window_shape_error():
    check_error(lambda x: jitorch.stft(x, 16, window=jitorch.ones(12), return_complex=True),
                lambda x: torch.stft(x, 16, window=torch.ones(12), return_complex=True), [make_array((50,))],
                match="window")


ISTFT_ERRORS = {
    "real_input": ((9, 13), "float32", {}, "complex-valued"),
    "empty": ((0, 9, 13), "complex64", {}, "empty"),
    "four_dims": ((1, 2, 9, 13), "complex64", {}, "dimensions"),
    "wrong_bins_onesided": ((8, 13), "complex64", {"onesided": True}, "n_fft / 2 + 1"),
    "wrong_bins_two_sided": ((9, 13), "complex64", {"onesided": False}, "n_fft"),
    "hop_past_window": ((9, 13), "complex64", {"hop_length": 20}, "hop_length"),
    "zero_envelope": ((9, 13), "complex64", {"hop_length": 16, "window": "hann"}, "overlap add"),
    "onesided_return_complex": ((9, 13), "complex64", {"return_complex": True}, "onesided"),
}


@pytest.mark.parametrize("case", list(ISTFT_ERRORS))
def test_istft_errors_match_torch(case):
    shape, dtype, kwargs, match = ISTFT_ERRORS[case]

    def run(lib):
        kw = dict(kwargs)
        if kw.get("window") == "hann":
            kw["window"] = lib.hann_window(16)
        return lambda s: lib.istft(s, 16, **kw)

    check_error(run(jitorch), run(torch), [make_array(shape, dtype)], match=match)


WINDOWS = ("hann_window", "hamming_window", "blackman_window", "bartlett_window", "kaiser_window")


@pytest.mark.parametrize("length", [0, 1, 2, 5, 8, 401])
@pytest.mark.parametrize("periodic", [True, False])
@pytest.mark.parametrize("dtype", [None, "float64"])
@pytest.mark.parametrize("name", WINDOWS)
def test_windows_match_torch(name, length, periodic, dtype):
    kw = {} if dtype is None else {"dtype": getattr(jitorch, dtype)}
    got = getattr(jitorch, name)(length, periodic, **kw)
    want = getattr(torch, name)(length, periodic, **({} if dtype is None else {"dtype": getattr(torch, dtype)}))
    assert tuple(got.shape) == tuple(want.shape) and str(got.dtype)[8:] == str(want.dtype)[6:]
    np.testing.assert_allclose(got.numpy(), want.numpy(), atol=2e-6 if dtype is None else 1e-12)


def test_window_options_and_errors():
    np.testing.assert_allclose(jitorch.hamming_window(9, False, alpha=0.6, beta=0.3).numpy(),
                               torch.hamming_window(9, False, alpha=0.6, beta=0.3).numpy(), atol=1e-6)
    np.testing.assert_allclose(jitorch.kaiser_window(9, True, 5.0).numpy(), torch.kaiser_window(9, True, 5.0).numpy(),
                               atol=1e-6)
    assert jitorch.hann_window(4, requires_grad=True).requires_grad
    check_error(lambda: jitorch.hann_window(4, dtype=jitorch.int64), lambda: torch.hann_window(4, dtype=torch.int64),
                match=("hann_window", "floating point"))
