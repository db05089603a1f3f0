"""jitorch.optim: PyTorch's optimizers and learning-rate schedulers, updating parameters in place.

Updates run on the arrays behind the tensors (NumPy on CPU, CuPy on CUDA) with PyTorch's formulas in PyTorch's
order of operations, so a jitorch model trains step for step like the same model in PyTorch.

>>> import jitorch
>>> w = jitorch.tensor([2.0], requires_grad=True)
>>> opt = jitorch.optim.Adam([w], lr=0.1)
>>> sched = jitorch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
>>> for _ in range(3):
...     opt.zero_grad()
...     (w ** 2).sum().backward()
...     opt.step()
...     sched.step()
>>> sched.get_last_lr()
[0.0125]
"""
from . import lr_scheduler, swa_utils  # noqa: F401
from .adadelta import Adadelta
from .adagrad import Adagrad
from .adam import Adam, AdamW
from .adafactor import Adafactor
from .adamax import Adamax
from .asgd import ASGD
from .lbfgs import LBFGS
from .muon import Muon
from .nadam import NAdam
from .optimizer import Optimizer
from .radam import RAdam
from .rmsprop import RMSprop
from .rprop import Rprop
from .sgd import SGD
from .sparse_adam import SparseAdam

__all__ = ["ASGD", "Adadelta", "Adafactor", "Adagrad", "Adam", "AdamW", "Adamax", "LBFGS", "Muon", "NAdam",
           "Optimizer", "RAdam", "RMSprop", "Rprop", "SGD", "SparseAdam", "lr_scheduler", "swa_utils"]
