"""``torch.version``: ``__version__`` (the PyTorch API release jitorch follows, jitorch's version as the local label),
``cuda`` (the CUDA runtime CuPy was built for, or None without a usable CuPy), ``git_version``, ``hip``, ``debug``.

>>> import jitorch
>>> jitorch.__version__ >= "2.0", jitorch.__version__.split("+")[1] == "jitorch." + jitorch.version.jitorch
(True, True)
"""
from __future__ import annotations

from ._version import __version__ as jitorch  # jitorch's own release (the package metadata's version)
from .torch_version import TorchVersion

__all__ = ["__version__", "git_version", "hip", "debug", "jitorch", "API_VERSION"]  # and ``cuda``, on first use

API_VERSION = "2.13.0"  # the PyTorch release whose API (and oracle in the tests) jitorch follows
__version__ = TorchVersion(f"{API_VERSION}+jitorch.{jitorch}")
git_version = "Unknown"
hip = None
debug = False


def __getattr__(name):
    if name == "cuda":  # CuPy is imported on first use only: most scripts never ask
        from .runtime import cuda_version

        return cuda_version()
    raise AttributeError(f"module 'jitorch.version' has no attribute {name!r}")
