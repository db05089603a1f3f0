"""``jitorch.backends.opt_einsum``: einsum contraction-order optimisation; unavailable, as in torch without the package.

>>> import jitorch.backends
>>> jitorch.backends.opt_einsum.is_available(), jitorch.backends.opt_einsum.enabled
(False, False)
"""
enabled = False
strategy = None


def is_available() -> bool:
    return False


def get_opt_einsum():
    return None
