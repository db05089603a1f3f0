"""``nn.Module``: the base class of every layer and model.

Attribute assignment registers ``Parameter``s, buffers and submodules; the module tree then drives parameter
iteration, ``state_dict``, device/dtype moves, train/eval mode, hooks and the nested ``repr``.

>>> import jitorch
>>> from jitorch import nn
>>> class Scale(nn.Module):
...     def __init__(self):
...         super().__init__()
...         self.weight = nn.Parameter(jitorch.ones(2))
...     def forward(self, x):
...         return x * self.weight
>>> net = nn.Sequential(Scale(), Scale())
>>> [name for name, _ in net.named_parameters()]
['0.weight', '1.weight']
>>> net(jitorch.tensor([1.0, 2.0]))
tensor([1., 2.], grad_fn=<MulBackward0>)
"""
from __future__ import annotations

import inspect
from typing import TypeVar
from collections import OrderedDict

from ..._tensor import Tensor
from ..parameter import Buffer, Parameter
from . import _call, _hooks, _members, _registration, _state, _tree
from ._hooks import (register_module_backward_hook, register_module_buffer_registration_hook,  # noqa: F401
                     register_module_forward_hook, register_module_forward_pre_hook, register_module_full_backward_hook,
                     register_module_full_backward_pre_hook, register_module_module_registration_hook,
                     register_module_parameter_registration_hook)
from ._registration import _typename
from ._state import _IncompatibleKeys  # noqa: F401

__all__ = ["Module", "register_module_forward_pre_hook", "register_module_forward_hook",
           "register_module_full_backward_pre_hook", "register_module_backward_hook",
           "register_module_full_backward_hook", "register_module_buffer_registration_hook",
           "register_module_module_registration_hook", "register_module_parameter_registration_hook"]


def _addindent(s_, num_spaces):
    lines = s_.split("\n")
    if len(lines) == 1:
        return s_
    first = lines.pop(0)
    rest = [(num_spaces * " ") + line if line.strip() else "" for line in lines]
    return first + "\n" + "\n".join(rest)



def _forward_unimplemented(self, *input):
    raise NotImplementedError(f'Module [{type(self).__name__}] is missing the required "forward" function')


def _remove_from(name, *dicts_or_sets):
    for d in dicts_or_sets:
        if name in d:
            if isinstance(d, dict):
                del d[name]
            else:
                d.discard(name)


class Module:
    """Base class for all neural network modules; subclass it and define ``forward``.

    Assigning a ``Parameter``, a ``Buffer`` or a ``Module`` as an attribute registers it; ``module(x)`` runs the
    forward pre-hooks, ``forward`` and the forward hooks.
    """

    dump_patches = False
    _version = 1
    training: bool
    call_super_init = False
    forward = _forward_unimplemented
    T_destination = TypeVar("T_destination", bound=dict)  # annotations of state_dict overrides name it

    def __init__(self, *args, **kwargs):
        if not self.call_super_init and kwargs:
            raise TypeError(f"{type(self).__name__}.__init__() got an unexpected keyword argument "
                            f"'{next(iter(kwargs))}'")
        if not self.call_super_init and args:
            raise TypeError(f"{type(self).__name__}.__init__() takes 1 positional argument but {len(args) + 1} were "
                            "given")
        # object.__setattr__ skips Module.__setattr__'s registration logic for the bookkeeping fields.
        setattr_ = super().__setattr__
        setattr_("training", True)
        setattr_("_parameters", {})
        setattr_("_buffers", {})
        setattr_("_non_persistent_buffers_set", set())
        setattr_("_backward_pre_hooks", OrderedDict())
        setattr_("_backward_hooks", OrderedDict())
        setattr_("_is_full_backward_hook", None)
        setattr_("_forward_hooks", OrderedDict())
        setattr_("_forward_hooks_with_kwargs", OrderedDict())
        setattr_("_forward_hooks_always_called", OrderedDict())
        setattr_("_forward_pre_hooks", OrderedDict())
        setattr_("_forward_pre_hooks_with_kwargs", OrderedDict())
        setattr_("_state_dict_hooks", OrderedDict())
        setattr_("_state_dict_pre_hooks", OrderedDict())
        setattr_("_load_state_dict_pre_hooks", OrderedDict())
        setattr_("_load_state_dict_post_hooks", OrderedDict())
        setattr_("_modules", {})
        if self.call_super_init:
            super().__init__(*args, **kwargs)

    # -- registration and member iteration (in _registration.py and _members.py) ------------------------------------
    _check_name = _registration._check_name
    register_buffer = _registration.register_buffer
    register_parameter = _registration.register_parameter
    add_module = _registration.add_module
    register_module = _registration.register_module
    get_submodule = _registration.get_submodule
    set_submodule = _registration.set_submodule
    get_parameter = _registration.get_parameter
    get_buffer = _registration.get_buffer
    get_extra_state = _registration.get_extra_state
    set_extra_state = _registration.set_extra_state
    _named_members = _members._named_members
    parameters = _members.parameters
    named_parameters = _members.named_parameters
    buffers = _members.buffers
    named_buffers = _members.named_buffers
    children = _members.children
    named_children = _members.named_children
    modules = _members.modules
    named_modules = _members.named_modules

    # -- attribute protocol ---------------------------------------------------------------------------------------
    def __getattr__(self, name):
        # Every ``self.weight`` of a forward comes here: the three registries are tried inline, not in a loop.
        d = self.__dict__
        members = d.get("_parameters")
        if members is not None and name in members:
            return members[name]
        members = d.get("_buffers")
        if members is not None and name in members:
            return members[name]
        members = d.get("_modules")
        if members is not None and name in members:
            return members[name]
        raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")

    def __setattr__(self, name, value):
        _registration.STATE_VERSION[0] += 1
        d = self.__dict__
        params = d.get("_parameters")
        if isinstance(value, Parameter):
            if params is None:
                raise AttributeError("cannot assign parameters before Module.__init__() call")
            _remove_from(name, d, self._buffers, self._modules, self._non_persistent_buffers_set)
            self.register_parameter(name, value)
        elif params is not None and name in params:
            if value is not None:
                raise TypeError(f"cannot assign '{_typename(value)}' as parameter '{name}' (torch.nn.Parameter or "
                                "None expected)")
            self.register_parameter(name, value)
        elif isinstance(value, Module):
            modules = d.get("_modules")
            if modules is None:
                raise AttributeError("cannot assign module before Module.__init__() call")
            _remove_from(name, d, self._parameters, self._buffers, self._non_persistent_buffers_set)
            for hook in _hooks._global_module_registration_hooks.values():
                out = hook(self, name, value)
                value = value if out is None else out
            modules[name] = value
        elif d.get("_modules") is not None and name in d["_modules"]:
            if value is not None:
                raise TypeError(f"cannot assign '{_typename(value)}' as child module '{name}' (torch.nn.Module or None "
                                "expected)")
            for hook in _hooks._global_module_registration_hooks.values():
                out = hook(self, name, value)
                value = value if out is None else out
            d["_modules"][name] = value
        elif isinstance(value, Buffer) or (d.get("_buffers") is not None and name in d["_buffers"]):
            self._set_buffer_attr(name, value)
        else:
            super().__setattr__(name, value)

    def _set_buffer_attr(self, name, value):
        if value is not None and not isinstance(value, Tensor):
            raise TypeError(f"cannot assign '{_typename(value)}' as buffer '{name}' (torch.nn.Buffer, torch.Tensor or "
                            "None expected)")
        if "_buffers" not in self.__dict__:
            raise AttributeError("cannot assign buffer before Module.__init__() call")
        persistent = value.persistent if isinstance(value, Buffer) else name not in self._non_persistent_buffers_set
        register = self.register_buffer
        if getattr(register, "__func__", None) is Module.register_buffer or \
                "persistent" in inspect.signature(register).parameters:
            register(name, value, persistent)
        elif not persistent:
            raise RuntimeError("Registering a non-persistent buffer on a Module subclass that implements "
                               "register_buffer() without the persistent argument is not allowed.")
        else:
            register(name, value)

    def __delattr__(self, name):
        _registration.STATE_VERSION[0] += 1
        if name in self._parameters:
            del self._parameters[name]
        elif name in self._buffers:
            del self._buffers[name]
            self._non_persistent_buffers_set.discard(name)
        elif name in self._modules:
            del self._modules[name]
        else:
            super().__delattr__(name)

    def __dir__(self):
        keys = (dir(self.__class__) + list(self.__dict__) + list(self._parameters) + list(self._modules)
                + list(self._buffers))
        return sorted(k for k in keys if not k[0].isdigit())

    def __getstate__(self):
        state = self.__dict__.copy()
        state.pop("_compiled_call_impl", None)
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        # Modules pickled by older versions may lack the newer bookkeeping fields.
        for name in ("_forward_pre_hooks", "_forward_pre_hooks_with_kwargs", "_forward_hooks_with_kwargs",
                     "_forward_hooks_always_called", "_state_dict_hooks", "_state_dict_pre_hooks",
                     "_load_state_dict_pre_hooks", "_load_state_dict_post_hooks", "_backward_pre_hooks"):
            if name not in self.__dict__:
                super().__setattr__(name, OrderedDict())
        if "_non_persistent_buffers_set" not in self.__dict__:
            super().__setattr__("_non_persistent_buffers_set", set())
        if "_is_full_backward_hook" not in self.__dict__:
            super().__setattr__("_is_full_backward_hook", None)

    # -- repr -----------------------------------------------------------------------------------------------------
    def _get_name(self):
        return self.__class__.__name__

    def extra_repr(self):
        """Override to describe the module's configuration inside its ``repr`` (one or more lines)."""
        return ""

    def __repr__(self):
        extra = self.extra_repr()
        extra_lines = extra.split("\n") if extra else []
        child_lines = ["(" + key + "): " + _addindent(repr(module), 2) for key, module in self._modules.items()]
        lines = extra_lines + child_lines
        main = self._get_name() + "("
        if lines:
            if len(extra_lines) == 1 and not child_lines:
                main += extra_lines[0]
            else:
                main += "\n  " + "\n  ".join(lines) + "\n"
        return main + ")"

    # -- tree-wide changes, calling, hooks and state dicts (in _tree.py, _call.py and _state.py) ----------------
    train = _tree.train
    eval = _tree.eval
    requires_grad_ = _tree.requires_grad_
    zero_grad = _tree.zero_grad
    apply = _tree.apply
    _apply = _tree._apply
    to = _tree.to
    cuda = _tree.cuda
    cpu = _tree.cpu
    xpu = _tree.xpu
    ipu = _tree.ipu
    mtia = _tree.mtia
    type = _tree.type_
    float = _tree.float_
    double = _tree.double
    half = _tree.half
    bfloat16 = _tree.bfloat16
    to_empty = _tree.to_empty
    share_memory = _tree.share_memory

    _compiled_call_impl = None  # set by ``compile``
    _call_impl = _call._call_impl
    _wrapped_call_impl = _call._wrapped_call_impl
    __call__ = _call._wrapped_call_impl
    compile = _call.compile_
    register_forward_pre_hook = _call.register_forward_pre_hook
    register_forward_hook = _call.register_forward_hook
    register_full_backward_pre_hook = _call.register_full_backward_pre_hook
    register_full_backward_hook = _call.register_full_backward_hook
    register_backward_hook = _call.register_backward_hook
    _get_backward_hooks = _call._get_backward_hooks
    _get_backward_pre_hooks = _call._get_backward_pre_hooks

    _save_to_state_dict = _state._save_to_state_dict
    state_dict = _state.state_dict
    _register_state_dict_hook = _state._register_state_dict_hook
    register_state_dict_post_hook = _state.register_state_dict_post_hook
    register_state_dict_pre_hook = _state.register_state_dict_pre_hook
    _register_load_state_dict_pre_hook = _state._register_load_state_dict_pre_hook
    register_load_state_dict_pre_hook = _state.register_load_state_dict_pre_hook
    register_load_state_dict_post_hook = _state.register_load_state_dict_post_hook
    _load_from_state_dict = _state._load_from_state_dict
    load_state_dict = _state.load_state_dict


# Methods defined in the helper files name themselves as Module's own, as in torch: argument errors then read
# "Module.register_forward_hook() takes ..." and bound methods repr as "<bound method Module.to of ...>".
for _name, _fn in list(vars(Module).items()):
    if getattr(_fn, "__module__", None) in (_call.__name__, _members.__name__, _registration.__name__, _state.__name__,
                                            _tree.__name__):
        _fn.__name__, _fn.__qualname__ = _name, f"Module.{_name}"
del _name, _fn
_registration.Module = Module
