"""Helpers of the linear-algebra tests: run a function in both libraries and compare, inputs, SPD matrices."""
import numpy as np
import torch
from helpers import check_error, check_op

import jitorch


def run(fn, *inputs, **kw):
    kw.setdefault("atol", 1e-5)
    kw.setdefault("rtol", 1e-4)
    return check_op(lambda *a: fn(jitorch, *a), lambda *a: fn(torch, *a), inputs, **kw)


def error(fn, *inputs, match=()):
    return check_error(lambda *a: fn(jitorch, *a), lambda *a: fn(torch, *a), inputs, match=match)


def arr(*shape, seed=0, dtype=np.float32):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)
