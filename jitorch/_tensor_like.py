"""Tensor-like types: a class that is not a Tensor but defines ``__torch_function__`` (the ``ScalarTensor`` and
``DiagonalTensor`` of PyTorch's "Extending torch with a Tensor-like type") takes over the public functions, Tensor
methods and operators its instances are passed to (also inside lists, tuples and keywords), as in PyTorch.

PyTorch's C++ argument parser checks each argument's type on every call. jitorch's functions cannot afford a Python
scan of their arguments (a quarter of ``a + b``'s time), so they stay unwrapped until such a value can exist:

- every ``class`` statement passes through :func:`_build_class` (``builtins.__build_class__``, installed by
  :func:`watch_class_statements` when jitorch is imported), which registers a class defining ``__torch_function__``
  with the user's Tensor subclasses (:func:`jitorch._subclass.adopt_tensor_like`): the same multiple dispatch hears
  its instances;
- the class's first instance turns the dispatch on for good (:func:`jitorch._subclass.note_instance`, as a Tensor
  subclass's first instance does; its ``__new__`` notes it), so code that only defines such classes (a library
  defining ``TensorDict``, a test module) keeps eager calls at full speed.

Not seen: classes made by calling ``type(name, bases, namespace)`` directly, or defined before jitorch was imported;
:func:`register` adopts one by hand.

>>> import jitorch
>>> class Scalar:
...     __module__ = "user_code"  # (an example's class is named after this module: say it is the user's)
...     @classmethod
...     def __torch_function__(cls, func, types, args=(), kwargs=None):
...         return f"{func.__name__} of {[t.__name__ for t in types]}"
>>> jitorch.mean(Scalar()), jitorch.ones(2).add(Scalar()), jitorch.cat([jitorch.ones(1), Scalar()])
("mean of ['Scalar']", "add of ['Scalar']", "cat of ['Scalar']")
"""
from __future__ import annotations

import builtins

from . import _subclass

__all__ = ["watch_class_statements", "register", "is_tensor_like_class"]

_original_build_class = None  # builtins.__build_class__ before jitorch wrapped it


def watch_class_statements():
    """Install the ``class`` statement hook (once): each class defining ``__torch_function__`` is registered."""
    global _original_build_class
    if _original_build_class is None:
        _original_build_class = builtins.__build_class__
        builtins.__build_class__ = _build_class


def _build_class(func, name, *bases, **kwds):
    cls = _original_build_class(func, name, *bases, **kwds)
    # NOTE: one cached attribute lookup for the classes that do not take part, nothing allocated.
    if getattr(cls, "__torch_function__", None) is not None and isinstance(cls, type) and is_tensor_like_class(cls):
        register(cls)
    return cls


def is_tensor_like_class(cls) -> bool:
    """Whether ``cls`` takes part as a Tensor-like type: it defines ``__torch_function__`` and is neither a Tensor
    (its subclasses register themselves), a function mode (which hears calls by being entered, not passed), nor
    built on one of jitorch's or PyTorch's own classes."""
    from ._tensor import Tensor
    from .overrides import TorchFunctionMode

    if getattr(cls, "__torch_function__", None) is None or issubclass(cls, (Tensor, TorchFunctionMode)):
        return False
    # NOTE: PyTorch's own classes and the user's classes built on them (``class Logged(torch.Tensor)`` beside
    # jitorch, as the tests compare) answer PyTorch's functions, not jitorch's.
    return not any(_package(k) in ("jitorch", "torch") for k in cls.__mro__)


def _package(cls) -> str:
    return (getattr(cls, "__module__", None) or "").partition(".")[0]


def register(cls):
    """Make instances of the Tensor-like class ``cls`` hand the calls they take part in to its
    ``__torch_function__`` (done for each ``class`` statement; call it for a class made another way)."""
    if _subclass.is_user_type(cls):
        return
    _subclass.adopt_tensor_like(cls)
    if _subclass.takes_over(cls) and not _subclass.dispatch_enabled():
        maker = next(k for k in cls.__mro__ if "__new__" in vars(k))
        noting = _noting(vars(maker)["__new__"], maker is object)
        _keep_signature(noting, cls.__init__ if maker is object else vars(maker)["__new__"])
        cls.__new__ = staticmethod(noting)


def _keep_signature(noting, source):
    """``inspect.signature(cls)`` reads a class's own ``__new__`` first: hand it the signature the class had
    (its ``__init__``'s, or its own ``__new__``'s), not the wrapper's ``(*args, **kwargs)``."""
    import inspect

    try:
        noting.__signature__ = inspect.signature(getattr(source, "__func__", source))
    except (TypeError, ValueError):  # a C-level __init__ without a signature: inspect then says so itself
        pass


def _noting(new, plain_object):
    """``__new__`` noting the first instance, which turns the dispatch on. ``object.__new__`` is called as Python
    would (without the constructor's arguments, refusing them where no ``__init__`` takes them).

    NOTE: it stays after the first instance: deleting an assigned ``__new__`` leaves CPython's ``tp_new`` slot
    calling ``object.__new__`` with the constructor's arguments, which it refuses.
    """
    new = getattr(new, "__func__", new)

    def __new__(cls, *args, **kwargs):
        if not _subclass.dispatch_enabled():
            _subclass.note_instance(cls)
        if not plain_object:
            return new(cls, *args, **kwargs)
        if (args or kwargs) and cls.__init__ is object.__init__:
            raise TypeError(f"{cls.__name__}() takes no arguments")
        return object.__new__(cls)
    return __new__
