"""Tolerances and inputs shared by the convolution, pooling and resampling tests."""
from __future__ import annotations

import numpy as np

from helpers import make_array


TOL = dict(atol=1e-5, rtol=1e-5)
CONV_TOL = dict(atol=1e-4, rtol=1e-4)  # float32 sums of up to ~100 products of values in [-3, 3]


def arr(*shape, seed=0, dtype="float32"):
    return make_array(shape, dtype, np.random.default_rng(seed))
