"""Saved-tensor hooks (``torch.autograd.graph.saved_tensors_hooks``, ``save_on_cpu``, ``disable_saved_tensors_hooks``).

While a pair of hooks is active, every tensor a recorded node or a custom Function saves for backward goes through
``pack_hook`` at save time, and the node keeps only what it returns; the backward gets the tensor back from
``unpack_hook(packed)`` each time it reads it. Only the innermost pair applies. As in torch, hooked values skip the
version check (the hooks may have copied or recomputed them), and an unpacked tensor leads back to the history of
the tensor that was saved, so double backward still works.

>>> import jitorch
>>> packed = []
>>> x = jitorch.tensor([1.0, 2.0], requires_grad=True)
>>> with jitorch.autograd.graph.saved_tensors_hooks(lambda t: packed.append(t) or len(packed) - 1,
...                                                 lambda i: packed[i]):
...     y = (x * x).sum()
>>> len(packed), y.backward(), x.grad
(2, None, tensor([2., 4.]))
"""
from __future__ import annotations

from .._tensor import Tensor

__all__ = ["saved_tensors_hooks", "save_on_cpu", "disable_saved_tensors_hooks", "active", "Packed", "pack",
           "one_op", "after_op"]

_stack: list = []  # (pack_hook, unpack_hook) pairs, innermost last
_disabled: list = []  # error messages of the disable_saved_tensors_hooks blocks running now
_op_depth = [0]  # one_op blocks running now
_after: list = []  # what a pack hook asked to run once the op it packed for is complete


class one_op:  # noqa: N801 - a context manager, named for what it marks
    """The ops inside form one torch op with its side effects (batch norm and its running statistics): a pack hook
    that must stop the computation (checkpoint's early stop) stops it after the block, as torch stops after the op.
    """

    def __enter__(self):
        _op_depth[0] += 1

    def __exit__(self, exc_type, *exc):
        _op_depth[0] -= 1
        if not _op_depth[0] and _after:
            pending = _after[:]
            _after.clear()
            if exc_type is None:
                for fn in pending:
                    fn()


def after_op(fn):
    """Run ``fn`` once the op being packed for is complete: now, or at the end of the enclosing ``one_op``."""
    if _op_depth[0]:
        _after.append(fn)
    else:
        fn()


class saved_tensors_hooks:  # noqa: N801 - torch's name
    """Context manager: tensors saved for backward inside it are packed by ``pack_hook`` and unpacked by
    ``unpack_hook`` when the backward reads them."""

    def __init__(self, pack_hook, unpack_hook):
        self.pack_hook = pack_hook
        self.unpack_hook = unpack_hook

    def __enter__(self):
        if _disabled:
            raise RuntimeError(_disabled[-1])
        _stack.append((self.pack_hook, self.unpack_hook))
        return self

    def __exit__(self, *exc):
        _stack.pop()


class save_on_cpu(saved_tensors_hooks):  # noqa: N801 - torch's name
    """Saved tensors are kept on the CPU (``pin_memory``: in a fresh pinned copy) and moved back to their device
    when the backward reads them; torch's own pack and unpack functions."""

    def __init__(self, pin_memory=False, device_type="cuda"):
        def pack_to_cpu(tensor):
            if not pin_memory:
                return tensor.device, tensor.cpu()
            from .. import _creation

            packed = _creation.empty(tensor.size(), dtype=tensor.dtype)  # jitorch's host memory needs no pinning
            packed.copy_(tensor)
            return tensor.device, packed

        def unpack_from_cpu(packed):
            device, tensor = packed
            return tensor.to(device, non_blocking=pin_memory)

        super().__init__(pack_to_cpu, unpack_from_cpu)


class disable_saved_tensors_hooks:  # noqa: N801 - torch's name
    """Context manager under which entering ``saved_tensors_hooks`` raises ``RuntimeError(error_message)``."""

    def __init__(self, error_message):
        self.error_message = error_message

    def __enter__(self):
        _disabled.append(self.error_message)
        return self

    def __exit__(self, *exc):
        _disabled.pop()


def active():
    """Whether saves go through hooks now."""
    return bool(_stack)


class Packed:
    """One saved tensor as its pack hook returned it, with what restores its history after unpacking."""

    __slots__ = ("value", "unpack_hook", "grad_fn", "output_nr", "leaf")

    def __init__(self, value, unpack_hook, grad_fn, output_nr, leaf):
        self.value, self.unpack_hook = value, unpack_hook
        self.grad_fn, self.output_nr, self.leaf = grad_fn, output_nr, leaf

    def unpack(self, history=True):
        """The tensor ``unpack_hook`` gives back, as a new alias leading to the saved tensor's history (``history``:
        when grad mode is on, as for double backward)."""
        from .grad_mode import GradState

        t = self.unpack_hook(self.value)
        if not isinstance(t, Tensor):
            raise TypeError(f"Output of saved tensor unpack_hook expected to be a Tensor but got result of type "
                            f"{type(t).__name__}")
        out = Tensor._make(t._data)
        if history and GradState.enabled:
            if self.grad_fn is not None:
                out.grad_fn, out._output_nr, out._requires_grad = self.grad_fn, self.output_nr, True
            elif self.leaf is not None:
                out.grad_fn, out._output_nr, out._requires_grad = _LeafEdge(self.leaf), 0, True
        return out


def pack(t, grad_fn=None, output_nr=0):
    """``t`` through the innermost pack hook (``grad_fn``/``output_nr``: the history to restore, for a saved output
    whose node is the saver itself)."""
    pack_hook, unpack_hook = _stack[-1]
    version = t._version
    value = pack_hook(t)
    if t._version != version:
        raise RuntimeError("A saved tensor pack hook is modifying its input in place. Tensors provided as input to "
                           "pack hook can not be modified by in-place operations as this can lead to unexpected "
                           "side-effects. Please open an issue if you need to perform in-place operations on the "
                           "input to a pack hook.")
    if grad_fn is None and t.grad_fn is not None:
        grad_fn, output_nr = t.grad_fn, t._output_nr
    leaf = t if grad_fn is None and t._requires_grad else None
    return Packed(value, unpack_hook, grad_fn, output_nr, leaf)


_LEAF_EDGE: list = []  # the node class below, made on first use (graph.py imports this module)


def _LeafEdge(leaf):  # noqa: N802 - reads as the node class it builds
    """A node whose gradient goes to ``leaf``: the history of an unpacked copy of a saved leaf."""
    if not _LEAF_EDGE:
        from .graph import Node

        class LeafEdge(Node):
            def __init__(self, leaf):
                Node.__init__(self, ((leaf, 0),), {})

            def apply(self, grads):
                return tuple(grads)

        _LEAF_EDGE.append(LeafEdge)
    return _LEAF_EDGE[0](leaf)
