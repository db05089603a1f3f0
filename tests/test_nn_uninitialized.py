"""``nn.parameter.UninitializedParameter`` / ``UninitializedBuffer`` against torch 2.13: class names and hierarchy,
``is_lazy``, what works before ``materialize`` (dtype, device, conversions) and torch's errors for everything else,
and what ``materialize`` turns them into."""
from __future__ import annotations

import copy

import pytest
import torch

import jitorch


def _kind(lib, code):
    from_param = lib.nn.parameter
    scope = {"L": lib, "P": from_param, "p": from_param.UninitializedParameter(),
             "b": from_param.UninitializedBuffer()}
    try:
        value = eval(code, scope)
    except Exception as e:  # noqa: BLE001 - the exception type is the outcome compared
        return type(e).__name__, str(e).split(" in ")[0] if isinstance(e, ValueError) else str(e)
    if isinstance(value, lib.Tensor) and not lib.nn.parameter.is_lazy(value):
        return "tensor", str(value.dtype).split(".")[-1], tuple(value.size())
    return repr(value).replace("jitorch.", "torch.")


@pytest.mark.parametrize("code", [
    "type(p).__name__", "type(b).__name__", "repr(p)", "str(b)", "P.is_lazy(p)", "P.is_lazy(b)",
    "P.is_lazy(L.nn.Parameter(L.ones(1)))", "isinstance(p, L.nn.Parameter)", "isinstance(p, L.Tensor)",
    "isinstance(b, L.nn.Parameter)", "isinstance(p, P.UninitializedTensorMixin)", "p.requires_grad", "b.requires_grad",
    "p.dtype", "p.device", "p.size()", "p.is_floating_point()", "repr(p.float())", "repr(p.double())", "p.data.shape",
    "L.nn.UninitializedParameter is P.UninitializedParameter", "p.grad",
    "P.UninitializedParameter(requires_grad=False, dtype=L.float64).dtype",
    # refused before materialize
    "p.shape", "p + 1", "1 + p", "L.ones(2) * p", "L.relu(p)", "p.sum()", "p.numel()", "p.view(0)", "p[0]", "p.t()",
    "p.dim()", "len(p)", "p.requires_grad_(False)", "p.share_memory_()", "b.sum()", "b.shape", "L.cat([p, p])",
])
def test_uninitialized_before_materialize_as_torch(code):
    assert _kind(jitorch, code) == _kind(torch, code)


@pytest.mark.parametrize("args,kwargs", [(((2, 3),), {}), ((4,), {"dtype": "float64"}), (([1, 2],), {})])
@pytest.mark.parametrize("which", ["UninitializedParameter", "UninitializedBuffer"])
def test_materialize_as_torch(which, args, kwargs):
    seen = []
    for lib in (torch, jitorch):
        t = getattr(lib.nn.parameter, which)()
        kw = {k: getattr(lib, v) for k, v in kwargs.items()}
        t.materialize(*args, **kw)
        seen.append((type(t).__name__, tuple(t.shape), str(t.dtype).split(".")[-1], t.requires_grad,
                     lib.nn.parameter.is_lazy(t), float(t.detach().clone().fill_(1).sum())))
    # (the memory is uninitialized in both libraries: it may hold NaN, so its values are not compared)
    assert seen[0] == seen[1]


def test_a_materialized_parameter_trains_in_a_module():
    m = jitorch.nn.Module()
    m.w = jitorch.nn.parameter.UninitializedParameter()
    assert [n for n, _ in m.named_parameters()] == ["w"]
    m.w.materialize((3,))
    with jitorch.no_grad():
        m.w.fill_(2.0)
    (m.w * m.w).sum().backward()
    assert type(m.w) is jitorch.nn.Parameter and m.w.grad.tolist() == [4.0, 4.0, 4.0]
    assert jitorch.ones(2).add(1).tolist() == [2.0, 2.0]  # nothing is intercepted once none is left


def test_copies_stay_uninitialized():
    p = jitorch.nn.parameter.UninitializedParameter(requires_grad=False, dtype=jitorch.float64)
    q = copy.deepcopy(p)
    assert type(q).__name__ == "UninitializedParameter" and q.dtype is jitorch.float64 and not q.requires_grad
    q.materialize(2)
    assert tuple(q.shape) == (2,) and jitorch.nn.parameter.is_lazy(p)
