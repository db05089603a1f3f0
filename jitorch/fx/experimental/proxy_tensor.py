"""``make_fx`` under torch's import path, ``torch.fx.experimental.proxy_tensor.make_fx``.

>>> from jitorch.fx.experimental.proxy_tensor import make_fx
>>> import jitorch.fx
>>> make_fx is jitorch.fx.make_fx
True
"""
from ..make_fx import make_fx

__all__ = ["make_fx"]
