"""A Tensor subclass passed to ``jitorch.compile`` gets what eager gives it: its type back on the outputs its ops
make, and its ``__torch_function__`` called for each op. The call runs eagerly (a compiled graph would return
plain Tensors and skip the handler); torch.compile returns the subclass too."""
from __future__ import annotations

import numpy as np
import torch
from helpers import assert_same

import jitorch


def _subclass(lib):
    class Tagged(lib.Tensor):
        pass
    return Tagged


def _logging(lib, seen):
    class Logged(lib.Tensor):
        @classmethod
        def __torch_function__(cls, func, types, args=(), kwargs=None):
            seen.append(getattr(func, "__name__", str(func)))
            return super().__torch_function__(func, types, args, kwargs or {})
    return Logged


def _fn(x, y):
    return (x * 2 + y).relu().sum(0), y + 1


def test_a_subclass_argument_comes_back_as_eager_gives_it():
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((3, 4)).astype(np.float32), rng.standard_normal((3, 4)).astype(np.float32)
    J, T = _subclass(jitorch), _subclass(torch)
    compiled = jitorch.compile(_fn)
    for _ in range(2):
        jx, tx = jitorch.tensor(a).as_subclass(J), torch.tensor(a).as_subclass(T)
        jo, to = compiled(jx, jitorch.tensor(b)), _fn(tx, torch.tensor(b))
        assert type(jo[0]) is J and type(to[0]) is T
        assert type(jo[1]) is jitorch.Tensor and type(to[1]) is torch.Tensor  # made from plain tensors only
        assert_same(jo[0].as_subclass(jitorch.Tensor), to[0].as_subclass(torch.Tensor), atol=1e-6, rtol=1e-6)
        assert_same(jo[1], to[1])


def test_a_subclass_handler_hears_the_ops_of_a_compiled_call():
    jseen, tseen = [], []
    J, T = _logging(jitorch, jseen), _logging(torch, tseen)
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    compiled = jitorch.compile(lambda x: (x * 2).exp().mean())
    out = compiled(jitorch.tensor(a).as_subclass(J))
    ref = (torch.tensor(a).as_subclass(T) * 2).exp().mean()
    heard = list(jseen)
    assert type(out) is J and heard == tseen == ["mul", "exp", "mean"]
    np.testing.assert_allclose(float(out.as_subclass(jitorch.Tensor)), float(ref.as_subclass(torch.Tensor)),
                               rtol=1e-6)


def test_plain_calls_of_the_same_function_still_compile():
    J = _subclass(jitorch)
    compiled = jitorch.compile(lambda x: (x * 2).relu() + 1)
    compiled(jitorch.ones(3).as_subclass(J))
    out = compiled(jitorch.ones(3))
    assert type(out) is jitorch.Tensor and out.tolist() == [3.0, 3.0, 3.0]
    assert compiled._compiles() == 1


def test_reduce_overhead_hands_a_subclass_argument_its_type():
    J = _subclass(jitorch)
    f = jitorch.compile(lambda x: (x * 2).relu() + 1, mode="reduce-overhead")
    kinds = [type(f(jitorch.ones(3).as_subclass(J))) for _ in range(3)] + [type(f(jitorch.ones(3)))]
    assert kinds == [J, J, J, jitorch.Tensor]
