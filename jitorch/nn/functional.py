"""``jitorch.nn.functional``: PyTorch's ``torch.nn.functional`` (``import jitorch.nn.functional as F``).

Stateless layers, activations, normalizations, dropout, attention and losses, each a composite of jitorch ops (so
autograd, double backward and, later, fusion come for free). The implementations live in ``_functional_*.py``, one
file per family; convolution, pooling, padding, interpolation and unfold/fold come from ``_functional_spatial``.

>>> import jitorch
>>> import jitorch.nn.functional as F
>>> x = jitorch.tensor([[-1.0, 2.0]], requires_grad=True)
>>> loss = F.cross_entropy(F.relu(x), jitorch.tensor([1]))
>>> loss.backward()
>>> x.grad
tensor([[ 0.0000, -0.1192]])
"""
from __future__ import annotations

from ._functional_activation import *  # noqa: F401,F403
from ._functional_attention import *  # noqa: F401,F403
from ._functional_core import *  # noqa: F401,F403
from ._functional_ctc import *  # noqa: F401,F403
from ._functional_grouped_mm import *  # noqa: F401,F403
from ._functional_dropout import *  # noqa: F401,F403
from ._functional_loss import *  # noqa: F401,F403
from ._functional_loss_extra import *  # noqa: F401,F403
from ._functional_mha import *  # noqa: F401,F403
from ._functional_mha import _canonical_mask, _none_or_dtype  # noqa: F401 - PyTorch's helpers for transformer layers
from ._functional_mha import _in_projection, _in_projection_packed, _mha_shape_check  # noqa: F401 - and for MHA copies
from ._functional_norm import *  # noqa: F401,F403
from ._functional_sparse import *  # noqa: F401,F403
from . import _functional_activation, _functional_attention, _functional_core, _functional_ctc  # noqa: E402
from . import _functional_dropout, _functional_grouped_mm  # noqa: E402
from . import _functional_loss, _functional_loss_extra, _functional_mha, _functional_norm  # noqa: E402
from . import _functional_sparse  # noqa: E402

__all__ = sorted(
    set(_functional_activation.__all__) | set(_functional_attention.__all__) | set(_functional_core.__all__)
    | set(_functional_ctc.__all__) | set(_functional_dropout.__all__) | set(_functional_grouped_mm.__all__)
    | set(_functional_loss.__all__) | set(_functional_loss_extra.__all__)
    | set(_functional_mha.__all__) | set(_functional_norm.__all__) | set(_functional_sparse.__all__)
)

from ._functional_spatial import *  # noqa: F401,F403,E402
from ._functional_spatial import __all__ as _spatial_all  # noqa: E402

__all__ += [name for name in _spatial_all if name not in __all__]

from ._functional_linear_cross_entropy import linear_cross_entropy  # noqa: F401,E402

__all__ += ["linear_cross_entropy"]

from .._overrides import publish as _publish  # noqa: E402

_publish(globals())  # see jitorch/_overrides.py
