"""Graph passes: shape propagation, common-subexpression elimination, constant folding.

>>> from jitorch.fx.passes import ShapeProp, CSEPass, fold_constants
"""
from .const_fold import fold_constants
from .cse import CSEPass, PassResult, eliminate_common_subexpressions
from .shape_prop import ShapeProp, TensorMetadata

__all__ = ["ShapeProp", "TensorMetadata", "CSEPass", "PassResult", "eliminate_common_subexpressions",
           "fold_constants"]
