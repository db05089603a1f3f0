"""Tensor.set_ and Tensor.as_strided_ against torch: shared memory, shapes, versions, storages and refusals."""
import numpy as np
import pytest
import torch

import jitorch


def _both(fn):
    return fn(jitorch), fn(torch)


def _same(ours, theirs):
    assert tuple(ours.shape) == tuple(theirs.shape) and ours.stride() == theirs.stride()
    assert ours.storage_offset() == theirs.storage_offset()
    np.testing.assert_array_equal(ours.numpy(), theirs.numpy())


def test_set_to_a_tensor_shares_its_memory_and_geometry():
    def run(lib):
        a, b = lib.zeros(3), lib.arange(12.).reshape(3, 4).t()
        assert a.set_(b) is a
        b[0, 0] = 5.0
        return a, a.data_ptr() == b.data_ptr(), a._version
    (ours, shared_j, ver_j), (theirs, shared_t, ver_t) = _both(run)
    _same(ours, theirs)
    assert shared_j and shared_t and ver_j == ver_t


@pytest.mark.parametrize("args", [(), (1, (2, 2), (1, 2)), (0, (3,)), (2, (0, 4))])
def test_set_to_a_storage_views_it_from_the_offset(args):
    def run(lib):
        b = lib.arange(6.)
        x = lib.zeros(2)
        x.set_(b.untyped_storage(), *args)
        b[1] = -1.0
        return x
    _same(*_both(run))


def test_set_with_no_source_empties_and_old_views_keep_the_old_memory():
    def run(lib):
        y = lib.arange(4.)
        v = y.view(2, 2)
        y.set_(lib.ones(5))
        y.add_(1)
        e = lib.zeros(3)
        e.set_()
        return v, y, e, v._version, y._version
    ours, theirs = _both(run)
    for o, t in zip(ours[:3], theirs[:3]):
        _same(o, t)
    assert ours[3:] == theirs[3:]


def test_set_refuses_what_torch_refuses():
    with pytest.raises(RuntimeError, match="Could not set tensor of type double to a tensor of type float"):
        jitorch.zeros(2).set_(jitorch.zeros(2, dtype=jitorch.float64))
    p = jitorch.nn.Parameter(jitorch.zeros(2))
    with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
        p.set_(jitorch.ones(2))
    with jitorch.no_grad():
        p.set_(jitorch.ones(3))
    assert p.requires_grad and p.tolist() == [1.0, 1.0, 1.0]
    with pytest.raises(RuntimeError, match="set_: storage of 6 elements is too small for size \\[4, 2\\]"):
        jitorch.zeros(1).set_(jitorch.arange(6.).untyped_storage(), 0, (4, 2))
    with pytest.raises(TypeError, match="set_\\(\\): expected a Tensor or a storage as source, got list"):
        jitorch.zeros(1).set_([1.0])


def test_as_strided_in_place_views_its_own_memory():
    def run(lib):
        t = lib.arange(10.)
        assert t.as_strided_((2, 3), (1, 2), 1) is t
        return t
    _same(*_both(run))


def test_offsets_follow_set_and_as_strided_and_a_saved_input_sees_the_change():
    def run(lib):
        t = lib.arange(6.)
        t.as_strided_((2,), (1,), 2)
        first = t.clone(), t.storage_offset()
        t.as_strided_((3,), (1,), 0)
        b = lib.arange(6.)
        x = lib.zeros(1)
        x.set_(b[2:])
        y = lib.zeros(1)
        y.set_(lib.arange(10.).untyped_storage(), 2, (2, 3))
        return first, (t, t.storage_offset()), (x.as_strided((2,), (1,), 0), x.storage_offset()), \
            (y, y.storage_offset())
    for (ours, ours_offset), (theirs, theirs_offset) in zip(*_both(run)):
        _same(ours, theirs)
        assert ours_offset == theirs_offset
    w = jitorch.tensor([1., 2., 3.], requires_grad=True)
    x = jitorch.arange(6.)[:3]
    y = (w * x).sum()
    x.as_strided_((3,), (1,), 3)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.backward()
    with pytest.raises(RuntimeError, match="Expected a Storage of type float or an UntypedStorage, but got type Long"):
        jitorch.zeros(1).set_(jitorch.arange(4, dtype=jitorch.int64).storage())
