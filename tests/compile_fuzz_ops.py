"""The op grammar of `compile_fuzz_gen`: each drawer returns one source expression over value names (or None when it
does not apply to its operand), written against a module ``lib`` (torch or jitorch); `is_exact` says whether torch
and jitorch must agree bit for bit on a line (see `compile_fuzz_check`'s tolerance rule).
"""
from __future__ import annotations

import re

SCALARS = (2, -1, 3, 0.5, -1.5, 2.0, True, 0.1, -0.3)
# Calls whose float32 value is correctly rounded (IEEE arithmetic, selects, casts, rounding to integers, extremes)
# or a copy of elements: computed in float32 and rounded once to a half type, every such op gives torch's bits.
EXACT_CALLS = frozenset((
    "abs", "neg", "relu", "clamp", "clamp_", "where", "maximum", "minimum", "sign", "trunc", "floor", "ceil",
    "round", "sqrt", "reciprocal", "amax", "amin", "argmax", "argmin", "half", "bfloat16", "float", "double", "to",
    "long", "bool", "reshape", "transpose", "permute", "unsqueeze", "expand", "cat", "add_", "mul_", "t",
    "isnan", "isfinite", "logical_not", "logical_and", "square"))
_CALL = re.compile(r"(?:lib\.(?:nn\.functional\.)?|\.)([a-z_0-9]+)\(")


def is_exact(expr):
    """Whether every op of the source expression ``expr`` is in `EXACT_CALLS` (``** 2`` squares exactly)."""
    if re.search(r"\*\* (?!2\b)", expr):
        return False
    return all(name in EXACT_CALLS for name in _CALL.findall(expr))


def _scalar(rng):
    return repr(SCALARS[int(rng.integers(len(SCALARS)))])


def _dims(rng, t):
    return int(rng.integers(-t.dim(), t.dim())) if t.dim() else None


def _choice(rng, options):
    return options[int(rng.integers(len(options)))]


def op_binary(rng, a, b, names):
    op = _choice(rng, ("+", "-", "*", "/"))
    r = rng.random()
    if r < 0.35:
        return f"{names[0]} {op} {_scalar(rng)}"
    if r < 0.5:
        return f"{_scalar(rng)} {op} {names[0]}"
    return f"{names[0]} {op} {names[1]}"


def op_unary(rng, a, b, names):
    x = names[0]
    choices = (f"-{x}", f"{x}.abs()", f"lib.exp({x})", f"lib.log({x}.abs() + 1)", f"lib.sqrt({x}.abs())",
               f"lib.tanh({x})", f"lib.sigmoid({x})", f"lib.relu({x})", f"lib.nn.functional.gelu({x})",
               f"lib.nn.functional.gelu({x}, approximate='tanh')", f"lib.nn.functional.silu({x})",
               f"lib.pow({x}.abs() + 0.5, {rng.choice([2, 3, 0.5, -1.5])})", f"{x} ** 2",
               f"lib.pow({x}.abs() + 0.5, {names[1]})",
               f"lib.clamp({x}, min={rng.choice([-1.0, 0.0, -0.5])})", f"lib.clamp({x}, max={rng.choice([1, 0.5])})",
               f"{x}.clamp({rng.choice([-1, -0.5])}, {rng.choice([0.5, 1])})")
    return _choice(rng, choices)


def op_math(rng, a, b, names):
    """Transcendentals, rounding and sign ops beyond `op_unary`'s (each fuses: a row with a fusion expression)."""
    x = names[0]
    choices = (f"lib.sin({x})", f"lib.cos({x})", f"lib.log1p({x}.abs())", f"lib.expm1({x})", f"lib.exp2({x})",
               f"lib.log2({x}.abs() + 0.25)", f"lib.rsqrt({x}.abs() + 0.5)", f"lib.reciprocal({x}.abs() + 0.5)",
               f"lib.erf({x})", f"lib.sign({x})", f"lib.neg({x})", f"lib.trunc({x} * 3)", f"lib.floor({x} * 3)",
               f"lib.ceil({x})", f"lib.round({x} * 2)", f"lib.atan({x})", f"{x}.square()", f"lib.sinh({x})",
               f"2 ** {x}", f"lib.sqrt({x}.abs() + 1)", f"lib.isnan({x})", f"lib.isfinite({x} / 0.1)")
    return _choice(rng, choices)


def op_cast(rng, a, b, names):
    """Conversions among the float types (and to int64/bool), so half values meet float32 ones and promote."""
    x = names[0]
    choices = (f"{x}.half()", f"{x}.bfloat16()", f"{x}.float()", f"{x}.to(lib.float16)", f"{x}.to(lib.bfloat16)",
               f"{x}.to(lib.float32)", f"{x}.to({names[1]}.dtype)", f"{x}.double()", f"{x}.long()", f"{x}.bool()")
    return _choice(rng, choices)


def op_compare(rng, a, b, names):
    op = _choice(rng, ("<", ">", "<=", ">=", "==", "!="))
    other = names[1] if rng.random() < 0.5 else _scalar(rng)
    return f"({names[0]} {op} {other})"


def op_select(rng, a, b, names):
    kind = int(rng.integers(5))
    x, y = names
    if kind == 0:
        cond = f"{x} > {rng.choice([0, 0.5])}"
        other = y if rng.random() < 0.6 else _scalar(rng)
        return f"lib.where({cond}, {x}, {other})"
    if kind == 3:
        return f"lib.where({y} < {x}, {_scalar(rng)}, {x})"
    if kind == 4:
        return f"lib.clamp({x}, {'min' if rng.random() < 0.5 else 'max'}={y})"
    return f"lib.{('maximum', 'minimum')[kind - 1]}({x}, {y})"


def _reduce_dims(rng, t):
    if t.dim() == 0 or rng.random() < 0.15:
        return ""
    k = int(rng.integers(1, t.dim() + 1))
    dims = sorted(int(d) for d in rng.choice(t.dim(), size=k, replace=False))
    return f", dim={tuple(dims)!r}" if rng.random() < 0.7 else f", dim={dims[0] - t.dim()}"


def op_reduce(rng, a, b, names):
    x = names[0]
    keep = ", keepdim=True" if rng.random() < 0.4 else ""
    name = _choice(rng, ("sum", "mean", "amax", "amin", "prod", "var", "std", "argmax", "argmin", "sum_dtype"))
    dims = _reduce_dims(rng, a)
    if name in ("prod", "argmax", "argmin"):  # one dim at a time (or all), as torch's prod and argmax take
        d = _dims(rng, a)
        return f"lib.{name}({x}{'' if d is None else f', dim={d}'}{keep if d is not None else ''})"
    if name == "sum_dtype":  # a half sum accumulated into a float32 result
        return f"{x}.sum({dims[2:] if dims else ''}{', ' if dims else ''}dtype=lib.float32)"
    if name in ("var", "std"):
        corr = f", correction={rng.choice([0, 1])}"
        return f"lib.{name}({x}{dims}{corr}{keep if dims else ''})"
    if name in ("amax", "amin"):
        return f"lib.{name}({x}{dims or ''}{keep})" if dims else f"lib.{name}({x})"
    return f"lib.{name}({x}{dims}{keep if dims else ''})"


def op_rows(rng, a, b, names):
    x, kind = names[0], int(rng.integers(5))
    if a.dim() == 0:
        return None
    if kind < 2:
        return f"lib.{('softmax', 'log_softmax')[kind]}({x}, dim={_dims(rng, a)})"
    if kind == 2:
        k = int(rng.integers(1, min(a.dim(), 2) + 1))
        if a.shape[-k:].numel() < 3:  # the output is +-1 or 0 whatever the values, its gradient rounding noise
            return None
        return f"lib.nn.functional.layer_norm({x}, {tuple(a.shape[-k:])!r})"
    if kind == 3:
        return f"lib.softmax({x}, dim={_dims(rng, a)}, dtype=lib.float32)"
    return f"lib.cumsum({x}, dim={_dims(rng, a)})"


def op_view(rng, a, b, names):
    x, n = names[0], a.dim()
    kind = int(rng.integers(7))
    if kind == 0:
        return f"{x}.reshape(-1)" if rng.random() < 0.5 or n < 2 else f"{x}.reshape({tuple(a.shape[:-2]) + (-1,)!r})"
    if kind == 1 and n >= 2:
        return f"{x}.transpose({_dims(rng, a)}, {_dims(rng, a)})"
    if kind == 2 and n >= 2:
        return f"{x}.permute{tuple(int(p) for p in rng.permutation(n))!r}"
    if kind == 3:
        return f"{x}.unsqueeze({int(rng.integers(-n - 1, n + 1))})"
    if kind == 4 and 1 in a.shape:
        return f"{x}.expand{tuple(3 if s == 1 else -1 for s in a.shape)!r}"
    if kind == 5 and n >= 1:
        d = int(rng.integers(n))
        step = rng.choice(["1:", "::2", "1::2", ":-1", "2:5"])
        return f"{x}[{':, ' * d}{step}]"
    if kind == 6 and n >= 1 and a.shape[0] > 0:
        return f"{x}[{int(rng.integers(a.shape[0]))}]"
    return None


def op_join(rng, a, b, names):
    if rng.random() < 0.5 and a.dim() >= 1:
        other = names[1] if rng.random() < 0.6 else names[0]
        return f"lib.cat([{names[0]}, {other}], dim={_dims(rng, a)})"
    if a.dim() >= 2:
        return f"lib.matmul({names[0]}, {names[0]}.transpose(-1, -2))" if rng.random() < 0.5 else \
            f"lib.matmul({names[0]}, {names[1]})"
    return f"lib.matmul({names[0]}, {names[1]})"


def op_inplace(rng, a, b, names):
    x = names[0]
    kind = int(rng.integers(3))
    if kind == 0:
        return f"{x}.add_({names[1] if rng.random() < 0.5 else _scalar(rng)})"
    if kind == 1:
        return f"{x}.mul_({_scalar(rng)})"
    return f"{x}.clamp_({rng.choice([-1.0, -0.5])}, {rng.choice([0.5, 1.0])})"
