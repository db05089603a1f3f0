"""How a view came to be when autograd cannot rebase an in-place write into it (torch's ``CreationMeta``).

A view made in ``no_grad`` or inference mode has no history of its own, and a view a custom Function returns has the
Function's: in neither case can a later in-place write be recorded onto it, so torch refuses the write while grad mode
is on. The dispatcher marks such views (``Tensor._nograd_view``) and raises ``ViewCreation.error``.

>>> NO_GRAD_VIEW.of_view("Slice").header
'Output 0 of Slice is a view of a view which was'
"""
from __future__ import annotations

__all__ = ["ViewCreation", "NO_GRAD_VIEW", "INFERENCE_VIEW"]

_VIEW_MODE_HINT = ("Given that this use case is ambiguous and error-prone, it is forbidden. You can clarify your code "
                   "by moving both the view and the inplace either both inside the {} block (if you don't want the "
                   "inplace to be tracked) or both outside (if you want the inplace to be tracked).")


class ViewCreation:
    """How a view came to be when autograd cannot rebase a write into it (torch's ``CreationMeta``): made in
    ``no_grad`` or inference mode, returned by a custom Function, or one of a custom Function's several outputs.
    Kept on the view (``Tensor._nograd_view``) and on the views taken from it; ``error`` is torch's refusal of an
    in-place write with grad mode on (``indirect``: the write went to its base or another view of it)."""

    __slots__ = ("kind", "header")

    def __init__(self, kind, header):
        self.kind = kind  # "no_grad", "inference", "custom" or "multi"
        self.header = header  # "A view was", "Output 0 of Slice is a view of a view which was", "Output 1 of F"

    def of_view(self, op_name):
        """The creation of a view taken from this one by the op ``op_name`` (``Slice``) with grad mode on."""
        if self.kind in ("no_grad", "inference"):
            return ViewCreation(self.kind, f"Output 0 of {op_name} is a view of a view which was")
        return ViewCreation(self.kind, f"Output 0 of {op_name}")

    def error(self, indirect=False):
        modified = "its base or another view of its base has been" if indirect else "is being"
        if self.kind == "no_grad":
            return RuntimeError(f"{self.header} created in no_grad mode and {modified} modified inplace with grad mode "
                                f"enabled. " + _VIEW_MODE_HINT.format("no_grad"))
        if self.kind == "inference":
            return RuntimeError(f"{self.header} created in inference mode and {modified} modified inplace in normal "
                                f"mode. " + _VIEW_MODE_HINT.format("inference_mode"))
        if self.kind == "custom":
            why = ("This view was created inside a custom Function (or because an input was returned as-is) and the "
                   "autograd logic to handle view+inplace would override the custom backward associated with the "
                   "custom Function, leading to incorrect gradients. This behavior is forbidden. You can fix this by "
                   "cloning the output of the custom Function.")
        else:
            why = ("This view is the output of a function that returns multiple views. Such functions do not allow the "
                   "output views to be modified inplace. You should replace the inplace operation by an out-of-place "
                   "one.")
        return RuntimeError(f"{self.header} is a view and {modified} modified inplace. {why}")


NO_GRAD_VIEW = ViewCreation("no_grad", "A view was")
INFERENCE_VIEW = ViewCreation("inference", "A view was")
