"""Kernel IR: construction checks, canonical text, dimension collapsing, and the NumPy interpreter against NumPy."""
import numpy as np
import pytest

from jitorch.codegen import interp
from jitorch.codegen.ir import Buffer, Kernel, Store, collapse, const, identity, load, op

from codegen_helpers import random_view, strided


def test_text_is_canonical_and_shares_subexpressions():
    x = load(0, "f32")
    y = op("mul", op("add", x, const(1, "f32")), op("add", x, const(1, "f32")))
    k = Kernel((4,), (Buffer("f32", (1,)), Buffer("f32", (1,))), (Store(1, y),))
    text = str(k)
    assert text.count("add") == 1 and text.count("load") == 1
    assert str(Kernel((4,), (Buffer("f32", (1,)), Buffer("f32", (1,))), (Store(1, y),))) == text
    assert len(k.nodes()) == 4


def test_type_errors_are_reported():
    with pytest.raises(TypeError, match="insert a cast"):
        op("add", load(0, "f32"), load(1, "f64"))
    with pytest.raises(TypeError, match="float"):
        op("exp", load(0, "i32"))
    with pytest.raises(ValueError, match="unknown primitive"):
        op("frobnicate", load(0, "f32"))
    with pytest.raises(ValueError, match="reduced axis"):
        Kernel((2, 3), (Buffer("f32", (3, 1)), Buffer("f32", (1, 1))), (Store(1, load(0, "f32"), "sum"),), 1)
    with pytest.raises(TypeError, match="buffer is"):
        Kernel((2,), (Buffer("f32", (1,)), Buffer("f64", (1,))), (Store(1, load(0, "f32")),))


def test_identities():
    assert identity("sum", "f32") == 0 and identity("prod", "i64") == 1
    assert identity("max", "f64") == -np.inf and identity("min", "i64") == np.iinfo(np.int64).max


@pytest.mark.parametrize("shape,strides,red,expect_shape", [
    ((2, 3, 4), (12, 4, 1), 0, (24,)),
    ((2, 3, 4), (1, 8, 2), 0, (2, 12)),
    ((2, 3, 4), (1, 2, 8), 0, (2, 3, 4)),
    ((2, 1, 4), (4, 99, 1), 0, (8,)),
    ((2, 3, 4), (12, 4, 1), 2, (2, 12)),
    ((3, 4), (4, 1), 2, (1, 12)),
    ((1, 1), (0, 0), 1, (1, 1)),
    ((0, 5), (5, 1), 0, (0,)),
])
def test_collapse(shape, strides, red, expect_shape):
    out_strides = tuple(0 if d >= len(shape) - red else s for d, s in enumerate(strides))
    k = Kernel(shape, (Buffer("f64", strides), Buffer("f64", out_strides)),
               (Store(1, load(0, "f64"), "sum" if red else None),), red)
    c = collapse(k)
    assert c.shape == expect_shape
    n = 1 if 0 in shape else sum((s - 1) * st for s, st in zip(shape, strides)) + 1
    x = np.random.default_rng(0).standard_normal(n)
    outs = [np.zeros(n), np.zeros(n)]
    for kernel, out in zip((k, c), outs):  # collapsing must not change what the interpreter computes
        interp.run(kernel, [x, out])
    np.testing.assert_array_equal(outs[0], outs[1])


@pytest.mark.parametrize("kind", ["contiguous", "transposed", "sliced", "broadcast"])
def test_interpreter_matches_numpy(kind):
    rng = np.random.default_rng(1)
    shape = (3, 5)
    ba, a = random_view(rng, shape, np.float32, kind)
    bb, b = random_view(rng, shape, np.float32, "contiguous")
    out = np.zeros(15, np.float32)
    e = op("where", op("gt", load(0, "f32"), load(1, "f32")), op("exp", load(0, "f32")), op("neg", load(1, "f32")))
    k = Kernel(shape, (strided(ba, a, shape), strided(bb, b, shape), Buffer("f32", (5, 1))), (Store(2, e),))
    interp.run(k, [ba, bb, out])
    np.testing.assert_allclose(out.reshape(shape), np.where(a > b, np.exp(a), -b), rtol=1e-6)
