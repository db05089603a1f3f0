"""einops' layers over ``jitorch.nn.Module``: ``Rearrange``, ``Reduce`` and ``EinMix`` (einops.layers.torch's).

Importable as ``einops.layers.jitorch`` (the spelling of einops' per-framework layer modules) and, where PyTorch is
not installed, as ``einops.layers.torch`` (see `_import_hooks`). The layers apply einops' cached recipes through
`_einops_backend.JitorchBackend`, as einops' layers for frameworks without TorchScript do.
"""
from __future__ import annotations

from einops.layers import RearrangeMixin, ReduceMixin
from einops.layers._einmix import _EinmixMixin

import jitorch
from jitorch.nn import Module, Parameter

__all__ = ["Rearrange", "Reduce", "EinMix"]


class Rearrange(RearrangeMixin, Module):
    def forward(self, input):
        return self._apply_recipe(input)


class Reduce(ReduceMixin, Module):
    def forward(self, input):
        return self._apply_recipe(input)


class EinMix(_EinmixMixin, Module):
    def _create_parameters(self, weight_shape, weight_bound, bias_shape, bias_bound):
        self.weight = Parameter(jitorch.zeros(weight_shape).uniform_(-weight_bound, weight_bound))
        if bias_shape is not None:
            self.bias = Parameter(jitorch.zeros(bias_shape).uniform_(-bias_bound, bias_bound))
        else:
            self.bias = None

    def _create_rearrange_layers(self, pre_reshape_pattern, pre_reshape_lengths, post_reshape_pattern,
                                 post_reshape_lengths):
        self.pre_rearrange = None
        if pre_reshape_pattern is not None:
            self.pre_rearrange = Rearrange(pre_reshape_pattern, **pre_reshape_lengths)
        self.post_rearrange = None
        if post_reshape_pattern is not None:
            self.post_rearrange = Rearrange(post_reshape_pattern, **post_reshape_lengths)

    def forward(self, input):
        if self.pre_rearrange is not None:
            input = self.pre_rearrange(input)
        result = jitorch.einsum(self.einsum_pattern, input, self.weight)
        if self.bias is not None:
            result += self.bias
        if self.post_rearrange is not None:
            result = self.post_rearrange(result)
        return result
