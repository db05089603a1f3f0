"""``jitorch.backends``: switches scripts set (``torch.backends``): ``cuda``, ``cudnn``, ``mha``, ``mkl``,
``mkldnn``, ``mps``, ``openmp``, ``opt_einsum``.

The flags are stored and read back with torch's defaults; jitorch's kernels do not consult them yet (jitorch never
uses TF32, cuDNN or reduced-precision reductions, so the strictest settings already hold).

>>> import jitorch.backends
>>> jitorch.backends.cudnn.benchmark = True
>>> jitorch.backends.cuda.matmul.allow_tf32
False
>>> jitorch.backends.cudnn.benchmark = False
"""
from . import cpu, cuda, cudnn, mha, mkl, mkldnn, mps, openmp, opt_einsum  # noqa: F401

__all__ = ["cpu", "cuda", "cudnn", "mha", "mkl", "mkldnn", "mps", "openmp", "opt_einsum"]
