"""Outputs of a mode="reduce-overhead" call on the CPU: fresh memory each call (scripts keep each step's result), in
the layout eager gives them, and sharing memory among themselves as eager's outputs do (``y`` and a view of ``y``)."""
from __future__ import annotations

import warnings

import pytest

import jitorch


def _views(x):
    y = x * 2
    return y.t().unsqueeze(-1), y


def _written_view(x):
    y = x * 2
    v = y.t()
    v.add_(1)
    return v, y


def _slice_of_big(x):
    y = (x * 2).repeat(50, 1)
    return y[:2], x.sum()


@pytest.mark.parametrize("fn", [_views, _written_view, _slice_of_big])
def test_outputs_keep_eagers_layout_and_sharing_on_every_replay(fn):
    compiled = jitorch.compile(fn, mode="reduce-overhead")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        kept = []
        for i in range(4):  # warm-up, capture, replays
            x = jitorch.arange(6.0).reshape(3, 2) + i
            got, want = compiled(x), fn(x)
            for g, w in zip(got, want):
                assert g.tolist() == w.tolist() and g.stride() == w.stride()
            got[0][(0,) * got[0].dim()] = -7.0  # eager's first output shares memory with its second iff ours does
            want[0][(0,) * want[0].dim()] = -7.0
            assert got[1].tolist() == want[1].tolist()
            kept.append((got[1], want[1].clone()))
        for g, w in kept:  # each call's outputs are its own: later calls did not rewrite them
            assert g.tolist() == w.tolist()
