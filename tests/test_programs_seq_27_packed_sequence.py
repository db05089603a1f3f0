"""PackedSequence conversions as data pipelines call them, against torch: ``self`` back when nothing changes
(``packed.cpu()``, ``.float()`` on float data), copies with the indices kept otherwise, every dtype method."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import jitorch

METHODS = ["float", "double", "half", "long", "int", "short", "char", "byte", "cpu"]


def _packed(lib):
    rng = np.random.default_rng(0)
    seqs = [lib.from_numpy(rng.standard_normal((n, 2)).astype(np.float32)) for n in (3, 1, 4)]
    return lib.nn.utils.rnn.pack_sequence(seqs, enforce_sorted=False)


@pytest.mark.parametrize("method", METHODS)
def test_packed_conversions_match_torch(method):
    got, want = _packed(jitorch), _packed(torch)
    g, w = getattr(got, method)(), getattr(want, method)()
    assert (g is got) == (w is want), method
    assert type(g) is type(got)
    assert str(g.data.dtype).split(".")[-1] == str(w.data.dtype).split(".")[-1]
    np.testing.assert_array_equal(g.data.numpy(), w.data.numpy())
    for name in ("batch_sizes", "sorted_indices", "unsorted_indices"):
        assert getattr(g, name).tolist() == getattr(w, name).tolist()
        assert getattr(g, name).dtype == jitorch.int64


@pytest.mark.parametrize("args, kwargs", [(("cpu",), {}), ((), {"dtype": "float32"}), ((), {"dtype": "float64"}),
                                          (("cpu", "float64"), {})])
def test_packed_to_returns_self_only_when_unchanged(args, kwargs):
    got, want = _packed(jitorch), _packed(torch)
    conv = {"float32": (jitorch.float32, torch.float32), "float64": (jitorch.float64, torch.float64)}
    g_args = tuple(conv[a][0] if a in conv else a for a in args)
    w_args = tuple(conv[a][1] if a in conv else a for a in args)
    g = got.to(*g_args, **{k: conv[v][0] for k, v in kwargs.items()})
    w = want.to(*w_args, **{k: conv[v][1] for k, v in kwargs.items()})
    assert (g is got) == (w is want)
    assert g.is_pinned() == w.is_pinned() and g.is_cuda == w.is_cuda
