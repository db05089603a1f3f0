"""``jitorch.signal``: signal-processing helpers, as ``torch.signal`` (today only ``windows``).

>>> import jitorch
>>> jitorch.signal.windows.hann(5)
tensor([0.0000, 0.5000, 1.0000, 0.5000, 0.0000])
"""
from . import windows

__all__ = ["windows"]
