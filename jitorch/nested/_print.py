"""How torch prints a nested tensor: the jagged layout by its structure, the strided layout by its components.

>>> import jitorch, jitorch.nested
>>> nt = jitorch.nested.nested_tensor([jitorch.ones(1, 2), jitorch.ones(2, 2)], layout=jitorch.jagged)
>>> nt
NestedTensor(size=(2, j..., 2), offsets=tensor([0, 1, 3]), contiguous=True)
"""
from __future__ import annotations

__all__ = ["nested_repr"]


def _grad_suffix(nt):
    if nt.grad_fn is not None:
        return f", grad_fn=<{type(nt.grad_fn).__name__} object at {hex(id(nt.grad_fn))}>"
    return ", requires_grad=True" if nt.requires_grad else ""


def nested_repr(nt):
    """``NestedTensor(size=(2, j1, 4), offsets=tensor([0, 2, 5]), contiguous=True)`` for the jagged layout (torch's
    repr, which prints no values), ``nested_tensor([...])`` with each component for the strided layout."""
    if nt._nt_components is None:
        size = "(" + ", ".join(str(s) for s in nt.shape) + ")"
        return (f"NestedTensor(size={size}, offsets={nt._nt_offsets!r}{_grad_suffix(nt)}, "
                f"contiguous={nt.is_contiguous()})")
    if not nt._nt_components:
        return "nested_tensor([\n\n])"
    parts = ["  " + repr(c).replace("\n", "\n  ") for c in nt._nt_components]
    suffix = _grad_suffix(nt) if nt.grad_fn is None else ""
    return "nested_tensor([\n" + ",\n".join(parts) + "\n]" + suffix + ")"
