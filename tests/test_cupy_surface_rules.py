"""The CuPy surface itself (``cupy_surface.py``): NumPy-only names and keywords refused, ufunc methods as
CuPy's, and the runtime helpers' NumPy branches (doubling scan, reduce in rounds) matching NumPy."""
from __future__ import annotations

import numpy as np
import pytest
from cupy_surface import cupy_surface_numpy, cupy_surface_special

from jitorch.ops import indexing as indexing_ops
from jitorch.ops import sorting as sorting_ops
from jitorch.runtime import devices as runtime_devices
from jitorch.runtime import is_cupy

SURFACE = cupy_surface_numpy()
SPECIAL_SURFACE = cupy_surface_special()


# -- the surface itself ------------------------------------------------------------------------------------------------
def test_surface_is_numpy_for_runtime_helpers():
    assert SURFACE.__name__ == "numpy" and not is_cupy(SURFACE)
    assert SURFACE.float32 is np.float32 and SURFACE.dtype is np.dtype and SURFACE.bool_ is np.bool_
    assert SURFACE.ndarray is np.ndarray and SURFACE.inf == np.inf
    assert SURFACE.linalg.__name__ == "numpy.linalg" and not is_cupy(SURFACE.linalg)


@pytest.mark.parametrize("path", ["block", "errstate", "linalg.vector_norm", "linalg.svdvals", "matvec"])
def test_surface_refuses_numpy_only_names(path):
    head, _, name = path.rpartition(".")
    module = SURFACE.linalg if head else SURFACE
    with pytest.raises(AttributeError, match=f"xp.{path}: exists in NumPy but not in CuPy; kernels must run on both"):
        getattr(module, name)


def test_surface_refuses_numpy_only_keywords():
    x = np.arange(6.0).reshape(2, 3)
    assert SURFACE.sum(x, axis=1, keepdims=True).shape == (2, 1)
    with pytest.raises(TypeError, match=r"xp.sum\(\): keyword 'where'"):
        SURFACE.sum(x, where=x > 1)
    with pytest.raises(TypeError, match=r"xp.add\(\): keyword\(s\) \['where'\]"):
        SURFACE.add(x, x, where=x > 1)
    with pytest.raises(TypeError, match=r"xp.linalg.qr\(\): keyword 'foo'"):
        SURFACE.linalg.qr(x, foo=1)


def test_surface_ufunc_methods_follow_cupy():
    assert SURFACE.add.accumulate == np.add.accumulate
    assert SURFACE.maximum.at == np.maximum.at
    with pytest.raises(AttributeError, match="xp.maximum.accumulate"):
        SURFACE.maximum.accumulate
    with pytest.raises(AttributeError, match="xp.multiply.at"):
        SURFACE.multiply.at
    with pytest.raises(AttributeError, match="special.agm: exists in SciPy but not in CuPy"):
        SPECIAL_SURFACE.agm


# -- the CuPy branches of kernel helpers, run through the surface ------------------------------------------------------
@pytest.mark.parametrize("name", ["maximum", "minimum", "logaddexp", "add"])
@pytest.mark.parametrize("axis", [0, 1, 2])
def test_doubling_scan_matches_accumulate(name, axis):
    a = np.random.default_rng(0).standard_normal((3, 5, 4))
    expected = getattr(np, name).accumulate(a, axis=axis)
    np.testing.assert_allclose(sorting_ops.doubling_scan(SURFACE, name, a, axis), expected, rtol=1e-12)


@pytest.mark.parametrize("reduce", ["prod", "amax", "amin"])
def test_reduce_in_rounds_matches_ufunc_at(reduce):
    rng = np.random.default_rng(1)
    out = rng.standard_normal((3, 4))
    key = (np.array([[0, 0, 2, 0], [1, 1, 1, 1]]), np.array([[3, 3, 3, 0], [0, 1, 0, 0]]))
    values = rng.standard_normal((2, 4))
    expected = out.copy()
    getattr(np, {"prod": "multiply", "amax": "maximum", "amin": "minimum"}[reduce]).at(expected, key, values)
    indexing_ops.reduce_in_rounds(SURFACE, reduce, out, key, values)
    np.testing.assert_array_equal(out, expected)


def test_runtime_helpers_leave_cupy_to_the_fallbacks():
    class FakeCupy:
        __name__ = "cupy"

    assert runtime_devices.accumulate(FakeCupy(), "maximum", np.ones(3), 0) is None
    assert runtime_devices.ufunc_at(FakeCupy(), "multiply", np.ones(3), (np.array([0]),), 2.0) is False
    out = np.ones(3)
    assert runtime_devices.ufunc_at(SURFACE, "multiply", out, (np.array([0, 0]),), 2.0) is True
    np.testing.assert_array_equal(out, [4.0, 1.0, 1.0])
