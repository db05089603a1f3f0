"""Basic keys with None, Ellipsis and 0-d integer tensors take the direct view path: same values, views, grad_fn
names and gradients as torch's."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import jitorch

E = Ellipsis
KEYS = [
    None, (None,), (slice(None), None), (E, None), (None, E), (E,), E, (E, 1), (1, E), (E, -1, None),
    (0, E, slice(1, 3)), (None, 0, None), (slice(None), None, slice(None)), (E, slice(None, None, 2)),
    (1, 2, 3, E), (None, E, None), (slice(1, 3), E, 0), "tensor", ("tensor", E), (E, "tensor"), ("tensor", None),
    # torch skips a whole-dim slice inside a tuple (the name is the item before it), never a lone one
    (slice(None), slice(0, 4)), (slice(None), slice(None)), slice(0, 3), slice(0, 10), slice(None),
    (None, slice(None)), (0, slice(None)), (slice(0, 2), slice(None, None, 1), slice(0, 99)), (E, slice(None)),
]


def _key(key, lib):
    if key == "tensor":
        return lib.tensor(2)
    if type(key) is tuple:
        return tuple(_key(k, lib) if isinstance(k, str) else k for k in key)
    return key


@pytest.mark.parametrize("key", KEYS, ids=repr)
def test_quick_basic_keys_match_torch(key):
    data = np.random.default_rng(0).standard_normal((3, 4, 5))
    a, ta = jitorch.tensor(data, requires_grad=True), torch.tensor(data, requires_grad=True)
    got, expected = a[_key(key, jitorch)], ta[_key(key, torch)]
    assert tuple(got.shape) == tuple(expected.shape)
    np.testing.assert_array_equal(got.detach().numpy(), expected.detach().numpy())
    assert got.grad_fn.name() == expected.grad_fn.name()
    upstream = np.random.default_rng(1).standard_normal(tuple(expected.shape))
    got.backward(jitorch.tensor(upstream))
    expected.backward(torch.tensor(upstream))
    np.testing.assert_array_equal(a.grad.numpy(), ta.grad.numpy())


@pytest.mark.parametrize("key", [(E, 1), (slice(None), None), (jitorch.tensor(1),), (None, E, 0)], ids=repr)
def test_quick_basic_results_are_views(key):
    a = jitorch.zeros(3, 4)
    view = a[key]
    view.fill_(7.0)
    assert view._base is a and float(a.sum()) == 7.0 * view.numel()


@pytest.mark.parametrize("key", [(E, E), (0, 0, 0), (E, 0, 0, 0), (None, 5), (None, None, 1, 9), (E, 9), (1, 7),
                                 "bool", "int64x1"], ids=repr)
def test_keys_the_quick_path_declines_still_match_torch(key):
    def build(lib):
        k = {"bool": lib.tensor(True), "int64x1": lib.tensor([1])}.get(key, key) if isinstance(key, str) else key
        return lib.arange(12.0).reshape(3, 4)[k]
    try:
        expected = build(torch)
    except IndexError as e:
        with pytest.raises(IndexError) as got:
            build(jitorch)
        assert str(got.value) == str(e)
        return
    np.testing.assert_array_equal(build(jitorch).numpy(), expected.numpy())


@pytest.mark.parametrize("key", [(E, 0), (slice(None), None), None, (E,), "tensor", (None, E, 1), ("tensor", E)],
                         ids=repr)
@pytest.mark.parametrize("value", [2.5, "tensor"])
def test_setitem_with_quick_keys_matches_torch(key, value):
    def run(lib):
        w = lib.tensor(np.arange(12.0).reshape(3, 4), requires_grad=True)
        x = w * 1.0
        v = lib.tensor(-1.0, requires_grad=True) if value == "tensor" else value
        x[_key(key, lib)] = v
        (x * lib.arange(12.0).reshape(3, 4)).sum().backward()
        return x.detach().numpy(), w.grad.numpy(), v.grad.numpy() if value == "tensor" else None, x.grad_fn.name()
    got, expected = run(jitorch), run(torch)
    for g, e in zip(got[:3], expected[:3]):
        np.testing.assert_array_equal(g, e)
    assert got[3] == expected[3]


@pytest.mark.parametrize("write", ["zero_", "fill_scalar", "fill_tensor", "fill_grad_tensor", "copy_", "whole_slice",
                                   "row_fill"])
def test_in_place_writes_show_torchs_node_names(write):
    def run(lib):
        w = lib.zeros(3, 3, requires_grad=True)
        x = w * 1.0
        {"zero_": lambda: x.zero_(), "fill_scalar": lambda: x.fill_(2.0),
         "fill_tensor": lambda: x.fill_(lib.tensor(2.0)),
         "fill_grad_tensor": lambda: x.fill_(lib.tensor(2.0, requires_grad=True)),
         "copy_": lambda: x.copy_(lib.ones(3)), "whole_slice": lambda: x.__setitem__(slice(0, 3), 1.0),
         "row_fill": lambda: x[0].fill_(2.0)}[write]()
        return x.grad_fn.name()
    assert run(jitorch) == run(torch)


@pytest.mark.parametrize("write", ["x[1:4] = x[2]", "x[1:4] = x[2:3]", "x[:] = x[2]", "x[...] = x[1:2]",
                                   "x[:, :3] = ones(4)", "x[0] = ones(2, 6)", "x[0] = ones(1, 6)", "x[1:] = x[:-1]"])
def test_setitem_overlap_and_broadcast_match_torch(write):
    def run(lib):
        x = lib.arange(6.0) if ":, :3" not in write and "x[0]" not in write else lib.zeros(3, 6)
        try:
            exec(write, {"x": x, "ones": lib.ones})
        except RuntimeError as e:
            return "error", str(e)
        return "ok", x.tolist()
    assert run(jitorch) == run(torch)


@pytest.mark.parametrize("dtype", ["uint8", "bool", "int32", "int16"])
def test_zero_dim_tensor_keys_follow_torchs_reading(dtype):
    # torch reads a 0-d uint8 or bool tensor as a mask (a new dim), the other integer dtypes as an int
    value = True if dtype == "bool" else 1
    for key in (lambda lib: lib.tensor(value, dtype=getattr(lib, dtype)),
                lambda lib: (lib.tensor(value, dtype=getattr(lib, dtype)), 0)):
        got = jitorch.arange(6).view(2, 3)[key(jitorch)]
        expected = torch.arange(6).view(2, 3)[key(torch)]
        assert tuple(got.shape) == tuple(expected.shape) and got.tolist() == expected.tolist()


def test_whole_key_write_into_an_expanded_tensor_is_refused():
    for key in (slice(None), Ellipsis):
        with pytest.raises(RuntimeError, match="more than one element of the written-to tensor"):
            jitorch.zeros(3).expand(2, 3)[key] = 1.0
