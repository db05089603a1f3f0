"""``torch.X(tensor, ...)`` spellings of Tensor methods that torch also exposes as functions: the in-place
pointwise ones (``torch.relu_(x)``, ``torch.clamp_(x, 0, 1)``, ``torch.fill_(x, v)``...) and a few queries
(``torch.detach``, ``torch.is_signed``...). Each calls the method, so it behaves exactly as the method does.

>>> import jitorch
>>> x = jitorch.tensor([-1.0, 2.0])
>>> jitorch.relu_(x) is x, x
(True, tensor([0., 2.]))
"""
from __future__ import annotations

NAMES = (
    "abs_", "acos_", "acosh_", "addmv_", "arccos_", "arcsin_", "arctan_", "asin_", "asinh_", "atan_", "atanh_",
    "ceil_", "clamp_", "clamp_max_", "clamp_min_", "clip_", "cos_", "cosh_", "deg2rad_", "detach_", "erf_", "erfc_",
    "exp2_", "exp_", "expm1_", "fill_", "fix_", "floor_", "frac_", "index_put_", "log10_", "log1p_", "log2_", "log_",
    "logit_", "nan_to_num_", "neg_", "negative_", "rad2deg_", "reciprocal_", "relu_", "resize_as_", "round_",
    "rsqrt_", "sigmoid_", "sin_", "sinc_", "sinh_", "sqrt_", "square_", "tan_", "tanh_", "trunc_", "xlogy_", "zero_",
    "detach", "diagonal_scatter", "get_device", "is_conj", "is_inference", "is_signed", "resolve_conj",
    "resolve_neg",
)
__all__ = list(NAMES)  # NOTE: defined below by a loop, not one by one


def _function(name):
    def fn(input, *args, **kwargs):
        return getattr(input, name)(*args, **kwargs)
    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = f"``torch.{name}(input, ...)``: ``input.{name}(...)``."
    return fn


for _name in NAMES:
    globals()[_name] = _function(_name)
