"""nn.AdaptiveLogSoftmaxWithLoss against PyTorch 2.13 with identical weights: output, loss and every parameter's and
the input's gradient (random upstream gradients), log_prob and predict, unbatched input, parameter names, errors."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from nn_oracle import check_module, copy_weights, same_parameter_names, torch_single_thread  # noqa: F401

import jitorch


def _pair(*args, **kwargs):
    torch.manual_seed(0)
    jm = jitorch.nn.AdaptiveLogSoftmaxWithLoss(*args, **kwargs)
    tm = torch.nn.AdaptiveLogSoftmaxWithLoss(*args, **kwargs)
    same_parameter_names(jm, tm)
    copy_weights(jm, tm)
    return jm, tm


@pytest.mark.parametrize("kwargs", [dict(cutoffs=[3, 7]), dict(cutoffs=[5], div_value=2.0, head_bias=True),
                                    dict(cutoffs=[2, 4, 8], div_value=1.5)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_forward_and_gradients_match_torch(kwargs, dtype):
    rng = np.random.default_rng(0)
    jm, tm = _pair(16, 12, **kwargs)
    if dtype == np.float64:
        jm, tm = jm.double(), tm.double()
    tol = dict(atol=1e-5, rtol=1e-4) if dtype == np.float32 else dict(atol=1e-10, rtol=1e-8)
    x = rng.standard_normal((9, 16)).astype(dtype)
    target = np.array([0, 11, 3, 7, 2, 9, 1, 5, 10])
    check_module(jm, tm, [x, target], copy=False, **tol)
    for m in (jm, tm):
        m.zero_grad()
    check_module(jm, tm, [x[0], np.array(10)], copy=False, **tol)  # unbatched: a 0-d target
    for m in (jm, tm):
        m.zero_grad()
    check_module(jm, tm, [x[:1], np.array([4])], copy=False, **tol)  # one row, one cluster
    for method in ("log_prob", "predict"):
        j, t = getattr(jm, method)(jitorch.tensor(x)), getattr(tm, method)(torch.tensor(x))
        assert str(j.dtype).split(".")[-1] == str(t.dtype).split(".")[-1]
        np.testing.assert_allclose(j.detach().numpy(), t.detach().numpy(), **tol)


def test_predict_with_rows_in_and_out_of_the_shortlist_matches_torch():
    jm, tm = _pair(6, 10, cutoffs=[4])
    with torch.no_grad():
        tm.head.weight[4].mul_(0).add_(torch.tensor([5.0, 0, 0, 0, 0, 0]))  # the cluster wins where x[0] is large
    copy_weights(jm, tm)
    x = np.random.default_rng(1).standard_normal((8, 6)).astype(np.float32)
    x[::2, 0] = 3.0
    np.testing.assert_array_equal(jm.predict(jitorch.tensor(x)).numpy(), tm.predict(torch.tensor(x)).numpy())


@pytest.mark.parametrize("args", [(8, 10, []), (8, 10, [5, 3]), (8, 10, [0, 3]), (8, 10, [3, 10]), (8, 10, [3, 3]),
                                  (8, 10, [2.5])])
def test_bad_cutoffs_raise_value_error_as_torch(args):
    with pytest.raises(ValueError):
        torch.nn.AdaptiveLogSoftmaxWithLoss(*args)
    with pytest.raises(ValueError, match="cutoffs"):
        jitorch.nn.AdaptiveLogSoftmaxWithLoss(*args)


@pytest.mark.parametrize("x_shape,target", [((3, 8), [1, 2]), ((3, 2, 8), [1, 2, 3]), ((8,), [1]),
                                            ((3, 8), [[1, 2, 3]]), ((3, 8), [1, 2, 12])])
def test_bad_inputs_raise_as_torch(x_shape, target):
    jm, tm = _pair(8, 10, cutoffs=[4])
    with pytest.raises(RuntimeError):
        tm(torch.ones(x_shape), torch.tensor(target))
    with pytest.raises(RuntimeError):
        jm(jitorch.ones(x_shape), jitorch.tensor(target))
