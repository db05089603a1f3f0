"""Turn an op-table ``Pointwise(expr)`` string into a codegen IR expression.

The strings are C-like (``"{0} * (1 - {1} * {1})"``, ``"max({0}, 0)"``, ``"{0} ? {1} : {2}"``); this is a small
recursive-descent parser whose leaves are the IR expressions (or Python numbers) bound to ``{i}``. Function names
and operators map through ``codegen.ir.EXPR_FUNCTIONS`` and ``INFIX_OPS``; anything without a primitive there
(``log1p``, ``floor``, bit operations...) raises `Unfusable`, and the row is simply run eagerly.

>>> from jitorch.codegen.ir import load
>>> print(parse_expr("max({0}, 0) * 2", [load(0, "f32")], "f32"))
mul[f32](max[f32](load[f32](0), const[f32](0.0)), const[f32](2.0))
"""
from __future__ import annotations

import re

from ..codegen.ir import DTYPES, EXPR_FUNCTIONS, INFIX_OPS, UNARY, Expr, const, op

__all__ = ["Unfusable", "parse_expr"]

_TOKEN = re.compile(r"\s*(\{\d+\}|\d+\.\d*(?:[eE][-+]?\d+)?|\d+(?:[eE][-+]?\d+)?|[A-Za-z_]\w*|&&|\|\||==|!=|<=|>="
                    r"|[-+*/<>!?:(),&|^~])")
# Casts spelled in the table ("(bool){0}") and the IR dtype names a "{dtype}" attribute is replaced with.
_CASTS = {"bool": "bool", "int": "i32", "long": "i64", "float": "f32", "double": "f64", **{d: d for d in DTYPES}}
_LEVELS = (("||",), ("&&",), ("==", "!="), ("<", "<=", ">", ">="), ("+", "-"), ("*", "/"))


class Unfusable(Exception):
    """The expression (or one of its operands) has no IR equivalent; the row runs eagerly instead."""


def _tokens(text):
    out, pos = [], 0
    text = text.rstrip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m:
            raise Unfusable(f"cannot tokenize {text[pos:]!r}")
        out.append(m.group(1))
        pos = m.end()
    return out


class _Parser:
    def __init__(self, text, operands, dtype):
        self.toks, self.i = _tokens(text), 0
        self.operands, self.dtype = operands, dtype

    def peek(self):
        return self.toks[self.i] if self.i < len(self.toks) else None

    def take(self, expected=None):
        tok = self.peek()
        if tok is None or (expected is not None and tok != expected):
            raise Unfusable(f"expected {expected!r}, got {tok!r}")
        self.i += 1
        return tok

    def ternary(self):
        cond = self.binary(0)
        if self.peek() != "?":
            return cond
        self.take("?")
        a = self.ternary()
        self.take(":")
        b = self.ternary()
        if not isinstance(cond, Expr) or cond.dtype != "bool":
            raise Unfusable("a ?: condition must be a bool expression")
        a, b = self.unify(a, b)
        return op(INFIX_OPS["?:"], cond, a, b)

    def binary(self, level):
        if level == len(_LEVELS):
            return self.unary()
        left = self.binary(level + 1)
        while self.peek() in _LEVELS[level]:
            sym = self.take()
            right = self.binary(level + 1)
            left = op(INFIX_OPS[sym], *self.unify(left, right))
        return left

    def unary(self):
        tok = self.peek()
        if tok == "-":
            self.take()
            x = self.unary()
            return -x if not isinstance(x, Expr) else op("neg", x)
        if tok == "!":
            self.take()
            x = self.unary()
            if not isinstance(x, Expr) or x.dtype != "bool":
                raise Unfusable("! needs a bool expression")
            return op("not", x)
        if tok == "(" and self.i + 2 < len(self.toks) and self.toks[self.i + 1] in _CASTS \
                and self.toks[self.i + 2] == ")":
            target = _CASTS[self.toks[self.i + 1]]
            self.i += 3
            return _cast(self.unary(), target)
        return self.primary()

    def primary(self):
        tok = self.take()
        if tok.startswith("{"):
            index = int(tok[1:-1])
            if index >= len(self.operands):
                raise Unfusable(f"{tok} has no operand")
            return self.operands[index]
        if tok[0].isdigit():
            return float(tok) if any(c in tok for c in ".eE") else int(tok)
        if tok == "(":
            inner = self.ternary()
            self.take(")")
            return inner
        if tok not in EXPR_FUNCTIONS:
            raise Unfusable(f"no IR primitive for {tok}()")
        self.take("(")
        args = [self.ternary()]
        while self.peek() == ",":
            self.take()
            args.append(self.ternary())
        self.take(")")
        prim = EXPR_FUNCTIONS[tok]
        if prim in UNARY:
            if len(args) != 1:
                raise Unfusable(f"{tok}() takes one argument")
            return op(prim, self.as_expr(args[0], self.dtype))
        return op(prim, *self.unify(*args))

    def as_expr(self, x, dtype):
        if isinstance(x, Expr):
            return x
        if x is None or isinstance(x, bool) or not isinstance(x, (int, float)):
            raise Unfusable(f"operand {x!r} is not a number")
        return const(x, dtype)

    def unify(self, *args):
        """The operands of one operation: numbers take the dtype of the expressions beside them."""
        dtype = next((x.dtype for x in args if isinstance(x, Expr)), self.dtype)
        return tuple(self.as_expr(x, dtype) for x in args)


def _cast(x, dtype):
    if not isinstance(x, Expr):
        if x is None or isinstance(x, bool) or not isinstance(x, (int, float)) or dtype == "bool":
            raise Unfusable(f"cast of {x!r}")
        return const(x, dtype)  # ``(float){2}``: a row's number rounded to the row's dtype, as ATen's Scalar
    if x.dtype == dtype:
        return x
    if dtype == "bool" or x.dtype == "bool":
        # The IR's cast to or from bool is not C's "!= 0" everywhere; keep it eager rather than guess.
        raise Unfusable(f"cast {x.dtype} -> {dtype}")
    return op("cast", x, dtype=dtype)


def parse_expr(text, operands, dtype):
    """The IR expression for ``text`` with ``{i}`` bound to ``operands[i]`` (IR expressions or Python numbers).

    ``dtype`` is the compute dtype: numbers that meet no expression become constants of it. Raises `Unfusable`.

    >>> from jitorch.codegen.ir import load
    >>> parse_expr("{0} ? {1} : {2}", [load(0, "bool"), load(1, "f64"), 0.5], "f64").op
    'where'
    """
    parser = _Parser(text.replace("{dtype}", dtype), operands, dtype)
    try:
        result = parser.ternary()
    except (TypeError, ValueError) as e:  # the IR's own dtype checks (float-only ops on ints...)
        raise Unfusable(str(e)) from None
    if parser.peek() is not None:
        raise Unfusable(f"trailing {parser.peek()!r} in {text!r}")
    if not isinstance(result, Expr):
        raise Unfusable("the expression reads no tensor")
    return result
