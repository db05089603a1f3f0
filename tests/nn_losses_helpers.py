"""Helpers of the loss tests: tolerances, reductions, float32 inputs and calling a loss in both libraries."""
from __future__ import annotations

import numpy as np
import torch.nn.functional as TF
from helpers import to_jitorch, to_torch

import jitorch.nn.functional as F


TOL = {"atol": 1e-5, "rtol": 1e-4}
REDUCTIONS = ["none", "mean", "sum"]


def f32(rng, shape, low=-2.0, high=2.0):
    return rng.uniform(low, high, shape).astype(np.float32)


def with_constants(jt_fn, th_fn, consts):
    """Functions of the gradient-carrying arrays only: ``consts`` (weights, targets that PyTorch refuses to
    differentiate) are appended as constant tensors."""
    jt_c = [to_jitorch(c) for c in consts]
    th_c = [to_torch(c) for c in consts]
    return (lambda *t: jt_fn(*t, *jt_c)), (lambda *t: th_fn(*t, *th_c))


def call(name, **kw):
    """(jitorch fn, torch fn) calling the functional ``name`` with keyword arguments ``kw``."""
    return (lambda *a: getattr(F, name)(*a, **kw)), (lambda *a: getattr(TF, name)(*a, **kw))
