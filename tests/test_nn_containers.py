"""nn.Parameter, nn.Buffer and the containers (Sequential, ModuleList, ModuleDict, ParameterList, ParameterDict)
against PyTorch: the same operations on both libraries must leave the same structure behind."""
from __future__ import annotations

import copy
import pickle
from collections import OrderedDict

import numpy as np
import pytest
import torch

import jitorch


def tagged(lib, n):
    """``n`` distinct leaf modules whose repr shows their index (so structures compare by repr)."""
    class Tag(lib.nn.Module):
        def __init__(self, i):
            super().__init__()
            self.i = i

        def forward(self, x):
            return x * 10 + self.i

        def extra_repr(self):
            return str(self.i)
    return [Tag(i) for i in range(n)]


def both(fn):
    """``fn(lib, mods)`` on torch and jitorch; returns (jitorch result, torch result) as reprs/values."""
    return fn(jitorch, tagged(jitorch, 6)), fn(torch, tagged(torch, 6))


def norm_repr(obj):
    return repr(obj).replace("jitorch.", "torch.")


# -- Parameter and Buffer -------------------------------------------------------------------------------------------
def test_parameter_basics():
    base = jitorch.arange(4.0)
    p = jitorch.nn.Parameter(base)
    assert p.requires_grad and p.is_leaf and isinstance(p, jitorch.Tensor)
    base[0] = 10.0  # shares memory with the tensor it was made from
    assert p[0].item() == 10.0
    assert type(p * 2) is jitorch.Tensor and type(p.detach()) is jitorch.Tensor and type(p.data) is jitorch.Tensor
    with jitorch.no_grad():
        assert jitorch.nn.Parameter(jitorch.ones(1)).requires_grad
    assert not jitorch.nn.Parameter(jitorch.ones(1), requires_grad=False).requires_grad
    assert tuple(jitorch.nn.Parameter().shape) == tuple(torch.nn.Parameter().shape) == (0,)
    from_nonleaf = jitorch.nn.Parameter(jitorch.ones(2, requires_grad=True) * 3)
    assert from_nonleaf.is_leaf and from_nonleaf.grad_fn is None
    with pytest.raises(RuntimeError):
        torch.nn.Parameter(torch.ones(2, dtype=torch.int64))
    with pytest.raises(RuntimeError):
        jitorch.nn.Parameter(jitorch.ones(2, dtype=jitorch.int64))
    (p * p).sum().backward()
    np.testing.assert_array_equal(p.grad.numpy(), 2 * p.detach().numpy())


def test_parameter_copy_and_pickle_keep_the_class():
    p = jitorch.nn.Parameter(jitorch.tensor([1.0, 2.0]))
    p.custom = 5
    for q in (copy.deepcopy(p), pickle.loads(pickle.dumps(p))):
        assert type(q) is jitorch.nn.Parameter and q.requires_grad
        np.testing.assert_array_equal(q.detach().numpy(), [1.0, 2.0])
        q.data.add_(1)
        assert p[0].item() == 1.0  # an independent copy
    assert pickle.loads(pickle.dumps(p)).custom == 5
    frozen = pickle.loads(pickle.dumps(jitorch.nn.Parameter(jitorch.ones(1), requires_grad=False)))
    assert not frozen.requires_grad


def test_buffer():
    b = jitorch.nn.Buffer(jitorch.ones(2), persistent=False)
    assert isinstance(b, jitorch.nn.Buffer) and isinstance(b, jitorch.Tensor) and not b.persistent
    assert not isinstance(jitorch.ones(2), jitorch.nn.Buffer)
    m = jitorch.nn.Module()
    m.b = b
    m.c = jitorch.nn.Buffer(jitorch.zeros(1))
    assert [n for n, _ in m.named_buffers()] == ["b", "c"] and list(m.state_dict()) == ["c"]


# -- Sequential -----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("op", [
    lambda lib, m: lib.nn.Sequential(*m[:3])[-1],
    lambda lib, m: lib.nn.Sequential(*m[:4])[1:3],
    lambda lib, m: lib.nn.Sequential(*m[:4])[::-2],
    lambda lib, m: lib.nn.Sequential(OrderedDict(a=m[0], b=m[1]))[1:],
    lambda lib, m: lib.nn.Sequential(*m[:2]).append(m[2]),
    lambda lib, m: lib.nn.Sequential(*m[:3]).insert(1, m[4]),
    lambda lib, m: lib.nn.Sequential(*m[:3]).insert(-1, m[4]),
    lambda lib, m: lib.nn.Sequential(*m[:2]).extend([m[2], m[3]]),
    lambda lib, m: lib.nn.Sequential(*m[:2]) + lib.nn.Sequential(m[3]),
    lambda lib, m: lib.nn.Sequential(*m[:2]) * 2,
    lambda lib, m: (lambda s: (s.pop(1), s))(lib.nn.Sequential(*m[:4])),
    lambda lib, m: (lambda s: (s.__delitem__(slice(0, 2)), s))(lib.nn.Sequential(*m[:4])),
    lambda lib, m: (lambda s: (s.__delitem__(-1), s))(lib.nn.Sequential(*m[:4])),
    lambda lib, m: (lambda s: (s.__setitem__(-2, m[5]), s))(lib.nn.Sequential(*m[:4])),
    lambda lib, m: (lambda s: (len(s), [x.i for x in s]))(lib.nn.Sequential(*m[:5])),
])
def test_sequential_ops_match_torch(op):
    jt, th = both(op)
    assert norm_repr(jt) == repr(th)


def test_sequential_forward_and_errors():
    seq = jitorch.nn.Sequential(*tagged(jitorch, 3))
    assert seq(jitorch.tensor(0.0)).item() == 12.0  # ((0 * 10 + 0) * 10 + 1) * 10 + 2
    assert jitorch.nn.Sequential()(5) == 5
    for bad in (lambda lib, m: lib.nn.Sequential(m[0])[3], lambda lib, m: lib.nn.Sequential(m[0]) + [m[1]],
                lambda lib, m: lib.nn.Sequential(m[0]).insert(5, m[1])):
        with pytest.raises(Exception) as th_err:
            bad(torch, tagged(torch, 2))
        with pytest.raises(type(th_err.value)) as jt_err:
            bad(jitorch, tagged(jitorch, 2))
        assert str(jt_err.value).replace("jitorch.", "torch.") == str(th_err.value)


# -- ModuleList and ModuleDict ----------------------------------------------------------------------------------
@pytest.mark.parametrize("op", [
    lambda lib, m: lib.nn.ModuleList(m[:4])[-2],
    lambda lib, m: lib.nn.ModuleList(m[:4])[1:],
    lambda lib, m: lib.nn.ModuleList(m[:2]).append(m[2]).extend(m[3:5]),
    lambda lib, m: (lambda ml: (ml.insert(1, m[5]), ml))(lib.nn.ModuleList(m[:3])),
    lambda lib, m: (lambda ml: (ml.__iadd__(m[3:5]), ml))(lib.nn.ModuleList(m[:2])),
    lambda lib, m: lib.nn.ModuleList(m[:2]) + lib.nn.ModuleList(m[2:3]),
    lambda lib, m: (lambda ml: (ml.pop(0), ml))(lib.nn.ModuleList(m[:3])),
    lambda lib, m: (lambda ml: (ml.__delitem__(slice(None, None, 2)), ml))(lib.nn.ModuleList(m[:5])),
    lambda lib, m: (lambda ml: (ml.__setitem__(-1, m[5]), ml))(lib.nn.ModuleList(m[:3])),
    lambda lib, m: (lambda ml: (len(ml), [x.i for x in ml]))(lib.nn.ModuleList(m[:3])),
    lambda lib, m: lib.nn.ModuleDict({"z": m[0], "a": m[1]}),
    lambda lib, m: (lambda d: (d.update([("k", m[2])]), d.pop("z"), list(d.keys()), "a" in d, len(d), d))(
        lib.nn.ModuleDict({"z": m[0], "a": m[1]})),
    lambda lib, m: (lambda d: (d.__setitem__("n", m[3]), d.__delitem__("a"), list(d), d))(
        lib.nn.ModuleDict(OrderedDict(a=m[0], b=m[1]))),
])
def test_module_list_and_dict_ops_match_torch(op):
    jt, th = both(op)
    assert norm_repr(jt) == repr(th)


def test_module_list_errors_and_registration():
    ml = jitorch.nn.ModuleList(tagged(jitorch, 2))
    assert [n for n, _ in ml.named_modules()] == ["", "0", "1"]
    with pytest.raises(IndexError, match="index 2 is out of range"):
        ml[2]
    with pytest.raises(TypeError, match="ModuleList.extend should be called with an iterable"):
        ml.extend(5)
    with pytest.raises(TypeError, match="is not a Module subclass"):
        ml.append(3)
    md = jitorch.nn.ModuleDict({"a": ml})
    md.clear()
    assert len(md) == 0


# -- ParameterList and ParameterDict --------------------------------------------------------------------------------
def test_parameter_list_matches_torch():
    def build(lib):
        pl = lib.nn.ParameterList([lib.zeros(2), lib.nn.Parameter(lib.ones(3))])
        pl.append(lib.zeros(1, 2))
        pl += [lib.ones(4)]
        pl.extend([lib.zeros(5)])
        pl[0] = lib.full((2,), 3.0)
        return pl

    jt, th = build(jitorch), build(torch)
    assert norm_repr(jt) == repr(th)
    assert [n for n, _ in jt.named_parameters()] == [n for n, _ in th.named_parameters()]
    assert all(type(p) is jitorch.nn.Parameter for p in jt)
    assert len(jt[1:4]) == 3 and jt[-1] is jt[4] and jt[0].sum().item() == 6.0
    with pytest.raises(TypeError, match="ParameterList.extend should be called with an iterable"):
        jt.extend(jitorch.ones(2))
    with pytest.raises(RuntimeError, match="ParameterList should not be called"):
        jt(1)


def test_parameter_dict_matches_torch():
    def build(lib):
        pd = lib.nn.ParameterDict({"z": lib.zeros(1), "b": lib.ones(2)})  # a plain dict is added in sorted order
        pd.update(OrderedDict(y=lib.zeros(3), a=lib.zeros(4)))
        pd["c"] = lib.nn.Parameter(lib.ones(1, 1))
        popped = pd.pop("y")
        pd.setdefault("d", lib.zeros(2))
        return pd, popped

    (jt, jt_popped), (th, th_popped) = build(jitorch), build(torch)
    assert norm_repr(jt) == repr(th)
    assert list(jt.keys()) == list(th.keys()) and [n for n, _ in jt.named_parameters()] == \
        [n for n, _ in th.named_parameters()]
    assert type(jt_popped) is jitorch.nn.Parameter and type(th_popped) is torch.nn.Parameter
    assert tuple(jt_popped.shape) == tuple(th_popped.shape) == (3,)
    assert "a" in jt and jt.get("missing") is None and len(jt.copy()) == len(jt)
    merged = jt | jitorch.nn.ParameterDict({"e": jitorch.ones(1)})
    assert list(merged.keys())[-1] == "e" and "e" not in jt
    with pytest.raises(TypeError, match="cannot be used as a key"):
        jt[3]
