"""Rows that order values, which PyTorch refuses for complex tensors: NumPy orders complex numbers
lexicographically, so without these checks ``z < w``, ``maximum``, ``clamp``, ``amax`` or ``argmax`` of complex
tensors would return answers where PyTorch raises. Each row gets PyTorch's error here (``OpDef.complex_error``),
which the dispatcher raises for a complex input before the kernel runs (real inputs pay nothing).

>>> import jitorch
>>> try:
...     jitorch.tensor([1 + 1j]) < 0
... except NotImplementedError as e:
...     print(e)
"lt_cpu" not implemented for 'ComplexFloat'
"""
from __future__ import annotations

from .._dispatch import TORCH_TYPE_NAMES
from .table import OPS

__all__ = ["REFUSED"]

def _not_implemented(kernel_name):
    return lambda dt: NotImplementedError(f'"{kernel_name}" not implemented for \'{TORCH_TYPE_NAMES[dt]}\'')


def _runtime(message):
    return lambda dt: RuntimeError(message)


# row name -> PyTorch's error for a complex input (its kernel's name, or its own message).
REFUSED = {
    "lt": _not_implemented("lt_cpu"), "le": _not_implemented("le_cpu"), "gt": _not_implemented("gt_cpu"),
    "ge": _not_implemented("ge_cpu"),
    "maximum": _runtime("maximum not implemented for complex tensors."),
    "minimum": _runtime("minimum not implemented for complex tensors."),
    "clamp": lambda dt: NotImplementedError("clamp is not supported for complex types"),
    "amax": _not_implemented("max_values_cpu"), "amin": _not_implemented("min_values_cpu"),
    "argmax": _runtime("argmax(): does not support complex input"),
    "argmin": _runtime("argmin(): does not support complex input"),
    "max_dim": _runtime("max(): does not support complex input"),
    "min_dim": _runtime("min(): does not support complex input"),
    # Rounding and sign: NumPy rounds each part (round) or returns z/|z| (sign) where PyTorch raises.
    **{n: (lambda n: lambda dt: NotImplementedError(f"{n} is not supported for complex inputs"))(n)
       for n in ("floor", "ceil", "trunc")},
    "round": _not_implemented("round_vml_cpu"), "frac": _not_implemented("frac_cpu"),
    "sign": lambda dt: NotImplementedError("Unlike NumPy, torch.sign is not intended to support complex numbers. "
                                           "Please use torch.sgn instead."),
    # Rows with no complex kernel in torch whose NumPy/SciPy kernels would answer (or raise TypeError).
    "relu": lambda dt: NotImplementedError("clamp is not supported for complex types"),
    "digamma": _not_implemented("digamma"), "erf": _not_implemented("erf_vml_cpu"),
    "erfinv": _not_implemented("erfinv_vml_cpu"), "i0": _not_implemented("i0_vml_cpu"),
    "lgamma": _not_implemented("lgamma_vml_cpu"),
    "signbit": lambda dt: NotImplementedError("signbit is not implemented for complex tensors."),
}


for _name, _error in REFUSED.items():
    OPS[_name].complex_error = _error
