"""Registration of a module's members, bound onto ``Module`` in module.py: ``register_buffer``/``_parameter``,
``add_module`` (with the global registration hooks), dotted-path lookups (``get_submodule``, ``set_submodule``,
``get_parameter``, ``get_buffer``) and the ``get/set_extra_state`` defaults.

>>> import jitorch
>>> from jitorch import nn
>>> net = nn.Sequential(nn.Linear(2, 2))
>>> net.register_buffer("steps", jitorch.zeros(()))
>>> net.get_parameter("0.bias").shape, net.get_submodule("0")
(jitorch.Size([2]), Linear(in_features=2, out_features=2, bias=True))
"""
from __future__ import annotations

from ..._tensor import Tensor
from ..parameter import Parameter
from . import _hooks

# The Module class, set by module.py once it exists: this module defines part of it, so an import here would be
# circular.
Module = None


# Bumped by every change of a module's attributes, parameters, buffers or submodules (``__setattr__``,
# ``__delattr__``, the register functions): a captured step's state check (`_compile.reduce_overhead_state`) walks
# the modules again only when it moved.
STATE_VERSION = [0]


def _typename(obj):
    if isinstance(obj, Tensor):
        return obj.type()
    module = type(obj).__module__
    return type(obj).__qualname__ if module in ("builtins", None) else f"{module}.{type(obj).__qualname__}"


def _check_name(self, kind, name, registry):
    if f"_{registry}" not in self.__dict__:
        raise AttributeError(f"cannot assign {kind} before Module.__init__() call")
    if not isinstance(name, str):
        raise TypeError(f"{kind} name should be a string. Got {_typename(name)}")
    if "." in name:
        raise KeyError(f"{kind} name can't contain \".\"" + (f", got: {name}" if kind == "module" else ""))
    if name == "":
        raise KeyError(f"{kind} name can't be empty string \"\"")
    if hasattr(self, name) and name not in self.__dict__[f"_{registry}"]:
        raise KeyError(f"attribute '{name}' already exists")


def register_buffer(self, name, tensor, persistent=True):
    """Add a buffer (state that is not a parameter, e.g. running statistics); ``persistent`` buffers are saved."""
    STATE_VERSION[0] += 1
    self._check_name("buffer", name, "buffers")
    if tensor is not None and not isinstance(tensor, Tensor):
        raise TypeError(f"cannot assign '{_typename(tensor)}' object to buffer '{name}' (torch Tensor or None "
                        "required)")
    for hook in _hooks._global_buffer_registration_hooks.values():
        out = hook(self, name, tensor)
        tensor = tensor if out is None else out
    self._buffers[name] = tensor
    if persistent:
        self._non_persistent_buffers_set.discard(name)
    else:
        self._non_persistent_buffers_set.add(name)


def register_parameter(self, name, param):
    """Add a parameter (a ``Parameter``, or None to reserve the name) reachable as ``self.<name>``."""
    STATE_VERSION[0] += 1
    self._check_name("parameter", name, "parameters")
    if param is None:
        self._parameters[name] = None
        return
    if not isinstance(param, Parameter):
        raise TypeError(f"cannot assign '{_typename(param)}' object to parameter '{name}' (torch.nn.Parameter or "
                        "None required)")
    if param.grad_fn is not None:
        raise ValueError(f"Cannot assign non-leaf Tensor to parameter '{name}'. Model parameters must be created "
                         f"explicitly. To express '{name}' as a function of another Tensor, compute the value in "
                         "the forward() method.")
    for hook in _hooks._global_parameter_registration_hooks.values():
        out = hook(self, name, param)
        param = param if out is None else out
    self._parameters[name] = param


def add_module(self, name, module):
    """Add a child module reachable as ``self.<name>`` (None reserves the name)."""
    STATE_VERSION[0] += 1
    if not isinstance(module, Module) and module is not None:
        raise TypeError(f"{_typename(module)} is not a Module subclass")
    self._check_name("module", name, "modules")
    for hook in _hooks._global_module_registration_hooks.values():
        out = hook(self, name, module)
        module = module if out is None else out
    self._modules[name] = module


def register_module(self, name, module):
    """Alias of ``add_module``."""
    self.add_module(name, module)


def get_submodule(self, target):
    """The submodule at dotted path ``target`` (``""`` is ``self``); AttributeError names the missing part."""
    if target == "":
        return self
    mod = self
    for item in target.split("."):
        if not hasattr(mod, item):
            raise AttributeError(mod._get_name() + " has no attribute `" + item + "`")
        mod = getattr(mod, item)
        if not isinstance(mod, Module):
            raise AttributeError("`" + item + "` is not an nn.Module")
    return mod


def set_submodule(self, target, module, strict=False):
    """Replace (or, unless ``strict``, add) the submodule at dotted path ``target``."""
    if target == "":
        raise ValueError("Cannot set the submodule without a target name!")
    if not isinstance(module, Module):
        raise ValueError(f"`module` is not an nn.Module, found {type(module)}")
    parent_path, _, name = target.rpartition(".")
    parent = self.get_submodule(parent_path)
    if strict and not hasattr(parent, name):
        raise AttributeError(parent._get_name() + " has no attribute `" + name + "`")
    if hasattr(parent, name) and not isinstance(getattr(parent, name), Module):
        raise AttributeError("`" + name + "` is not an nn.Module")
    setattr(parent, name, module)


def get_parameter(self, target):
    """The ``Parameter`` at dotted path ``target`` (``"layer.weight"``)."""
    module_path, _, name = target.rpartition(".")
    mod = self.get_submodule(module_path)
    if not hasattr(mod, name):
        raise AttributeError(mod._get_name() + " has no attribute `" + name + "`")
    param = getattr(mod, name)
    if not isinstance(param, Parameter):
        raise AttributeError("`" + name + "` is not an nn.Parameter")
    return param


def get_buffer(self, target):
    """The buffer at dotted path ``target``."""
    module_path, _, name = target.rpartition(".")
    mod = self.get_submodule(module_path)
    if not hasattr(mod, name):
        raise AttributeError(mod._get_name() + " has no attribute `" + name + "`")
    if name not in mod._buffers:
        raise AttributeError("`" + name + "` is not a buffer")
    return getattr(mod, name)


def get_extra_state(self):
    """Override (with ``set_extra_state``) to save non-tensor state in ``state_dict``."""
    raise RuntimeError("Reached a code path in Module.get_extra_state() that should never be called.")


def set_extra_state(self, state):
    """Override (with ``get_extra_state``) to restore non-tensor state from ``load_state_dict``."""
    raise RuntimeError("Reached a code path in Module.set_extra_state() that should never be called.")
