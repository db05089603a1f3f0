"""native_batch_norm, native_group_norm and conv_tbc against torch: outputs, saved statistics, running stats,
gradients."""
import numpy as np
import pytest
import torch

import jitorch
from helpers import check_op, make_array


@pytest.mark.parametrize("training", [True, False])
@pytest.mark.parametrize("affine", [True, False])
@pytest.mark.parametrize("shape", [(4, 3), (4, 3, 5), (2, 3, 4, 4)])
def test_native_batch_norm_matches_torch(training, affine, shape):
    rng = np.random.default_rng(len(shape) + training)
    x = make_array(shape, "float64", rng)
    w, b = make_array((3,), "float64", rng), make_array((3,), "float64", rng)
    stats = {}

    def run(lib):
        def fn(x, w, b):
            rm, rv = lib.zeros(3, dtype=lib.float64), lib.ones(3, dtype=lib.float64)
            out = lib.native_batch_norm(x, w if affine else None, b if affine else None, rm, rv, training, 0.1,
                                        1e-5)
            stats[lib.__name__] = (rm.detach().numpy().copy(), rv.detach().numpy().copy())
            return out
        return fn
    check_op(run(jitorch), run(torch), [x, w, b], atol=1e-10, rtol=1e-9)
    for ours, theirs in zip(stats["jitorch"], stats["torch"]):
        np.testing.assert_allclose(ours, theirs, rtol=1e-12)


@pytest.mark.parametrize("affine", [True, False])
def test_native_group_norm_matches_torch(affine):
    rng = np.random.default_rng(5)
    x = make_array((4, 6, 5), "float64", rng)
    w, b = make_array((6,), "float64", rng), make_array((6,), "float64", rng)

    def run(lib):
        return lambda x, w, b: lib.native_group_norm(x, w if affine else None, b if affine else None, 4, 6, 5, 3,
                                                     1e-5)
    check_op(run(jitorch), run(torch), [x, w, b], atol=1e-10, rtol=1e-9)
    with pytest.raises(RuntimeError, match=r"native_group_norm: input of shape \(4, 6, 5\) does not match N=4, C=5"):
        jitorch.native_group_norm(jitorch.tensor(x), None, None, 4, 5, 5, 3, 1e-5)


@pytest.mark.parametrize("pad", [0, 1, 2])
def test_conv_tbc_matches_torch(pad):
    rng = np.random.default_rng(pad)
    x, w, b = make_array((7, 2, 3), "float32", rng), make_array((3, 3, 4), "float32", rng), \
        make_array((4,), "float32", rng)
    check_op(lambda *a: jitorch.conv_tbc(*a, pad), lambda *a: torch.conv_tbc(*a, pad), [x, w, b],
             atol=1e-5, rtol=1e-5)
    with pytest.raises(RuntimeError, match="conv_tbc: channels disagree"):
        jitorch.conv_tbc(jitorch.ones(7, 2, 3), jitorch.ones(3, 2, 4), jitorch.ones(4))


def test_native_group_norm_of_an_empty_batch():
    ours = jitorch.native_group_norm(jitorch.zeros(0, 4, 3), None, None, 0, 4, 3, 2, 1e-5)
    theirs = torch.native_group_norm(torch.zeros(0, 4, 3), None, None, 0, 4, 3, 2, 1e-5)
    assert [tuple(t.shape) for t in ours] == [tuple(t.shape) for t in theirs]
