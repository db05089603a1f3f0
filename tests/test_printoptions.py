"""``set_printoptions`` (it was a silent no-op): the same options set in jitorch and torch 2.13 give the same repr."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import jitorch


@pytest.fixture(autouse=True)
def _default_options_after():
    yield
    for m in (torch, jitorch):
        m.set_printoptions(profile="default")


VALUES = [
    np.array([1.23456, 2.0], np.float32), np.array([1e-10, 1.0], np.float32), np.array([1.0, 2.0, 3.0], np.float64),
    np.array([123456.789, -0.5, math.inf, math.nan], np.float32), np.arange(30, dtype=np.int64),
    np.linspace(-1, 1, 24, dtype=np.float32).reshape(2, 3, 4), np.arange(40.0, dtype=np.float32).reshape(8, 5) / 3,
    np.array(3.14159, np.float32), np.array([1 + 2.5j, -3j], np.complex64), np.zeros((2, 0), np.float32),
]
OPTIONS = [
    {"precision": 2}, {"precision": 2, "sci_mode": False}, {"sci_mode": True}, {"precision": 6, "sci_mode": True},
    {"threshold": 5}, {"threshold": 5, "edgeitems": 1}, {"threshold": 5, "edgeitems": 0}, {"linewidth": 30},
    {"profile": "short"}, {"profile": "full"}, {"profile": "short", "precision": 5}, {"threshold": 0},
]


@pytest.mark.parametrize("options", OPTIONS, ids=[str(o) for o in OPTIONS])
@pytest.mark.parametrize("values", range(len(VALUES)))
def test_repr_under_options_matches_torch(options, values):
    arr = VALUES[values]
    for m in (torch, jitorch):
        m.set_printoptions(**options)
    mine, theirs = repr(jitorch.tensor(arr)), repr(torch.tensor(arr))
    assert mine == theirs.replace("torch.", "jitorch.")


def test_options_persist_and_suffix_wraps_at_the_line_width():
    for m in (torch, jitorch):
        m.set_printoptions(precision=3, linewidth=40)
    for make in (lambda m: m.ones(3, requires_grad=True) * 1.5, lambda m: m.arange(12.0).view(3, 4).double()):
        assert repr(make(jitorch)) == repr(make(torch)).replace("torch.", "jitorch.")


def test_printoptions_context_restores():
    from jitorch import _printing

    with _printing.printoptions(precision=1):
        assert repr(jitorch.tensor([1.25])) == "tensor([1.2])"
    assert repr(jitorch.tensor([1.25])) == "tensor([1.2500])"
    assert _printing.get_printoptions() == {"precision": 4, "threshold": 1000, "edgeitems": 3, "linewidth": 80,
                                            "sci_mode": None}
