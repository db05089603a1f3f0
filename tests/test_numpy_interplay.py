"""How tensors meet NumPy in user code, against torch: ``np.array(t)`` copies, NumPy functions of a tensor give a
tensor, NumPy integers and 0-d integer tensors are accepted wherever a size or count is, and ``cat`` promotes over
the empty tensors it skips."""
from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

import jitorch

LIBS = (jitorch, torch)


def test_np_array_copies_and_asarray_shares():
    for lib in LIBS:
        p, hist = lib.zeros(2), []
        for _ in range(3):
            hist.append(np.array(p))
            p.add_(1)
        assert [h.tolist() for h in hist] == [[0, 0], [1, 1], [2, 2]], lib.__name__
        shared = np.asarray(p)
        p.add_(1)
        assert shared.tolist() == [4, 4], lib.__name__


def test_np_array_of_a_tensor_requiring_grad_raises_as_torch():
    for lib in LIBS:
        with pytest.raises(RuntimeError, match="requires grad"), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # torch's __array__ takes no copy keyword (NumPy 2 warns)
            np.array(lib.ones(3, requires_grad=True))


def test_np_asarray_refuses_a_copy_it_cannot_avoid():
    t = jitorch.ones(3)
    assert np.asarray(t, copy=False).tolist() == [1, 1, 1]
    with pytest.raises(ValueError, match="avoid copy"):
        np.asarray(t, dtype=np.float64, copy=False)


@pytest.mark.parametrize("fn", [np.exp, np.isnan, np.abs, np.log1p, lambda t: np.maximum(t, 0.5),
                                lambda t: np.add(t, 1), np.sin, np.argmax])
def test_numpy_functions_of_a_tensor_give_torch_s_tensor(fn):
    data = np.array([[0.5, -2.0, 3.0], [np.nan, 1.0, 0.0]], np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch's __array_wrap__ signature is deprecated by NumPy 2
        want = fn(torch.tensor(data))
    got = fn(jitorch.tensor(data))
    assert isinstance(got, jitorch.Tensor)
    assert str(got.dtype).split(".")[-1] == str(want.dtype).split(".")[-1]
    np.testing.assert_array_equal(got.numpy(), want.numpy())


def test_ndarray_operator_tensor_reaches_the_tensor():
    out = np.ones(3) + jitorch.tensor([1.0, 2.0, 3.0])
    assert isinstance(out, jitorch.Tensor) and out.tolist() == [2, 3, 4]
    assert (jitorch.tensor([1.0, 2.0]) + np.float64(2)).dtype == jitorch.float32


SIZE_CASES = {
    "zeros": lambda lib, n: lib.zeros(n).shape,
    "zeros tuple": lambda lib, n: lib.zeros((n,)).shape,
    "randn": lambda lib, n: lib.randn(n).shape,
    "new_zeros": lambda lib, n: lib.ones(2).new_zeros(n).shape,
    "repeat": lambda lib, n: lib.ones(2).repeat(n).shape,
    "Conv2d": lambda lib, n: lib.nn.Conv2d(3, n, 3).weight.shape,
    "Linear": lambda lib, n: lib.nn.Linear(4, n).weight.shape,
    "BatchNorm2d": lambda lib, n: lib.nn.BatchNorm2d(n).weight.shape,
    "GroupNorm": lambda lib, n: lib.nn.GroupNorm(2, n).weight.shape,
    "chunk": lambda lib, n: [c.shape for c in lib.ones(8).chunk(n)],
    "roll": lambda lib, n: lib.roll(lib.arange(10), n, 0).tolist(),
    "tensor_split": lambda lib, n: [c.shape for c in lib.arange(10).tensor_split(n)],
    "interpolate": lambda lib, n: lib.nn.functional.interpolate(lib.ones(1, 1, 4, 4), size=(n, n)).shape,
}


MODULES = ("Conv2d", "Linear", "BatchNorm2d", "GroupNorm")  # torch takes no tensor as a module's size


@pytest.mark.parametrize("case, kind", [(c, "numpy") for c in sorted(SIZE_CASES)] +
                         [(c, "0-d tensor") for c in sorted(SIZE_CASES) if c not in MODULES])
def test_numpy_and_tensor_integers_as_sizes(case, kind):
    make = (lambda lib: np.int64(4)) if kind == "numpy" else (lambda lib: lib.tensor(4))
    got, want = SIZE_CASES[case](jitorch, make(jitorch)), SIZE_CASES[case](torch, make(torch))
    assert [tuple(s) if not isinstance(s, int) else s for s in got] == \
        [tuple(s) if not isinstance(s, int) else s for s in want]


@pytest.mark.parametrize("parts", [[([], None), ([1, 2], None)], [([1, 2], None), ([], None)],
                                   [([], "float64"), ([1, 2], "int32")], [([], "int64"), ([], None)]])
def test_cat_promotes_over_skipped_empty_tensors(parts):
    results = []
    for lib in LIBS:
        ts = [lib.tensor(v, dtype=None if d is None else getattr(lib, d)) for v, d in parts]
        out = lib.cat(ts)
        results.append((str(out.dtype).split(".")[-1], out.tolist()))
    assert results[0] == results[1]


def test_deepcopy_keeps_views_sharing_their_copied_memory():
    import copy

    for lib in LIBS:
        base = lib.arange(6.0)
        view = base[1:3]
        b2, v2 = copy.deepcopy((base, view))
        v2[0] = 100.0
        assert b2.tolist() == [0, 100, 2, 3, 4, 5] and base.tolist() == [0, 1, 2, 3, 4, 5], lib.__name__
        model = lib.nn.Linear(2, 2)
        model.register_buffer("table", lib.arange(4.0))
        model.register_buffer("head", model.table[:2])
        clone = copy.deepcopy(model)
        clone.head[0] = 50.0
        assert clone.table.tolist() == [50, 1, 2, 3] and model.table.tolist() == [0, 1, 2, 3], lib.__name__
        t = lib.arange(6.0).view(2, 3).t()
        assert copy.deepcopy(t).stride() == t.stride()
        t.note = {"k": 1}
        assert copy.deepcopy(t).note == {"k": 1}
