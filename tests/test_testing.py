"""jitorch.testing.assert_close/make_tensor and jitorch.amp.GradScaler, compared with torch 2.13."""
from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

import jitorch
import jitorch.amp
import jitorch.testing


def failure(fn, *args, **kwargs):
    try:
        fn(*args, **kwargs)
    except Exception as e:  # noqa: BLE001 - the type and text are compared
        return type(e).__name__, str(e).replace("jitorch.", "torch.")
    return None


CASES = [
    ([1.0, 2.0, 3.0], [1.0, 2.1, 3.0], "float32", "float32", {}),
    ([1.0, 2.0, 3.0], [1.0, 2.0 + 1e-7, 3.0], "float32", "float32", {}),
    ([1, 2, 3], [1, 3, 3], "int64", "int64", {}),
    ([True, False], [True, True], "bool", "bool", {}),
    ([1.0, 2.0], [1.0, 2.0], "float32", "float64", {}),
    ([1.0, 2.0], [1.0, 2.0], "float32", "float64", {"check_dtype": False}),
    ([float("nan")], [float("nan")], "float32", "float32", {}),
    ([float("nan")], [float("nan")], "float32", "float32", {"equal_nan": True}),
    ([1.0, float("inf")], [1.0, float("inf")], "float32", "float32", {}),
    ([1.0, 0.0], [1.0, 1e-6], "float32", "float32", {}),
    ([[1.0, 2.0], [3.0, 4.0]], [[1.0, 2.0], [3.0, 5.0]], "float64", "float64", {}),
    ([[1.0, 2.0], [3.0, 4.0]], [[1.0, 2.0], [3.0, 4.001]], "float16", "float16", {}),
    ([1.0, 2.0], [1.01, 2.0], "bfloat16", "bfloat16", {}),
    ([1.0, 2.0], [1.1, 2.0], "float32", "float32", {"rtol": 0.2, "atol": 0.0}),
    ([1.0], [1.0], "float32", "float32", {"rtol": 1e-3}),
    ([1.0, 2.0], [1.0, 2.0, 3.0], "float32", "float32", {}),
    (1.0, 1.5, "float32", "float32", {}),
    ([1.0, 2.0], [1.0, 3.0], "float32", "float32", {"msg": "custom"}),
]


@pytest.mark.parametrize("actual,expected,dt_a,dt_e,kwargs", CASES)
def test_assert_close_matches_torch(actual, expected, dt_a, dt_e, kwargs):
    mine = failure(jitorch.testing.assert_close, jitorch.tensor(actual, dtype=getattr(jitorch, dt_a)),
                   jitorch.tensor(expected, dtype=getattr(jitorch, dt_e)), **kwargs)
    theirs = failure(torch.testing.assert_close, torch.tensor(actual, dtype=getattr(torch, dt_a)),
                     torch.tensor(expected, dtype=getattr(torch, dt_e)), **kwargs)
    assert mine == theirs


@pytest.mark.parametrize("actual,expected", [(1.0, 1.5), (1, 2), (1.0, 1.0 + 1e-9),
                                              ([1.0, 2.0], [1.0, 2.5]), ({"a": 1.0}, {"a": 2.0}), ([1.0], [1.0, 2.0])])
def test_assert_close_python_values_match_torch(actual, expected):
    assert failure(jitorch.testing.assert_close, actual, expected) == failure(torch.testing.assert_close, actual,
                                                                              expected)


def test_assert_close_nested_containers_report_the_item():
    mine = failure(jitorch.testing.assert_close, {"a": [jitorch.tensor([1.0])]}, {"a": [jitorch.tensor([2.0])]})
    theirs = failure(torch.testing.assert_close, {"a": [torch.tensor([1.0])]}, {"a": [torch.tensor([2.0])]})
    assert mine == theirs and theirs[1].endswith("The failure occurred for item ['a'][0]")


def test_assert_close_callable_msg_and_tensor_vs_scalar():
    with pytest.raises(AssertionError, match="^wrapped: Tensor-likes are not close!"):
        jitorch.testing.assert_close(jitorch.tensor([1.0]), jitorch.tensor([2.0]), msg=lambda m: "wrapped: " + m)
    with pytest.raises(TypeError, match="No comparison pair"):
        jitorch.testing.assert_close(jitorch.tensor([1.0]), 1.0)


@pytest.mark.parametrize("dtype,low,high", [("float32", None, None), ("float64", -1, 1), ("int64", None, None),
                                            ("uint8", None, None), ("bool", None, None), ("int32", 0, 5)])
def test_make_tensor_respects_shape_dtype_and_range(dtype, low, high):
    t = jitorch.testing.make_tensor(3, 4, dtype=getattr(jitorch, dtype), device="cpu", low=low, high=high)
    ref = torch.testing.make_tensor(3, 4, dtype=getattr(torch, dtype), device="cpu", low=low, high=high)
    assert tuple(t.shape) == tuple(ref.shape) and str(t.dtype).split(".")[1] == str(ref.dtype).split(".")[1]
    if dtype != "bool":
        lo = -9 if low is None else low
        lo = 0 if dtype == "uint8" else lo
        hi = 9 if high is None else high
        assert t.min().item() >= lo and t.max().item() <= hi


def test_make_tensor_options():
    t = jitorch.testing.make_tensor((2, 3), dtype=jitorch.float32, device="cpu", exclude_zero=True,
                                    noncontiguous=True, requires_grad=True)
    assert t.requires_grad and not t.is_contiguous() and bool((t != 0).all())
    with pytest.raises(ValueError, match="`low` must be less than or equal to `high`"):
        jitorch.testing.make_tensor(2, dtype=jitorch.float32, device="cpu", low=2, high=1)


# ---- GradScaler ----------------------------------------------------------------------------------------------------

def _train(mod, scaler_kwargs, grads_to_inject, clip=False):
    """A scaled training loop; some iterations get an inf/NaN gradient. Returns per-step (scale, tracker, weights)."""
    w = mod.nn.Parameter(mod.tensor([1.0, -2.0, 0.5]))
    opt = mod.optim.SGD([w], lr=0.1)
    scaler = mod.amp.GradScaler("cpu", **scaler_kwargs)
    history = []
    for bad in grads_to_inject:
        opt.zero_grad()
        loss = (w * w).sum()
        scaler.scale(loss).backward()
        if bad is not None:
            with mod.no_grad():
                w.grad[1] = bad
        if clip:
            scaler.unscale_(opt)
            mod.nn.utils.clip_grad_norm_([w], 1.0)
        scaler.step(opt)
        scaler.update()
        history.append((scaler.get_scale(), scaler._get_growth_tracker(), w.detach().numpy().tolist()))
    return history, scaler.state_dict()


@pytest.mark.parametrize("clip", [False, True])
def test_grad_scaler_matches_torch_step_for_step(clip):
    schedule = [None, None, float("inf"), None, float("nan"), None, None, None, None]
    kwargs = dict(init_scale=2.0**10, growth_factor=3.0, backoff_factor=0.25, growth_interval=3)
    mine, mine_state = _train(jitorch, kwargs, schedule, clip)
    theirs, their_state = _train(torch, kwargs, schedule, clip)
    assert mine_state == their_state
    for (s1, g1, w1), (s2, g2, w2) in zip(mine, theirs):
        assert (s1, g1) == (s2, g2)
        np.testing.assert_allclose(w1, w2, rtol=1e-6)


def test_grad_scaler_growth_never_overflows_to_inf():
    kwargs = dict(init_scale=2.0**126, growth_factor=4.0, growth_interval=1)
    assert _train(jitorch, kwargs, [None] * 2) == _train(torch, kwargs, [None] * 2)


def test_grad_scaler_errors_match_torch():
    for mod in (jitorch, torch):
        w = mod.nn.Parameter(mod.ones(2))
        opt = mod.optim.SGD([w], lr=0.1)
        scaler = mod.amp.GradScaler("cpu")
        assert failure(scaler.step, opt)[0] == "AssertionError"
        scaler.scale(w.sum()).backward()
        scaler.unscale_(opt)
        assert failure(scaler.unscale_, opt) == ("RuntimeError", "unscale_() has already been called on this "
                                                 "optimizer since the last update().")
        scaler.step(opt)
        assert failure(scaler.step, opt) == ("RuntimeError", "step() has already been called since the last update().")
        assert failure(scaler.step, opt, closure=None)[1] == "Closure use is not currently supported if GradScaler " \
                                                           "is enabled."
        scaler.update(8.0)
        assert scaler.get_scale() == 8.0
        assert failure(mod.amp.GradScaler, "cpu", growth_factor=1.0) == ("AssertionError",
                                                                        "The growth factor must be > 1.0.")


def test_grad_scaler_scales_nested_outputs_like_torch():
    mine = jitorch.amp.GradScaler("cpu", init_scale=4.0).scale([jitorch.tensor(1.0), (jitorch.tensor([2.0]),)])
    theirs = torch.amp.GradScaler("cpu", init_scale=4.0).scale([torch.tensor(1.0), (torch.tensor([2.0]),)])
    assert mine[0].item() == theirs[0].item() and mine[1][0].tolist() == theirs[1][0].tolist()


def test_disabled_grad_scaler_is_transparent():
    with pytest.warns(UserWarning, match=r"GradScaler is enabled, but CUDA is not available\.  Disabling\."):
        scaler = jitorch.amp.GradScaler()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = torch.amp.GradScaler()
    w = jitorch.nn.Parameter(jitorch.ones(2))
    opt = jitorch.optim.SGD([w], lr=0.5)
    loss = w.sum()
    assert scaler.scale(loss) is loss
    loss.backward()
    scaler.unscale_(opt)
    assert scaler.step(opt) is None and w.tolist() == [0.5, 0.5]
    scaler.update()
    assert (scaler.get_scale(), scaler.state_dict(), scaler.is_enabled()) == (ref.get_scale(), ref.state_dict(),
                                                                              ref.is_enabled())
    scaler.load_state_dict({})  # ignored when disabled, as in torch


def test_grad_scaler_state_dict_round_trip_and_pickle():
    import pickle

    scaler = jitorch.amp.GradScaler("cpu", init_scale=16.0, growth_interval=5)
    w = jitorch.nn.Parameter(jitorch.ones(1))
    opt = jitorch.optim.SGD([w], lr=0.1)
    scaler.scale(w.sum()).backward()
    scaler.step(opt)
    scaler.update()
    other = jitorch.amp.GradScaler("cpu")
    other.load_state_dict(scaler.state_dict())
    assert other.state_dict() == scaler.state_dict() == {"scale": 16.0, "growth_factor": 2.0, "backoff_factor": 0.5,
                                                         "growth_interval": 5, "_growth_tracker": 1}
    assert pickle.loads(pickle.dumps(scaler)).state_dict() == scaler.state_dict()
    with pytest.raises(RuntimeError, match="The source state dict is empty"):
        other.load_state_dict({})
