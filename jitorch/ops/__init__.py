"""The op table (``OPS``) and the primitive rows, one module per family; ``jitorch.ops.<namespace>`` are the
operators registered through ``jitorch.library`` (torch's ``torch.ops.mylib.foo``).

>>> from jitorch.ops import OPS
>>> OPS["mul"].saves
'inputs'
"""
from . import inplace_views, movement, pointwise, reduction  # noqa: F401 - importing registers the rows
from . import linalg, sorting  # noqa: F401,E402 - linear algebra and sorting rows
from . import sets_and_counts  # noqa: F401,E402 - unique, searchsorted, histc, bincount rows
from . import indexing  # noqa: F401,E402 - advanced indexing rows
from . import nn_ops  # noqa: F401,E402 - nn.functional rows (binary_cross_entropy)
from . import complex_ops  # noqa: F401,E402 - conj, real/imag and the real <-> complex views
from . import fft  # noqa: F401,E402 - FFT rows (c2c, r2c, c2r)
from . import conv_ops  # noqa: F401,E402 - convolution, im2col/col2im and pooling rows
from . import special  # noqa: F401,E402 - lgamma, digamma, Bessel, gcd rows
from . import random_ops  # noqa: F401,E402 - rows that draw random numbers (dropout's mask)
from . import nn_batch_norm  # noqa: F401,E402 - batch norm with batch statistics, and its backward
from . import activation_ops  # noqa: F401,E402 - GELU and SiLU with their backward rows
from . import rnn_ops  # noqa: F401,E402 - RNN/LSTM/GRU recurrences as scan rows
from . import resample_nearest  # noqa: F401,E402 - interpolate's nearest modes and their gradient
from . import resample_linear  # noqa: F401,E402 - interpolate's (bi/tri)linear and bicubic modes, their gradient
from . import complex_refusals  # noqa: F401,E402 - after the rows: ordering rows refuse complex inputs
from .table import OPS, OpDef

__all__ = ["OPS", "OpDef"]


def __getattr__(name):
    """``jitorch.ops.<namespace>`` (torch.ops): the namespace of ``jitorch.library`` operators for a name that is not
    one of this package's modules and is a namespace jitorch.library knows (an operator defined or pending in it, or
    a Library of it); made once, then an attribute like any other."""
    if not name.isidentifier():
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib
    import importlib.util

    if not name.startswith("__") and importlib.util.find_spec(f"{__name__}.{name}") is not None:  # a row module
        return importlib.import_module(f"{__name__}.{name}")
    from ..library._ops import known_namespace, namespace

    if name.startswith("_") or not known_namespace(name):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = ns = namespace(name)
    return ns
