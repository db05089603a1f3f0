"""bfloat16 on the CPU (CPU autocast's dtype) through the native passes give torch's bits: conversions
(`jitorch/ops/bf16_cast.py`), add/sub/mul/div and comparisons (`half_cast.bf16_binary`), float32-accumulated sums
and means; matmul/linear/bmm (a float32 GEMM rounded once) within an ulp or so of torch's bfloat16 GEMM."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
import torch

import jitorch
from jitorch.ops import bf16_cast, half_cast

BF16 = np.dtype(ml_dtypes.bfloat16)


def _bits(t):
    """A tensor's (jitorch or torch) values as integers of its width, in row-major order."""
    if t.dtype in (jitorch.bfloat16, torch.bfloat16):
        t = t.view(jitorch.int16 if isinstance(t, jitorch.Tensor) else torch.int16)
    a = np.ascontiguousarray(t.numpy())
    return a.view({1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[a.dtype.itemsize])


def _same(got, expected):
    """Bit-equal, but NaN as NaN (torch's vector loop writes bfloat16 NaN as 0xFFFF, its scalar tail as 0x7FC0)."""
    assert tuple(got.shape) == tuple(expected.shape) and str(got.dtype)[8:] == str(expected.dtype)[6:]
    g, e = _bits(got), _bits(expected)
    if got.is_floating_point():
        nan = torch.isnan(expected.float()).numpy().ravel()
        assert np.array_equal(jitorch.isnan(got.float()).numpy().ravel(), nan)
        g, e = g.ravel()[~nan], e.ravel()[~nan]
    np.testing.assert_array_equal(g, e)


def _pair(array):
    """The same values as a jitorch and a torch tensor (bfloat16 through float32: torch takes no ml_dtypes array)."""
    if array.dtype == BF16:
        f = array.astype(np.float32)
        return jitorch.tensor(f).bfloat16(), torch.tensor(f).bfloat16()
    return jitorch.tensor(array), torch.tensor(array)


def _float32_patterns(n=200_000):
    rng = np.random.default_rng(0)
    edges = np.array([0x7FC00000, 0xFFC00000, 0x7F800001, 0xFF812345, 1, 0x8000, 0x18000, 0x3F808000, 0x3F818000,
                      0x3F808001, 0x7F7FFFFF, 0x7F7F8000, 0x7F800000, 0xFF800000, 0x80000000, 0x00800000, 0x807FFFFF,
                      0x007F8000, 0x00008000], np.uint32)
    return np.concatenate([edges, rng.integers(0, 1 << 32, n, dtype=np.uint64).astype(np.uint32)]).view(np.float32)


def _bf16_values(shape, seed=0, scale=3.0):
    return (np.random.default_rng(seed).standard_normal(shape) * scale).astype(np.float32).astype(BF16)


# -- conversions -----------------------------------------------------------------------------------------------------
def test_float32_narrows_to_torchs_bfloat16_ties_subnormals_and_nans():
    values = _float32_patterns()
    j, t = _pair(values)
    assert bf16_cast.astype(values, BF16) is not None  # the native pass, not ml_dtypes' loop
    _same(j.bfloat16(), t.bfloat16())
    _same(j.to(jitorch.bfloat16), t.to(torch.bfloat16))


def test_every_bfloat16_widens_exactly():
    every = np.arange(1 << 16, dtype=np.uint16).view(BF16)
    wide = bf16_cast.astype(every, np.float32)
    assert wide is not None and wide.dtype == np.float32
    np.testing.assert_array_equal(wide.view(np.uint32), every.view(np.uint16).astype(np.uint32) << 16)
    assert np.array_equal(bf16_cast.astype(every, np.float64), every.astype(np.float64), equal_nan=True)
    j = jitorch.tensor(_float32_patterns(70_000)).bfloat16()
    t = torch.tensor(_float32_patterns(70_000)).bfloat16()
    _same(j.float(), t.float())
    _same(j.double(), t.double())


@pytest.mark.parametrize("layout", ["c", "f", "strided", "expanded", "small", "empty", "0-d"])
@pytest.mark.parametrize("to", ["bfloat16", "float", "double"])
def test_casts_keep_layouts_and_sizes_as_torch(layout, to):
    source = np.random.default_rng(1).standard_normal((64, 96)).astype(np.float32)
    if to != "bfloat16":
        source = source.astype(BF16)
    make = {"c": lambda t: t, "f": lambda t: t.t(), "strided": lambda t: t[:, ::3], "expanded":
            lambda t: t[:1].expand(64, 96), "small": lambda t: t[:3, :5], "empty": lambda t: t[:0],
            "0-d": lambda t: t[2, 3]}[layout]
    j, t = _pair(source)
    got, expected = getattr(make(j), to)(), getattr(make(t), to)()
    _same(got, expected)
    assert got.stride() == expected.stride()


@pytest.mark.parametrize("src,dst", [("bfloat16", "float32"), ("float32", "bfloat16"), ("bfloat16", "float64")])
@pytest.mark.parametrize("transposed", [False, True])
def test_copy_between_dtypes_converts_like_torch(src, dst, transposed):
    source = _float32_patterns(60 * 70 - 19).reshape(60, 70)
    if src == "bfloat16":
        source = source.astype(BF16)
    j, t = _pair(source)
    if transposed:
        j, t = j.t(), t.t()
    got = jitorch.empty(tuple(j.shape), dtype=getattr(jitorch, dst)).copy_(j)
    expected = torch.empty(tuple(t.shape), dtype=getattr(torch, dst)).copy_(t)
    _same(got, expected)


@pytest.mark.parametrize("src,dst", [(BF16, np.float32), (np.float32, BF16), (np.float16, np.float32),
                                     (np.float32, np.float16)])
def test_conversion_into_an_existing_array(src, dst):
    source = _float32_patterns(3000 * 7 - 19).reshape(-1, 7).astype(src)
    for a, order in ((source, "C"), (source.T, "F")):
        out = np.full(a.shape, 7, dst, order=order)
        assert half_cast.astype_into(a, out)
        expected = np.ascontiguousarray(a.astype(dst))
        got = np.ascontiguousarray(out)
        nan = np.isnan(expected.astype(np.float32))
        assert np.isnan(got.astype(np.float32)[nan]).all()
        unsigned = np.uint16 if got.itemsize == 2 else np.uint32
        np.testing.assert_array_equal(got.view(unsigned)[~nan], expected.view(unsigned)[~nan])
    out = np.zeros(source.shape, dst)
    assert not half_cast.astype_into(source[:, :3], out[:, :3])  # strided
    assert not half_cast.astype_into(source, out[:, :3])  # another shape
    assert not half_cast.astype_into(source.T, out.T.copy())  # memory orders differ
    assert not half_cast.astype_into(source, np.zeros(source.shape, np.float64))  # not a native pair
    assert (out == 0).all()


# -- add/sub/mul/div and comparisons -----------------------------------------------------------------------------------
_BINARY = {"add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
           "div": lambda a, b: a / b, "gt": lambda a, b: a > b, "le": lambda a, b: a <= b,
           "eq": lambda a, b: a == b, "ne": lambda a, b: a != b}


@pytest.mark.parametrize("op", list(_BINARY))
@pytest.mark.parametrize("case", ["same", "broadcast", "transposed", "small", "0-d other"])
def test_binary_ops_give_torchs_bits(op, case):
    x = _bf16_values((48, 80), 2)
    y = _bf16_values((48, 80), 3) if case != "broadcast" else _bf16_values((80,), 3)
    x.ravel()[:200] = y.ravel()[:200] if case != "broadcast" else x.ravel()[:200]  # ties for the comparisons
    x.ravel()[200:204] = [np.inf, -np.inf, np.nan, 0.0]
    (jx, tx), (jy, ty) = _pair(x), _pair(y)
    if case == "transposed":
        jx, tx, jy, ty = jx.t(), tx.t(), jy.t(), ty.t()
    elif case == "small":
        jx, tx, jy, ty = jx[:3, :5], tx[:3, :5], jy[:3, :5], ty[:3, :5]
    elif case == "0-d other":
        jy, ty = jy[1, 2], ty[1, 2]
    if op == "eq" and case == "same":  # the native pass did the work (the others go where it declines)
        assert half_cast.bf16_binary(np.equal, x, y) is not None
    _same(_BINARY[op](jx, jy), _BINARY[op](tx, ty))


# 1 + 2^-8 + 2^-30 rounds to bfloat16 1.0 through float32 (a tie), to 1 + 2^-7 directly: ATen goes through float32.
_NUMBERS = [1.1, 0.1, -3.3333, 1 + 2 ** -8 + 2 ** -30, 1e-3, 7, -2, 1e30, 0.0, -0.0]


@pytest.mark.parametrize("op", list(_BINARY) + ["radd", "rsub", "rmul", "rdiv"])
def test_binary_ops_with_numbers_round_the_number_as_torch(op):
    x = _bf16_values((100, 70), 4)
    x.ravel()[:4] = [np.inf, -np.inf, np.nan, -0.0]
    jx, tx = _pair(x)
    fn = _BINARY.get(op) or {"radd": lambda a, s: s + a, "rsub": lambda a, s: s - a, "rmul": lambda a, s: s * a,
                             "rdiv": lambda a, s: s / a}[op]
    for number in _NUMBERS:
        _same(fn(jx, number), fn(tx, number))
    x_bits = x.ravel()
    for number in (float(x_bits[7]), float(x_bits[8]) + 2 ** -20):  # equal to a value, or just beside one
        _same(fn(jx, number), fn(tx, number))


def test_binary_op_gradients_match_torch():
    x, y, g = _bf16_values((40, 50), 5), _bf16_values((40, 50), 6), _bf16_values((40, 50), 7)
    (jx, tx), (jy, ty), (jg, tg) = _pair(x), _pair(y), _pair(g)
    for t in (jx, tx, jy, ty):
        t.requires_grad_(True)
    (jx * jy / (jy + 3.5) - jx * 1.1).backward(jg)
    (tx * ty / (ty + 3.5) - tx * 1.1).backward(tg)
    _same(jx.grad, tx.grad)
    _same(jy.grad, ty.grad)


def test_helpers_decline_what_they_do_not_take():
    x = _bf16_values((64, 64))
    assert half_cast.bf16_binary(np.maximum, x, x) is None  # ml_dtypes' ties of zeros
    assert half_cast.bf16_binary(np.add, x, x[0]) is None  # a broadcast
    assert half_cast.bf16_binary(np.add, x, float("nan")) is None
    assert half_cast.bf16_binary(np.add, x[:2, :2], x[:2, :2]) is None  # small: ml_dtypes' loop
    assert half_cast.bf16_binary(np.add, x, x.astype(np.float32)) is None
    assert bf16_cast.astype(x[:, ::2], np.float32) is None  # not dense
    assert bf16_cast.astype(x.astype(np.float16), BF16) is None


@pytest.fixture
def torch_one_thread():
    """torch on one thread: with more, each thread's partial sum of a long bfloat16 reduction is rounded to bfloat16
    before they are added (100000 terms on two threads: an ulp from the float32 sum's rounding)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


# -- sums and means --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("shape,dims", [((5000,), None), ((100_000,), 0), ((300, 257), 0), ((300, 257), 1),
                                        ((37, 513), (0, 1)), ((4, 300, 257), 1), ((4, 300, 257), (0, 2)),
                                        ((3, 1, 2048), -1), ((2048, 3), 0)])
@pytest.mark.parametrize("reduce", ["sum", "mean"])
def test_sums_and_means_accumulate_in_float32_as_torch(shape, dims, reduce, torch_one_thread):
    j, t = _pair(_bf16_values(shape, 8) + BF16.type(1.0))
    args = () if dims is None else (dims,)
    _same(getattr(j, reduce)(*args), getattr(t, reduce)(*args))
    _same(getattr(j.mT if j.ndim > 1 else j, reduce)(-1), getattr(t.mT if t.ndim > 1 else t, reduce)(-1))
    jg, tg = _pair(_bf16_values(tuple(t.sum(*args).shape), 9))
    j.requires_grad_(True)
    t.requires_grad_(True)
    getattr(j, reduce)(*args).backward(jg)
    getattr(t, reduce)(*args).backward(tg)
    _same(j.grad, t.grad)


@pytest.mark.parametrize("dtype", [BF16, np.dtype(np.float16)])
@pytest.mark.parametrize("shape,dims", [((1000, 1000), (1,)), ((1000, 1000), (0, 1)), ((100_000,), (0,)),
                                        ((7, 33, 4097), (2,)), ((7, 33, 4097), (1, 2)), ((3, 70_000), (1,))])
def test_half_sums_widened_as_they_load_equal_sums_of_widened_copies(dtype, shape, dims):
    from jitorch.ops.native_sum import trailing_sum

    a = _bf16_values(shape, 11).astype(np.float32).astype(dtype)
    got = trailing_sum(a, dims, True)  # widened as it loads
    assert got is not None and got.dtype == np.float32
    np.testing.assert_array_equal(got, trailing_sum(a.astype(np.float32), dims, True))


# -- matrix products ---------------------------------------------------------------------------------------------------
def _ulps(got, expected):
    """Distances in bfloat16 units in the last place (on the sign-magnitude integer line)."""
    def line(t):
        b = _bits(t).astype(np.int64)
        return np.where(b & 0x8000, -(b & 0x7FFF), b)
    return np.abs(line(got) - line(expected))


@pytest.mark.parametrize("product", ["matmul", "linear", "linear bias", "bmm", "matmul backward"])
def test_products_round_a_float32_gemm_once(product):
    (ja, ta), (jb, tb), (jc, tc) = (_pair(_bf16_values(s, i)) for i, s in
                                    enumerate([(3, 96, 200), (3, 200, 64), (64,)], 10))
    if product == "matmul":
        got, expected = ja[0] @ jb[0], ta[0] @ tb[0]
    elif product == "linear":
        got, expected = jitorch.nn.functional.linear(ja, jb[0].t()), torch.nn.functional.linear(ta, tb[0].t())
    elif product == "linear bias":
        got = jitorch.nn.functional.linear(ja, jb[0].t(), jc)
        expected = torch.nn.functional.linear(ta, tb[0].t(), tc)
    elif product == "bmm":
        got, expected = jitorch.bmm(ja, jb), torch.bmm(ta, tb)
    else:
        for t in (ja, jb, ta, tb):
            t.requires_grad_(True)
        (ja @ jb).sum().backward()
        (ta @ tb).sum().backward()
        got, expected = jitorch.cat([ja.grad.reshape(-1), jb.grad.reshape(-1)]), \
            torch.cat([ta.grad.reshape(-1), tb.grad.reshape(-1)])
    assert got.dtype == jitorch.bfloat16 and tuple(got.shape) == tuple(expected.shape)
    ulps = _ulps(got, expected)
    # torch's bfloat16 GEMM (oneDNN, AVX512-BF16 where the host has it) sums in float32 in its own order.
    assert ulps.max() <= 2 and (ulps == 0).mean() > 0.99


def test_autocast_mlp_matches_torch_within_an_ulp():
    rng = np.random.default_rng(20)
    x, w1, w2 = (rng.standard_normal(s).astype(np.float32) / d for s, d in (((64, 256), 1), ((512, 256), 16),
                                                                             ((10, 512), 16)))

    def run(lib):
        F_ = lib.nn.functional
        xs, w1s, w2s = (lib.tensor(a) for a in (x, w1, w2))
        with lib.autocast("cpu", dtype=lib.bfloat16):  # casts the float32 weights natively, products in bfloat16
            return F_.linear(F_.gelu(F_.linear(xs, w1s)) * 1.5 + 0.25, w2s)

    got, expected = run(jitorch), run(torch)
    assert got.dtype == jitorch.bfloat16
    ulps = _ulps(got, expected)
    assert ulps.max() <= 2 and (ulps == 0).mean() > 0.98
