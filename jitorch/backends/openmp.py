"""``jitorch.backends.openmp``: jitorch's kernels split work over their own thread pool, not OpenMP.

>>> import jitorch.backends
>>> jitorch.backends.openmp.is_available()
False
"""


def is_available() -> bool:
    return False
