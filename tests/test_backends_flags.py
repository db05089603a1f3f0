"""``backends.cudnn.flags`` as torch 2.13 sets it: values inside the block, restored after (an exception too)."""
from __future__ import annotations

import pytest
import torch

import jitorch.backends

# benchmark_limit is left out of the comparison: a CPU-only torch reads it as None (no cuDNN to ask).
NAMES = ("enabled", "benchmark", "deterministic", "allow_tf32")


def _read(cudnn):
    return {name: getattr(cudnn, name) for name in NAMES}


@pytest.mark.parametrize("kwargs", [{}, {"enabled": False, "deterministic": True}, {"benchmark": True,
                                                                                    "benchmark_limit": 3}])
def test_cudnn_flags_match_torch(kwargs):
    ours, theirs = jitorch.backends.cudnn, torch.backends.cudnn
    before = _read(ours)
    assert before == _read(theirs)
    limit = ours.benchmark_limit
    with ours.flags(**kwargs), theirs.flags(**kwargs):
        assert _read(ours) == _read(theirs)
        assert ours.benchmark_limit == kwargs.get("benchmark_limit", 10)
    assert _read(ours) == _read(theirs) == before
    assert ours.benchmark_limit == limit

    @ours.flags(**kwargs)
    def inside():
        return _read(ours)

    with theirs.flags(**kwargs):
        assert inside() == _read(theirs)
    assert _read(ours) == before


def test_cudnn_flags_restore_after_an_exception():
    cudnn = jitorch.backends.cudnn
    before = _read(cudnn)
    with pytest.raises(ValueError, match="inside"):
        with cudnn.flags(enabled=False, benchmark=True):
            assert not cudnn.enabled and cudnn.benchmark
            raise ValueError("inside")
    assert _read(cudnn) == before
