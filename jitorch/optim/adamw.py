"""``jitorch.optim.adamw``: where PyTorch keeps ``AdamW``; the implementation lives with Adam (``adam.py``).

>>> from jitorch.optim.adamw import AdamW
>>> AdamW.__module__
'jitorch.optim.adam'
"""
from .adam import AdamW, adamw

__all__ = ["AdamW", "adamw"]
