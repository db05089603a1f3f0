"""``jitorch.fft`` against ``torch.fft``: every transform on random real and complex inputs (float32/float64,
complex64/complex128), each norm, ``n``/``s`` padding and truncation, odd and even sizes, several dims; gradients
with random (complex) upstream gradients; gradcheck and gradgradcheck in double precision; torch's errors."""
import numpy as np
import pytest
import torch
from helpers import check_error, check_op, gradcheck_op, gradgradcheck_op, make_array

import jitorch

DTYPES = ("float32", "float64", "complex64", "complex128")
NORMS = (None, "backward", "forward", "ortho")


def _tol(dtype):
    # Different FFT libraries (torch: MKL or pocketfft; jitorch: SciPy's pocketfft) round differently.
    return (3e-5, 3e-5) if dtype in ("float32", "complex64") else (1e-11, 1e-11)


def _check(name, args, kwargs, arrays, dtype, layout="contiguous"):
    atol, rtol = _tol(dtype)
    return check_op(lambda *xs: getattr(jitorch.fft, name)(*xs, *args, **kwargs),
                    lambda *xs: getattr(torch.fft, name)(*xs, *args, **kwargs), arrays,
                    atol=atol, rtol=rtol, layout=layout)


# -- one-dimensional transforms -----------------------------------------------------------------------------------
ONE_D = ("fft", "ifft", "rfft", "irfft", "hfft", "ihfft")
# (n, dim): default size, truncation, zero-padding to odd and even sizes, another dim.
SIZES = ((None, -1), (4, -1), (5, -1), (12, -1), (3, 0), (8, 0), (1, -1))


@pytest.mark.parametrize("norm", NORMS)
@pytest.mark.parametrize("n, dim", SIZES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", ONE_D)
def test_one_dimensional_transform(name, dtype, n, dim, norm):
    x = make_array((4, 7), dtype, np.random.default_rng(len(name) + (n or 0)))
    _check(name, (n, dim, norm), {}, [x], dtype)


@pytest.mark.parametrize("name", ONE_D)
@pytest.mark.parametrize("layout", ["transposed", "sliced"])
def test_non_contiguous_input(name, layout):
    dtype = "complex128" if name in ("irfft", "hfft") else "float64"
    _check(name, (6, 0), {}, [make_array((5, 6), dtype)], dtype, layout=layout)


@pytest.mark.parametrize("name", ONE_D)
def test_even_length_round_trip_of_irfft_default_size(name):
    # Default irfft/hfft size is 2 * (m - 1): an even signal whose Nyquist bin is real.
    dtype = "complex64" if name in ("irfft", "hfft", "fft", "ifft") else "float32"
    _check(name, (), {}, [make_array((2, 3, 6), dtype)], dtype)


# -- n-dimensional transforms -------------------------------------------------------------------------------------
N_D = ("fftn", "ifftn", "rfftn", "irfftn", "hfftn", "ihfftn")
# (s, dim) of a (3, 4, 5) input.
SHAPES = ((None, None), ((4,), None), ((6, 3), None), ((3, 8), (0, 2)), ((-1, 5), (1, -1)), (None, (2, 0)),
          ((2, 3, 7), None), (None, (1,)), ((5,), (0,)))


@pytest.mark.parametrize("norm", [None, "ortho"])
@pytest.mark.parametrize("s, dim", SHAPES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", N_D)
def test_n_dimensional_transform(name, dtype, s, dim, norm):
    x = make_array((3, 4, 5), dtype, np.random.default_rng(len(name)))
    _check(name, (s, dim, norm), {}, [x], dtype)


@pytest.mark.parametrize("name", ("fft2", "ifft2", "rfft2", "irfft2", "hfft2", "ihfft2"))
@pytest.mark.parametrize("dtype", ["float32", "complex128"])
@pytest.mark.parametrize("s, dim", [(None, (-2, -1)), ((4, 6), (-2, -1)), ((3, 3), (0, 2)), (None, (2, 1))])
def test_two_dimensional_transform(name, dtype, s, dim):
    _check(name, (s, dim, "ortho"), {}, [make_array((2, 5, 4), dtype)], dtype)


def test_fftn_over_no_dims_is_a_complex_copy():
    _check("fftn", (), {"dim": ()}, [make_array((2, 3), "float64")], "float64")


# -- dtypes -------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", ["int64", "int32", "uint8", "bool"])
@pytest.mark.parametrize("name", ["fft", "rfft", "irfft", "fftn", "rfftn", "ihfft"])
def test_integer_inputs_promote_to_the_default_float(name, dtype):
    _check(name, (), {}, [make_array((3, 4), dtype)], "float32")


def test_integer_inputs_follow_set_default_dtype():
    previous = jitorch.get_default_dtype()
    jitorch.set_default_dtype(jitorch.float64)
    try:
        assert jitorch.fft.fft(jitorch.arange(4)).dtype == jitorch.complex128
        assert jitorch.fft.irfft(jitorch.arange(4)).dtype == jitorch.float64
    finally:
        jitorch.set_default_dtype(previous)


@pytest.mark.parametrize("name", ["fft", "rfft", "irfft", "fftn", "hfft"])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_precision_is_refused_as_on_torch_cpu(name, dtype):
    check_error(getattr(jitorch.fft, name), getattr(torch.fft, name), [make_array((4,), dtype)],
                match=(name, "Unsupported dtype"))


# -- errors -------------------------------------------------------------------------------------------------------
ERRORS = {
    "zero_dim": ("fft", np.array(1.0), {}, "no dimensions"),
    "zero_dim_rfftn": ("rfftn", np.array(1.0), {}, "at least one axis"),
    "n_zero": ("fft", np.ones(4), {"n": 0}, "(0)"),
    "n_negative": ("rfft", np.ones(4), {"n": -1}, "(-1)"),
    "irfft_n_zero": ("irfft", np.ones(4, np.complex64), {"n": 0}, "(0)"),
    "irfft_length_one": ("irfft", np.ones(1, np.complex64), {}, "(0)"),
    "empty_dim": ("fft", np.ones((3, 0)), {}, "(0)"),
    "dim_out_of_range": ("fft", np.ones((2, 3)), {"dim": 2}, "out of range"),
    "bad_norm": ("ifft", np.ones(4), {"norm": "bogus"}, "bogus"),
    "duplicate_dims": ("fftn", np.ones((2, 3)), {"dim": (0, 0)}, "unique"),
    "s_too_long": ("fftn", np.ones(4), {"s": (2, 2)}, "only has 1"),
    "s_dim_mismatch": ("ifftn", np.ones((2, 3)), {"s": (2,), "dim": (0, 1)}, "same length"),
    "s_zero": ("rfftn", np.ones((2, 3)), {"s": (2, 0)}, "(0)"),
    "rfft_complex": ("rfft", np.ones(4, np.complex64), {}, "ComplexFloat"),
    "ihfft_complex": ("ihfft", np.ones(4, np.complex128), {}, "ComplexDouble"),
    "rfftn_complex": ("rfftn", np.ones((2, 2), np.complex64), {}, "real-valued"),
    "rfftn_no_dims": ("rfftn", np.ones((2, 2)), {"dim": ()}, "at least one axis"),
    "irfftn_no_dims": ("irfftn", np.ones((2, 2), np.complex64), {"dim": ()}, "at least one axis"),
}


@pytest.mark.parametrize("case", list(ERRORS))
def test_errors_match_torch(case):
    name, x, kwargs, match = ERRORS[case]
    check_error(lambda a: getattr(jitorch.fft, name)(a, **kwargs), lambda a: getattr(torch.fft, name)(a, **kwargs),
                [x], match=match)


def test_n_must_be_an_int():
    with pytest.raises(TypeError):
        jitorch.fft.rfft(jitorch.ones(4), n=2.5)


def test_empty_batch_dims_transform_to_empty_results():
    # torch's MKL build refuses these ("Inconsistent configuration parameters"); the transforms are well defined.
    x = jitorch.zeros(0, 6)
    assert jitorch.fft.fft(x).shape == (0, 6) and jitorch.fft.fft(x).dtype == jitorch.complex64
    assert jitorch.fft.rfft(x).shape == (0, 4)
    assert jitorch.fft.irfft(jitorch.fft.rfft(x)).shape == (0, 6)
    assert jitorch.fft.fft2(jitorch.zeros(0, 2, 3)).shape == (0, 2, 3)


# -- out= ---------------------------------------------------------------------------------------------------------
@pytest.mark.filterwarnings("ignore:An output with one or more elements was resized")
@pytest.mark.parametrize("name, out_dtype, n", [("fft", "complex64", 8), ("fft", "complex128", 3),
                                               ("ifft", "complex64", 1), ("rfft", "complex128", 5),
                                               ("irfft", "float64", 2), ("hfft", "float32", 14),
                                               ("fftn", "complex64", 8)])
def test_out_argument(name, out_dtype, n):
    x = make_array((8,), "complex64" if name in ("irfft", "hfft") else "float32")
    jt_out = jitorch.empty(n, dtype=getattr(jitorch, out_dtype))
    th_out = torch.empty(n, dtype=getattr(torch, out_dtype))
    got = getattr(jitorch.fft, name)(jitorch.tensor(x), out=jt_out)
    want = getattr(torch.fft, name)(torch.tensor(x), out=th_out)
    assert got is jt_out and tuple(got.shape) == tuple(want.shape) and str(got.dtype)[8:] == str(want.dtype)[6:]
    np.testing.assert_allclose(got.numpy(), want.numpy(), atol=3e-5, rtol=3e-5)


@pytest.mark.parametrize("name, out_dtype, match", [("fft", "float32", "complex output"),
                                                    ("irfft", "complex64", "floating point output"),
                                                    ("fftn", "float64", "complex output")])
def test_out_of_the_wrong_kind_is_refused(name, out_dtype, match):
    x = np.ones(4, np.complex64) if name == "irfft" else np.ones(4, np.float32)
    check_error(lambda a: getattr(jitorch.fft, name)(a, out=jitorch.empty(4, dtype=getattr(jitorch, out_dtype))),
                lambda a: getattr(torch.fft, name)(a, out=torch.empty(4, dtype=getattr(torch, out_dtype))), [x],
                match=(name, match))


def test_out_refuses_inputs_that_require_grad():
    x = jitorch.ones(4, requires_grad=True)
    with pytest.raises(RuntimeError, match="don't support automatic differentiation"):
        jitorch.fft.fft(x, out=jitorch.empty(4, dtype=jitorch.complex64))
    with jitorch.no_grad():
        assert jitorch.fft.fft(x, out=jitorch.empty(4, dtype=jitorch.complex64)).shape == (4,)


# -- gradients in double precision --------------------------------------------------------------------------------
GRAD_CASES = {
    "fft_real": (lambda x: jitorch.fft.fft(x, n=5), "float64"),
    "fft_complex_pad": (lambda x: jitorch.fft.fft(x, n=9, norm="ortho"), "complex128"),
    "ifft_trim": (lambda x: jitorch.fft.ifft(x, n=3, dim=0), "complex128"),
    "ifft_real": (lambda x: jitorch.fft.ifft(x, norm="forward"), "float64"),
    "rfft_odd": (lambda x: jitorch.fft.rfft(x, n=5), "float64"),
    "rfft_even_pad": (lambda x: jitorch.fft.rfft(x, n=10), "float64"),
    "irfft_odd": (lambda x: jitorch.fft.irfft(x, n=7), "complex128"),
    "irfft_even": (lambda x: jitorch.fft.irfft(x, norm="ortho"), "complex128"),
    "irfft_real_input": (lambda x: jitorch.fft.irfft(x, n=4), "float64"),
    "hfft": (lambda x: jitorch.fft.hfft(x, n=5, norm="forward"), "complex128"),
    "ihfft": (lambda x: jitorch.fft.ihfft(x, n=7), "float64"),
    "fftn": (lambda x: jitorch.fft.fftn(x, s=(3, 5)), "complex128"),
    "rfftn": (lambda x: jitorch.fft.rfftn(x, s=(4, 5), norm="ortho"), "float64"),
    "irfftn": (lambda x: jitorch.fft.irfftn(x, s=(2, 6)), "complex128"),
    "irfft2_odd": (lambda x: jitorch.fft.irfft2(x, s=(3, 5)), "complex128"),
    "hfftn": (lambda x: jitorch.fft.hfftn(x, s=(3, 4)), "complex128"),
    "ihfftn": (lambda x: jitorch.fft.ihfftn(x, dim=(1, 0)), "float64"),
    "abs_of_rfft": (lambda x: jitorch.fft.rfft(x).abs(), "float64"),
    "shift": (lambda x: jitorch.fft.ifftshift(jitorch.fft.fftshift(x, dim=0) * 2), "complex128"),
}


@pytest.mark.parametrize("case", list(GRAD_CASES))
def test_gradcheck(case):
    fn, dtype = GRAD_CASES[case]
    gradcheck_op(fn, [make_array((3, 4), dtype, np.random.default_rng(1))])


@pytest.mark.parametrize("case", ["fft_complex_pad", "rfft_odd", "irfft_odd", "irfftn", "hfftn", "abs_of_rfft"])
def test_gradgradcheck(case):
    fn, dtype = GRAD_CASES[case]
    gradgradcheck_op(fn, [make_array((3, 4), dtype, np.random.default_rng(2))])


def test_spectral_loss_gradient_matches_torch():
    # A spectral loss as used in training: |rfft2(pred) - rfft2(target)| averaged.
    def loss(lib, pred, target):
        return (lib.fft.rfft2(pred, norm="ortho") - lib.fft.rfft2(target, norm="ortho")).abs().mean()

    rng = np.random.default_rng(3)
    check_op(lambda a, b: loss(jitorch, a, b), lambda a, b: loss(torch, a, b),
             [make_array((2, 6, 5), "float32", rng), make_array((2, 6, 5), "float32", rng)], atol=1e-5, rtol=1e-5)


def test_spectral_convolution_layer_gradient_matches_torch():
    # The Fourier layer of an FNO: rfft, a complex weight on the lowest modes, irfft back to the signal's size.
    def layer(lib, x, w_re, w_im):
        x_ft = lib.fft.rfft(x)
        w = lib.complex(w_re, w_im)
        out_ft = lib.zeros(x.shape[0], 3, x.shape[-1] // 2 + 1, dtype=lib.complex64)
        out_ft[:, :, :4] = lib.einsum("bix,iox->box", x_ft[:, :, :4], w)
        return lib.fft.irfft(out_ft, n=x.shape[-1])

    rng = np.random.default_rng(4)
    check_op(lambda *a: layer(jitorch, *a), lambda *a: layer(torch, *a),
             [make_array((2, 2, 16), "float32", rng), make_array((2, 3, 4), "float32", rng),
              make_array((2, 3, 4), "float32", rng)], atol=1e-5, rtol=1e-5)


# -- shifts and frequencies ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["fftshift", "ifftshift"])
@pytest.mark.parametrize("dim", [None, 0, -1, (0, 2), (2, 0, 1)])
def test_shifts(name, dim):
    _check(name, (), {"dim": dim}, [make_array((3, 4, 5), "complex64")], "complex64")


@pytest.mark.parametrize("name", ["fftfreq", "rfftfreq"])
@pytest.mark.parametrize("n, d", [(1, 1.0), (5, 1.0), (8, 0.1), (9, 2.5), (0, 1.0)])
@pytest.mark.parametrize("dtype", [None, "float64"])
def test_frequencies(name, n, d, dtype):
    jt = getattr(jitorch.fft, name)(n, d, dtype=None if dtype is None else getattr(jitorch, dtype))
    th = getattr(torch.fft, name)(n, d, dtype=None if dtype is None else getattr(torch, dtype))
    assert tuple(jt.shape) == tuple(th.shape) and str(jt.dtype)[8:] == str(th.dtype)[6:]
    np.testing.assert_array_equal(jt.numpy(), th.numpy())  # the same rounding: one multiply in the dtype


def test_frequencies_options():
    # torch allows a complex dtype but its CPU arange does not implement it; the values are the real ones.
    values = jitorch.fft.fftfreq(5).tolist()
    assert jitorch.fft.fftfreq(5, dtype=jitorch.complex64).tolist() == [complex(v) for v in values]
    assert jitorch.fft.fftfreq(4, requires_grad=True).requires_grad
    out = jitorch.empty(3, dtype=jitorch.float64)
    assert jitorch.fft.rfftfreq(4, out=out) is out and out.tolist() == [0.0, 0.25, 0.5]
    check_error(lambda: jitorch.fft.fftfreq(4, dtype=jitorch.int64), lambda: torch.fft.fftfreq(4, dtype=torch.int64),
                match="floating point")


def test_phase_of_a_real_signal_spectrum_matches_torch():
    # A real input's full spectrum is filled by conjugate symmetry, as ATen fills it: the signs of zero imaginary parts,
    # and so the angle of a negative bin (pi, not -pi), are torch's.
    x = np.array([[-3.0, 1.0, -1.0, 0.5, -2.0, 1.0], [1.0, 0.0, -1.0, 0.0, 2.0, -4.0]], np.float32)
    out = check_op(lambda a: jitorch.fft.fft(a).angle(), lambda a: torch.fft.fft(a).angle(), [x], grad=False)
    assert np.signbit(out[0].numpy()).tolist() == np.signbit(out[1].numpy()).tolist()
