"""Names: unique, valid identifiers for nodes, and importable dotted paths for call targets.

A target's path (``"jitorch.relu"``, ``"operator.add"``) is what generated code calls and what pickling stores,
because jitorch's functions are built by factories and their ``__qualname__`` does not lead back to them.
"""
from __future__ import annotations

import builtins
import importlib
import keyword
import operator
import re
import sys

__all__ = ["Namespace", "global_path", "resolve_path"]

# Namespaces searched first, so ``jitorch.mul`` is named by its public path, not its private defining module.
_PUBLIC = ("jitorch", "jitorch.nn.functional", "jitorch.linalg", "jitorch.special", "jitorch.fft", "operator",
           "math", "builtins")
_BUILTIN_NAMES = frozenset(dir(builtins))  # once: dir() builds a sorted list on every call
# Names generated code uses for its own purposes: a node must not shadow them.
RESERVED = {"self", "jitorch", "operator", "math", "getattr", "slice", "float", "int", "inf", "nan", "None", "True",
            "False", "device"}


def _module(name):
    module = sys.modules.get(name)
    if module is None and name in ("jitorch.nn.functional", "jitorch.linalg", "math"):
        module = importlib.import_module(name)
    return module


def global_path(obj) -> str | None:
    """A dotted path that imports ``obj``, or None when it has none (lambdas, local functions)."""
    for modname in _PUBLIC:
        module = _module(modname)
        name = getattr(obj, "__name__", None)
        if module is not None and isinstance(name, str) and getattr(module, name, None) is obj:
            return name if modname == "builtins" else f"{modname}.{name}"
    modname, qualname = getattr(obj, "__module__", None), getattr(obj, "__qualname__", None)
    if modname and qualname and "<" not in qualname:
        try:
            if resolve_path(f"{modname}.{qualname}") is obj:
                return f"{modname}.{qualname}"
        except (ImportError, AttributeError):
            pass
    return None


def resolve_path(path: str):
    """The object a :func:`global_path` names."""
    if "." not in path:
        return getattr(builtins, path)
    parts = path.split(".")
    for i in range(len(parts) - 1, 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for attr in parts[i:]:
            obj = getattr(obj, attr)
        return obj
    raise ImportError(f"cannot import {path!r}")


def target_basename(target) -> str:
    """The stem a node name is derived from: ``operator.add`` -> ``add``, ``"layer1.0"`` -> ``layer1_0``."""
    if isinstance(target, str):
        return target.replace(".", "_")
    if target is getattr:
        return "getattr"
    if target is operator.getitem:
        return "getitem"
    name = getattr(target, "__name__", None) or type(target).__name__
    return name.strip("_") or "fn"


class Namespace:
    """Hands out unique identifiers: ``add``, ``add_1``, ``add_2``...

    >>> ns = Namespace(); ns.create_name("add"), ns.create_name("add"), ns.create_name("1x"), ns.create_name("sum")
    ('add', 'add_1', '_1x', 'sum_1')
    """

    def __init__(self):
        self._used: set[str] = set()
        self._counters: dict[str, int] = {}

    def create_name(self, candidate: str) -> str:
        name = re.sub(r"[^0-9a-zA-Z_]+", "_", candidate) or "_"
        if name[0].isdigit():
            name = f"_{name}"
        match = re.fullmatch(r"(.*)_(\d+)", name)
        base = match.group(1) if match and match.group(1) else name
        if name in self._used or keyword.iskeyword(name) or name in RESERVED or name in _BUILTIN_NAMES:
            name = base
            while name in self._used or keyword.iskeyword(name) or name in RESERVED or name in _BUILTIN_NAMES:
                self._counters[base] = self._counters.get(base, 0) + 1
                name = f"{base}_{self._counters[base]}"
        self._used.add(name)
        return name

    def reserve(self, name: str):
        self._used.add(name)
