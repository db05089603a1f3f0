"""The op table (``OPS``) and the primitive rows, one module per family.

>>> from jitorch.ops import OPS
>>> OPS["mul"].saves
'inputs'
"""
from . import inplace_views, movement, pointwise, reduction  # noqa: F401 - importing registers the rows
from .table import OPS, OpDef

__all__ = ["OPS", "OpDef"]
