"""torch.* names scripts reach for, compared with torch 2.13: constants, isin, anomaly detection, the function
spellings of Tensor methods, diagflat/row_stack, torch.random, torch.multiprocessing and the torch.jit shim."""
from __future__ import annotations

import math
import warnings

import mp_workers
import numpy as np
import pytest
import torch

import jitorch
from jitorch import _method_functions


def _same(a, b):
    assert tuple(a.shape) == tuple(b.shape) and str(a.dtype).split(".")[-1] == str(b.dtype).split(".")[-1]
    np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_constants():
    for name in ("pi", "e", "inf", "nan"):
        mine, theirs = getattr(jitorch, name), getattr(torch, name)
        assert type(mine) is type(theirs) and (mine == theirs or (math.isnan(mine) and math.isnan(theirs)))
    assert jitorch.newaxis is torch.newaxis is None
    x = jitorch.tensor([1.0, 2.0])
    assert x.masked_fill(x > 1, -jitorch.inf).tolist() == [1.0, -math.inf]


ISIN = [
    (lambda m: m.tensor([[1, 2], [3, 4]]), lambda m: m.tensor([2, 3, 7]), {}),
    (lambda m: m.tensor([[1, 2], [3, 4]]), lambda m: m.tensor([2, 3, 7]), {"invert": True}),
    (lambda m: m.tensor([1.5, float("nan"), 2.0]), lambda m: m.tensor([float("nan"), 2.0]), {}),
    (lambda m: m.tensor([1, 2, 3]), lambda m: m.tensor([2.0, 3.5]), {}),
    (lambda m: m.tensor([1, 2, 3]), lambda m: 2, {}),
    (lambda m: 3, lambda m: m.tensor([1, 3]), {}),
    (lambda m: m.arange(6).view(2, 3), lambda m: m.tensor([], dtype=m.int64), {}),
    (lambda m: m.tensor([5, 1, 3]), lambda m: m.tensor([3, 1]), {"assume_unique": True}),
]


@pytest.mark.parametrize("case", range(len(ISIN)))
def test_isin_matches_torch(case):
    elements, test, kwargs = ISIN[case]
    _same(jitorch.isin(elements(jitorch), test(jitorch), **kwargs), torch.isin(elements(torch), test(torch), **kwargs))


def test_isin_refuses_bool_like_torch():
    messages = []
    for m in (jitorch, torch):
        with pytest.raises(RuntimeError) as e:
            m.isin(m.tensor([True, False]), m.tensor([True]))
        messages.append(str(e.value))
    assert messages[0] == messages[1]


def test_detect_anomaly_raises_on_nan_gradients_like_torch():
    messages = []
    for m in (jitorch, torch):
        x = m.tensor([-1.0, 4.0], requires_grad=True)
        with pytest.warns(UserWarning, match="Anomaly Detection has been enabled"):
            ctx = m.autograd.detect_anomaly()
        with ctx, pytest.raises(RuntimeError) as e, warnings.catch_warnings():
            warnings.simplefilter("ignore")
            assert m.is_anomaly_enabled() and m.is_anomaly_check_nan_enabled()
            (x.sqrt() * 2).sum().backward()
        messages.append(str(e.value))
        assert not m.is_anomaly_enabled()
        (x.sqrt() * 2).sum().backward()  # outside: NaN gradients are allowed
        assert math.isnan(x.grad[0].item())
        with m.autograd.set_detect_anomaly(True, check_nan=False):
            assert m.is_anomaly_enabled() and not m.is_anomaly_check_nan_enabled()
            (x.sqrt() * 2).sum().backward()
        assert not m.is_anomaly_enabled() and m.is_anomaly_check_nan_enabled()
        m.set_anomaly_enabled(False)
    assert messages[0] == messages[1]


@pytest.mark.parametrize("name", _method_functions.__all__)
def test_method_functions_exist_in_torch_and_call_the_method(name):
    assert callable(getattr(torch, name)) and getattr(jitorch, name).__name__ == name


@pytest.mark.parametrize("call", [
    lambda m: m.relu_(m.tensor([-1.0, 2.0])), lambda m: m.clamp_(m.tensor([-1.0, 2.0, 0.5]), 0, 1),
    lambda m: m.fill_(m.zeros(3), 2.5), lambda m: m.sigmoid_(m.tensor([0.0])), lambda m: m.zero_(m.ones(2)),
    lambda m: m.detach(m.ones(2, requires_grad=True) * 2), lambda m: m.exp_(m.tensor([0.0])),
    lambda m: m.tensor(m.is_signed(m.tensor([1], dtype=m.uint8))), lambda m: m.diagflat(m.tensor([[1, 2], [3, 4]])),
    lambda m: m.diagflat(m.tensor([1.0, 2.0]), -1), lambda m: m.row_stack([m.ones(2), m.zeros(2)]),
])
def test_function_spellings_match_torch(call):
    mine, theirs = call(jitorch), call(torch)
    assert mine.requires_grad == theirs.requires_grad
    _same(mine.detach(), theirs.detach())


def test_random_module():
    assert set(jitorch.random.__all__) >= {"manual_seed", "seed", "initial_seed", "get_rng_state", "set_rng_state",
                                           "fork_rng"}
    for m in (jitorch, torch):
        assert m.random.manual_seed(3) is m.random.default_generator
        state = m.random.get_rng_state()
        first = m.rand(3)
        with m.random.fork_rng():
            inside = m.rand(3)
        assert (m.rand(3) == inside).all() and (inside != first).all()
        m.random.set_rng_state(state)
        assert (m.rand(3) == first).all() and m.random.initial_seed() == 3
        with m.random.fork_rng(enabled=False):
            m.rand(1)


def test_multiprocessing_spawn_and_reexports(tmp_path):
    import multiprocessing

    import jitorch.multiprocessing as mp
    assert mp.Queue is multiprocessing.Queue and mp.cpu_count() == multiprocessing.cpu_count()
    assert mp.get_sharing_strategy() in mp.get_all_sharing_strategies()
    with pytest.raises(mp.ProcessRaisedException, match="rank 1 failed") as e:
        mp.spawn(mp_workers.write_rank_or_fail, args=(str(tmp_path),), nprocs=2)
    assert e.value.error_index == 1 and [p.read_text() for p in tmp_path.iterdir()] == ["0"]


def test_jit_shim_returns_its_argument():
    def f(x):
        return x * 2

    with pytest.warns(DeprecationWarning, match="torch.jit.script` is deprecated"):
        assert jitorch.jit.script(f) is f
    with pytest.warns(DeprecationWarning, match="torch.jit.trace` is deprecated"):
        assert jitorch.jit.trace(f, jitorch.ones(2)) is f
    for deco in (jitorch.jit.ignore, jitorch.jit.unused, jitorch.jit.export):
        assert deco(f) is f and deco(drop=True)(f) is f
    assert not jitorch.jit.is_scripting() and not jitorch.jit.is_tracing()
    assert jitorch.jit.Final[int] is int and jitorch.jit.annotate(list, [1]) == [1]
    assert jitorch.jit.wait(jitorch.jit.fork(f, 3)) == 6
    assert isinstance(jitorch.nn.Linear(1, 1), jitorch.jit.ScriptModule)  # code checks this to pick a path
