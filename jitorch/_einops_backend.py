"""einops' backend for jitorch tensors (imported once ``einops._backends`` exists; see `_import_hooks`).

einops finds a backend by walking ``AbstractBackend.__subclasses__()`` and keeping those whose ``framework_name``
is in ``sys.modules``; defining the subclass is the registration. The methods are einops' torch backend's, spelled
with jitorch: ``rearrange``/``reduce``/``repeat``/``einsum``/``pack``/``unpack``/``parse_shape``/``asnumpy`` and the
layers run jitorch ops, so autograd and ``jitorch.compile`` (which traces real calls) go through them unchanged.

>>> import einops, jitorch
>>> einops.rearrange(jitorch.arange(6).reshape(2, 3), "a b -> (b a)")
tensor([0, 3, 1, 4, 2, 5])
"""
from __future__ import annotations

from einops._backends import AbstractBackend

import jitorch

_FLOATS = (jitorch.float16, jitorch.float32, jitorch.float64, jitorch.bfloat16)


class JitorchBackend(AbstractBackend):
    framework_name = "jitorch"

    def is_appropriate_type(self, tensor):
        return isinstance(tensor, jitorch.Tensor)

    def from_numpy(self, x):
        variable = jitorch.from_numpy(x)
        if self.is_float_type(variable):
            variable.requires_grad = True  # as einops' torch backend: its tests take gradients through the ops
        return variable

    def to_numpy(self, x):
        return x.detach().cpu().numpy()

    def arange(self, start, stop):
        return jitorch.arange(start, stop, dtype=jitorch.int64)

    def reduce(self, x, operation, reduced_axes):
        if operation == "min":
            return x.amin(dim=reduced_axes)
        if operation == "max":
            return x.amax(dim=reduced_axes)
        if operation == "sum":
            return x.sum(dim=reduced_axes)
        if operation == "mean":
            return x.mean(dim=reduced_axes)
        if operation in ("any", "all", "prod"):
            # torch's any/all/prod take one dim; reducing the last first keeps the others' positions
            for i in sorted(reduced_axes)[::-1]:
                x = getattr(x, operation)(dim=i)
            return x
        raise NotImplementedError("Unknown reduction ", operation)

    def transpose(self, x, axes):
        return x.permute(axes)

    def stack_on_zeroth_dimension(self, tensors: list):
        return jitorch.stack(tensors)

    def add_axes(self, x, n_axes, pos2len):
        # expand, as einops' torch backend: the new axes are a view, copied only by a reshape that needs it
        repeats = [-1] * n_axes
        for axis_position, axis_length in pos2len.items():
            x = self.add_axis(x, axis_position)
            repeats[axis_position] = axis_length
        return x.expand(repeats)

    def tile(self, x, repeats):
        return x.repeat(repeats)

    def concat(self, tensors, axis: int):
        return jitorch.cat(tensors, dim=axis)

    def add_axis(self, x, new_position):
        return jitorch.unsqueeze(x, new_position)

    def is_float_type(self, x):
        return x.dtype in _FLOATS

    def layers(self):
        from . import _einops_layers

        return _einops_layers

    def einsum(self, pattern, *x):
        return jitorch.einsum(pattern, *x)
