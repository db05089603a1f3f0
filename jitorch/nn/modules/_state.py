"""``Module.state_dict`` and ``Module.load_state_dict`` (with their hooks), bound onto ``Module`` in module.py.

>>> import jitorch
>>> from jitorch import nn
>>> m = nn.Module(); m.w = nn.Parameter(jitorch.zeros(2))
>>> m.load_state_dict({"w": jitorch.ones(2)})
<All keys matched successfully>
>>> list(m.state_dict().items())
[('w', tensor([1., 1.]))]
"""
from __future__ import annotations

import warnings
from collections import OrderedDict, namedtuple
from collections.abc import Mapping

from ..._tensor import Tensor
from ...autograd.grad_mode import no_grad
from ..parameter import Parameter
from ._hooks import RemovableHandle, _WrappedHook

__all__ = ["_IncompatibleKeys", "EXTRA_STATE_KEY_SUFFIX"]

EXTRA_STATE_KEY_SUFFIX = "_extra_state"


class _IncompatibleKeys(namedtuple("IncompatibleKeys", ["missing_keys", "unexpected_keys"])):
    """What ``load_state_dict`` returns: the keys the module expected but did not get, and the keys it ignored."""

    __slots__ = ()

    def __repr__(self):
        if not self.missing_keys and not self.unexpected_keys:
            return "<All keys matched successfully>"
        return super().__repr__()

    __str__ = __repr__


def _overrides(module, name):
    from .module import Module

    return getattr(type(module), name, getattr(Module, name)) is not getattr(Module, name)


# -- saving ---------------------------------------------------------------------------------------------------------
def _save_to_state_dict(self, destination, prefix, keep_vars):
    """Put this module's own parameters and persistent buffers (not its children's) into ``destination``."""
    for name, param in self._parameters.items():
        if param is not None:
            destination[prefix + name] = param if keep_vars else param.detach()
    for name, buf in self._buffers.items():
        if buf is not None and name not in self._non_persistent_buffers_set:
            destination[prefix + name] = buf if keep_vars else buf.detach()
    if _overrides(self, "get_extra_state"):
        destination[prefix + EXTRA_STATE_KEY_SUFFIX] = self.get_extra_state()


def state_dict(self, *args, destination=None, prefix="", keep_vars=False):
    """An ``OrderedDict`` of every parameter and persistent buffer, keyed by dotted name (``"0.weight"``).

    Values are detached aliases of the module's tensors unless ``keep_vars``; ``prefix`` is prepended to each key.
    """
    if args:
        warnings.warn("Positional args are being deprecated, use kwargs instead. Refer to "
                      "https://pytorch.org/docs/main/generated/torch.nn.Module.html#torch.nn.Module.state_dict for "
                      "details.", FutureWarning, stacklevel=2)
        destination = args[0] if destination is None else destination
        if len(args) > 1 and prefix == "":
            prefix = args[1]
        if len(args) > 2 and keep_vars is False:
            keep_vars = args[2]
    if destination is None:
        destination = OrderedDict()
        destination._metadata = OrderedDict()
    local_metadata = dict(version=self._version)
    if hasattr(destination, "_metadata"):
        destination._metadata[prefix[:-1]] = local_metadata
    for hook in self._state_dict_pre_hooks.values():
        hook(self, prefix, keep_vars)
    self._save_to_state_dict(destination, prefix, keep_vars)
    for name, module in self._modules.items():
        if module is not None:
            module.state_dict(destination=destination, prefix=prefix + name + ".", keep_vars=keep_vars)
    for hook in self._state_dict_hooks.values():
        result = hook(self, destination, prefix, local_metadata)
        if not getattr(hook, "_from_public_api", False):
            if result is not None:
                destination = result
        elif result is not None:
            raise RuntimeError("state_dict post-hook must return None")
    return destination


def _register_state_dict_hook(self, hook):
    """``hook(module, state_dict, prefix, local_metadata) -> None or state_dict`` after ``state_dict``."""
    if getattr(hook, "_from_public_api", False):
        raise RuntimeError("Cannot register the same function as the state dict post hook that was previously "
                           "registered via register_state_dict_post_hook")
    handle = RemovableHandle(self._state_dict_hooks)
    self._state_dict_hooks[handle.id] = hook
    return handle


def register_state_dict_post_hook(self, hook):
    """``hook(module, state_dict, prefix, local_metadata) -> None`` after ``state_dict``; may edit it in place."""
    hook._from_public_api = True
    handle = RemovableHandle(self._state_dict_hooks)
    self._state_dict_hooks[handle.id] = hook
    return handle


def register_state_dict_pre_hook(self, hook):
    """``hook(module, prefix, keep_vars) -> None`` before ``state_dict`` collects this module's tensors."""
    handle = RemovableHandle(self._state_dict_pre_hooks)
    self._state_dict_pre_hooks[handle.id] = hook
    return handle


# -- loading --------------------------------------------------------------------------------------------------------
def _register_load_state_dict_pre_hook(self, hook, with_module=False):
    """``hook([module,] state_dict, prefix, local_metadata, strict, missing, unexpected, error_msgs)``."""
    handle = RemovableHandle(self._load_state_dict_pre_hooks)
    self._load_state_dict_pre_hooks[handle.id] = _WrappedHook(hook, self if with_module else None)
    return handle


def register_load_state_dict_pre_hook(self, hook):
    """``hook(module, state_dict, prefix, local_metadata, strict, missing, unexpected, error_msgs) -> None``."""
    return self._register_load_state_dict_pre_hook(hook, with_module=True)


def register_load_state_dict_post_hook(self, hook):
    """``hook(module, incompatible_keys) -> None`` after ``load_state_dict``; may edit the key lists in place."""
    handle = RemovableHandle(self._load_state_dict_post_hooks)
    self._load_state_dict_post_hooks[handle.id] = hook
    return handle


def _copy_entry(self, name, param, input_param, assign):
    with no_grad():
        if not assign:
            param.copy_(input_param)
            return
        if isinstance(param, Parameter):
            if isinstance(input_param, Parameter):
                input_param.requires_grad_(param.requires_grad)
            else:
                input_param = Parameter(input_param, requires_grad=param.requires_grad)
        setattr(self, name, input_param)


def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                          error_msgs):
    """Copy this module's own entries of ``state_dict`` into its parameters and buffers; record problems."""
    for hook in self._load_state_dict_pre_hooks.values():
        hook(state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs)
    local_state = {k: v for k, v in self._parameters.items() if v is not None}
    local_state.update((k, v) for k, v in self._buffers.items()
                       if v is not None and k not in self._non_persistent_buffers_set)
    assign = local_metadata.get("assign_to_params_buffers", False)
    for name, param in local_state.items():
        key = prefix + name
        if key not in state_dict:
            if strict:
                missing_keys.append(key)
            continue
        input_param = state_dict[key]
        if not isinstance(input_param, Tensor):
            error_msgs.append(f'While copying the parameter named "{key}", expected torch.Tensor or Tensor-like '
                              f"object from checkpoint but received {type(input_param)}")
            continue
        if param.dim() == 0 and input_param.dim() == 1 and input_param.shape[0] == 1:
            input_param = input_param[0]  # checkpoints from before 0-dim tensors stored scalars as shape (1,)
        if input_param.shape != param.shape:
            error_msgs.append(f"size mismatch for {key}: copying a param with shape {input_param.shape} from "
                              f"checkpoint, the shape in current model is {param.shape}.")
            continue
        if param.is_meta and not input_param.is_meta and not assign:
            warnings.warn(f"for {key}: copying from a non-meta parameter in the checkpoint to a meta parameter in the "
                          "current model, which is a no-op. (Did you mean to pass `assign=True` to assign items in "
                          "the state dictionary to their corresponding key in the module instead of copying them in "
                          "place?)", UserWarning, stacklevel=2)
        try:
            _copy_entry(self, name, param, input_param, assign)
        except Exception as ex:  # noqa: BLE001 - reported with the others, as PyTorch does
            error_msgs.append(f'While copying the parameter named "{key}", whose dimensions in the model are '
                              f"{param.size()} and whose dimensions in the checkpoint are {input_param.size()}, an "
                              f"exception occurred : {ex.args}.")
    extra_key = prefix + EXTRA_STATE_KEY_SUFFIX
    if _overrides(self, "set_extra_state"):
        if extra_key in state_dict:
            self.set_extra_state(state_dict[extra_key])
        elif strict:
            missing_keys.append(extra_key)
    elif strict and extra_key in state_dict:
        unexpected_keys.append(extra_key)
    if strict:
        for key in state_dict:
            if key.startswith(prefix) and key != extra_key:
                head = key[len(prefix):].split(".", 1)
                if (len(head) > 1 and head[0] not in self._modules) or (len(head) == 1 and head[0] not in local_state):
                    unexpected_keys.append(key)


def load_state_dict(self, state_dict, strict=True, assign=False):
    """Copy ``state_dict``'s tensors into this module's parameters and buffers (in place unless ``assign``).

    Returns ``_IncompatibleKeys(missing_keys, unexpected_keys)``; with ``strict`` any such key, and always a shape
    mismatch, raises ``RuntimeError("Error(s) in loading state_dict for <Class>: ...")``.
    """
    if not isinstance(state_dict, Mapping):
        raise TypeError(f"Expected state_dict to be dict-like, got {type(state_dict)}.")
    missing_keys, unexpected_keys, error_msgs = [], [], []
    metadata = getattr(state_dict, "_metadata", None)
    state_dict = OrderedDict(state_dict)
    if metadata is not None:
        state_dict._metadata = metadata

    def load(module, local_state_dict, prefix=""):
        local_metadata = {} if metadata is None else dict(metadata.get(prefix[:-1], {}))
        if assign:
            local_metadata["assign_to_params_buffers"] = assign
        module._load_from_state_dict(local_state_dict, prefix, local_metadata, True, missing_keys, unexpected_keys,
                                     error_msgs)
        for name, child in module._modules.items():
            if child is not None:
                child_prefix = prefix + name + "."
                load(child, {k: v for k, v in local_state_dict.items() if k.startswith(child_prefix)}, child_prefix)
        incompatible = _IncompatibleKeys(missing_keys, unexpected_keys)
        for hook in module._load_state_dict_post_hooks.values():
            if hook(module, incompatible) is not None:
                raise AssertionError("Hooks registered with ``register_load_state_dict_post_hook`` are not expected "
                                     "to return new values, if incompatible_keys need to be modified, it should be "
                                     "done inplace.")

    load(self, state_dict)
    if strict:
        if unexpected_keys:
            error_msgs.insert(0, "Unexpected key(s) in state_dict: {}. ".format(
                ", ".join(f'"{k}"' for k in unexpected_keys)))
        if missing_keys:
            error_msgs.insert(0, "Missing key(s) in state_dict: {}. ".format(
                ", ".join(f'"{k}"' for k in missing_keys)))
    if error_msgs:
        raise RuntimeError("Error(s) in loading state_dict for {}:\n\t{}".format(
            self.__class__.__name__, "\n\t".join(error_msgs)))
    return _IncompatibleKeys(missing_keys, unexpected_keys)
