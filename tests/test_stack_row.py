"""``torch.stack`` as one row (the ``cat`` of unsqueezed views is kept where a tracer or compiler records it, and
for ``out=``): values, dtypes, layouts and gradients against PyTorch for every dim, mixed dtypes, 0-d and empty
inputs, non-contiguous inputs, and the traced form."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import jitorch
from helpers import check_op

RNG = np.random.default_rng(0)


@pytest.mark.parametrize("shape", [(), (0, 3), (4,), (3, 5), (2, 3, 4)])
@pytest.mark.parametrize("layout", ["contiguous", "transposed"])
def test_stack_matches_torch_at_every_dim(shape, layout):
    arrays = [RNG.standard_normal(shape) for _ in range(3)]
    for dim in range(-len(shape) - 1, len(shape) + 1):
        got, want = check_op(lambda *t: jitorch.stack(t, dim), lambda *t: torch.stack(t, dim), arrays, layout=layout,
                             atol=0, rtol=0)
        assert got.is_contiguous() == want.is_contiguous()
        if want.requires_grad:
            assert got.grad_fn.name() == want.grad_fn.name() == "StackBackward0"


def test_mixed_dtypes_promote_as_torch():
    got = jitorch.stack([jitorch.ones(2, dtype=jitorch.int32), jitorch.ones(2, dtype=jitorch.float64)])
    want = torch.stack([torch.ones(2, dtype=torch.int32), torch.ones(2, dtype=torch.float64)])
    assert str(got.dtype).split(".")[1] == str(want.dtype).split(".")[1]


def test_shape_mismatch_error_and_traced_form():
    with pytest.raises(RuntimeError, match="stack expects each tensor to be equal size"):
        jitorch.stack([jitorch.ones(2), jitorch.ones(3)])
    fn = lambda a, b: jitorch.stack([a, b * 2], 1)  # noqa: E731
    a, b = jitorch.randn(3, 4), jitorch.randn(3, 4)
    traced = jitorch.fx.symbolic_trace(fn)
    traced.graph.lint()
    np.testing.assert_array_equal(traced(a, b).numpy(), fn(a, b).numpy())
    np.testing.assert_array_equal(jitorch.compile(fn)(a, b).numpy(), fn(a, b).numpy())


def test_channels_last_inputs_keep_their_layout_as_torch():
    x = np.random.default_rng(1).standard_normal((2, 3, 4, 5)).astype(np.float32)
    j = jitorch.tensor(x).contiguous(memory_format=jitorch.channels_last)
    t = torch.from_numpy(x).contiguous(memory_format=torch.channels_last)
    got, want = jitorch.stack([j, j, j]), torch.stack([t, t, t])
    assert got.stride() == want.stride()
    np.testing.assert_array_equal(got.numpy(), want.numpy())
