"""``jitorch.utils``: ``jitorch.utils.data`` (datasets and the DataLoader); ``jitorch.utils.tensorboard`` on import.

>>> import jitorch
>>> jitorch.utils.data.TensorDataset(jitorch.zeros(3, 2))[0]
(tensor([0., 0.]),)
"""
from . import _pytree, checkpoint, data, deterministic, dlpack, weak  # noqa: F401
from ._swap_tensors import swap_tensors  # noqa: F401
