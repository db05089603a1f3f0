"""jitorch: PyTorch's programming model with a compiler inside.

>>> import jitorch as torch
>>> x = torch.randn(3, requires_grad=True)
>>> (x * 2).sum().backward()
>>> x.grad
tensor([2., 2., 2.])
"""
from __future__ import annotations

from . import runtime as _runtime  # noqa: F401 - first: it sets OpenBLAS's thread policy before NumPy loads it
import math as _math  # noqa: E402
import numpy as _np  # noqa: E402

# PyTorch does not warn on 0/0 or overflow; NumPy's floating-point warnings would be noise in every user script.
_np.seterr(all="ignore")

from ._dtype import (  # noqa: E402,F401
    bfloat16, bool, can_cast, complex64, complex128, dtype, finfo, float16, float32, float64, get_default_dtype, iinfo,
    int8, int16, int32, int64, jagged, layout, promote_types, result_type, set_default_dtype, sparse_bsc, sparse_bsr,
    sparse_coo, sparse_csc, sparse_csr, strided, uint8, uint16, uint32, uint64,
)
from ._device import device, get_default_device, set_default_device  # noqa: E402,F401
from .runtime.host_malloc import tune_malloc as _tune_malloc  # noqa: E402

_tune_malloc()  # glibc: keep freed activation buffers in the heap (see runtime/host_malloc.py)
from ._tensor import Size, Tensor  # noqa: E402,F401
from . import ops  # noqa: E402,F401
from . import _pointwise, _movement, _reduction, _conversion  # noqa: E402,F401
from ._pointwise import *  # noqa: E402,F401,F403
from ._movement import *  # noqa: E402,F401,F403
from ._reduction import *  # noqa: E402,F401,F403
from ._creation import *  # noqa: E402,F401,F403
from ._random import *  # noqa: E402,F401,F403
from ._random_params import *  # noqa: E402,F401,F403
from . import _random_inplace  # noqa: E402,F401 - Tensor.uniform_, normal_, random_...
from . import _indexing  # noqa: E402,F401
from . import _C  # noqa: E402,F401 - torch._C's Python-facing names (Tensor subclasses reach for them)
from ._indexing import *  # noqa: E402,F401,F403
from ._misc import *  # noqa: E402,F401,F403
from ._math_extra import *  # noqa: E402,F401,F403
from ._fake_quantize import *  # noqa: E402,F401,F403
from ._movement_extra import *  # noqa: E402,F401,F403
from ._spectral import *  # noqa: E402,F401,F403
from . import _linalg, _sorting, linalg  # noqa: E402,F401
from ._linalg import *  # noqa: E402,F401,F403
from ._linalg_lu import legacy_lu as lu, legacy_lu_solve as lu_solve, lu_unpack  # noqa: E402,F401
from ._linalg_more import triangular_solve  # noqa: E402,F401
from ._sorting import *  # noqa: E402,F401,F403
from ._segment import *  # noqa: E402,F401,F403
from ._segment import segment_reduce as _segment_reduce  # noqa: E402,F401 - the alias graph libraries call
from ._segment import _convert_indices_from_coo_to_csr, _convert_indices_from_csr_to_coo  # noqa: E402,F401
from ._finite_diff import *  # noqa: E402,F401,F403
from . import sparse  # noqa: E402,F401 - torch.sparse: sparse_coo tensors
from .sparse import sparse_coo_tensor, spmm  # noqa: E402,F401
from . import nested  # noqa: E402,F401 - torch.nested: jagged and strided nested tensors
from .sparse._creation import (  # noqa: E402,F401 - clear refusals: jitorch has sparse_coo tensors only
    sparse_bsc_tensor, sparse_bsr_tensor, sparse_compressed_tensor, sparse_csc_tensor, sparse_csr_tensor)
from . import _overrides  # noqa: E402
from ._overrides import publish as _publish  # noqa: E402

# Before the submodules below capture them (``class ReLU: _fn = F.relu``): a public function handed a
# ``jitorch.fx.Proxy`` records itself, however the caller reached it (see _overrides.py).
_publish(globals())
from . import autograd, return_types  # noqa: E402,F401
from .autograd import enable_grad, inference_mode, is_grad_enabled, no_grad, set_grad_enabled  # noqa: E402,F401
from .autograd import is_inference_mode_enabled  # noqa: E402,F401
from ._conversion import to as _to  # noqa: E402,F401
from . import nn, optim, utils  # noqa: E402,F401
from . import serialization  # noqa: E402,F401
from ._storage import TypedStorage, UntypedStorage  # noqa: E402,F401 - also Tensor.untyped_storage, .storage
from .serialization import load, save  # noqa: E402,F401
import jitorch.utils.data  # noqa: E402,F401
import jitorch.utils.hooks  # noqa: E402,F401

from .utils._pytree import SequenceKey as _SequenceKey, register_pytree_node as _register_pytree_node  # noqa: E402

# A Size is a pytree node as in torch: tree_map over shapes maps their ints (a map to non-ints gives a tuple).
_register_pytree_node(Size, lambda s: (list(s), None), lambda v, c: Size._from_leaves(v),
                      flatten_with_keys_fn=lambda s: ([(_SequenceKey(i), d) for i, d in enumerate(s)], None))
from . import fx  # noqa: E402,F401
from . import accelerator, amp, backends, cuda, distributed, distributions, mps, onnx, testing  # noqa: E402,F401
from . import cpu  # noqa: E402,F401
from .cpu import amp as _cpu_amp  # noqa: E402,F401 - ``jitorch.cpu.amp``, as ``torch.cpu.amp``
from . import special  # noqa: E402,F401
from . import fft  # noqa: E402,F401 - torch.fft
from . import signal  # noqa: E402,F401 - torch.signal (windows)
from . import masked  # noqa: E402,F401 - torch.masked: masked reductions/normalizations and MaskedTensor
from . import overrides  # noqa: E402,F401 - torch.overrides
from .amp import autocast  # noqa: E402,F401
from .amp.autocast_mode import (  # noqa: E402,F401
    autocast_decrement_nesting, autocast_increment_nesting, get_autocast_cpu_dtype, get_autocast_dtype,
    get_autocast_gpu_dtype, is_autocast_cache_enabled, is_autocast_cpu_enabled, is_autocast_enabled,
    set_autocast_cache_enabled, set_autocast_dtype, set_autocast_enabled,
)
from ._compile import compile  # noqa: E402,F401,A001 - torch.compile
from . import func, jit, multiprocessing, quasirandom, random  # noqa: E402,F401
from . import __future__  # noqa: E402,F401 - torch.__future__: module-conversion flags
from . import export  # noqa: E402,F401 - torch.export
from . import types  # noqa: E402,F401 - torch.types
from . import library  # noqa: E402,F401 - torch.library: custom operators, jitorch.ops.<namespace>
from . import profiler  # noqa: E402,F401 - torch.profiler
from . import hub  # noqa: E402,F401 - torch.hub
from .autograd import profiler as _autograd_profiler  # noqa: E402,F401 - torch.autograd.profiler
from ._method_functions import *  # noqa: E402,F401,F403
from .autograd.anomaly_mode import (  # noqa: E402,F401
    is_anomaly_check_nan_enabled, is_anomaly_enabled, set_anomaly_enabled,
)

from .nn.functional import (  # noqa: E402,F401 - torch exposes these at the top level too
    batch_norm, celu, cosine_similarity, dropout, embedding, group_norm, instance_norm, layer_norm, pairwise_distance,
    pdist, pixel_shuffle, pixel_unshuffle, prelu, selu, threshold, rrelu, hardshrink,
)
from .nn.functional import conv1d, conv2d, conv_transpose1d, conv_transpose2d  # noqa: E402,F401
from ._aten_aliases import *  # noqa: E402,F401,F403 - nn.functional ops under their torch.* names and signatures
from ._aten_misc import *  # noqa: E402,F401,F403 - cond, while_loop, vmap, frombuffer, unravel_index, settings
from ._method_extras import *  # noqa: E402,F401,F403 - igamma, igammac; Tensor's in-place and alias spellings
from ._view_copies import *  # noqa: E402,F401,F403 - permute_copy, select_copy...: views in new memory
from ._symbolic_shims import *  # noqa: E402,F401,F403 - sym_max, sym_int...: size arithmetic as plain Python
from ._native_forms import *  # noqa: E402,F401,F403 - native_batch_norm, native_group_norm, conv_tbc
from . import _tensor_set  # noqa: E402,F401 - Tensor.set_, Tensor.as_strided_
from . import functional  # noqa: E402,F401 - torch.functional: einsum, split, stft... under that module's name
OutOfMemoryError = cuda.OutOfMemoryError  # torch.OutOfMemoryError is torch.cuda's

pi, e, inf, nan = _math.pi, _math.e, _math.inf, _math.nan
newaxis = None
half, double, long, short, cfloat, cdouble = float16, float64, int64, int16, complex64, complex128
float = float32  # noqa: A001 - torch.float is float32
int = int32  # noqa: A001 - torch.int is int32
chalf = complex64
from ._memory_format import (  # noqa: E402,F401
    channels_last, channels_last_3d, contiguous_format, memory_format, preserve_format,
)
from . import torch_version  # noqa: E402,F401
from . import version  # noqa: E402,F401

# The PyTorch release whose API jitorch follows, with jitorch's own version as the local label: scripts compare
# ``torch.__version__ >= "2.0"`` to pick compile, SDPA or other modern paths, which jitorch has.
__version__ = version.__version__


def is_tensor(obj):
    return isinstance(obj, Tensor)


def is_floating_point(input):
    return input.is_floating_point()


def is_complex(input):
    return input.is_complex()


def numel(input):
    return input.numel()


def _assert(condition, message):
    """``assert condition, message`` as a function, so that ``jitorch.fx`` can record it (``torch._assert``)."""
    assert condition, message


_publish(globals())  # the functions defined above and the re-exports of nn.functional
_assert = _overrides.public(_assert)  # private by name, but recorded when handed a Proxy, as torch._assert


def _install_out_variants():
    # Before the NumPy names, so that ``axis=`` is renamed before ``out=`` is taken (_out_variants.py).
    import sys

    from . import _out_variants

    _out_variants.install(sys.modules[__name__])
    _out_variants.install(sys.modules[__name__], _out_variants.CREATION, _out_variants.creation_with_out)
    # Functions whose signatures took out= and ignored it.
    _out_variants.install(sys.modules[__name__], ("bernoulli", "normal", "lu", "lu_unpack", "qr", "row_stack", "svd",
                                                  "triangular_solve", "complex", "polar"))
    _out_variants.install(linalg, ("cholesky_ex", "eig", "eigh", "inv_ex", "lu", "lu_factor", "qr", "slogdet",
                                   "solve_ex", "svd"))


_install_out_variants()


def _install_numpy_names():
    # NOTE: last, once every module has bound (and published) its functions and Tensor methods (_numpy_names.py).
    import sys

    from . import _numpy_names as names

    for owner, listed in ((sys.modules[__name__], names.FUNCTIONS), (Tensor, names.METHODS), (linalg, names.LINALG),
                          (special, names.SPECIAL), (nn.functional, names.FUNCTIONAL)):
        names.install(owner, listed)


_install_numpy_names()
from . import _foreach  # noqa: E402

globals().update(_foreach.functions())  # torch._foreach_add, _foreach_lerp_, ... (91 names)
_overrides.name_public_functions()  # last: after every wrapper above
from . import _import_hooks  # noqa: E402

_import_hooks.install()  # einops' backend, defined when einops loads; safetensors.torch without PyTorch
