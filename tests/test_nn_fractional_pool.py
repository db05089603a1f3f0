"""fractional_max_pool2d/3d and FractionalMaxPool2d/3d against PyTorch 2.13 with the same ``_random_samples``: values,
indices, dtypes and input gradients (random upstream gradients; overlapping windows accumulate), output_ratio,
unbatched and empty-batch inputs, errors; without samples, shapes and that the windows' maxima are input values."""
from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as TF
from helpers import check_error, check_op

import jitorch
import jitorch.nn.functional as F

CASES2 = [((2, 3, 9, 11), 2, dict(output_size=(4, 5))), ((3, 9, 11), (3, 2), dict(output_size=5)),
          ((2, 3, 10, 10), 3, dict(output_ratio=(0.5, 0.7))), ((1, 2, 5, 5), 1, dict(output_size=5)),
          ((2, 2, 6, 7), 2, dict(output_size=1)), ((0, 2, 6, 7), 2, dict(output_size=3)),
          ((1, 2, 8, 8), 2, dict(output_size=(7, 2)))]
CASES3 = [((2, 3, 6, 9, 11), 2, dict(output_size=(3, 4, 5))), ((3, 6, 9, 7), (3, 2, 2), dict(output_size=3)),
          ((2, 2, 8, 10, 10), 3, dict(output_ratio=(0.5, 0.7, 0.6))), ((1, 1, 4, 4, 4), 2, dict(output_size=1))]


def _samples(rng, shape, nd, dtype):
    batch = 1 if len(shape) == nd + 1 else shape[0]
    return rng.random((batch, shape[-nd - 1], nd)).astype(dtype)


@pytest.mark.parametrize("nd,shape,kernel,kwargs", [(2,) + c for c in CASES2] + [(3,) + c for c in CASES3])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_fractional_max_pool_matches_torch(nd, shape, kernel, kwargs, dtype):
    rng = np.random.default_rng(0)
    x, s = rng.standard_normal(shape).astype(dtype), _samples(rng, shape, nd, dtype)
    name = f"fractional_max_pool{nd}d"
    # values and indices exactly; overlapping windows sum their gradients in another order than ATen
    tol = dict(atol=0, rtol=0, grad_atol=1e-6 if dtype == np.float32 else 1e-14, grad_rtol=1e-5)
    check_op(lambda x, s: getattr(F, name)(x, kernel, return_indices=True, _random_samples=s.detach(), **kwargs),
             lambda x, s: getattr(TF, name)(x, kernel, return_indices=True, _random_samples=s.detach(), **kwargs),
             [x, s], **tol)
    check_error(lambda x, s: getattr(F, name)(x, kernel, _random_samples=s.requires_grad_(), **kwargs),
                lambda x, s: getattr(TF, name)(x, kernel, _random_samples=s.requires_grad_(), **kwargs), [x, s],
                match="random_samples")
    check_op(lambda x, s: getattr(F, name)(x, kernel, _random_samples=s.detach(), **kwargs),
             lambda x, s: getattr(TF, name)(x, kernel, _random_samples=s.detach(), **kwargs), [x, s], **tol,
             layout=["transposed", "contiguous"])


@pytest.mark.parametrize("nd", [2, 3])
def test_fractional_max_pool_modules_match_torch(nd):
    rng = np.random.default_rng(1)
    shape = (2, 3) + (9,) * nd
    x, s = rng.standard_normal(shape).astype(np.float32), _samples(rng, shape, nd, np.float32)
    jm = getattr(jitorch.nn, f"FractionalMaxPool{nd}d")(2, output_ratio=0.5, return_indices=True,
                                                         _random_samples=jitorch.tensor(s))
    tm = getattr(torch.nn, f"FractionalMaxPool{nd}d")(2, output_ratio=0.5, return_indices=True,
                                                       _random_samples=torch.tensor(s))
    check_op(jm, tm, [x], atol=0, rtol=0, grad_atol=1e-6, grad_rtol=1e-5)
    assert list(jm.state_dict()) == list(tm.state_dict()) == ["_random_samples"]
    assert repr(jm) == repr(tm)
    more = rng.random((4,) + s.shape[1:]).astype(np.float32)  # samples beyond the batch are ignored, as in torch
    check_op(lambda x, s: getattr(F, f"fractional_max_pool{nd}d")(x, 2, output_size=3, _random_samples=s.detach()),
             lambda x, s: getattr(TF, f"fractional_max_pool{nd}d")(x, 2, output_size=3, _random_samples=s.detach()),
             [x, more], atol=0, rtol=0, grad_atol=1e-6, grad_rtol=1e-5)
    free = getattr(jitorch.nn, f"FractionalMaxPool{nd}d")(3, output_size=4)  # fresh samples on each call
    out = free(jitorch.tensor(x))
    assert tuple(out.shape) == (2, 3) + (4,) * nd
    assert np.isin(out.numpy(), x).all()


@pytest.mark.parametrize("call", [
    lambda F, lib: F.fractional_max_pool2d(lib.ones(1, 1, 5, 5), 3, output_size=4),
    lambda F, lib: F.fractional_max_pool2d(lib.ones(1, 1, 5, 5), (2, 2, 2), output_size=2),
    lambda F, lib: F.fractional_max_pool2d(lib.ones(2, 1, 1, 5, 5), 2, output_size=2),
    lambda F, lib: F.fractional_max_pool2d(lib.ones(1, 1, 5, 5), 2),
    lambda F, lib: F.fractional_max_pool2d(lib.ones(1, 2, 5, 5), 2, output_size=2, _random_samples=lib.ones(1, 1, 2)),
    lambda F, lib: F.fractional_max_pool2d(lib.ones(1, 1, 5, 5), 2, output_size=2, _random_samples=lib.ones(1, 1, 3)),
    lambda F, lib: F.fractional_max_pool2d(lib.ones(2, 0, 5, 5), 2, output_size=2),
    lambda F, lib: F.fractional_max_pool2d(lib.ones(2, 1, 5, 5), 2, output_size=2, _random_samples=lib.ones(1, 1, 2)),
    lambda F, lib: F.fractional_max_pool2d(lib.ones(2, 1, 5, 5), 2, output_size=2, _random_samples=lib.ones(2, 2)),
    lambda F, lib: F.fractional_max_pool3d(lib.ones(1, 1, 5, 5, 5), 2, output_size=4),  # 3-D's check is strict
    lambda F, lib: F.fractional_max_pool3d(lib.ones(1, 1, 5, 5, 5), 2),
])
def test_fractional_max_pool_errors_match_torch(call):
    check_error(lambda: call(F, jitorch), lambda: call(TF, torch), match="fractional_max_pool")


@pytest.mark.parametrize("kwargs", [dict(), dict(output_size=2, output_ratio=0.5), dict(output_ratio=1.0)])
def test_fractional_max_pool_module_argument_errors_match_torch(kwargs):
    with pytest.raises(ValueError):
        torch.nn.FractionalMaxPool2d(2, **kwargs)
    with pytest.raises(ValueError):
        jitorch.nn.FractionalMaxPool2d(2, **kwargs)
