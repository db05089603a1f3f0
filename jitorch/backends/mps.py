"""``jitorch.backends.mps``: Apple's Metal backend, which jitorch does not have.

>>> import jitorch.backends
>>> jitorch.backends.mps.is_available(), jitorch.backends.mps.is_built()
(False, False)
"""


def is_available() -> bool:
    return False


def is_built() -> bool:
    return False


def is_macos_or_newer(major: int, minor: int) -> bool:
    return False
