"""Helpers of the transformer tests: tolerances, inputs, module pairs and masks."""
from __future__ import annotations

import numpy as np
import torch

from helpers import make_array
from nn_oracle import same_parameter_names


TOL = dict(atol=2e-5, rtol=2e-5)


def arr(*shape, seed=0):
    return make_array(shape, "float32", np.random.default_rng(seed), low=-1.0, high=1.0)


def pair(jt_cls, th_cls, *args, **kwargs):
    torch.manual_seed(0)
    th = th_cls(*args, **kwargs)
    jt = jt_cls(*args, **kwargs)
    assert repr(jt) == repr(th)
    same_parameter_names(jt, th)
    return jt, th


def padding_mask(batch, length, seed=0, dtype=bool):
    """True (or -inf) at padded positions; every row keeps at least its first position."""
    mask = np.random.default_rng(seed).random((batch, length)) < 0.3
    mask[:, 0] = False
    return mask if dtype is bool else np.where(mask, -np.inf, 0.0).astype(np.float32)


def causal_mask(length, dtype=bool):
    mask = np.triu(np.ones((length, length), dtype=bool), 1)
    return mask if dtype is bool else np.where(mask, -np.inf, 0.0).astype(np.float32)
