"""``torch.autograd.forward_ad``: dual tensors for forward-mode Jacobian-vector products.

jitorch has no forward-mode engine: ``make_dual`` returns a tensor that reverse-mode autograd records from, and
``unpack_dual`` takes the tangent of any tensor computed from the level's dual tensors by the double-vjp trick
(`functional.double_vjp`). The values are forward mode's; the work is two backward passes per ``unpack_dual``, and the
dual tensors' computation must run with grad mode on (as it does by default).

>>> import jitorch
>>> import jitorch.autograd.forward_ad as fwAD
>>> with fwAD.dual_level():
...     x = fwAD.make_dual(jitorch.tensor([1.0, 2.0]), jitorch.tensor([1.0, 0.5]))
...     fwAD.unpack_dual(x ** 2).tangent
tensor([2., 2.])
"""
from __future__ import annotations

from typing import NamedTuple

from .._tensor import Tensor
from .forward_ad_shadow import pop_shadow_mode, push_shadow_mode, shadow_of_output
from .functional import double_vjp
from .grad_mode import enable_grad, is_grad_enabled

__all__ = ["UnpackedDualTensor", "enter_dual_level", "exit_dual_level", "make_dual", "unpack_dual", "dual_level"]

_LEVELS: list = []  # per open level: {id(dual): (dual, the tensor the trick differentiates against, tangent)}
_SHADOW_MODES: list = []  # per open level: its `forward_ad_shadow.ShadowMode` (on the stack only while it can act)


class UnpackedDualTensor(NamedTuple):
    """``unpack_dual``'s result: the primal and the tangent (None for a tensor no dual tensor reaches)."""

    primal: Tensor
    tangent: Tensor | None


def enter_dual_level():
    """Open a new forward AD level; returns its index."""
    if _LEVELS:
        raise RuntimeError("Nested forward mode AD is not supported at the moment")
    _LEVELS.append({})
    _SHADOW_MODES.append(push_shadow_mode())
    return len(_LEVELS) - 1


def exit_dual_level(*, level=None):
    """Close the innermost level: its dual tensors' tangents are forgotten."""
    if level is not None and level != len(_LEVELS) - 1:
        raise RuntimeError("Trying to exit a forward AD level that was not the last one that was created. This is not "
                           "supported.")
    if _LEVELS:
        _LEVELS.pop()
        pop_shadow_mode(_SHADOW_MODES.pop())


class dual_level:  # noqa: N801 - torch's name
    """``with dual_level():`` the scope of the dual tensors made inside it."""

    def __enter__(self):
        return enter_dual_level()

    def __exit__(self, *exc):
        exit_dual_level()
        return False


def _level(level):
    if not _LEVELS:
        return None
    return _LEVELS[-1 if level is None else level]


def make_dual(tensor, tangent, *, level=None):
    """A tensor with ``tensor``'s values whose tangent is ``tangent`` (same shape), inside the current level."""
    duals = _level(level)
    if duals is None:
        raise RuntimeError("Trying to create a dual Tensor for forward AD but no level exists, make sure to "
                           "enter_dual_level() first.")
    if not (tensor.is_floating_point() or tensor.is_complex()):
        raise ValueError(f"Expected primal to be floating point or complex, but got: {tensor.dtype}")
    if not (tangent.is_floating_point() or tangent.is_complex()):
        raise ValueError(f"Expected tangent to be floating point or complex, but got: {tangent.dtype}")
    if tensor.shape != tangent.shape:
        raise RuntimeError("Trying to set a forward gradient that has a different size than that of the original "
                           f"Tensor, this is not supported. Tensor is of size {list(tensor.shape)} while the given "
                           f"forward gradient is of size {list(tangent.shape)}.")
    with enable_grad():
        if tensor.requires_grad:  # keeps its reverse-mode history
            base = dual = tensor.view_as(tensor)
        else:
            # A leaf the trick differentiates against, marked as no tensor of the caller's (`func._reaches_outside`);
            # the dual is a view of it, so in-place ops on the dual are allowed as on the primal.
            base = tensor.detach().requires_grad_(True)
            base._func_input = True
            dual = base.view_as(base)
    duals[id(dual)] = (dual, base, tangent)
    return dual


def unpack_dual(tensor, *, level=None):
    """``(primal, tangent)`` of ``tensor`` at the level (the innermost by default)."""
    from ..func import _reaches_outside

    duals = _level(level)
    if not isinstance(tensor, Tensor):
        return UnpackedDualTensor(tensor, None)
    attached = is_grad_enabled() and _reaches_outside(tensor)
    primal = tensor if attached else tensor.detach()
    # Made with grad mode off, or changed in place since: the history of its tangent is its shadow's.
    shadow = shadow_of_output(tensor) if duals is not None and level is None else None
    if shadow is not None:
        attached = attached and tensor.requires_grad
        tensor = shadow
    if duals is None or not tensor.requires_grad:
        return UnpackedDualTensor(primal, None)
    entry = duals.get(id(tensor))
    if shadow is None and entry is not None and entry[0] is tensor:
        return UnpackedDualTensor(primal, entry[2])
    entries = list(duals.values())
    with enable_grad():
        (tangent,) = double_vjp((tensor,), [base for _, base, _ in entries], [t for _, _, t in entries],
                                create_graph=attached, custom_jvps=True)
    return UnpackedDualTensor(primal, tangent)
