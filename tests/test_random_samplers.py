"""The samplers' ranges and argument checks against PyTorch (jitorch/_random_inplace.py, jitorch/_random_params.py).

The streams differ from torch's by design, so samples are compared as ranges, sets of values (where a range is small
enough for every value to show up) and statistics; errors are compared by exception type and message.
"""
import math
import warnings

import pytest
import torch
from helpers import DTYPES, check_error

import jitorch


def _top(dtype_name):
    """The upper end of torch's ``random_()``: 2**digits for a float dtype, the largest value for an integer one."""
    dt = getattr(torch, dtype_name)
    if dt.is_floating_point:
        return 2 ** round(1 - math.log2(torch.finfo(dt).eps))
    return 1 if dt == torch.bool else torch.iinfo(dt).max


# -- random_ -----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES)
def test_random_default_range_is_torchs_inclusive_range(dtype):
    top = _top(dtype)
    n = 60000
    jt = jitorch.empty(n, dtype=getattr(jitorch, dtype)).random_()
    th = torch.empty(n, dtype=getattr(torch, dtype)).random_()
    assert jt.dtype.name == dtype
    for t in (jt, th):
        assert 0 <= float(t.min()) and float(t.max()) <= top
    if top <= 4096:  # every value shows up: both ends are drawn, as torch draws them
        assert set(jt.double().tolist()) == set(th.double().tolist()) == set(map(float, range(top + 1)))
    else:
        assert float(jt.max()) > 0.99 * top and float(th.max()) > 0.99 * top


@pytest.mark.parametrize("dtype, args", [
    ("int8", (-3, 2)), ("uint8", (0, 256)), ("uint8", (250, None)), ("bool", (0, 2)), ("int16", (5,)),
    ("float16", (2040, 2060)),   # past 2**11: odd integers round to even float16 values (and warn)
    ("float16", (2049, 2050)), ("bfloat16", (250, None)), ("bfloat16", (300,)), ("float64", (-2, 3)),
])
def test_random_from_to_draws_torchs_values(dtype, args):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        jt = jitorch.empty(20000, dtype=getattr(jitorch, dtype)).random_(*args)
        th = torch.empty(20000, dtype=getattr(torch, dtype)).random_(*args)
    assert set(jt.double().tolist()) == set(th.double().tolist())


def test_random_keyword_to_and_full_int64_range():
    assert set(jitorch.empty(2000).random_(to=3).tolist()) == {0.0, 1.0, 2.0}
    assert set(jitorch.empty(2000).random_(1, to=3).tolist()) == {1.0, 2.0}
    full = jitorch.empty(4000, dtype=jitorch.int64).random_(-2 ** 63, None)
    assert float(full.min()) < -2 ** 62 and float(full.max()) > 2 ** 62  # both halves of int64


@pytest.mark.parametrize("dtype, args", [
    ("uint8", (0, 300)), ("uint8", (-3, 2)), ("int8", (300,)), ("bool", (5,)), ("bool", (3, None)),
    ("int16", (2 ** 25,)), ("int32", (2 ** 60, None)), ("float16", (2 ** 25,)), ("float32", (2 ** 60, None)),
    ("float16", (65505, 65506)), ("float16", (2049, None)), ("float32", (5, 5)), ("int64", (0,)),
    ("complex64", (5,)), ("complex64", (3, None)), ("uint8", (-2 ** 63, None)),
])
def test_random_bound_errors_match_torch(dtype, args):
    err = check_error(lambda: jitorch.empty(3, dtype=getattr(jitorch, dtype)).random_(*args),
                      lambda: torch.empty(3, dtype=getattr(torch, dtype)).random_(*args))
    assert "random_" in str(err)


@pytest.mark.parametrize("dtype", ["float16", "bool", "complex64"])
def test_random_full_range_refuses_dtypes_without_the_kernel(dtype):
    check_error(lambda: jitorch.empty(3, dtype=getattr(jitorch, dtype)).random_(-2 ** 63, None),
                lambda: torch.empty(3, dtype=getattr(torch, dtype)).random_(-2 ** 63, None),
                match="random_full_64_bits_range_kernel_cpu")


def test_random_argument_types_and_precision_warning():
    for args in ((1.5,), (True,), (0, 2.5)):
        check_error(lambda: jitorch.empty(3).random_(*args), lambda: torch.empty(3).random_(*args))
    check_error(lambda: jitorch.empty(3, dtype=jitorch.complex64).random_(),
                lambda: torch.empty(3, dtype=torch.complex64).random_(), match="random_kernel_cpu")
    for T in (jitorch, torch):  # float32 holds every integer only up to 2**24
        with pytest.warns(UserWarning, match=r"out of bounds \[-\(2\^24\), 2\^24\]"):
            T.empty(3).random_(2 ** 25)


# -- argument checks of the other samplers ---------------------------------------------------------------------
SAMPLER_ERRORS = {
    "cauchy_ sigma<0": lambda T: T.empty(3).cauchy_(0.0, -1.0),
    "cauchy_ sigma nan": lambda T: T.empty(3).cauchy_(0.0, float("nan")),
    "cauchy_ long": lambda T: T.empty(3, dtype=T.long).cauchy_(),
    "bernoulli_ p>1": lambda T: T.empty(3).bernoulli_(1.5),
    "bernoulli_ p nan": lambda T: T.empty(3).bernoulli_(float("nan")),
    "bernoulli_ complex": lambda T: T.empty(3, dtype=T.complex64).bernoulli_(0.5),
    "bernoulli_ tensor p>1": lambda T: T.empty(3).bernoulli_(T.tensor([0.5, 1.5, 0.0])),
    "bernoulli_ long p": lambda T: T.empty(3).bernoulli_(T.tensor([0, 1, 0])),
    "bernoulli_ p shape": lambda T: T.empty(2).bernoulli_(T.full((3,), 0.5)),
    "bernoulli long": lambda T: T.bernoulli(T.tensor([1, 0])),
    "bernoulli bool": lambda T: T.bernoulli(T.tensor([True, False])),
    "bernoulli nan": lambda T: T.bernoulli(T.tensor([float("nan")])),
    "bernoulli p=-1": lambda T: T.bernoulli(T.zeros(2), p=-1.0),
    "bernoulli complex p=": lambda T: T.bernoulli(T.zeros(2, dtype=T.complex64), p=0.5),
    "normal std<0": lambda T: T.normal(T.zeros(3), T.tensor([1.0, -1.0, 1.0])),
    "normal std nan": lambda T: T.normal(T.zeros(3), T.tensor([1.0, float("nan"), 1.0])),
    "normal scalar std<0": lambda T: T.normal(T.zeros(2), -1.0),
    "normal float mean, std<0": lambda T: T.normal(0.0, T.tensor([1.0, -1.0])),
    "normal complex std": lambda T: T.normal(T.zeros(2), T.ones(2, dtype=T.complex64)),
    "normal long mean": lambda T: T.normal(T.zeros(2, dtype=T.long), 1.0),
    "normal long std": lambda T: T.normal(0.0, T.ones(2, dtype=T.long)),
    "normal no size": lambda T: T.normal(2.0, 3.0),
    "normal no mean": lambda T: T.normal(std=T.ones(2)),
    "normal sizes": lambda T: T.normal(T.zeros(3), T.ones(2)),
    "normal long dtype": lambda T: T.normal(0.0, 1.0, (2,), dtype=T.long),
    "normal_ std<0": lambda T: T.empty(2).normal_(0.0, -1.0),
    "normal_ long": lambda T: T.empty(3, dtype=T.long).normal_(),
    "normal_ bool": lambda T: T.empty(3, dtype=T.bool).normal_(),
    "uniform_ long": lambda T: T.empty(3, dtype=T.long).uniform_(),
    "uniform_ int8": lambda T: T.empty(3, dtype=T.int8).uniform_(),
    "uniform_ from>to": lambda T: T.empty(3).uniform_(2.0, 1.0),
    "uniform_ to inf": lambda T: T.empty(3).uniform_(0.0, float("inf")),
    "uniform_ float16 bound": lambda T: T.empty(3, dtype=T.float16).uniform_(0, 70000),
    "uniform_ span": lambda T: T.empty(3).uniform_(-3e38, 3e38),
    "log_normal_ long": lambda T: T.empty(3, dtype=T.long).log_normal_(),
    "log_normal_ std 0": lambda T: T.empty(3).log_normal_(1.0, 0.0),
    "log_normal_ complex": lambda T: T.empty(3, dtype=T.complex64).log_normal_(),
    "exponential_ 0": lambda T: T.empty(3).exponential_(0.0),
    "exponential_ long": lambda T: T.empty(3, dtype=T.long).exponential_(),
    "geometric_ p=1": lambda T: T.empty(3).geometric_(1.0),
    "geometric_ p=0": lambda T: T.empty(3).geometric_(0.0),
    "geometric_ bool": lambda T: T.empty(3, dtype=T.bool).geometric_(0.5),
    "leaf requires grad": lambda T: T.empty(3, requires_grad=True).uniform_(),
    "leaf requires grad, bad sigma": lambda T: T.empty(3, requires_grad=True).cauchy_(0.0, -1.0),
    "poisson long": lambda T: T.poisson(T.ones(2, dtype=T.long)),
    "poisson rate<0": lambda T: T.poisson(T.tensor([-1.0])),
    "multinomial long": lambda T: T.multinomial(T.ones(2, dtype=T.long), 1),
    "multinomial 0 samples": lambda T: T.multinomial(T.tensor([1.0, 0, 0]), 0),
    "multinomial float n": lambda T: T.multinomial(T.ones(3), 2.0),
    "multinomial all zero": lambda T: T.multinomial(T.tensor([[1.0, 0, 0], [0, 0, 0]]), 2),
    "manual_seed 2**64": lambda T: T.manual_seed(2 ** 64),
    "manual_seed -2**63-1": lambda T: T.manual_seed(-2 ** 63 - 1),
    "Generator.manual_seed float": lambda T: T.Generator().manual_seed(1.5),
}


# Errors whose message is jitorch's own: the type is torch's, the text names jitorch's shapes or arguments.
_OWN_MESSAGE = {"normal sizes", "normal no size", "normal no mean", "multinomial float n", "manual_seed 2**64",
                "manual_seed -2**63-1"}


@pytest.mark.parametrize("name", SAMPLER_ERRORS)
def test_sampler_argument_errors_match_torch(name):
    fn = SAMPLER_ERRORS[name]
    try:
        fn(torch)
    except Exception as e:  # noqa: BLE001
        torch_text = str(e).split("  (Could this")[0]
    # torch's message, less a prefix naming torch's function, is part of jitorch's
    check_error(lambda: fn(jitorch), lambda: fn(torch),
                match=() if name in _OWN_MESSAGE else torch_text.split("): ")[-1])


def test_empty_tensors_skip_the_dtype_check_where_torch_does():
    for fn in (lambda T: T.empty(0, dtype=T.long).normal_(), lambda T: T.empty(0, dtype=T.long).exponential_(),
               lambda T: T.empty(0, dtype=T.bool).geometric_(0.5), lambda T: T.empty(0, dtype=T.complex64).random_()):
        assert fn(jitorch).dtype.name == str(fn(torch).dtype).split(".")[1]


def test_manual_seed_accepts_torchs_range():
    for seed, expected in ((2 ** 64 - 1, 2 ** 64 - 1), (-1, 2 ** 64 - 1), (-2 ** 63, 2 ** 63), (1.5, 1)):
        assert jitorch.manual_seed(seed).initial_seed() == torch.manual_seed(seed).initial_seed() == expected


# -- gradients and dtypes of samples ---------------------------------------------------------------------------
GRAD_CASES = {
    "normal(mean)": lambda T, a, b: T.normal(a, 1.0),
    "normal(0, std)": lambda T, a, b: T.normal(0.0, b),
    "normal(mean, std)": lambda T, a, b: T.normal(a, b),
    "bernoulli(p)": lambda T, a, b: T.bernoulli(a.sigmoid()),
    "poisson": lambda T, a, b: T.poisson(b * 3),
    "normal_ of a non-leaf": lambda T, a, b: (a * 2).normal_(),
    "random_ of a non-leaf": lambda T, a, b: (b + 1).random_(0, 4),
    "bernoulli_ of a non-leaf": lambda T, a, b: (a - 1).bernoulli_(0.5),
}


@pytest.mark.parametrize("name", GRAD_CASES)
def test_samples_require_grad_with_zero_gradient_like_torch(name):
    outs = {}
    for T in (jitorch, torch):
        a, b = T.zeros(3, requires_grad=True), T.ones(3, requires_grad=True)
        y = GRAD_CASES[name](T, a, b)
        assert y.requires_grad
        (y * T.arange(3.0)).sum().backward()
        outs[T.__name__] = [None if g is None else g.tolist() for g in (a.grad, b.grad)]
    assert outs["jitorch"] == outs["torch"]
    assert all(g is None or g == [0.0, 0.0, 0.0] for g in outs["torch"])
    with jitorch.no_grad():
        assert not GRAD_CASES[name](jitorch, jitorch.zeros(3, requires_grad=True), jitorch.ones(3)).requires_grad


def test_bernoulli_with_a_number_p_has_no_derivative():
    for T in (jitorch, torch):
        y = T.bernoulli(T.full((3,), 0.5, requires_grad=True), p=0.5)
        assert y.requires_grad
        with pytest.raises(RuntimeError, match="derivative for aten::bernoulli is not implemented"):
            y.sum().backward()


@pytest.mark.parametrize("mean, std", [("float32", "float64"), ("float16", "float32"), ("float32", "int64"),
                                       (None, "float64"), ("complex64", None), ("float64", None)])
def test_normal_result_dtype_is_means_then_stds(mean, std):
    def fn(T):
        m = 0.0 if mean is None else T.zeros(2, dtype=getattr(T, mean))
        return T.normal(m, 1.0 if std is None else T.ones(2, dtype=getattr(T, std)))
    assert fn(jitorch).dtype.name == str(fn(torch).dtype).split(".")[1]


@pytest.mark.parametrize("method, args", [("uniform_", (1.0, 2.0)), ("normal_", (1.0, 2.0))])
def test_complex_in_place_samplers_draw_both_parts(method, args):
    stats = []
    for T in (jitorch, torch):
        z = getattr(T.zeros(40000, dtype=T.complex64), method)(*args)
        stats.append([float(z.real.mean()), float(z.imag.mean()), float(z.real.std()), float(z.imag.std())])
    assert stats[0] == pytest.approx(stats[1], abs=0.03)
    z = jitorch.normal(2.0, 3.0, (40000,), dtype=jitorch.complex64)  # each part: mean 2, std 3/sqrt(2)
    assert [float(z.real.mean()), float(z.imag.mean()), float(z.imag.std())] == pytest.approx([2, 2, 2.121], abs=0.05)


def test_multinomial_without_replacement_fills_with_zero_weight_categories():
    for T in (jitorch, torch):
        for _ in range(5):
            row = T.multinomial(T.tensor([0.0, 1, 0, 0, 1]), 4).tolist()
            assert sorted(row[:2]) == [1, 4] and len(set(row)) == 4  # positive weights first, no repeats
        assert T.multinomial(T.tensor([1.0, 0, 0]), 3).tolist()[0] == 0
        rows = T.multinomial(T.tensor([[1.0, 0, 0], [1, 1, 1]]), 2)
        assert rows[0, 0].item() == 0 and all(len(set(r)) == 2 for r in rows.tolist())
