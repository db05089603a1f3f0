"""``torch.__future__``: opt-in behaviours of module conversions (``module.to``, ``.double()``, ``.cuda()``...).

- overwrite: each converted parameter becomes a NEW ``Parameter`` object in the module (optimizers built before
  the conversion keep the old ones), instead of the default in-place ``param.data = converted``.
- swap: each parameter object keeps its identity and trades contents with the converted one through
  ``jitorch.utils.swap_tensors``; it wins over overwrite.

>>> import jitorch.__future__ as future
>>> future.get_overwrite_module_params_on_conversion(), future.get_swap_module_params_on_conversion()
(False, False)
"""
from __future__ import annotations

__all__ = ["set_overwrite_module_params_on_conversion", "get_overwrite_module_params_on_conversion",
           "set_swap_module_params_on_conversion", "get_swap_module_params_on_conversion"]

_overwrite_module_params_on_conversion = False
_swap_module_params_on_conversion = False


def set_overwrite_module_params_on_conversion(value: bool) -> None:
    """Makes conversions assign new Parameter objects (see the module docstring).

    >>> import jitorch
    >>> m = jitorch.nn.Linear(1, 1); w = m.weight
    >>> set_overwrite_module_params_on_conversion(True)
    >>> m.double().weight is w
    False
    >>> set_overwrite_module_params_on_conversion(False)
    """
    global _overwrite_module_params_on_conversion
    _overwrite_module_params_on_conversion = value


def get_overwrite_module_params_on_conversion() -> bool:
    """Whether conversions assign new Parameter objects.

    >>> get_overwrite_module_params_on_conversion()
    False
    """
    return _overwrite_module_params_on_conversion


def set_swap_module_params_on_conversion(value: bool) -> None:
    """Makes conversions swap each parameter's contents with the converted one (see the module docstring).

    >>> import jitorch
    >>> m = jitorch.nn.Linear(1, 1); w = m.weight
    >>> set_swap_module_params_on_conversion(True)
    >>> m.double().weight is w, w.dtype
    (True, jitorch.float64)
    >>> set_swap_module_params_on_conversion(False)
    """
    global _swap_module_params_on_conversion
    _swap_module_params_on_conversion = value


def get_swap_module_params_on_conversion() -> bool:
    """Whether conversions swap parameter contents.

    >>> get_swap_module_params_on_conversion()
    False
    """
    return _swap_module_params_on_conversion
