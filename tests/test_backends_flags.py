"""``backends.cudnn.flags`` as torch 2.13 sets it: values inside the block, restored after (an exception too)."""
from __future__ import annotations

import pytest
import torch

import jitorch.backends

# benchmark_limit is left out of the comparison: a CPU-only torch reads it as None (no cuDNN to ask).
NAMES = ("enabled", "benchmark", "deterministic", "allow_tf32", "fp32_precision", "depthwise_kernel")


def _read(cudnn):
    return {name: getattr(cudnn, name) for name in NAMES}


@pytest.mark.parametrize("kwargs", [{}, {"enabled": False, "deterministic": True}, {"benchmark": True,
                                                                                    "benchmark_limit": 3},
                                    {"fp32_precision": "tf32", "depthwise_kernel": "native"},
                                    {"allow_tf32": False, "fp32_precision": "ieee", "depthwise_kernel": "cudnn"},
                                    {"enabled": None, "fp32_precision": None, "depthwise_kernel": None}])
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


def test_cudnn_flags_match_torchs_signature_and_refusals():
    import inspect

    ours, theirs = jitorch.backends.cudnn, torch.backends.cudnn
    assert inspect.signature(ours.flags) == inspect.signature(theirs.flags)
    before = _read(ours)
    for kwargs in ({"fp32_precision": "TF32"}, {"fp32_precision": "bf16"}, {"depthwise_kernel": "bogus"},
                   {"depthwise_kernel": 3}):
        messages = []
        for cudnn in (theirs, ours):
            try:
                with pytest.raises(RuntimeError) as info:
                    with cudnn.flags(**kwargs):
                        pass
            finally:  # torch's flags has set the flags before the bad one and does not put them back
                for name, value in before.items():
                    setattr(theirs, name, value)
            messages.append(str(info.value))
        assert messages[0] == messages[1], kwargs
    assert _read(ours) == _read(theirs) == before  # jitorch checks before it sets anything
