"""``torch._foreach_*``: one op over lists of tensors (the multi-tensor ops EMA helpers and hand-written optimizers
call), as composites of the per-tensor ops. Out-of-place forms return a tuple; in-place forms update each tensor
and return the list; the second operand may be a scalar, a list of scalars, one tensor or a list of tensors, as in
torch's overloads.

>>> import jitorch
>>> ema, new = [jitorch.zeros(2), jitorch.zeros(3)], [jitorch.ones(2), jitorch.ones(3)]
>>> _ = jitorch._foreach_lerp_(ema, new, 0.25)
>>> [t.tolist() for t in ema]
[[0.25, 0.25], [0.25, 0.25, 0.25]]
"""
from __future__ import annotations

from ._tensor import Tensor

UNARY = ("abs", "acos", "asin", "atan", "ceil", "cos", "cosh", "erf", "erfc", "exp", "expm1", "floor", "frac",
         "lgamma", "log", "log10", "log1p", "log2", "neg", "reciprocal", "round", "rsqrt", "sigmoid", "sign", "sin",
         "sinh", "sqrt", "tan", "tanh", "trunc")
BINARY = ("add", "sub", "mul", "div", "clamp_min", "clamp_max", "maximum", "minimum", "pow")


def _lists(name, first, *others):
    """The other operands as one entry per tensor of ``first`` (a scalar or a single tensor is repeated)."""
    first = list(first)
    spread = []
    for other in others:
        if isinstance(other, (list, tuple)):
            if len(other) != len(first):
                raise RuntimeError(f"{name}: Tensor lists must have the same number of tensors, got {len(first)} and "
                                   f"{len(other)}")
            spread.append(list(other))
        else:
            spread.append([other] * len(first))
    return first, spread


def _binary_one(op, t, other, alpha, inplace):
    if op in ("maximum", "minimum") and not isinstance(other, Tensor):
        op = "clamp_min" if op == "maximum" else "clamp_max"  # the Scalar overloads of torch's foreach maximum
    method = getattr(t, op + "_" if inplace else op)
    if alpha is not None:
        return method(other, alpha=alpha)
    return method(other)


def _binary(op, inplace):
    def fn(self, other, *, alpha=None):
        name = f"_foreach_{op}{'_' if inplace else ''}"
        if op == "pow" and not isinstance(self, (list, tuple)):  # _foreach_pow(scalar, exponents)
            return tuple(self ** e for e in other)
        tensors, (others,) = _lists(name, self, other)
        results = [_binary_one(op, t, o, alpha, inplace) for t, o in zip(tensors, others)]
        return self if inplace else tuple(results)
    fn.__name__ = fn.__qualname__ = f"_foreach_{op}{'_' if inplace else ''}"
    return fn


def _unary(op, inplace):
    def fn(self):
        results = [getattr(t, op + "_" if inplace else op)() for t in self]
        return self if inplace else tuple(results)
    fn.__name__ = fn.__qualname__ = f"_foreach_{op}{'_' if inplace else ''}"
    return fn


def _scalars(name, self, scalars):
    """``value``/``scalars`` of addcmul/addcdiv: a number, a list of numbers or a 1-D tensor of them."""
    if isinstance(scalars, Tensor):
        scalars = scalars.tolist()
    return _lists(name, self, scalars)[1][0]


def _addc(op, inplace):
    def fn(self, tensor1, tensor2, value=1, *, scalars=None):
        name = f"_foreach_{op}{'_' if inplace else ''}"
        tensors, (t1, t2) = _lists(name, self, tensor1, tensor2)
        values = _scalars(name, tensors, value if scalars is None else scalars)
        method = op + "_" if inplace else op
        results = [getattr(t, method)(a, b, value=v) for t, a, b, v in zip(tensors, t1, t2, values)]
        return self if inplace else tuple(results)
    fn.__name__ = fn.__qualname__ = f"_foreach_{op}{'_' if inplace else ''}"
    return fn


def _lerp(inplace):
    def fn(self, tensors1, weight):
        name = f"_foreach_lerp{'_' if inplace else ''}"
        tensors, (ends, weights) = _lists(name, self, tensors1, weight)
        results = [(t.lerp_ if inplace else t.lerp)(e, w) for t, e, w in zip(tensors, ends, weights)]
        return self if inplace else tuple(results)
    fn.__name__ = fn.__qualname__ = f"_foreach_lerp{'_' if inplace else ''}"
    return fn


def _foreach_norm(self, ord=2, dtype=None):
    from .linalg import vector_norm

    return tuple(vector_norm(t, ord, dtype=dtype) for t in self)


def _foreach_powsum(self, ord=2, dtype=None):
    return tuple(t.abs().pow(ord).sum(dtype=dtype) for t in self)


def _foreach_max(self):
    return tuple(t.max() for t in self)


def _foreach_mm(self, other):
    tensors, (others,) = _lists("_foreach_mm", self, other)
    return tuple(a.mm(b) for a, b in zip(tensors, others))


def _foreach_clone(self):
    return tuple(t.clone() for t in self)


def _foreach_zero_(self):
    for t in self:
        t.zero_()
    return self


def _foreach_copy_(self, src, non_blocking=False):
    tensors, (sources,) = _lists("_foreach_copy_", self, src)
    for t, s in zip(tensors, sources):
        t.copy_(s, non_blocking=non_blocking)
    return self


def functions():
    """Every ``_foreach_*`` function by name (torch's 91)."""
    table = {f"_foreach_{op}{suffix}": _unary(op, bool(suffix)) for op in UNARY for suffix in ("", "_")}
    table.update({f"_foreach_{op}{suffix}": _binary(op, bool(suffix)) for op in BINARY for suffix in ("", "_")})
    table.update({f"_foreach_{op}{suffix}": _addc(op, bool(suffix)) for op in ("addcmul", "addcdiv")
                  for suffix in ("", "_")})
    table.update({"_foreach_lerp": _lerp(False), "_foreach_lerp_": _lerp(True)})
    for fn in (_foreach_norm, _foreach_powsum, _foreach_max, _foreach_mm, _foreach_clone, _foreach_zero_,
               _foreach_copy_):
        table[fn.__name__] = fn
    for name, fn in table.items():
        fn.__module__ = "jitorch"  # pickled and printed as torch's: jitorch._foreach_add
    return table
