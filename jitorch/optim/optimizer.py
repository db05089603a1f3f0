"""``Optimizer``: the base of every optimizer, PyTorch's ``torch.optim.Optimizer``.

It owns the parameter groups (dicts of tensors and options), the per-parameter ``state``, ``zero_grad``, the
``state_dict``/``load_state_dict`` format of torch (parameters saved as indices), and the step hooks. The helpers the
optimizers share (hyperparameter checks, the step scalar, closures) live in ``_optimizer_helpers.py`` and are
re-exported here under torch's names.

>>> import jitorch
>>> from jitorch.optim import SGD
>>> w = jitorch.tensor([1.0, 2.0], requires_grad=True)
>>> opt = SGD([w], lr=0.5)
>>> (w * w).sum().backward()
>>> opt.step()
>>> w
tensor([0., 0.], requires_grad=True)
>>> opt.state_dict()["param_groups"][0]["params"]
[0]
"""
from __future__ import annotations

import functools
import warnings
from collections import OrderedDict, defaultdict
from collections.abc import Iterable
from copy import deepcopy
from itertools import chain

from .. import _creation, _dtype
from .._tensor import Tensor
from ..nn.modules._hooks import RemovableHandle
from ..utils._foreach_utils import _group_tensors_by_device_and_dtype
from ._kernels import capturing, guard_hyperparameters
from ._step_capture import STEPPED, adopt_capturable, note_step
from ._optimizer_helpers import (  # noqa: F401 - split for size; torch.optim.optimizer's names, re-exported here
    _check_adam_hyperparameters, _check_capturable, _check_fused_flags, _check_tensor_lr, _device_dtype_check_for_fused,
    _get_scalar_dtype, _get_value, _to_scalar, _use_grad_for_differentiable, evaluate_closure, new_step, upgrade_step,
)
from ._optimizer_extras import (  # noqa: F401 - torch.optim.optimizer's aliases and helpers, for optimizers outside it
    Args, DeviceDict, DeviceDtypeDict, GlobalOptimizerPostHook, GlobalOptimizerPreHook, Kwargs, ParamsT, StateDict,
    _capturable_doc, _default_to_fused_or_foreach, _differentiable_doc, _disable_dynamo_if_unsupported, _foreach_doc,
    _foreach_supported_types, _fused_doc, _get_capturable_supported_devices, _maximize_doc, _params_doc,
    _stack_if_compiling, _view_as_real,
)

__all__ = ["Optimizer", "register_optimizer_step_pre_hook", "register_optimizer_step_post_hook", "required"]

_global_optimizer_pre_hooks: OrderedDict = OrderedDict()
_global_optimizer_post_hooks: OrderedDict = OrderedDict()


class _RequiredParameter:
    """The default of an option a parameter group must set (``SGD``'s ``lr`` in older PyTorch)."""

    def __repr__(self):
        return "<required parameter>"


required = _RequiredParameter()


def _register(hooks_dict, hook, prepend=False):
    handle = RemovableHandle(hooks_dict)
    hooks_dict[handle.id] = hook
    if prepend:
        hooks_dict.move_to_end(handle.id, last=False)
    return handle


def register_optimizer_step_pre_hook(hook):
    """``hook(optimizer, args, kwargs) -> None or (args, kwargs)`` runs before every optimizer's ``step``."""
    return _register(_global_optimizer_pre_hooks, hook)


def register_optimizer_step_post_hook(hook):
    """``hook(optimizer, args, kwargs)`` runs after every optimizer's ``step``."""
    return _register(_global_optimizer_post_hooks, hook)


def _with_step_hooks(step):
    """Wrap a class's ``step`` so the global and per-instance step hooks run around it.

    Hooks get ``args`` with the optimizer first, as PyTorch passes them. A subclass ``step`` calling
    ``super().step()`` runs the hooks once: the inner call sees the instance already inside a hooked step.
    """

    @functools.wraps(step)
    def wrapper(*args, **kwargs):
        self = args[0]
        if self._in_hooked_step:
            return step(*args, **kwargs)
        self._in_hooked_step = True
        if STEPPED:
            note_step(self)
        try:
            if capturing():
                adopt_capturable(self)
                guard_hyperparameters(self)
            for pre_hook in chain(_global_optimizer_pre_hooks.values(), self._optimizer_step_pre_hooks.values()):
                result = pre_hook(self, args, kwargs)
                if result is not None:
                    if isinstance(result, tuple) and len(result) == 2:
                        args, kwargs = result
                    else:
                        raise RuntimeError(f"{step} must return None or a tuple of (new_args, new_kwargs), but got "
                                           f"{result}.")
            out = step(*args, **kwargs)
            for post_hook in chain(self._optimizer_step_post_hooks.values(), _global_optimizer_post_hooks.values()):
                post_hook(self, args, kwargs)
            return out
        finally:
            self._in_hooked_step = False

    wrapper.hooked = True
    return wrapper


class Optimizer:
    r"""Base class for all optimizers (PyTorch's ``torch.optim.Optimizer``).

    Args:
        params: an iterable of tensors, of ``(name, tensor)`` pairs, or of dicts (parameter groups, each with a
            ``'params'`` entry and options that override ``defaults``).
        defaults: the default value of every optimization option.

    Subclasses implement ``step``; the step hooks wrap it automatically.
    """

    _in_hooked_step = False
    OptimizerPreHook = GlobalOptimizerPreHook
    OptimizerPostHook = GlobalOptimizerPostHook
    # Optimizers with foreach updates group their tensor lists with it, as PyTorch's do.
    _group_tensors_by_device_and_dtype = staticmethod(_group_tensors_by_device_and_dtype)

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        step = cls.__dict__.get("step")
        if step is not None and not getattr(step, "hooked", False):
            cls.step = _with_step_hooks(step)

    def __init__(self, params, defaults):
        self.defaults = defaults
        self._optimizer_step_pre_hooks = OrderedDict()
        self._optimizer_step_post_hooks = OrderedDict()
        self._optimizer_state_dict_pre_hooks = OrderedDict()
        self._optimizer_state_dict_post_hooks = OrderedDict()
        self._optimizer_load_state_dict_pre_hooks = OrderedDict()
        self._optimizer_load_state_dict_post_hooks = OrderedDict()
        if isinstance(params, Tensor):
            raise TypeError("params argument given to the optimizer should be an iterable of Tensors or dicts, but got "
                            + params.type())
        self.state = defaultdict(dict)
        self.param_groups = []
        param_groups = list(params)
        if len(param_groups) == 0:
            raise ValueError("optimizer got an empty parameter list")
        if not isinstance(param_groups[0], dict):
            param_groups = [{"params": param_groups}]
        for param_group in param_groups:
            self.add_param_group(param_group)

    def __getstate__(self):
        return {"defaults": self.defaults, "state": self.state, "param_groups": self.param_groups}

    def __setstate__(self, state):
        self.__dict__.update(state)
        for name in ("_optimizer_step_pre_hooks", "_optimizer_step_post_hooks", "_optimizer_state_dict_pre_hooks",
                     "_optimizer_state_dict_post_hooks", "_optimizer_load_state_dict_pre_hooks",
                     "_optimizer_load_state_dict_post_hooks"):
            if name not in self.__dict__:
                setattr(self, name, OrderedDict())
        self.defaults.setdefault("differentiable", False)

    def _upgrade_state(self, group_defaults, number_state=("step",)):
        """For optimizers unpickled from older checkpoints: fill the group options they lacked, and turn the state
        entries saved as Python numbers into the scalar tensors the step expects."""
        for group in self.param_groups:
            for key, value in group_defaults.items():
                group.setdefault(key, value)
        for s in self.state.values():
            for key in number_state:
                if key in s and not isinstance(s[key], Tensor):
                    s[key] = _creation.tensor(float(s[key]), dtype=_get_scalar_dtype())

    def __repr__(self):
        format_string = self.__class__.__name__ + " ("
        for i, group in enumerate(self.param_groups):
            format_string += f"\nParameter Group {i}\n"
            for key in sorted(group.keys()):
                if key != "params":
                    format_string += f"    {key}: {group[key]}\n"
        return format_string + ")"

    # -- hooks ----------------------------------------------------------------------------------------------------
    def register_step_pre_hook(self, hook):
        """``hook(optimizer, args, kwargs) -> None or (args, kwargs)`` runs before this optimizer's ``step``."""
        return _register(self._optimizer_step_pre_hooks, hook)

    def register_step_post_hook(self, hook):
        """``hook(optimizer, args, kwargs)`` runs after this optimizer's ``step``."""
        return _register(self._optimizer_step_post_hooks, hook)

    def register_state_dict_pre_hook(self, hook, prepend=False):
        return _register(self._optimizer_state_dict_pre_hooks, hook, prepend)

    def register_state_dict_post_hook(self, hook, prepend=False):
        return _register(self._optimizer_state_dict_post_hooks, hook, prepend)

    def register_load_state_dict_pre_hook(self, hook, prepend=False):
        return _register(self._optimizer_load_state_dict_pre_hooks, hook, prepend)

    def register_load_state_dict_post_hook(self, hook, prepend=False):
        return _register(self._optimizer_load_state_dict_post_hooks, hook, prepend)

    # -- saving and loading ---------------------------------------------------------------------------------------
    def state_dict(self):
        """``{'state': {index: {...}}, 'param_groups': [{..., 'params': [indices]}]}``; tensors are not copied."""
        for pre_hook in self._optimizer_state_dict_pre_hooks.values():
            pre_hook(self)
        param_mappings = {}
        start_index = 0

        def pack_group(group):
            nonlocal start_index
            packed = {k: v for k, v in group.items() if k != "params"}
            param_mappings.update({id(p): i for i, p in enumerate(group["params"], start_index)
                                   if id(p) not in param_mappings})
            packed["params"] = [param_mappings[id(p)] for p in group["params"]]
            start_index += len(packed["params"])
            return packed

        param_groups = [pack_group(g) for g in self.param_groups]
        packed_state = {(param_mappings[id(k)] if isinstance(k, Tensor) else k): v for k, v in self.state.items()}
        state_dict = {"state": packed_state, "param_groups": param_groups}
        for post_hook in self._optimizer_state_dict_post_hooks.values():
            result = post_hook(self, state_dict)
            if result is not None:
                state_dict = result
        return state_dict

    @staticmethod
    def _process_value_according_to_param_policy(param, value, param_id, param_groups, key=None):
        # Floating state follows the parameter's dtype and device; 'step' stays where it was saved (a CPU scalar)
        # unless the group is fused or capturable, where it lives on the parameter's device as float32.
        fused = capturable = False
        for pg in param_groups:
            if param_id in pg["params"]:
                fused = pg.get("fused", False)
                capturable = pg.get("capturable", False)
                break
        if key == "step":
            if capturable or fused:
                return value.to(dtype=_dtype.float32, device=param.device)
            return value
        if param.is_floating_point():
            return value.to(dtype=param.dtype, device=param.device)
        return value.to(device=param.device)

    def load_state_dict(self, state_dict):
        """Load a ``state_dict()`` of an optimizer built over parameters of the same group sizes."""
        state_dict = state_dict.copy()
        for pre_hook in self._optimizer_load_state_dict_pre_hooks.values():
            result = pre_hook(self, state_dict)
            if result is not None:
                state_dict = result
        groups = self.param_groups
        saved_groups = deepcopy(state_dict["param_groups"])
        if len(groups) != len(saved_groups):
            raise ValueError("loaded state dict has a different number of parameter groups")
        if any(len(g["params"]) != len(s["params"]) for g, s in zip(groups, saved_groups)):
            raise ValueError("loaded state dict contains a parameter group that doesn't match the size of optimizer's "
                             "group")
        id_map = dict(zip(chain.from_iterable(g["params"] for g in saved_groups),
                          chain.from_iterable(g["params"] for g in groups)))

        def _cast(param, value, param_id=None, key=None):
            if isinstance(value, Tensor):
                return Optimizer._process_value_according_to_param_policy(
                    param, value, param_id, state_dict["param_groups"], key)
            if isinstance(value, dict):
                return {k: _cast(param, v, param_id=param_id, key=k) for k, v in value.items()}
            if isinstance(value, Iterable) and not isinstance(value, (str, bytes)):
                return type(value)(_cast(param, v, param_id=param_id) for v in value)
            return value

        state = defaultdict(dict)
        for k, v in state_dict["state"].items():
            if k in id_map:
                param = id_map[k]
                state[param] = _cast(param, v, param_id=k)
            else:
                state[k] = v

        def update_group(group, new_group):
            new_group["params"] = group["params"]
            if "param_names" in group and "param_names" not in new_group:
                new_group["param_names"] = group["param_names"]
            return new_group

        param_groups = [update_group(g, ng) for g, ng in zip(groups, saved_groups)]
        self.__setstate__({"state": state, "param_groups": param_groups})
        for post_hook in self._optimizer_load_state_dict_post_hooks.values():
            post_hook(self)

    # -- gradients and groups -------------------------------------------------------------------------------------
    def zero_grad(self, set_to_none=True):
        """Reset every parameter's ``.grad``: to ``None`` (default) or, with ``set_to_none=False``, to zeros."""
        for group in self.param_groups:
            for p in group["params"]:
                grad = p.grad
                if grad is None:
                    continue
                if set_to_none:
                    p.grad = None
                    continue
                if grad.grad_fn is not None:
                    grad.detach_()
                else:
                    grad.requires_grad_(False)
                grad.zero_()

    def step(self, closure=None):
        """Perform one optimization step; ``closure`` re-evaluates the model and returns the loss."""
        raise NotImplementedError

    def add_param_group(self, param_group):
        """Add a parameter group (a dict with ``'params'`` and options overriding ``defaults``)."""
        if not isinstance(param_group, dict):
            raise TypeError(f"param_group must be a dict, but got {type(param_group)}")
        params = param_group["params"]
        if isinstance(params, Tensor):
            param_group["params"] = [params]
        elif isinstance(params, set):
            raise TypeError("optimizer parameters need to be organized in ordered collections, but the ordering of "
                            "tensors in sets will change between runs. Please use a list instead.")
        else:
            param_group["params"] = list(params)
        tensors, names = [], []
        for param in param_group["params"]:
            if isinstance(param, tuple):
                names.append(param[0])
                tensors.append(param[1])
            else:
                tensors.append(param)
        param_group["params"] = tensors
        if names:
            if len(names) != len(tensors):
                raise ValueError("all optimizer params should be with/without names. Some param names are missing")
            param_group["param_names"] = names
        for param in tensors:
            if not isinstance(param, Tensor):
                raise TypeError("optimizer can only optimize Tensors, but one of the params is " + type(param).__name__)
            if param.is_sparse:
                raise NotImplementedError(f"{type(self).__name__}: jitorch's optimizers do not update sparse_coo "
                                          "tensors; optimize their values (a dense leaf the sparse tensor is built "
                                          "from) instead")
            if not self.defaults.get("differentiable", None) and not (param.is_leaf or param.retains_grad):
                raise ValueError("can't optimize a non-leaf Tensor")
        for name, default in self.defaults.items():
            if default is required and name not in param_group:
                raise ValueError(f"parameter group didn't specify a value of required optimization parameter {name}")
            param_group.setdefault(name, default)
        if len(tensors) != len({id(p) for p in tensors}):
            warnings.warn("optimizer contains a parameter group with duplicate parameters; in future, this will cause "
                          "an error; see github.com/pytorch/pytorch/issues/40967 for more information", stacklevel=3)
        seen = set()
        for group in self.param_groups:
            seen.update(id(p) for p in group["params"])
            if ("param_names" in param_group) != ("param_names" in group):
                which = "with names" if "param_names" in param_group else "without names"
                raise ValueError("all optimizer param groups should be with/without names. "
                                 f"cannot add param group {which} to the optimizer")
        if any(id(p) in seen for p in tensors):
            raise ValueError("some parameters appear in more than one parameter group")
        self.param_groups.append(param_group)

    def _capture_refusal(self):
        """Why a CPU graph could not replay this optimizer's ``step`` (its update reads a Python step count), or None.

        ``jitorch.compile(mode="reduce-overhead")`` asks after its warm-up, before capturing: a step it could not
        replay runs through the default compiled path instead. Capturable groups (set by the capture where the
        optimizer has the option: `adopt_capturable`) keep their count in a tensor.
        """
        return None

    def _accelerator_graph_capture_health_check(self):
        """Refuse to capture ``step()`` in a CPU graph unless every group is ``capturable`` (PyTorch's check).

        A non-capturable step computes its bias corrections from a Python step count, which replay would freeze.
        """
        from ._kernels import capturing, refuse_capture

        if capturing() and not all(group.get("capturable", False) for group in self.param_groups):
            refuse_capture(f"Attempting CPU graph capture of step() for an instance of {type(self).__name__} but "
                           "param_groups' capturable is False: its step count is a Python number in the update, "
                           "which replay would not advance. Construct it with capturable=True.")

    _cuda_graph_capture_health_check = _accelerator_graph_capture_health_check
