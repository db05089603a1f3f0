"""The op tables and input domains of the pointwise tests (``test_pointwise.py``,
``test_pointwise_inplace_errors.py``).
"""
import torch

import jitorch


# name -> (low, high) of the inputs: the op's domain, so values (and gradients) stay finite.
UNARY = {
    "neg": None, "negative": None, "abs": None, "absolute": None, "exp": None, "exp2": None, "expm1": None,
    "log": (0.1, 5), "log2": (0.1, 5), "log10": (0.1, 5), "log1p": (-0.9, 5), "sqrt": (0.1, 5), "rsqrt": (0.1, 5),
    "square": None, "sin": None, "cos": None, "tan": (-1.2, 1.2), "asin": (-0.9, 0.9), "acos": (-0.9, 0.9),
    "atan": None, "arcsin": (-0.9, 0.9), "arccos": (-0.9, 0.9), "arctan": None, "sinh": None, "cosh": None,
    "tanh": None, "asinh": None, "acosh": (1.1, 5), "atanh": (-0.9, 0.9), "arcsinh": None, "arccosh": (1.1, 5),
    "arctanh": (-0.9, 0.9), "sigmoid": None, "erf": None, "erfc": None, "erfinv": (-0.9, 0.9),
    "reciprocal": (0.25, 3), "relu": None, "floor": None, "ceil": None, "trunc": None, "fix": None, "round": None,
    "sign": None, "sgn": None, "frac": None, "nan_to_num": None, "deg2rad": None, "rad2deg": None,
    "logit": (0.05, 0.95), "sinc": None,
    # no gradient: bool or integer results
    "logical_not": None, "bitwise_not": None, "isnan": None, "isinf": None, "isfinite": None, "isposinf": None,
    "isneginf": None, "isreal": None, "signbit": None,
}
NONDIFF_UNARY = {"logical_not", "bitwise_not", "isnan", "isinf", "isfinite", "isposinf", "isneginf", "isreal",
                 "signbit"}


# name -> ((low, high) of input, (low, high) of other)
BINARY = {
    "add": None, "sub": None, "subtract": None, "mul": None, "multiply": None, "div": ((-3, 3), (0.5, 3)),
    "divide": ((-3, 3), (0.5, 3)), "true_divide": ((-3, 3), (0.5, 3)), "floor_divide": ((-5, 5), (1, 4)),
    "remainder": ((-5, 5), (1, 4)), "fmod": ((-5, 5), (1, 4)), "pow": ((0.5, 2), (0, 3)),
    "float_power": ((0.5, 2), (0, 3)), "maximum": None, "minimum": None, "fmax": None, "fmin": None, "atan2": None,
    "arctan2": None, "hypot": None, "xlogy": ((-3, 3), (0.5, 3)), "logaddexp": None, "copysign": None,
    "eq": None, "ne": None, "lt": None, "le": None, "gt": None, "ge": None, "greater": None, "greater_equal": None,
    "less": None, "less_equal": None, "not_equal": None, "isclose": None,
    "logical_and": None, "logical_or": None, "logical_xor": None, "bitwise_and": None, "bitwise_or": None,
    "bitwise_xor": None, "bitwise_left_shift": ((0, 7), (0, 3)), "bitwise_right_shift": ((0, 100), (0, 3)),
}
NONDIFF_BINARY = {"eq", "ne", "lt", "le", "gt", "ge", "greater", "greater_equal", "less", "less_equal", "not_equal",
                  "isclose", "logical_and", "logical_or", "logical_xor", "bitwise_and", "bitwise_or", "bitwise_xor",
                  "bitwise_left_shift", "bitwise_right_shift",
                  "floor_divide"}  # torch's floor_divide backward raises; jitorch's gives zeros (documented)


BITWISE = {"bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_left_shift", "bitwise_right_shift", "bitwise_not"}


def _domain(table, name, k=None):
    dom = table[name]
    default = (-3, 3)
    return (dom or default) if k is None else (dom[k] if dom else default)


def _fns(name):
    return getattr(jitorch, name), getattr(torch, name)
