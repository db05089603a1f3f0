"""``torch.utils.deterministic``: ``fill_uninitialized_memory`` (default True), whether ``empty`` and its kin fill
their memory with NaN (the largest integer, True) while ``use_deterministic_algorithms(True)`` is set.

>>> import jitorch
>>> jitorch.use_deterministic_algorithms(True)
>>> jitorch.empty(2), jitorch.utils.deterministic.fill_uninitialized_memory
(tensor([nan, nan]), True)
>>> jitorch.use_deterministic_algorithms(False)
"""
from __future__ import annotations

import sys
import types

from .. import _misc


class _Deterministic(types.ModuleType):
    @property
    def fill_uninitialized_memory(self):
        """Whether to fill uninitialized memory with a known value while deterministic algorithms are on."""
        return _misc._fill_uninitialized[0]

    @fill_uninitialized_memory.setter
    def fill_uninitialized_memory(self, mode):
        _misc.set_fill_uninitialized_memory(mode)


sys.modules[__name__].__class__ = _Deterministic
