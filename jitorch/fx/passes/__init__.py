"""Graph passes: shape propagation, common-subexpression elimination, constant folding; ``split_module`` (in its
module, as in torch: ``from jitorch.fx.passes.split_module import split_module``).

>>> from jitorch.fx.passes import ShapeProp, CSEPass, fold_constants
"""
from .const_fold import fold_constants
from .cse import CSEPass, PassResult, eliminate_common_subexpressions
from .shape_prop import ShapeProp, TensorMetadata

__all__ = ["ShapeProp", "TensorMetadata", "CSEPass", "PassResult", "eliminate_common_subexpressions",
           "fold_constants"]
