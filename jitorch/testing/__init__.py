"""``jitorch.testing``: ``assert_close`` and ``make_tensor`` (PyTorch's ``torch.testing``).

>>> import jitorch
>>> from jitorch.testing import assert_close
>>> assert_close(jitorch.tensor([1.0]), jitorch.tensor([1.0]))
"""
from . import _comparison, _creation  # noqa: F401
from ._comparison import assert_close
from ._creation import make_tensor

__all__ = ["assert_close", "make_tensor"]
