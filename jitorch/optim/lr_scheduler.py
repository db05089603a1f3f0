"""jitorch.optim.lr_scheduler: PyTorch's learning-rate schedulers, with the same sequences and state dicts.

>>> import jitorch
>>> from jitorch.optim import SGD
>>> from jitorch.optim.lr_scheduler import CosineAnnealingLR
>>> opt = SGD([jitorch.zeros(1, requires_grad=True)], lr=1.0)
>>> sched = CosineAnnealingLR(opt, T_max=2)
>>> lrs = []
>>> for _ in range(2):
...     opt.step(); sched.step(); lrs.append(round(sched.get_last_lr()[0], 6))
>>> lrs
[0.5, 0.0]
"""
from ._scheduler_base import EPOCH_DEPRECATION_WARNING, LRScheduler, _LRScheduler  # noqa: F401
from ._schedulers_composite import ChainedScheduler, ReduceLROnPlateau, SequentialLR
from ._schedulers_cyclic import CosineAnnealingLR, CosineAnnealingWarmRestarts, CyclicLR, OneCycleLR
from ._schedulers_simple import (ConstantLR, ExponentialLR, LambdaLR, LinearLR, MultiplicativeLR, MultiStepLR,
                                 PolynomialLR, StepLR)

__all__ = ["LambdaLR", "MultiplicativeLR", "StepLR", "MultiStepLR", "ConstantLR", "LinearLR", "ExponentialLR",
           "SequentialLR", "CosineAnnealingLR", "ChainedScheduler", "ReduceLROnPlateau", "CyclicLR",
           "CosineAnnealingWarmRestarts", "OneCycleLR", "PolynomialLR", "LRScheduler"]
