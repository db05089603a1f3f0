"""Tensor.untyped_storage() / Tensor.storage() against torch 2.13: which tensors share a storage (the data_ptr
test), storage sizes, the bytes and elements they read, writes through them, and sharing after save/load."""
import io
import warnings

import numpy as np
import pytest
import torch

import jitorch

VIEWS = {
    "whole": lambda x: x,
    "row": lambda x: x[1],
    "column": lambda x: x[:, 2],
    "transpose": lambda x: x.t(),
    "flat-slice": lambda x: x.view(-1)[3:7],
    "reshape": lambda x: x.reshape(4, 3),
}


def _base(lib):
    return lib.arange(12.0).view(3, 4)


@pytest.mark.parametrize("view", sorted(VIEWS))
def test_views_share_the_storage_of_their_base(view):
    for lib in (jitorch, torch):
        x = _base(lib)
        v = VIEWS[view](x)
        s = v.untyped_storage()
        assert s.data_ptr() == x.untyped_storage().data_ptr(), lib.__name__
        assert v.data_ptr() - s.data_ptr() == v.storage_offset() * v.element_size(), lib.__name__
    j, t = VIEWS[view](_base(jitorch)).untyped_storage(), VIEWS[view](_base(torch)).untyped_storage()
    assert (j.nbytes(), j.size(), len(j), j.element_size(), str(j.device)) == \
        (t.nbytes(), t.size(), len(t), t.element_size(), str(t.device))
    assert j.tolist() == t.tolist()


def test_copies_do_not_share_a_storage():
    for lib in (jitorch, torch):
        x = _base(lib)
        assert x.clone().untyped_storage().data_ptr() != x.untyped_storage().data_ptr()
        assert x.t().contiguous().untyped_storage().data_ptr() != x.untyped_storage().data_ptr()


@pytest.mark.parametrize("make", [lambda m: m.empty(0), lambda m: m.tensor(3.0), lambda m: m.ones(2, 3, dtype=m.int16),
                                  lambda m: m.tensor([True, False]), lambda m: m.ones(3, dtype=m.bfloat16)],
                         ids=["empty", "0-d", "int16", "bool", "bfloat16"])
def test_storage_sizes_and_contents_match_torch(make):
    j, t = make(jitorch), make(torch)
    js, ts = j.untyped_storage(), t.untyped_storage()
    assert js.nbytes() == ts.nbytes() and js.tolist() == ts.tolist()
    assert (js.data_ptr() == 0) == (ts.data_ptr() == 0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        jt, tt = j.storage(), t.storage()
    assert (jt.size(), jt.nbytes(), jt.element_size(), jt.tolist()) == \
        (tt.size(), tt.nbytes(), tt.element_size(), tt.tolist())
    assert str(jt.dtype).split(".")[-1] == str(tt.dtype).split(".")[-1]


def test_indexing_and_writes_through_a_storage():
    outs = []
    for lib in (jitorch, torch):
        x = _base(lib)
        s = x[1].untyped_storage()
        read = [s[0], s[7], s[-1], s[4:8].tolist()]
        with pytest.raises(IndexError) as err:
            s[48]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            typed = x[2].storage()
        read += [typed[5], typed[-1], typed.size()]
        with pytest.raises(RuntimeError, match="slices are only supported in UntypedStorage.__getitem__"):
            typed[2:4]
        typed[0] = 42.0
        s2 = x.untyped_storage()
        clone = s2.clone()
        s2.fill_(0)
        outs.append((read, str(err.value), x.tolist(), clone.data_ptr() != s2.data_ptr(), clone.tolist()[:4]))
    assert outs[0] == outs[1]


def test_typed_storage_warns_like_torch():
    torch.storage._warn_typed_storage_removal.__dict__["has_warned"] = False
    jitorch._storage._warned_typed_storage = False
    messages = []
    for lib in (jitorch, torch):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            lib.ones(2).storage()
            lib.ones(2).storage()
        messages.append([(w.category, str(w.message)) for w in caught])
    assert messages[0] == messages[1] and len(messages[0]) == 1


def test_tensors_saved_sharing_a_storage_share_it_after_load():
    results = []
    for lib in (jitorch, torch):
        x = lib.arange(100.0)
        buf = io.BytesIO()
        lib.save({"x": x.view(10, 10), "row": x.view(10, 10)[3], "t": x.view(10, 10).t(), "tail": x[90:]}, buf)
        buf.seek(0)
        loaded = lib.load(buf)
        ptrs = {k: v.untyped_storage().data_ptr() for k, v in loaded.items()}
        sizes = {k: v.untyped_storage().nbytes() for k, v in loaded.items()}
        loaded["x"][9, 5] = -1.0
        results.append((len(set(ptrs.values())), sizes, loaded["tail"].tolist(), loaded["t"][5, 9].item()))
    assert results[0] == results[1]


def test_a_saved_slice_keeps_its_whole_storage():
    sizes = []
    for lib in (jitorch, torch):
        buf = io.BytesIO()
        lib.save(lib.arange(100.0)[10:12], buf)
        buf.seek(0)
        y = lib.load(buf)
        sizes.append((y.untyped_storage().nbytes(), y.storage_offset(), y.tolist()))
    assert sizes[0] == sizes[1]


def test_from_numpy_storage_starts_at_the_arrays_data():
    arr = np.arange(6, dtype=np.float32)
    for lib in (jitorch, torch):
        tail = lib.from_numpy(arr[2:])
        s = tail.untyped_storage()
        assert (s.data_ptr(), s.nbytes(), tail.storage_offset()) == (arr[2:].ctypes.data, 16, 0), lib.__name__
        assert lib.from_numpy(arr).untyped_storage().data_ptr() == arr.ctypes.data, lib.__name__


def test_storage_classes_are_exported():
    assert isinstance(jitorch.ones(1).untyped_storage(), jitorch.UntypedStorage)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert isinstance(jitorch.ones(1).storage(), jitorch.TypedStorage)
