"""Edge values against PyTorch: integers beyond float precision, infinities, overflow-prone inputs, half-precision
accumulation, empty batches and special values, each where a naive formula goes wrong."""
import numpy as np
import pytest
import torch
from helpers import check_error, check_op, np_dtype

import jitorch

BIG = [2**31 - 1, 2**53 + 1, 10**18 + 7, -(10**18) - 7, -7, 7, 0, -2**31]


@pytest.mark.parametrize("dtype", ["int64", "int32", "int16", "uint8"])
def test_div_trunc_is_exact_for_integers(dtype):
    info = np.iinfo(dtype)
    a = np.array([v for v in BIG if info.min <= v <= info.max] + [info.max, info.min + 1], dtype)
    for b in (np.array([-1, 1, 3, -3, 2, -2, 7, 5, 1, -1][:a.size], dtype) if info.min < 0 else
              np.array([1, 3, 2, 7, 5, 1, 1][:a.size], dtype),):
        b = np.resize(b, a.shape)
        check_op(lambda x, y: jitorch.div(x, y, rounding_mode="trunc"),
                 lambda x, y: torch.div(x, y, rounding_mode="trunc"), [a, b])
        check_op(lambda x: jitorch.div(x, 3, rounding_mode="trunc"), lambda x: torch.div(x, 3, rounding_mode="trunc"),
                 [a])
    check_op(lambda x, y: jitorch.div(x, y, rounding_mode="trunc"),
             lambda x, y: torch.div(x, y, rounding_mode="trunc"), [a[:0], np.array(3, dtype)])  # empty, 0-d


def test_div_trunc_compiled_and_inplace_stay_exact():
    a, b = [2**53 + 1, 10**18 + 7, -(10**18) - 7], [1, 3, 3]
    fn = jitorch.compile(lambda x, y: jitorch.div(x, y, rounding_mode="trunc"))
    assert fn(jitorch.tensor(a), jitorch.tensor(b)).tolist() == torch.div(torch.tensor(a), torch.tensor(b),
                                                                          rounding_mode="trunc").tolist()
    x = jitorch.tensor([-7, 7, 5])
    x.div_(jitorch.tensor([2, -2, 5]), rounding_mode="trunc")
    assert x.tolist() == [-3, -3, 1]


def test_div_trunc_by_integer_zero_raises():
    a, z = np.array([5, -5, 0]), np.array([0, 1, 2])
    err = check_error(lambda x, y: jitorch.div(x, y, rounding_mode="trunc"),
                      lambda x, y: torch.div(x, y, rounding_mode="trunc"), [a, z], match="ZeroDivisionError")
    assert "div(rounding_mode='trunc')" in str(err)
    check_error(lambda x: jitorch.div(x, 0, rounding_mode="trunc"), lambda x: torch.div(x, 0, rounding_mode="trunc"),
                [a], match="ZeroDivisionError")
    check_error(lambda x, y: jitorch.div(x, y, rounding_mode="trunc"),
                lambda x, y: torch.div(x, y, rounding_mode="trunc"), [a > 0, a < 0], match="Bool")
    # float division by zero is not an error
    check_op(lambda x, y: jitorch.div(x, y, rounding_mode="trunc"), lambda x, y: torch.div(x, y, rounding_mode="trunc"),
             [np.array([5.0, -5.0, 0.0, 7.5]), np.array([0.0, 0.0, 0.0, -2.0])])


@pytest.mark.parametrize("shape", [(0, 3), (0, 3, 4), (2, 3, 0), (0, 3, 2, 2)])
@pytest.mark.parametrize("compiled", [False, True])
def test_batch_norm_on_an_empty_batch_keeps_running_stats(shape, compiled):
    results = []
    for m in (torch, jitorch):
        bn = (m.nn.BatchNorm1d if len(shape) < 4 else m.nn.BatchNorm2d)(3)
        with m.no_grad():
            bn.running_mean.fill_(0.5)
            bn.running_var.fill_(2.0)
        f = jitorch.compile(bn) if compiled and m is jitorch else bn
        x = m.ones(*shape, requires_grad=True)
        y = f(x)
        y.sum().backward()
        bn.eval()
        results.append((tuple(y.shape), bn.running_mean.tolist(), bn.running_var.tolist(),
                        int(bn.num_batches_tracked), bn.weight.grad.tolist(), bn(m.ones(2, *shape[1:])).tolist()))
    assert results[0] == results[1]


@pytest.mark.parametrize("shape", [(0, 3, 4), (2, 3, 0)])
def test_instance_norm_running_stats_of_empty_inputs(shape):
    # torch: empty instances keep the running statistics; an empty batch of instances makes them nan
    stats = []
    for m in (torch, jitorch):
        rm, rv = m.full((3,), 0.5), m.ones(3)
        m.nn.functional.instance_norm(m.ones(*shape), rm, rv)
        stats.append(np.array([rm.tolist(), rv.tolist()]))
    np.testing.assert_array_equal(stats[1], stats[0])


LOG_ADD_A = [np.inf, -np.inf, np.inf, -1.0, 1e-7, 1e-38, 2.0, 2.0, -np.inf, 30.0, -np.inf, np.nan]
LOG_ADD_B = [3.0, -np.inf, np.inf, np.inf, -9.0, -87.5, 2.0, -80.0, 4.0, -30.0, np.inf, 1.0]


@pytest.mark.parametrize("name", ["logaddexp", "logaddexp2"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_logaddexp_infinities_and_tiny_tails(name, dtype):
    a, b = np.array(LOG_ADD_A, dtype), np.array(LOG_ADD_B, dtype)
    rtol = 1e-6 if dtype == "float32" else 1e-14
    check_op(getattr(jitorch, name), getattr(torch, name), [a, b], atol=0, rtol=rtol)  # grads: nan where torch's are
    check_op(getattr(jitorch, name), getattr(torch, name), [a.reshape(3, 4), b[:4]], atol=0, rtol=rtol)  # broadcast
    check_op(getattr(jitorch, name), getattr(torch, name), [np.array(5.0, dtype), np.array(-np.inf, dtype)])  # 0-d
    check_op(getattr(jitorch, name), getattr(torch, name), [a[:0], b[:1]])  # empty
    fn = jitorch.compile(getattr(jitorch, name))
    np.testing.assert_allclose(fn(jitorch.tensor(a), jitorch.tensor(b)).numpy(),
                               getattr(torch, name)(torch.tensor(a), torch.tensor(b)).numpy(), rtol=rtol)


@pytest.mark.parametrize("name", ["logaddexp", "logaddexp2"])
def test_logaddexp_half_and_errors(name):
    rng = np.random.default_rng(0)
    a, b = rng.uniform(-20, 20, 64).astype(np.float16), rng.uniform(-20, 20, 64).astype(np.float16)
    check_op(getattr(jitorch, name), getattr(torch, name), [a, b], atol=1e-2, rtol=2e-3)
    check_error(getattr(jitorch, name), getattr(torch, name), [np.arange(3), np.arange(3)], match="Long")


HYPOT_A = [1e30, 3e19, 3.4e38, 3e-30, 0.0, np.inf, np.nan, -np.inf, 3.0, -2e20, 1e-45, -1e-40]
HYPOT_B = [20.0, 4e19, 1.0, 4e-30, 0.0, np.nan, np.inf, 2.0, -4.0, 0.5, 0.0, 1e-40]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_hypot_neither_overflows_nor_underflows(dtype):
    a, b = np.array(HYPOT_A, dtype), np.array(HYPOT_B, dtype)
    check_op(jitorch.hypot, torch.hypot, [a, b], atol=0, rtol=1e-6, grad=False)
    # torch's gradient g * a / hypot rounds g * a to a subnormal first: compared on normal inputs only
    check_op(jitorch.hypot, torch.hypot, [a[:10], b[:10]], atol=0, rtol=1e-6)
    check_op(jitorch.hypot, torch.hypot, [a[:10].reshape(2, 5), b[:5]], atol=0, rtol=1e-6)  # broadcast
    check_op(jitorch.hypot, torch.hypot, [np.array(3e30, dtype), np.array(-4e30, dtype)], atol=0, rtol=1e-6)  # 0-d
    check_op(jitorch.hypot, torch.hypot, [a[:0], b[:1]])  # empty
    fn = jitorch.compile(jitorch.hypot)
    np.testing.assert_allclose(fn(jitorch.tensor(a), jitorch.tensor(b)).numpy(),
                               torch.hypot(torch.tensor(a), torch.tensor(b)).numpy(), rtol=1e-6)


def test_hypot_half_precision():
    a, b = np.array([6e4, 3e-3, 1.0, 200.0], np.float16), np.array([3e4, 4e-3, -1.0, 300.0], np.float16)
    check_op(jitorch.hypot, torch.hypot, [a, b], atol=0, rtol=1e-3, grad=False)  # the first overflows to inf
    check_op(jitorch.hypot, torch.hypot, [a[1:], b[1:]], atol=0, rtol=1e-3, grad_rtol=4e-3)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
@pytest.mark.parametrize("name", ["cumsum", "cumprod"])
def test_scans_accumulate_wider_than_their_dtype(name, dtype):
    # torch's running value is float32 for halves and float64 for float32 (CPU), each output rounded once
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3, 4096)) if name == "cumsum" else 1 + 0.01 * rng.standard_normal((3, 4096))
    x = x.astype(np_dtype(dtype))
    for dim in (1, 0):
        check_op(lambda t: getattr(jitorch, name)(t, dim), lambda t: getattr(torch, name)(t, dim), [x], atol=0, rtol=0,
                 grad=name == "cumsum")
    check_op(lambda t: getattr(jitorch, name)(t, 0, dtype=jitorch.float32),
             lambda t: getattr(torch, name)(t, 0, dtype=torch.float32), [x[0]], atol=0, rtol=0, grad=False)
    compiled = jitorch.compile(lambda t: getattr(t, name)(1))(jitorch.from_numpy(x))
    np.testing.assert_array_equal(compiled.double().numpy(), getattr(torch, name)(
        torch.from_numpy(x.astype(np.float32)).to(getattr(torch, dtype)), 1).double().numpy())


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_reductions_round_once(dtype):
    x = np.random.default_rng(0).standard_normal((64, 512)).astype(np_dtype(dtype))
    for jt_fn, th_fn in [(lambda t: t.sum(1), lambda t: t.sum(1)), (lambda t: t.mean(0), lambda t: t.mean(0)),
                         (lambda t: t.var(1), lambda t: t.var(1)), (lambda t: t.std(0), lambda t: t.std(0)),
                         (lambda t: jitorch.var_mean(t, 1), lambda t: torch.var_mean(t, 1))]:
        check_op(jt_fn, th_fn, [x], atol=0, rtol=0, grad=False)
    check_op(lambda t: t.var(1), lambda t: t.var(1), [x[:4, :8]], atol=1e-2, rtol=1e-2)  # gradient in half


LERP_WEIGHTS = [0.0, 0.25, 0.49, 0.5, 0.75, 1.0, -0.7, 1.6, np.nan]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_lerp_uses_the_nearer_end(dtype):
    a = np.array([1e8, 3.0, -2.5, 0.0, 1e-3, 7.0, 1e8, -1e8, 1.0], dtype)
    b = np.array([1.0, np.inf, 4.0, 1e8, -1e-3, -7.0, 1.0, 3.0, 2.0], dtype)
    # torch fuses w * diff + base into an FMA (one rounding, NumPy has two) and its gradient is g * (1 - w) where
    # here it is g - g * w: both round differently; what matters is the branch (1e8 -> 1 at w = 1 is off by 1 without)
    f32 = dtype == "float32"
    tol = dict(atol=1e-9 if f32 else 1e-18, rtol=1e-6 if f32 else 1e-14, grad_atol=1e-5 if f32 else 1e-13,
               grad_rtol=1e-5)
    assert jitorch.lerp(jitorch.tensor(a), jitorch.tensor(b), 1.0).tolist()[2:] == b.tolist()[2:]
    for w in LERP_WEIGHTS:
        check_op(lambda x, y: jitorch.lerp(x, y, w), lambda x, y: torch.lerp(x, y, w), [a, b], **tol)
    w = np.array(LERP_WEIGHTS, dtype)
    check_op(jitorch.lerp, torch.lerp, [a, b, w], **tol)
    check_op(jitorch.lerp, torch.lerp, [a.reshape(3, 3), b[:3], w[:3].reshape(3, 1)], **tol)  # broadcast
    check_op(jitorch.lerp, torch.lerp, [a[:0], b[:1], np.array(0.75, dtype)])  # empty, 0-d weight
    check_op(jitorch.lerp, torch.lerp, [np.array(1e8, dtype), np.array(1.0, dtype), np.array(1.0, dtype)])  # 0-d
    fn = jitorch.compile(jitorch.lerp)
    np.testing.assert_allclose(fn(jitorch.tensor(a), jitorch.tensor(b), jitorch.tensor(w)).numpy(),
                               torch.lerp(torch.tensor(a), torch.tensor(b), torch.tensor(w)).numpy(),
                               atol=tol["atol"], rtol=tol["rtol"])


def test_lerp_half_in_place_and_errors():
    a, b = np.array([1e4, 3.0, -2.5], np.float16), np.array([1.0, 5.0, 4.0], np.float16)
    for w in (0.3, 0.9, 1.0):
        check_op(lambda x, y: jitorch.lerp(x, y, w), lambda x, y: torch.lerp(x, y, w), [a, b], atol=0, rtol=0,
                 grad=False)
        check_op(lambda x, y: x.clone().lerp_(y, w), lambda x, y: x.clone().lerp_(y, w), [a, b], atol=0, rtol=0,
                 grad=False)
    check_error(jitorch.lerp, torch.lerp, [a, b.astype(np.float32), 0.5], match=["lerp", "end"])
    check_error(jitorch.lerp, torch.lerp, [a.astype(np.float32), b.astype(np.float32), np.array([0.5])],
                match=["lerp", "weight"])
    check_error(jitorch.lerp, torch.lerp, [np.arange(3), np.arange(3), 0.5], match="Long")
    check_error(jitorch.lerp, torch.lerp, [np.arange(3), np.arange(3), np.arange(3)], match="lerp_kernel_tensor")


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16"])
def test_hardsigmoid_keeps_nan(dtype):
    x = np.array([np.nan, -np.inf, np.inf, -3.0, 3.0, 0.0, -2.9, 2.5], dtype)
    check_op(jitorch.nn.functional.hardsigmoid, torch.nn.functional.hardsigmoid, [x], atol=1e-3, rtol=1e-3)
    check_op(lambda t: jitorch.nn.functional.hardsigmoid(t.clone(), inplace=True),
             lambda t: torch.nn.functional.hardsigmoid(t.clone(), inplace=True), [x], atol=1e-3, rtol=1e-3)


def test_lgamma_and_trigamma_at_minus_infinity():
    x = np.array([np.nan, -np.inf, np.inf, -3.0, 0.0, -1.0, -2.5, 0.5], np.float32)
    check_op(jitorch.lgamma, torch.lgamma, [x], atol=1e-6, rtol=1e-5)  # the gradient: digamma
    check_op(jitorch.lgamma, torch.lgamma, [x.astype(np.float16)[1:3]])
    check_op(jitorch.special.gammaln, torch.special.gammaln, [x], grad=False)
    for n in (0, 1, 2, 3):
        check_op(lambda t: jitorch.polygamma(n, t), lambda t: torch.polygamma(n, t), [x[:3]], grad=False)


# -- smaller mismatches: out= casting, index dtypes, errors, nextafter ------------------------------------------------
@pytest.mark.parametrize("fn", [
    lambda m, x: m.add(x, x, out=m.zeros(3, dtype=m.int64)),
    lambda m, x: m.mul(x.int(), 2, out=m.zeros(3, dtype=m.bool)),
    lambda m, x: m.div(x.int(), 2, out=m.zeros(3, dtype=m.int32)),
    lambda m, x: m.sin(x, out=m.zeros(3, dtype=m.int64)),
    lambda m, x: m.where(x > 0, x, m.zeros(3), out=m.zeros(3, dtype=m.int64)),
    lambda m, x: m.lgamma(x, out=m.zeros(3, dtype=m.int64)),
])
def test_out_must_hold_the_result_category(fn):
    check_error(lambda x: fn(jitorch, x), lambda x: fn(torch, x), [np.array([1.5, -2.0, 3.0], np.float32)],
                match=["can't be cast to the desired output type", "out="])


def test_cat_out_must_hold_the_result_category():
    check_error(lambda x: jitorch.cat([x, x], out=jitorch.zeros(6, dtype=jitorch.int64)),
                lambda x: torch.cat([x, x], out=torch.zeros(6, dtype=torch.int64)), [np.ones(3, np.float32)],
                match=["cat()", "can't be cast to the desired output type Long"])


def test_out_may_widen_the_result():
    x = np.array([1, -2, 3], np.int32)
    for fn in (lambda m, t: m.add(t, t, out=m.zeros(3, dtype=m.int64)), lambda m, t: m.add(t, 1, out=m.zeros(3)),
               lambda m, t: m.eq(t, 1, out=m.zeros(3, dtype=m.int64)), lambda m, t: m.add(t, t, out=m.zeros(0))):
        check_op(lambda t: fn(jitorch, t), lambda t: fn(torch, t), [x], grad=False)


@pytest.mark.parametrize("dtype", ["int32", "int64"])
def test_gather_and_scatter_take_int32_indices(dtype):
    x = np.arange(12, dtype=np.float64).reshape(3, 4)
    i = np.array([[0, 3], [2, 2], [-0, 1]], dtype)
    check_op(lambda a, idx: jitorch.gather(a, 1, idx), lambda a, idx: torch.gather(a, 1, idx), [x, i])
    check_op(lambda a, idx: a.scatter_add(1, idx, a[:, :2] * 2), lambda a, idx: a.scatter_add(1, idx, a[:, :2] * 2),
             [x, i])
    check_op(lambda a, idx: a.scatter(1, idx, 7.0), lambda a, idx: a.scatter(1, idx, 7.0), [x, i])
    check_op(lambda a, idx: a.scatter_reduce(1, idx, a[:, :2], "amax"),
             lambda a, idx: a.scatter_reduce(1, idx, a[:, :2], "amax"), [x, i])
    fn = jitorch.compile(lambda a, idx: jitorch.gather(a, 1, idx))
    assert fn(jitorch.tensor(x), jitorch.tensor(i)).tolist() == torch.gather(torch.tensor(x), 1,
                                                                             torch.tensor(i)).tolist()
    check_error(lambda a, idx: jitorch.gather(a, 1, idx), lambda a, idx: torch.gather(a, 1, idx),
                [x, i.astype(np.int16)], match=["gather()", "int32/int64", "Short"])
    check_error(lambda a, idx: a.scatter(1, idx, 1.0), lambda a, idx: a.scatter(1, idx, 1.0),
                [x, i.astype(np.int16)], match="int32/int64")
    check_error(lambda a, idx: jitorch.gather(a, 1, idx), lambda a, idx: torch.gather(a, 1, idx),
                [x, np.array([[4]], dtype)], match="index 4 is out of bounds for dimension 1 with size 4")


def test_cat_of_zero_dim_tensors_and_negative_eye_raise_clearly():
    for tensors in ([np.array(1.0), np.array(2.0)], [np.array([1.0]), np.array(2.0)]):
        pos = 1 if tensors[0].ndim else 0
        check_error(lambda *ts: jitorch.cat(ts), lambda *ts: torch.cat(ts), tensors,
                    match=["cat()", f"zero-dimensional tensor (at position {pos})"])
    check_op(lambda *ts: jitorch.stack(ts), lambda *ts: torch.stack(ts), [np.array(1.0), np.array(2.0)])
    check_error(lambda: jitorch.eye(-2), lambda: torch.eye(-2), match=["eye()", "n must be", "-2"])
    check_error(lambda: jitorch.eye(2, -1), lambda: torch.eye(2, -1), match=["eye()", "m must be", "-1"])
    check_op(lambda: jitorch.eye(0), lambda: torch.eye(0), [])
    check_op(lambda: jitorch.eye(2, 0), lambda: torch.eye(2, 0), [])


@pytest.mark.parametrize("start,length", [(-6, 1), (4, 0), (0, -1), (-1, 2), (2, 2)])
def test_narrow_errors_report_start_as_given(start, length):
    err = check_error(lambda x: x.narrow(1, start, length), lambda x: x.narrow(1, start, length),
                      [np.zeros((2, 3), np.float32)], match="narrow()")
    if not -3 <= start <= 3:
        assert f"but got {start})" in str(err)
    for ok_start, ok_length in [(-3, 3), (3, 0), (-1, 1)]:
        check_op(lambda x: x.narrow(1, ok_start, ok_length), lambda x: x.narrow(1, ok_start, ok_length),
                 [np.arange(6.0).reshape(2, 3)])


@pytest.mark.parametrize("dim,index,source_shape", [
    (1, [5], (2, 1, 3)), (1, [-6], (2, 1, 3)), (0, [2], (1, 5, 3)), (-1, [7], (2, 5, 1)),
    (0, [0], (2, 5, 3)), (1, [0], (2, 1, 4)), (1, [0, 1], (2, 1, 3)), (0, [0], (5, 3))])
def test_index_copy_errors_name_the_right_dimension(dim, index, source_shape):
    check_error(lambda x, s: x.index_copy(dim, jitorch.tensor(index), s),
                lambda x, s: x.index_copy(dim, torch.tensor(index), s),
                [np.zeros((2, 5, 3), np.float32), np.ones(source_shape, np.float32)], match="index_copy_()")
    if dim != 0 and len(source_shape) == 3 and source_shape[-1] == 3 and max(index) >= 5 or min(index) < -5:
        err = check_error(lambda x, s: x.index_copy(dim, jitorch.tensor(index), s),
                          lambda x, s: x.index_copy(dim, torch.tensor(index), s),
                          [np.zeros((2, 5, 3), np.float32), np.ones(source_shape, np.float32)])
        assert f"out of bounds for dimension {dim % 3} with size 5" in str(err)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64"])
def test_nextafter(dtype):
    a = np.array([1.0, 0.0, -0.0, np.inf, np.nan, 2.0, -1.0, 65504.0], np_dtype(dtype))
    b = np.array([2.0, -1.0, 1.0, 0.0, 1.0, 2.0, -np.inf, np.inf], np_dtype(dtype))
    check_op(jitorch.nextafter, torch.nextafter, [a, b], atol=0, rtol=0)  # gradient: g to input, none to other
    check_op(jitorch.nextafter, torch.nextafter, [a.reshape(2, 4), b[:4]], atol=0, rtol=0)
    check_op(jitorch.nextafter, torch.nextafter, [a[:0], b[:1]], atol=0, rtol=0)
    check_op(jitorch.nextafter, torch.nextafter, [a[:1], b.reshape(2, 4)], atol=0, rtol=0, grad_rtol=1e-2)  # broadcast
    check_op(lambda x, y: x.clone().nextafter_(y), lambda x, y: x.clone().nextafter_(y), [a, b], atol=0, rtol=0)
    check_op(lambda x, y: torch_out(jitorch, x, y), lambda x, y: torch_out(torch, x, y), [a, b], atol=0, rtol=0,
             grad=False)
    compiled = jitorch.compile(lambda x, y: jitorch.nextafter(x, y) * 1)(jitorch.from_numpy(a), jitorch.from_numpy(b))
    np.testing.assert_array_equal(compiled.double().numpy(), torch.nextafter(
        torch.from_numpy(a.astype(np.float32)).to(getattr(torch, dtype)),
        torch.from_numpy(b.astype(np.float32)).to(getattr(torch, dtype))).double().numpy())


def torch_out(m, x, y):
    out = m.empty(0, dtype=x.dtype)
    m.nextafter(x, y, out=out)
    return out


def test_nextafter_promotes_and_rejects_integers():
    check_op(jitorch.nextafter, torch.nextafter, [np.array([1, 2]), np.array([2.0, 0.0], np.float32)], rtol=0)
    check_op(jitorch.nextafter, torch.nextafter, [np.float32(1) * np.ones(2, np.float32), np.zeros(2)], rtol=0)
    check_error(jitorch.nextafter, torch.nextafter, [np.array([1, 2]), np.array([2, 0])], match="Long")


@pytest.mark.parametrize("name", ["cumsum", "cumprod"])
def test_scans_take_out(name):
    x = np.array([[1.5, -2.0, 3.0], [0.5, 1.0, 2.0]], np.float32)
    for out_dtype, out_shape, dtype in [("float32", (2, 3), None), ("float64", (2, 3), None), ("int64", (2, 3), None),
                                        ("float32", (0,), None), ("float64", (2, 3), "float64")]:
        def run(m, t, out_dtype=out_dtype, out_shape=out_shape, dtype=dtype):
            out = m.zeros(out_shape, dtype=getattr(m, out_dtype))
            r = getattr(m, name)(t, 1, out=out, **({"dtype": getattr(m, dtype)} if dtype else {}))
            assert r is out
            return out
        check_op(lambda t: run(jitorch, t), lambda t: run(torch, t), [x], grad=False)
    check_error(lambda t: getattr(jitorch, name)(t, 1, dtype=jitorch.float64, out=jitorch.zeros(2, 3)),
                lambda t: getattr(torch, name)(t, 1, dtype=torch.float64, out=torch.zeros(2, 3)), [x],
                match=[name, "Expected out tensor to have dtype"])


@pytest.mark.parametrize("name", ["nextafter", "div_floor"])
def test_no_gradient_to_an_operand_passes_through_its_cast(name):
    # the row gives other no gradient (None); the cast node in front of other must not run with it
    def fn(m, x, y):
        if name == "nextafter":
            return m.nextafter(x.half(), y.half())
        return m.div(x.half(), y.half() + 2, rounding_mode="floor")
    x, y = np.array([1.0, 2.0, -3.5], np.float32), np.array([0.5, 2.0, 1.0], np.float32)
    check_op(lambda a, b: fn(jitorch, a, b), lambda a, b: fn(torch, a, b), [x, y], atol=0, rtol=0)
