"""jitorch.nn.utils.rnn (padding/packing) against torch.nn.utils.rnn, values and gradients."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import jitorch
import jitorch.nn.utils.rnn as jr
import torch.nn.utils.rnn as tr

LENGTHS = [[3, 5, 1, 4], [5, 4, 3, 1], [2]]


def make_seqs(lengths, feat=(2,)):
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal((n,) + feat).astype(np.float32) for n in lengths]
    mine = [jitorch.tensor(a, requires_grad=True) for a in arrays]
    theirs = [torch.tensor(a, requires_grad=True) for a in arrays]
    return mine, theirs


def same(a, b):
    np.testing.assert_array_equal(a.detach().numpy(), b.detach().numpy())


@pytest.mark.parametrize("lengths", LENGTHS)
@pytest.mark.parametrize("batch_first", [False, True])
@pytest.mark.parametrize("padding_side", ["right", "left"])
def test_pad_sequence_and_grad(lengths, batch_first, padding_side):
    mine, theirs = make_seqs(lengths)
    a = jr.pad_sequence(mine, batch_first=batch_first, padding_value=-1.5, padding_side=padding_side)
    b = tr.pad_sequence(theirs, batch_first=batch_first, padding_value=-1.5, padding_side=padding_side)
    same(a, b)
    weight = np.arange(b.numel(), dtype=np.float32).reshape(tuple(b.shape))
    (a * jitorch.tensor(weight)).sum().backward()
    (b * torch.tensor(weight)).sum().backward()
    for x, y in zip(mine, theirs):
        same(x.grad, y.grad)


@pytest.mark.parametrize("lengths", LENGTHS)
@pytest.mark.parametrize("batch_first", [False, True])
def test_pack_then_pad_round_trip_and_grad(lengths, batch_first):
    mine, theirs = make_seqs(lengths, feat=(3,))
    pa = jr.pad_sequence(mine, batch_first=batch_first)
    pb = tr.pad_sequence(theirs, batch_first=batch_first)
    packed_a = jr.pack_padded_sequence(pa, lengths, batch_first=batch_first, enforce_sorted=False)
    packed_b = tr.pack_padded_sequence(pb, lengths, batch_first=batch_first, enforce_sorted=False)
    same(packed_a.data, packed_b.data)
    for name in ("batch_sizes", "sorted_indices", "unsorted_indices"):
        assert getattr(packed_a, name).tolist() == getattr(packed_b, name).tolist()
    assert str(packed_a.batch_sizes.dtype) == "jitorch.int64"
    out_a, len_a = jr.pad_packed_sequence(packed_a, batch_first=batch_first, padding_value=7.0, total_length=6)
    out_b, len_b = tr.pad_packed_sequence(packed_b, batch_first=batch_first, padding_value=7.0, total_length=6)
    same(out_a, out_b)
    assert len_a.tolist() == len_b.tolist()
    weight = np.arange(out_b.numel(), dtype=np.float32).reshape(tuple(out_b.shape))
    (out_a * jitorch.tensor(weight)).sum().backward()
    (out_b * torch.tensor(weight)).sum().backward()
    for x, y in zip(mine, theirs):
        same(x.grad, y.grad)


def test_pack_sequence_sorted_and_unpack():
    mine, theirs = make_seqs([4, 3, 1])
    a, b = jr.pack_sequence(mine), tr.pack_sequence(theirs)
    same(a.data, b.data)
    assert a.sorted_indices is None and b.sorted_indices is None
    for x, y in zip(jr.unpack_sequence(a), tr.unpack_sequence(b)):
        same(x, y)
    unpadded = jr.unpad_sequence(jr.pad_sequence(mine, batch_first=True), jitorch.tensor([4, 3, 1]), batch_first=True)
    for x, y in zip(unpadded, mine):
        same(x, y)


def test_errors_match_torch():
    def err(fn):
        try:
            fn()
        except Exception as e:  # noqa: BLE001 - type and text compared
            return type(e).__name__, str(e)

    mine, theirs = make_seqs([1, 3])
    assert err(lambda: jr.pack_sequence(mine)) == err(lambda: tr.pack_sequence(theirs))
    pa, pb = jr.pack_sequence(mine, enforce_sorted=False), tr.pack_sequence(theirs, enforce_sorted=False)
    assert err(lambda: jr.pad_packed_sequence(pa, total_length=2)) == err(
        lambda: tr.pad_packed_sequence(pb, total_length=2))
    assert err(lambda: jr.pad_sequence(mine, padding_side="up")) == err(
        lambda: tr.pad_sequence(theirs, padding_side="up"))
    assert err(lambda: jr.pack_padded_sequence(jitorch.zeros(3, 2), [2, 0])) == err(
        lambda: tr.pack_padded_sequence(torch.zeros(3, 2), [2, 0]))


def test_packed_sequence_is_a_tuple_with_methods():
    packed = jr.pack_sequence([jitorch.ones(2, 1), jitorch.ones(1, 1)])
    data, batch_sizes, sorted_indices, unsorted_indices = packed
    assert batch_sizes.tolist() == [2, 1] and sorted_indices is None and unsorted_indices is None
    assert str(packed.double().data.dtype) == "jitorch.float64" and not packed.is_cuda
    assert packed.to("cpu") is packed
    reordered = jr.PackedSequence(data, batch_sizes, jitorch.tensor([1, 0]))
    assert reordered.unsorted_indices.tolist() == [1, 0]
