"""nn.functional edge cases a sweep against PyTorch 2.13 found: empty batches and argument checks, each against
torch (values, dtypes and gradients with random upstream gradients; errors by type)."""
from __future__ import annotations

import numpy as np
import pytest
import torch.nn.functional as TF
from helpers import check_error, check_op

import jitorch.nn.functional as F

F32 = {"atol": 1e-5, "rtol": 1e-4}


@pytest.fixture
def rng():
    return np.random.default_rng(0)


@pytest.mark.parametrize("shape", [(0, 4, 3), (0, 4), (0, 4, 2, 0)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_group_norm_of_an_empty_batch_matches_torch(shape, dtype, rng):
    # the group size cannot be inferred with -1 from zero elements
    w, b = rng.standard_normal(4).astype(dtype), rng.standard_normal(4).astype(dtype)
    check_op(lambda x, w, b: F.group_norm(x, 2, w, b), lambda x, w, b: TF.group_norm(x, 2, w, b),
             [np.zeros(shape, dtype), w, b], **F32)


def test_embedding_bag_rejects_a_last_offset_past_the_input():
    check_error(lambda i, w, o: F.embedding_bag(i, w, o), lambda i, w, o: TF.embedding_bag(i, w, o),
                [np.array([1, 2, 3]), np.ones((5, 2), np.float32), np.array([0, 4])], match=["offsets[-1]", "4"])
