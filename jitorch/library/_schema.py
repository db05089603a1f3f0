"""Operator schemas: ``"ns::foo(Tensor x, int n=3) -> Tensor"`` parsed into a `FunctionSchema`, and inferred from a
function's type hints (`infer_schema`) as ``torch.library.infer_schema`` does, with torch's errors.

>>> import jitorch
>>> def f(x: jitorch.Tensor, n: int = 3) -> jitorch.Tensor: ...
>>> infer_schema(f, mutates_args=())
'(Tensor x, SymInt n=3) -> Tensor'
>>> s = parse_schema("mylib::foo(Tensor(a!) x, Tensor? y=None, *, float a=1.5) -> ()")
>>> [(a.name, a.mutable, a.kwarg_only, a.has_default and a.default) for a in s.arguments]
[('x', True, False, False), ('y', False, False, None), ('a', False, True, 1.5)]
"""
from __future__ import annotations

import ast
import collections.abc
import inspect
import re
import typing
from types import GenericAlias

__all__ = ["Argument", "Return", "FunctionSchema", "parse_schema", "infer_schema"]

_NO_DEFAULT = object()
BASE_TYPES = frozenset({"Tensor", "int", "SymInt", "float", "bool", "str", "Scalar", "ScalarType", "Device", "Layout",
                        "MemoryFormat", "Generator", "complex", "Dimname", "Storage", "Stream", "Any"})
# base, alias annotation ``(a!)``, optional elements, list ``[]``/``[2]``, optional list
_TYPE = re.compile(r"^(\w+)(?:\((\w+)(!?)\))?(\?)?(?:\[(\d*)\])?(\?)?$")


class Argument:
    """One argument of a schema: its type string split into what binding and aliasing need."""

    __slots__ = ("name", "base", "alias", "mutable", "optional", "is_list", "list_size", "elem_optional", "default",
                 "kwarg_only", "default_text", "kind")

    def __init__(self, name, type_text, default_text=None, kwarg_only=False, where=""):
        m = _TYPE.match(type_text.replace(" ", ""))
        if m is None or m.group(1) not in BASE_TYPES:
            raise RuntimeError(f"Unknown type name '{type_text}':\n{where}")
        base, alias, bang, q1, size, q2 = m.groups()
        self.name, self.base, self.alias, self.mutable = name, base, alias, bool(bang)
        self.is_list, self.list_size = size is not None, size or ""
        self.elem_optional = bool(q1) and self.is_list
        self.optional = bool(q2) or (bool(q1) and not self.is_list)
        self.kwarg_only, self.default_text = kwarg_only, default_text
        self.default = _NO_DEFAULT if default_text is None else _parse_default(default_text, base, where)
        tensor = base == "Tensor"
        self.kind = ("tensor_list" if self.is_list else "tensor_opt" if self.optional else "tensor") if tensor \
            else "value"

    @property
    def has_default(self):
        return self.default is not _NO_DEFAULT

    @property
    def type_text(self):
        alias = f"({self.alias}{'!' if self.mutable else ''})" if self.alias else ""
        if self.is_list:
            elem = f"{self.base}{alias}{'?' if self.elem_optional else ''}"
            return f"{elem}[{self.list_size}]{'?' if self.optional else ''}"
        return f"{self.base}{alias}{'?' if self.optional else ''}"

    def __str__(self):
        if self.default_text is None:
            return f"{self.type_text} {self.name}"
        default = self.default_text
        if type(self.default) is float and default.endswith(".0"):
            default = default[:-1]  # torch prints a float default as C++ does: ``scale=1.``
        return f"{self.type_text} {self.name}={default}"


class Return(Argument):
    """One return: a type (and an optional name)."""

    def __str__(self):
        return self.type_text + (f" {self.name}" if self.name else "")


class FunctionSchema:
    """``name(arguments) -> returns``; ``returns_tuple`` when the returns are a tuple (even of one, ``((Tensor))``)."""

    def __init__(self, name, overload_name, arguments, returns, returns_tuple):
        self.name, self.overload_name = name, overload_name
        self.arguments, self.returns, self.returns_tuple = tuple(arguments), tuple(returns), returns_tuple
        self.positional = tuple(a for a in self.arguments if not a.kwarg_only)
        self.index = {a.name: i for i, a in enumerate(self.arguments)}

    @property
    def is_mutable(self):
        return any(a.mutable for a in self.arguments)

    def with_name(self, name, overload_name=""):
        return FunctionSchema(name, overload_name, self.arguments, self.returns, self.returns_tuple)

    def __str__(self):
        args, star = [], False
        for a in self.arguments:
            if a.kwarg_only and not star:
                args.append("*")
                star = True
            args.append(str(a))
        rets = [str(r) for r in self.returns]
        if not self.returns_tuple:
            ret = rets[0]
        elif len(rets) == 1:
            ret = f"(({rets[0]}))"
        else:
            ret = f"({', '.join(rets)})"
        head = self.name + (f".{self.overload_name}" if self.overload_name else "")
        return f"{head}({', '.join(args)}) -> {ret}"

    __repr__ = __str__


def _parse_default(text, base, where):
    if text in ("True", "False", "None"):
        return {"True": True, "False": False, "None": None}[text]
    if base in ("ScalarType", "Layout", "MemoryFormat") and re.fullmatch(r"\w+", text):
        import jitorch

        return getattr(jitorch, text, text)
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        try:
            return float(text)  # inf, -inf, nan
        except ValueError:
            raise RuntimeError(f"invalid default value {text!r}:\n{where}") from None
    return list(value) if isinstance(value, tuple) else value


def _split_top(text):
    """``text`` split at the commas outside brackets and quotes."""
    parts, depth, quote, start = [], 0, None, 0
    for i, c in enumerate(text):
        if quote:
            quote = None if c == quote else quote
        elif c in "'\"":
            quote = c
        elif c in "([":
            depth += 1
        elif c in ")]":
            depth -= 1
        elif c == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return [p.strip() for p in parts if p.strip()]


def _closing(text, start):
    """The index of the ``)`` closing the ``(`` at ``start``; torch's parse errors otherwise."""
    depth = 0
    for i in range(start, len(text)):
        c = text[i]
        if c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
            if depth == 0:
                return i
        elif c == "-" and depth == 1 and text.startswith("->", i):
            raise RuntimeError(f"expected ) but found 'arrow' here:\n{text}\n{' ' * i}~~ <--- HERE\n")
    raise RuntimeError(f"expected ) but found 'eof' here:\n{text}\n{' ' * len(text)}~ <--- HERE")


def parse_schema(text):
    """A `FunctionSchema` from torch's schema syntax; the name part may be empty (``"(Tensor x) -> Tensor"``)."""
    text = text.strip()
    open_at = text.find("(")
    if open_at < 0:
        raise RuntimeError(f"expected ( to open the argument list here:\n{text}\n~ <--- HERE")
    close = _closing(text, open_at)
    head, rest = text[:open_at].strip(), text[close + 1:].strip()
    if not rest.startswith("->"):
        found = repr(rest[:1]) if rest else "'eof'"
        raise RuntimeError(f"expected 'arrow' but found {found} here:\n{text}\n{' ' * (close + 1)}~ <--- HERE")
    name, _, overload = head.partition(".")
    args, kwarg_only = [], False
    for part in _split_top(text[open_at + 1:close]):
        if part == "*":
            kwarg_only = True
            continue
        decl, eq, default = part.partition("=")
        pieces = decl.strip().rsplit(None, 1)
        if len(pieces) != 2:
            raise RuntimeError(f"expected a type and a name for argument {part!r} here:\n{text}")
        args.append(Argument(pieces[1], pieces[0], default.strip() if eq else None, kwarg_only, text))
    returns, as_tuple = _parse_returns(rest[2:].strip(), text)
    return FunctionSchema(name, overload, args, returns, as_tuple)


def _parse_returns(text, where):
    if text == "()":
        return [], True
    as_tuple = text.startswith("(") and text.endswith(")") and _closing(text, 0) == len(text) - 1
    items = _split_top(text[1:-1]) if as_tuple else [text]
    if as_tuple and len(items) == 1:  # ``(Tensor)`` is one Tensor; ``((Tensor))`` a tuple of one
        inner = items[0]
        if inner.startswith("(") and inner.endswith(")"):
            items = [inner[1:-1].strip()]
        else:
            as_tuple = False
    returns = []
    for item in items:
        pieces = item.split()
        returns.append(Return(pieces[1] if len(pieces) > 1 else "", pieces[0], None, False, where))
    return returns, as_tuple


# -- inference from type hints ---------------------------------------------------------------------------------------
def _derived(base, schema_type, lists, optional_elems, optional_list):
    seqs = (lambda t: (typing.Sequence[t], typing.List[t], GenericAlias(collections.abc.Sequence, (t,)),  # noqa: UP006
                       GenericAlias(list, (t,))))
    out = [(base, schema_type), (typing.Optional[base], f"{schema_type}?")]
    if lists:
        out += [(s, f"{schema_type}[]") for s in seqs(base)]
    if optional_elems:
        out += [(s, f"{schema_type}?[]") for s in seqs(typing.Optional[base])]
    if optional_list:
        out += [(typing.Optional[s], f"{schema_type}[]?") for s in seqs(base)]
    return out


def _tables():
    from .._device import device
    from .._dtype import dtype
    from .._tensor import Tensor
    from ..types import Number

    params = {}
    # (annotation, schema type, list[T], list[Optional[T]], Optional[list[T]]), torch's table
    for row in ((Tensor, "Tensor", True, True, False), (int, "SymInt", True, False, True),
                (float, "float", True, False, True), (bool, "bool", True, False, True),
                (str, "str", False, False, False), (Number, "Scalar", True, False, False),
                (dtype, "ScalarType", False, False, False), (device, "Device", False, False, False)):
        params.update(_derived(*row))
    returns = {Tensor: "Tensor", typing.List[Tensor]: "Tensor[]", list[Tensor]: "Tensor[]",  # noqa: UP006
               int: "SymInt", float: "float", bool: "bool", Number: "Scalar"}
    return params, returns


_TABLES: list = []


def supported_types():
    """``(parameter types, return types)``: Python annotation -> schema type, built once (after the Tensor exists)."""
    if not _TABLES:
        _TABLES.extend(_tables())
    return _TABLES[0], _TABLES[1]


def infer_schema(prototype_function, /, *, mutates_args, op_name=None):
    """The schema string of a function from its type hints (``torch.library.infer_schema``); ``mutates_args`` names
    the Tensor arguments the function writes (or is ``"unknown"``: all of them)."""
    sig = inspect.signature(prototype_function)
    params_table, returns_table = supported_types()
    if type(mutates_args) is not str:
        mutates_args = tuple(mutates_args)

    def error_fn(what):
        raise ValueError(f"infer_schema(func): {what} Got func with signature {sig})")

    def resolve(annotation):
        if not isinstance(annotation, str):
            return annotation
        try:
            return eval(annotation, prototype_function.__globals__)  # noqa: S307 - as torch: stringified hints
        except Exception as e:  # noqa: BLE001
            error_fn(f"Unsupported type annotation {annotation}. It is not a type. ({type(e).__name__}: {e})")

    params, seen, kw_seen = [], set(), False
    for idx, (name, param) in enumerate(sig.parameters.items()):
        if param.kind not in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY):
            error_fn("We do not support positional-only args, varargs, or varkwargs.")
        if param.kind == inspect.Parameter.KEYWORD_ONLY and not kw_seen:
            params.append("*")
            kw_seen = True
        if param.annotation is inspect.Parameter.empty:
            error_fn(f"Parameter {name} must have a type annotation.")
        annotation = resolve(param.annotation)
        schema_type = params_table.get(annotation) if _hashable(annotation) else None
        if schema_type is None:
            if typing.get_origin(annotation) is tuple:
                as_list = _tuple_to_list(annotation)
                example = f"For example, {as_list}.\n\n" if as_list in params_table else "\n\n"
                error_fn(f"Parameter {name} has unsupported type {param.annotation}. We do not support Tuple inputs "
                         f"in schema. As a workaround, please try to use List instead. {example}The valid types are: "
                         f"{params_table.keys()}.")
            error_fn(f"Parameter {name} has unsupported type {param.annotation}. The valid types are: "
                     f"{params_table.keys()}.")
        if type(mutates_args) is str:
            if mutates_args != "unknown":
                raise ValueError("mutates_args must either be a sequence of the names of the arguments that are "
                                 "mutated or the string 'unknown'. ")
            if schema_type.startswith("Tensor"):
                schema_type = f"Tensor(a{idx}!){schema_type[len('Tensor'):]}"
        elif name in mutates_args:
            if not schema_type.startswith("Tensor"):
                error_fn(f"Parameter {name} is in mutable_args but only Tensors or collections of Tensors can be "
                         "mutated")
            schema_type = f"Tensor(a{idx}!){schema_type[len('Tensor'):]}"
        seen.add(name)
        if param.default is inspect.Parameter.empty:
            params.append(f"{schema_type} {name}")
        else:
            params.append(f"{schema_type} {name}={_default_repr(param.default, name, error_fn)}")
    if mutates_args != "unknown":
        missing = set(mutates_args) - seen
        if missing:
            error_fn(f"{missing} in mutates_args were not found in the custom op's signature. mutates_args should "
                     "contain the names of all args that the custom op mutates, or just the string 'unknown' if you "
                     "don't know.")
    ret = _parse_return(resolve(sig.return_annotation), returns_table, error_fn)
    head = op_name if op_name is not None else ""
    return f"{head}({', '.join(params)}) -> {ret}"


def _tuple_to_list(annotation):
    args = typing.get_args(annotation)
    if not args:
        return list
    if len(args) == 1 or (len(args) == 2 and args[1] is Ellipsis):
        return list[args[0]]
    return list[typing.Union[args]]


def _hashable(annotation):
    try:
        hash(annotation)
    except TypeError:
        return False
    return True


def _default_repr(value, name, error_fn):
    from .._device import device
    from .._dtype import dtype

    if value is None or isinstance(value, (int, float, bool)):
        return str(value)
    if isinstance(value, (str, device)):
        return f'"{value}"'
    if isinstance(value, dtype):
        return str(value).removeprefix("torch.").removeprefix("jitorch.")
    error_fn(f"Parameter {name} has an unsupported default value type {type(value)}. Please file an issue on GitHub "
             "so we can prioritize this.")


def _parse_return(annotation, table, error_fn):
    if annotation is None:
        return "()"
    if annotation is inspect.Parameter.empty:
        error_fn("No return type annotation was provided. Please add one.")
    if typing.get_origin(annotation) is not tuple:
        if not _hashable(annotation) or annotation not in table:
            error_fn(f"Return has unsupported type {annotation}. The valid types are: {table}.")
        return table[annotation]
    args = typing.get_args(annotation)
    for arg in args:
        if not _hashable(arg) or arg not in table:
            error_fn(f"Return has unsupported type {annotation}. The valid types are: {table}.")
    out = ", ".join(table[a] for a in args)
    return f"(({out}))" if len(args) == 1 else f"({out})"
