"""``jitorch.nn.utils``: gradient clipping, parameter/vector conversion, weight and spectral normalization,
parametrizations and ``functional_call`` (``torch.nn.utils``).

>>> import jitorch
>>> from jitorch import nn
>>> p = nn.Parameter(jitorch.zeros(3)); p.grad = jitorch.tensor([-2.0, 0.5, 3.0])
>>> nn.utils.clip_grad_value_([p], 1.0); p.grad
tensor([-1.0000,  0.5000,  1.0000])
"""
from . import clip_grad, convert_parameters, parametrizations, parametrize, prune, rnn, stateless  # noqa: F401
from .clip_grad import clip_grad_norm, clip_grad_norm_, clip_grad_value_, clip_grads_with_norm_, get_total_norm
from .convert_parameters import parameters_to_vector, vector_to_parameters
from .spectral_norm import remove_spectral_norm, spectral_norm
from .weight_norm import remove_weight_norm, weight_norm
from . import fusion  # noqa: F401,E402
from .fusion import fuse_conv_bn_eval, fuse_conv_bn_weights, fuse_linear_bn_eval, fuse_linear_bn_weights
from .memory_format import convert_conv2d_weight_memory_format, convert_conv3d_weight_memory_format, skip_init

__all__ = ["clip_grad_norm", "clip_grad_norm_", "clip_grad_value_", "clip_grads_with_norm_", "get_total_norm",
           "parameters_to_vector", "vector_to_parameters", "weight_norm", "remove_weight_norm", "spectral_norm",
           "remove_spectral_norm", "parametrize", "parametrizations", "stateless", "fuse_conv_bn_eval",
           "fuse_conv_bn_weights", "fuse_linear_bn_eval", "fuse_linear_bn_weights",
           "convert_conv2d_weight_memory_format", "convert_conv3d_weight_memory_format", "skip_init"]
