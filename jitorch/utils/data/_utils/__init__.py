"""PyTorch's private ``torch.utils.data._utils`` paths, which user code imports for custom collation
(``from torch.utils.data._utils.collate import collate, default_collate_fn_map``).

>>> from jitorch.utils.data._utils.collate import collate, default_collate_fn_map
>>> collate([1, 2], collate_fn_map=default_collate_fn_map)
tensor([1, 2])
"""
import sys

from . import collate, fetch, pin_memory, worker  # noqa: F401
from .worker import MP_STATUS_CHECK_INTERVAL, ExceptionWrapper  # noqa: F401

IS_WINDOWS = sys.platform == "win32"
HAS_NUMPY = True  # jitorch always has NumPy
