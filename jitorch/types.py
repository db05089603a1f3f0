"""``torch.types``: the type aliases annotations use (``Number``, ``Device``, ``_size``...).

>>> isinstance(3.5, Number.__args__)
True
"""
from __future__ import annotations

import builtins
import os
from typing import IO, Any, Union

from ._device import device as _device
from ._tensor import Size, Tensor
from ._storage import TypedStorage, UntypedStorage

__all__ = ["Number", "Device", "FileLike", "Storage", "Tensor", "Size", "_bool", "_int", "_float", "_complex",
           "_device", "_size", "_layout", "_dispatchkey", "IntLikeType", "FloatLikeType", "BoolLikeType",
           "Any"]

_bool, _int, _float, _complex = builtins.bool, builtins.int, builtins.float, builtins.complex
_size = Union[Size, list, tuple]
Number = Union[int, float, bool]
Device = Union[_device, str, int, None]
FileLike = Union[str, os.PathLike, IO[bytes]]
Storage = Union[TypedStorage, UntypedStorage]
IntLikeType = int
FloatLikeType = float
BoolLikeType = bool
_layout = object
_dispatchkey = Union[str, object]


def __getattr__(name):
    if name == "_dtype":  # after jitorch's own _dtype module is loaded: the dtype class
        from . import _dtype as dtypes

        return dtypes.dtype
    raise AttributeError(f"module 'jitorch.types' has no attribute {name!r}")
