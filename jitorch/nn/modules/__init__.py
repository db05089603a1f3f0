"""``jitorch.nn.modules``: ``Module``, the containers and the layers, one file per family (PyTorch's module paths).

>>> from jitorch.nn.modules import Linear, Sequential, ReLU
>>> Sequential(Linear(2, 3), ReLU())
Sequential(
  (0): Linear(in_features=2, out_features=3, bias=True)
  (1): ReLU()
)
"""
from . import (  # noqa: F401 - the family modules are PyTorch's import paths
    activation, adaptive, attention, batchnorm, container, conv, distance, dropout, flatten, fold, instancenorm,
    lazy, linear, linear_cross_entropy_options, loss, module, normalization, padding, pixelshuffle, pooling, rnn,
    sparse, transformer, upsampling, utils)
from .activation import *  # noqa: F401,F403
from .adaptive import *  # noqa: F401,F403
from .attention import *  # noqa: F401,F403
from .batchnorm import *  # noqa: F401,F403
from .container import ModuleDict, ModuleList, ParameterDict, ParameterList, Sequential  # noqa: F401
from .conv import *  # noqa: F401,F403
from .distance import *  # noqa: F401,F403
from .dropout import *  # noqa: F401,F403
from .flatten import *  # noqa: F401,F403
from .fold import *  # noqa: F401,F403
from .instancenorm import *  # noqa: F401,F403
from .lazy import *  # noqa: F401,F403
from .linear import *  # noqa: F401,F403
from .linear_cross_entropy_options import *  # noqa: F401,F403
from .loss import *  # noqa: F401,F403
from .module import Module  # noqa: F401
from .normalization import *  # noqa: F401,F403
from .padding import *  # noqa: F401,F403
from .pixelshuffle import *  # noqa: F401,F403
from .pooling import *  # noqa: F401,F403
from .rnn import *  # noqa: F401,F403
from .sparse import *  # noqa: F401,F403
from .transformer import *  # noqa: F401,F403
from .upsampling import *  # noqa: F401,F403

_FAMILIES = (activation, adaptive, attention, batchnorm, conv, distance, dropout, flatten, fold, instancenorm, lazy,
             linear, linear_cross_entropy_options, loss, normalization, padding, pixelshuffle, pooling, rnn, sparse,
             transformer, upsampling)
__all__ = sorted({"Module", "Sequential", "ModuleList", "ModuleDict", "ParameterList", "ParameterDict"}
                 | {name for family in _FAMILIES for name in family.__all__})
