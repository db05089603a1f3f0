"""Tensor subclasses' ``__torch_function__``: PyTorch's protocol for user subclasses of ``Tensor``.

A user subclass of ``Tensor`` (any class not defined inside jitorch) hears every public function, Tensor method,
operator and property read that one of its instances takes part in, through its ``__torch_function__(cls, func,
types, args, kwargs)``. Tensor's own (:func:`torch_function`) runs ``func`` with the protocol off
(:class:`DisableTorchFunctionSubclass`) and makes the Tensor results instances of the subclass, so ``x + 1`` and
``x.sum()`` of a subclass instance are instances of it, as torch's.

How calls reach it: jitorch's public functions and Tensor method wrappers hand calls to a type defining
``__jitorch_function__`` (:mod:`jitorch._overrides`); :func:`register` gives each user subclass the bridge
:func:`_bridge` there, which runs torch's multiple dispatch (:func:`hand_over`). The first user subclass turns the
method wrappers on for good when its first instance is made (torch checks every call too); plain tensors never
reach this module.

``Parameter`` (and its subclasses, unless they define their own ``__torch_function__``) opt out, as torch's
``_disabled_torch_function_impl``: their results are plain tensors.

>>> import jitorch
>>> class Tagged(jitorch.Tensor):
...     __module__ = "user_code"  # (an example's class is named after this module: say it is the user's)
>>> x = jitorch.ones(2).as_subclass(Tagged)
>>> type(x + 1).__name__, type(jitorch.relu(x)).__name__, type(x.sum()).__name__
('Tagged', 'Tagged', 'Tagged')
>>> with DisableTorchFunctionSubclass():
...     type(x + 1).__name__
'Tensor'
"""
from __future__ import annotations

import functools
import threading
import warnings

from . import _overrides

__all__ = ["torch_function", "DisableTorchFunctionSubclass", "DisableTorchFunction", "register", "takes_over",
           "hand_over", "convert", "default_nowrap_functions", "disabled_torch_function_impl", "as_subclass",
           "note_instance", "make_subclass", "adopt_tensor_like", "dispatch_enabled", "overloaded_types", "handler_of",
           "is_torch_function_enabled", "is_torch_function_mode_enabled"]


class _Flags(threading.local):
    """This thread's switches, as torch's are per thread: how many ``DisableTorchFunction*`` blocks are open."""

    def __init__(self):
        self.subclass_off = 0  # subclasses' __torch_function__ is not called (modes still are)
        self.all_off = 0  # neither subclasses nor modes are


FLAGS = _Flags()
_user_types: set = set()  # the user's Tensor subclasses and Tensor-like classes (_tensor_like.py) registered so far
_Tensor = None  # jitorch.Tensor, set at the first registration (this module is imported by _tensor.py)


class DisableTorchFunctionSubclass:
    """``with DisableTorchFunctionSubclass():`` calls inside run without Tensor subclasses' ``__torch_function__``
    (function modes still hear them), as ``torch._C.DisableTorchFunctionSubclass``."""

    def __enter__(self):
        FLAGS.subclass_off += 1
        return self

    def __exit__(self, *exc):
        FLAGS.subclass_off -= 1
        return False


class DisableTorchFunction:
    """``with DisableTorchFunction():`` calls inside reach neither subclasses' ``__torch_function__`` nor the entered
    function modes, as ``torch._C.DisableTorchFunction``."""

    def __enter__(self):
        FLAGS.subclass_off += 1
        FLAGS.all_off += 1
        modes = _overrides.FUNCTION_MODES
        self._modes, modes.modes = modes.modes, []  # the modes wait, as torch's stack does while disabled
        return self

    def __exit__(self, *exc):
        modes = _overrides.FUNCTION_MODES
        modes.modes = self._modes + modes.modes
        FLAGS.all_off -= 1
        FLAGS.subclass_off -= 1
        return False


def is_torch_function_enabled() -> bool:
    """``torch._C._is_torch_function_enabled``: False inside :class:`DisableTorchFunction*` blocks."""
    return not FLAGS.subclass_off


def is_torch_function_mode_enabled() -> bool:
    """``torch._C._is_torch_function_mode_enabled``: whether entered modes would hear calls now."""
    return not FLAGS.all_off and bool(_overrides.FUNCTION_MODES)


class _DisabledImpl:
    """``torch._C._disabled_torch_function_impl``: the ``__torch_function__`` of types opting out (``Parameter``):
    runs ``func`` with subclasses' protocol off. An object, not a function, so it does not bind as a method."""

    __name__ = __qualname__ = "_disabled_torch_function_impl"

    def __call__(self, func, types, args=(), kwargs=None):
        with DisableTorchFunctionSubclass():
            return func(*args, **(kwargs or {}))

    def __repr__(self):
        return "<built-in function _disabled_torch_function_impl>"


disabled_torch_function_impl = _DisabledImpl()


def default_nowrap_functions() -> set:
    """The functions whose results Tensor's ``__torch_function__`` hands back unconverted: field reads that must
    keep their identity (``a.grad is a.grad``), as ``torch.overrides.get_default_nowrap_functions``."""
    return {vars(_tensor())["grad"].__get__}


def _is_nowrap(func) -> bool:
    return getattr(func, "__name__", None) == "__get__" and getattr(func, "__self__", None) is vars(_tensor())["grad"]


def torch_function(cls, func, types, args=(), kwargs=None):
    """Tensor's ``__torch_function__``: ``func`` run with the protocol off, its Tensor results (also inside tuples and
    lists) made ``cls`` instances; ``NotImplemented`` where ``types`` holds a type ``cls`` is not a subclass of."""
    if kwargs is None:
        kwargs = {}
    for t in types:
        if not issubclass(cls, t):
            return NotImplemented
    with DisableTorchFunctionSubclass():
        result = func(*args, **kwargs)
        if _is_nowrap(func):
            return result
        return convert(result, cls)


torch_function.__qualname__ = "Tensor.__torch_function__"
torch_function.__name__ = "__torch_function__"


def convert(result, cls):
    """``result`` with its Tensors made ``cls`` instances (``as_subclass``), through tuples, named tuples and
    lists, as ``torch._tensor._convert``."""
    tensor = _tensor()
    if cls is tensor:
        return result
    if isinstance(result, tensor) and not isinstance(result, cls):
        result = result.as_subclass(cls)
    elif isinstance(result, (tuple, list)):
        items = [convert(r, cls) for r in result]
        make = getattr(type(result), "_make", None)  # a named tuple (``return_types.max``) takes fields, not a list
        result = make(items) if make is not None else type(result)(items)
    return result


def _tensor():
    global _Tensor
    if _Tensor is None:
        from ._tensor import Tensor

        _Tensor = Tensor
    return _Tensor


def _is_users(cls) -> bool:
    """Whether ``cls`` was defined outside jitorch (jitorch's own subclasses, such as ``Parameter`` and the sparse
    tensor, keep their own protocol or none)."""
    module = getattr(cls, "__module__", "") or ""
    return module != "jitorch" and not module.startswith("jitorch.")


def register(cls):
    """Called for each new subclass of Tensor (``Tensor.__init_subclass__``): a user's subclass gets the bridge to
    torch's protocol, and its construction notes the first instance (:func:`note_instance`)."""
    if not _is_users(cls):
        return
    own = next((k for k in cls.__mro__ if "__jitorch_function__" in vars(k)), None)
    if own is not None and own not in _user_types:
        return  # a subclass of jitorch's sparse or uninitialized tensors: their protocol answers
    _user_types.add(cls)
    cls.__jitorch_function__ = classmethod(_bridge)
    _overrides.forget_types()
    maker = next(k for k in cls.__mro__ if "__new__" in vars(k))
    if maker is cls or maker not in _user_types:  # a user's base already notes its instances
        cls.__new__ = staticmethod(_noting(vars(maker)["__new__"]))


def _noting(new):
    new = getattr(new, "__func__", new)

    @functools.wraps(new)
    def __new__(cls, *args, **kwargs):
        if not _enabled:
            note_instance(cls)
        return new(cls, *args, **kwargs)
    return __new__


_enabled = False  # whether a subclass instance taking over was made: the method wrappers stay on from then


def note_instance(cls):
    """An instance of ``cls`` is being made: the first of a user's subclass that takes over turns the Tensor method
    wrappers on for good (an instance may live anywhere from then; torch checks every call too). Waiting for an
    instance, not the class statement, keeps code that only defines subclasses (a test module) at full speed."""
    global _enabled
    if not _enabled and cls in _user_types and takes_over(cls):
        _enabled = True
        _overrides.acquire()


def is_user_type(cls) -> bool:
    """Whether ``cls`` is a registered user subclass of Tensor or Tensor-like class."""
    return cls in _user_types


def adopt_tensor_like(cls):
    """Register a class that is not a Tensor but defines ``__torch_function__`` (:mod:`jitorch._tensor_like`): its
    instances reach the same multiple dispatch as subclass instances (torch's protocol does not tell them apart)."""
    _user_types.add(cls)
    cls.__jitorch_function__ = classmethod(_bridge)
    _overrides.forget_types()


def dispatch_enabled() -> bool:
    """Whether a user's instance taking over was made: the Tensor method wrappers are on for good."""
    return _enabled


def hears_calls(values) -> bool:
    """Whether one of ``values`` is an instance of a user's Tensor subclass whose ``__torch_function__`` takes
    calls (not inside ``DisableTorchFunctionSubclass``): ``jitorch.compile`` runs such calls eagerly."""
    tensor = _tensor()
    return any(type(t) is not tensor and isinstance(t, tensor) and _overrides.is_subclass_kind(type(t))
               for t in values)


def takes_over(cls) -> bool:
    """Whether instances of the user subclass ``cls`` hand calls to its ``__torch_function__``: not where it is
    torch's disabled implementation, nor where a ``Parameter`` subclass keeps Tensor's default (torch's Parameter
    disables the protocol, so its subclasses inherit that)."""
    handler = vars(_tensor()).get("__torch_function__")
    own = getattr(cls, "__torch_function__", None)
    if own is None or own is disabled_torch_function_impl:
        return False
    if getattr(own, "__func__", None) is getattr(handler, "__func__", handler):
        from .nn.parameter import Parameter

        return not issubclass(cls, Parameter)
    return True


def _overloaded_args(args, kwargs):
    """The arguments (and items of list/tuple arguments) whose types take over, one per type, a subclass before its
    bases (torch's order)."""
    found = []
    for group in (args, kwargs.values()):
        for a in group:
            if type(a) is list or type(a) is tuple:
                for item in a:
                    _add_overloaded(found, item)
            else:
                _add_overloaded(found, a)
    return found


def _add_overloaded(found, a):
    t = type(a)
    if not _overrides.is_subclass_kind(t) or any(type(o) is t for o in found):
        return
    index = next((i for i, o in enumerate(found) if issubclass(t, type(o))), len(found))
    found.insert(index, a)


class _AllDeclined(TypeError):
    """Every ``__torch_function__`` returned NotImplemented (operators turn this into NotImplemented)."""


def hand_over(func, args, kwargs):
    """``func(*args, **kwargs)`` through the subclasses' ``__torch_function__`` (torch's multiple dispatch): the first
    answer that is not ``NotImplemented``; TypeError when all decline."""
    overloaded = _overloaded_args(args, kwargs)
    types = tuple(type(a) for a in overloaded)
    for arg in overloaded:
        result = handler_of(arg)(func, types, args, kwargs)
        if result is not NotImplemented:
            return result
    method = _overrides.tensor_method_name(func)
    name = f"jitorch.Tensor.{method}" if method else \
        f"{getattr(func, '__module__', None) or 'jitorch'}.{getattr(func, '__name__', func)}"
    listed = "".join(f"  - tensor subclass {t}\n" for t in types)  # (torch's words, Tensor-like types too)
    advice = f"handle '{name}' in one of them"
    if any(issubclass(t, _tensor()) for t in types):
        advice += ", or call super().__torch_function__ for the types it does not know"
    raise _AllDeclined(f"Multiple dispatch failed for '{name}'; all __torch_function__ handlers returned "
                       f"NotImplemented:\n\n{listed}\nEach handler returned NotImplemented: {advice}.")


def handler_of(arg):
    """``arg``'s ``__torch_function__`` read from the instance, as torch reads it: a classmethod, or (deprecated,
    with torch's warning) a plain method bound to ``arg``."""
    handler = arg.__torch_function__
    if getattr(handler, "__self__", None) is arg:
        warnings.warn("Defining your `__torch_function__` as a plain method is deprecated and will be an error in "
                      "future, please define it as a classmethod.", UserWarning, stacklevel=4)
    return handler


# Public functions reading their argument as data (torch's parser looks for no ``__torch_function__`` there): a
# subclass instance or Tensor-like value passed to them is converted, not asked.
_DATA_FUNCTIONS = frozenset({"tensor", "as_tensor", "asarray", "from_numpy", "frombuffer", "scalar_tensor"})


def _bridge(cls, func, args, kwargs):
    """The ``__jitorch_function__`` of user subclasses: jitorch's hand-over into torch's protocol."""
    if cls not in _user_types:  # a subclass of a Tensor-like class made by ``type()`` (no class statement seen)
        adopt_tensor_like(cls)
    original = getattr(func, "__jitorch_original__", None)
    if original is not None and func.__name__ in _DATA_FUNCTIONS:
        return original(*args, **(kwargs or {}))
    return hand_over(func, args, kwargs or {})


def overloaded_types(args, kwargs) -> tuple:
    """The types of the arguments that take over (items of list/tuple arguments too), in the order they are asked:
    the ``types`` torch hands a function mode."""
    return tuple(type(a) for a in _overloaded_args(args, kwargs or {}))


def as_subclass(self, cls):
    """``self``'s data as a ``cls`` instance sharing memory and attached to the autograd graph, as torch's; no
    ``__torch_function__`` hears the alias it is made from."""
    from ._tensor_autograd import as_subclass as alias_as

    if not _enabled:
        note_instance(cls)
    with DisableTorchFunctionSubclass():
        return alias_as(self, cls)


def make_subclass(cls, data, require_grad=False, dispatch_strides=False, dispatch_device=False,
                  device_for_backend_keys=None):
    """torch's constructor helper for subclasses: a ``cls`` leaf over ``data``'s memory (no ``__torch_function__``
    hears it)."""
    from ._tensor_autograd import _make_subclass

    if not _enabled:
        note_instance(cls)
    with DisableTorchFunctionSubclass():
        return _make_subclass(cls, data, require_grad, dispatch_strides, dispatch_device, device_for_backend_keys)
