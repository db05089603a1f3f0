"""Helpers of the indexing tests: the array module of a library, inputs and masks for both."""
import numpy as np
import torch

import jitorch


def _lib(t):
    return torch if isinstance(t, torch.Tensor) else jitorch


def _arr(shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape)


MASK_34 = _arr((3, 4), 1) > 0


def _scalar(fn):
    return lambda x, *rest: fn(x.reshape(()), *rest)
