"""runtime.host_pointer.data_address reads NumPy's data field directly: it must agree with ``a.ctypes.data`` for every
kind of array a kernel is handed (a wrong address would make a native kernel read or write the wrong memory)."""
import numpy as np
import pytest

from jitorch.runtime import host_cache
from jitorch.runtime.host_pointer import _fast, data_address


def _arrays():
    base = np.arange(60, dtype=np.float32).reshape(3, 4, 5)
    yield "contiguous", base
    yield "offset view", base[1:, 2:]
    yield "strided", base[:, ::2, 1::3]
    yield "transposed", base.T
    yield "fortran", np.asfortranarray(base)
    yield "0-d", np.array(3.5)
    yield "element view", base[2, 3, 4:]
    yield "empty", np.empty((0, 4))
    yield "read-only", np.frombuffer(bytes(16), np.float32)
    yield "float64 from host cache", host_cache.empty((256, 1024), np.float64)
    yield "record", np.zeros(3, dtype=[("a", np.int8), ("b", np.float64)])
    yield "subclass", np.arange(6.0).view(np.matrix)


@pytest.mark.parametrize("name,array", list(_arrays()), ids=[n for n, _ in _arrays()])
def test_data_address_agrees_with_ctypes(name, array):
    assert data_address(array) == array.ctypes.data


def test_the_fast_read_is_the_one_in_use_on_cpython():
    # On CPython the layout check passes, so eager kernels get the fast read (and it agrees, above).
    assert data_address is _fast
