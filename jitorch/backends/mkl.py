"""``jitorch.backends.mkl``: jitorch's BLAS is NumPy's OpenBLAS, not MKL.

>>> import jitorch.backends
>>> jitorch.backends.mkl.is_available()
False
"""


def is_available() -> bool:
    return False
