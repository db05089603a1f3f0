"""``__jitorch_function__``: how a value that is not a Tensor (``jitorch.fx.Proxy``) takes over the public functions
and Tensor methods it is passed to, as ``__torch_function__`` does in PyTorch.

A type opts in by defining ``__jitorch_function__(cls, func, args, kwargs)`` and counting its live instances with
:func:`acquire` / :func:`release`. Then, while any such instance is alive:

- every public function (``jitorch.*``, ``jitorch.nn.functional.*``, ``jitorch.linalg.*``, ``jitorch.special.*``)
  that finds one among its arguments (also inside lists, tuples and dicts) hands the call over: ``func`` is the public
  function itself, whatever name or container the caller reached it through (``self.act = F.gelu``, a dict of
  activations, a closure);
- every Tensor method does the same with ``func`` the method (:func:`tensor_method_name` gives its name), and the
  binary operators return ``NotImplemented``, so Python asks the other operand's reflected operator.

The functions are wrapped once, at import (:func:`publish`): the wrapper costs one call and one integer test while no
overriding value exists. Methods are looked up on the class at each call, so their wrappers are installed only while
one exists (:func:`acquire` installs them, the last :func:`release` removes them): eager code pays nothing for them.

>>> import jitorch
>>> class Logged:
...     calls = []
...     def __init__(self): acquire()
...     def __del__(self): release()
...     @classmethod
...     def __jitorch_function__(cls, func, args, kwargs):
...         cls.calls.append(tensor_method_name(func) or func.__name__)
...         return "intercepted"
>>> v = Logged()
>>> jitorch.relu(v), jitorch.ones(2).mul(v), jitorch.cat([jitorch.ones(1), v])
('intercepted', 'intercepted', 'intercepted')
>>> del v
>>> Logged.calls, jitorch.ones(1).mul(2)
(['relu', 'mul', 'cat'], tensor([2.]))
"""
from __future__ import annotations

import functools
import sys
import threading
import types

__all__ = ["acquire", "release", "publish", "public", "register_public", "find_override", "tensor_method_name",
           "NEVER_OVERRIDDEN", "FUNCTION_MODES", "mode_call", "is_subclass_kind", "forget_types"]

# Public functions that inspect a value's type instead of computing on it: they must answer for the value itself.
NEVER_OVERRIDDEN = frozenset({"is_tensor", "is_storage", "is_floating_point", "is_complex", "is_grad_enabled",
                              "is_inference_mode_enabled", "get_default_dtype", "typename", "is_nonzero"})
# Tensor operators that answer NotImplemented, so that ``tensor + proxy`` becomes ``proxy.__radd__(tensor)``.
_OPERATORS = frozenset(f"__{p}{n}__" for n in ("add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "matmul",
                                                "and", "or", "xor", "lshift", "rshift") for p in ("", "r")) | {
    "__lt__", "__le__", "__gt__", "__ge__", "__eq__", "__ne__"}
# The names torch's Tensor operators hand to a function mode (``x * 2`` is ``mul``, ``2 - x`` is ``__rsub__``).
_OPERATOR_NAMES = {"__add__": "add", "__radd__": "add", "__sub__": "sub", "__mul__": "mul", "__rmul__": "mul",
                   "__truediv__": "div", "__rtruediv__": "__rdiv__", "__mod__": "remainder", "__pow__": "pow",
                   "__matmul__": "matmul", "__rand__": "bitwise_and", "__ror__": "bitwise_or",
                   "__rxor__": "bitwise_xor", "__lt__": "lt", "__le__": "le", "__gt__": "gt", "__ge__": "ge",
                   "__ne__": "ne"}
# Dunder methods that do compute with their arguments; the other dunders (repr, copy, pickling...) are left alone.
_DUNDER_METHODS = frozenset({"__getitem__", "__setitem__"})
# Dunders that only a user's Tensor subclass hears (jitorch/_subclass.py), under torch's names (``x += 1`` is
# ``add_``, ``-x`` is ``neg``); function modes and jitorch's own overriding types keep them unwrapped.
_SUBCLASS_INPLACE = {"__iadd__": "add_", "__isub__": "sub_", "__imul__": "mul_", "__itruediv__": "div_",
                     "__ifloordiv__": "floor_divide_", "__imod__": "remainder_", "__ipow__": "pow_"} | {
    n: n for n in ("__iand__", "__ior__", "__ixor__", "__ilshift__", "__irshift__")}
_SUBCLASS_UNARY = {"__pos__": "positive", "__neg__": "neg", "__abs__": "abs"} | {n: n for n in (
    "__invert__", "__len__", "__bool__", "__float__", "__int__", "__index__", "__complex__", "__contains__",
    "__array__", "__reversed__", "__repr__", "__format__", "__deepcopy__", "__reduce_ex__")}
# The Tensor method torch hands to an argument's ``__torch_function__`` for an operator (``x + y``: ``Tensor.add``,
# ``x == y``: ``Tensor.eq``, ``x += y``: ``Tensor.add_``); the others hand the operator (``Tensor.__pow__``).
_HANDED_METHODS = {n: m for n, m in (_OPERATOR_NAMES | _SUBCLASS_INPLACE).items()
                   if not m.startswith("__") and n not in ("__pow__", "__ipow__")} | {"__eq__": "eq"}
# Whether a type is a user's Tensor subclass taking over (`_classify`): a third answer beside True and False.
_SUBCLASS = "subclass"

_live = 0  # overriding values alive now
class _ThreadModes(threading.local):
    """This thread's entered modes, innermost last: torch's mode stack is per thread, so a mode entered in one
    thread never sees (nor races with) another thread's calls."""

    def __init__(self):
        self.modes = []

    def __bool__(self):
        return bool(self.modes)

    def __len__(self):
        return len(self.modes)

    def __iter__(self):
        return iter(self.modes)

    def __getitem__(self, i):
        return self.modes[i]

    def __delitem__(self, i):
        del self.modes[i]

    def append(self, mode):
        self.modes.append(mode)

    def pop(self):
        return self.modes.pop()


# Entered ``overrides.TorchFunctionMode`` instances, per thread. Each counts as a live overriding value while
# entered; the public functions and Tensor methods hand their calls to the innermost (see `mode_call`).
FUNCTION_MODES = _ThreadModes()
# Those of them that take over Tensor methods too: a Tensor subclass answering for its own methods (a sparse_coo
# tensor, jitorch/sparse) acquires with ``methods=False``, so eager code keeps its unwrapped methods meanwhile.
_method_users = 0
_lock = threading.RLock()
_wrappers: dict[int, object] = {}  # id(original function) -> its public wrapper: aliases share one
_methods: dict[int, str] = {}  # id(installed Tensor method wrapper) -> its name (``mul`` and ``multiply`` share code)
_installed: list = []  # (class, name, original) of the Tensor methods replaced while values are alive
# Whether each type seen defines ``__jitorch_function__``. ``hasattr`` answers False for Tensor, int... by raising and
# catching an AttributeError inside (about 0.3 us an argument of every public call while a sparse tensor lives);
# cleared at each `acquire`, so a type given the method later is seen.
_overriding: dict = {}


def find_override(args, kwargs=None):
    """The first argument (searching lists, tuples and dicts) whose type defines ``__jitorch_function__``, or None."""
    known = _overriding.get
    for a in args:
        if known(type(a)) is not False:  # a type known not to override (a Tensor, a number) is skipped at once
            found = _search(a)
            if found is not None:
                return found
    if kwargs:
        for a in kwargs.values():
            if known(type(a)) is not False:
                found = _search(a)
                if found is not None:
                    return found
    return None


def _search(a):
    t = type(a)
    if t is list or t is tuple or t is dict:  # (never cached: their items are searched)
        return find_override(a.values() if t is dict else a)
    overriding = _overriding.get(t)
    if overriding is None:
        overriding = _overriding[t] = _classify(t)
    if overriding is _SUBCLASS:  # a user's Tensor subclass, heard unless a DisableTorchFunction* block is open
        return None if _subclass.FLAGS.subclass_off else a
    return a if overriding else None


def _classify(t):
    if _subclass.is_user_type(t):
        return _SUBCLASS if _subclass.takes_over(t) else False
    return hasattr(t, "__jitorch_function__")


def is_subclass_kind(t) -> bool:
    """Whether ``t`` is a user's Tensor subclass whose ``__torch_function__`` hears calls (off inside
    ``DisableTorchFunctionSubclass``)."""
    kind = _overriding.get(t)
    if kind is None:
        kind = _overriding[t] = _classify(t)
    return kind is _SUBCLASS and not _subclass.FLAGS.subclass_off


def forget_types():
    """Forget which types override (a new Tensor subclass, a type given ``__torch_function__`` later)."""
    _overriding.clear()


def public(fn):
    """``fn`` as the public function: it hands calls with an overriding argument to that argument's type."""
    wrapper = _wrappers.get(id(fn))
    if wrapper is not None:
        return wrapper

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        if _live:
            if FUNCTION_MODES:
                return mode_call(wrapper, args, kwargs)
            found = find_override(args, kwargs)
            if found is not None:
                return type(found).__jitorch_function__(wrapper, args, kwargs)
        return fn(*args, **kwargs)
    _wrappers[id(fn)] = wrapper
    return register_public(wrapper, fn)


def register_public(wrapper, original):
    """Note ``wrapper`` as a public function computing ``original`` (`public`, or a wrapper that also renames keywords:
    _numpy_names.py), which an overriding type calls to compute the result itself."""
    wrapper.__jitorch_original__ = original
    _wrappers[id(wrapper)] = wrapper  # publishing a namespace twice keeps the first wrapper
    return wrapper


def publish(namespace: dict):
    """Replace each public function of a module's ``namespace`` by its :func:`public` wrapper."""
    for name, value in list(namespace.items()):
        if isinstance(value, types.FunctionType) and not name.startswith("_") and name not in NEVER_OVERRIDDEN:
            namespace[name] = public(value)


def name_public_functions():
    """Name each public function of the loaded public jitorch modules after where it is published
    (``jitorch.nn.functional.relu``), as torch's functions are named, unless its own module already holds it.

    Pickle finds a function by its module and qualified name. The wrappers (`public`, keyword renaming, ``out=``)
    copy the wrapped function's names, which lead to a private module holding the unwrapped function, or to none for
    one made by a factory: a model holding ``F.relu`` (a ``TransformerEncoderLayer``) could not be saved.
    """
    names = sorted(n for n in sys.modules if n.split(".")[0] == "jitorch" and not any(
        part.startswith("_") for part in n.split(".")))
    for module_name in names:
        for name, fn in list(vars(sys.modules[module_name]).items()):
            if name.startswith("_") or not isinstance(fn, types.FunctionType) or \
                    not fn.__module__.startswith("jitorch"):
                continue
            home = sys.modules.get(fn.__module__)
            if home is None or "<" in fn.__qualname__ or getattr(home, fn.__qualname__, None) is not fn:
                fn.__module__, fn.__qualname__ = module_name, name


def tensor_method_name(func) -> str | None:
    """The name ``func`` has on Tensor when it is a Tensor method handing a call over (not a public function)."""
    return _methods.get(id(func))


def acquire(methods=True):
    """Note one more live overriding value; the first that takes over methods installs the Tensor method wrappers
    (``methods=False``: only the public functions hand calls over)."""
    global _live, _method_users
    with _lock:
        _overriding.clear()
        _live += 1
        if methods:
            _method_users += 1
            if _method_users == 1:
                _install_methods()


def release(methods=True):
    """Note one overriding value fewer (acquired with the same ``methods``); the last that took over methods removes
    the Tensor method wrappers."""
    global _live, _method_users
    with _lock:
        _live -= 1
        if methods:
            _method_users -= 1
            if _method_users == 0:
                _uninstall_methods()


def _install_methods():
    global _Tensor
    from ._tensor import Tensor

    _Tensor = Tensor
    for name, original in list(vars(Tensor).items()):
        if isinstance(original, property):
            if name.startswith("_") or original.fget is None:
                continue
            wrapper = _subclass_property(original)
        elif not isinstance(original, types.FunctionType):
            continue
        elif name in _OPERATORS:
            wrapper = _operator(original)
            wrapper.__name__ = _OPERATOR_NAMES.get(name, name)  # what a function mode sees, as torch names it
            wrapper.__jitorch_method__ = _HANDED_METHODS.get(name)
        elif not name.startswith("_") or name in _DUNDER_METHODS:
            wrapper = _method(original)
            wrapper.__name__ = name  # ``_view`` is published as ``view``: the name torch's functions carry
            _methods[id(wrapper)] = name
        elif name in _SUBCLASS_INPLACE:
            wrapper = _subclass_inplace(original)
            wrapper.__name__ = _SUBCLASS_INPLACE[name]
            wrapper.__jitorch_method__ = _HANDED_METHODS.get(name)
        elif name in _SUBCLASS_UNARY:
            wrapper = _subclass_unary(original)
            wrapper.__name__ = _SUBCLASS_UNARY[name]
        else:
            continue
        _installed.append((Tensor, name, original))
        setattr(Tensor, name, wrapper)


def _uninstall_methods():
    for cls, name, original in reversed(_installed):
        setattr(cls, name, original)
    _installed.clear()
    _methods.clear()


def mode_call(func, args, kwargs):
    """``func``'s call handed to the innermost function mode, which is off the stack while it handles it (so calling
    ``func`` inside runs it, as torch's ``__torch_function__`` modes)."""
    # the types that would hear the call next (torch's ``types``); none can exist before a user's instance does
    types = _subclass.overloaded_types(args, kwargs) if _subclass.dispatch_enabled() else ()
    mode = FUNCTION_MODES.pop()
    try:
        return mode.__torch_function__(func, types, args, kwargs)
    finally:
        FUNCTION_MODES.append(mode)


def _method(original):
    @functools.wraps(original)
    def method(*args, **kwargs):
        if FUNCTION_MODES:
            return mode_call(method, args, kwargs)
        found = find_override(args, kwargs)
        if found is not None and getattr(type(found), "__jitorch_methods__", True):
            return type(found).__jitorch_function__(method, args, kwargs)
        return original(*args, **kwargs)  # (a type hearing functions only, as sparse tensors: the method's own)
    return method


def _operator(original):
    @functools.wraps(original)
    def operator_method(self, other):
        if FUNCTION_MODES:
            return mode_call(operator_method, (self, other), {})
        found = _search(other)
        if found is not None and not getattr(type(found), "__jitorch_methods__", True):
            found = None  # a type hearing functions only (sparse tensors): the operator's own handling
        if found is None:
            if not _hears(self):
                return original(self, other)
            found = self
        elif _overriding.get(type(found)) is not _SUBCLASS:
            return NotImplemented  # a Proxy: Python asks its reflected operator
        try:
            return type(found).__jitorch_function__(_as_method(operator_method), (self, other), {})
        except TypeError:  # as torch's operators: every handler declined, so Python asks the other operand
            return NotImplemented
    return operator_method


def _as_method(operator):
    """What torch hands to ``__torch_function__`` for an operator (`_HANDED_METHODS`), so a handler keyed on
    ``Tensor.add`` hears ``x + y`` too; the operator itself where torch hands that."""
    name = operator.__jitorch_method__
    method = vars(_Tensor).get(name) if name else None
    return method if id(method) in _methods else operator


def _hears(a) -> bool:
    """Whether ``a`` is an instance of a user's Tensor subclass whose ``__torch_function__`` hears calls now."""
    return type(a) is not _Tensor and _search(a) is not None and _overriding.get(type(a)) is _SUBCLASS


def _subclass_unary(original):
    @functools.wraps(original)
    def dunder(self, *args, **kwargs):
        if _hears(self):
            return type(self).__jitorch_function__(dunder, (self, *args), kwargs)
        return original(self, *args, **kwargs)
    return dunder


def _subclass_inplace(original):
    @functools.wraps(original)
    def inplace(self, other):
        found = self if _hears(self) else other if _hears(other) else None
        if found is None:
            return original(self, other)
        try:
            return type(found).__jitorch_function__(_as_method(inplace), (self, other), {})
        except TypeError:  # every handler declined: Python tries ``self + other`` next, as torch's
            return NotImplemented
    return inplace


def _subclass_property(prop):
    """``prop`` with its getter and setter heard by a user's Tensor subclass, as torch's (``func`` is
    ``Tensor.<name>.__get__`` / ``__set__``)."""
    fget, fset = prop.fget, prop.fset

    def get(self):
        if _hears(self):
            return type(self).__jitorch_function__(wrapped.__get__, (self,), {})
        return fget(self)

    def set_(self, value):
        if _hears(self):
            return type(self).__jitorch_function__(wrapped.__set__, (self, value), {})
        return fset(self, value)

    wrapped = property(get, set_ if fset is not None else None, prop.fdel, prop.__doc__)
    return wrapped


from . import _subclass  # noqa: E402  (it imports this module: the protocol's bridge and switches)

_Tensor = None  # jitorch.Tensor, once the method wrappers are first installed
