"""The grad-mode flags, in a module that imports nothing, so ``_tensor.py`` can read them as tensors are made.

``jitorch.autograd.grad_mode`` owns the switches that set them (``no_grad``, ``inference_mode``...).
"""
from __future__ import annotations

__all__ = ["GradState"]


class GradState:
    """The flags the dispatcher reads on every op (class attributes: the cheapest global read).

    ``inference`` is True inside ``inference_mode``: tensors made there report ``is_inference()``.
    """

    enabled = True
    inference = False
