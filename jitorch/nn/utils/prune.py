"""``torch.nn.utils.prune``: pruning by masks, as torch's. Pruning ``name`` moves the parameter to ``name_orig``,
adds the buffer ``name_mask`` and a forward pre-hook that sets ``name = name_orig * name_mask`` before each call;
pruning again combines masks over the entries still unpruned (a `PruningContainer`); ``remove`` makes it permanent.

>>> import jitorch
>>> from jitorch.nn.utils import prune
>>> lin = jitorch.nn.Linear(4, 2)
>>> with jitorch.no_grad():
...     _ = lin.weight.copy_(jitorch.arange(8.0).reshape(2, 4) - 3.5)
>>> _ = prune.l1_unstructured(lin, "weight", amount=0.5)
>>> lin.weight_mask  # the four weights of smallest magnitude (|0.5| and |1.5|) are pruned
tensor([[1., 1., 0., 0.],
        [0., 0., 1., 1.]])
>>> sorted(n for n, _ in lin.named_parameters()), prune.is_pruned(lin)
(['bias', 'weight_orig'], True)
"""
from __future__ import annotations

import numbers

from ... import _creation, _movement_copy, _random

__all__ = ["BasePruningMethod", "PruningContainer", "Identity", "RandomUnstructured", "L1Unstructured",
           "RandomStructured", "LnStructured", "CustomFromMask", "identity", "random_unstructured", "l1_unstructured",
           "random_structured", "ln_structured", "global_unstructured", "custom_from_mask", "remove", "is_pruned"]


def _count(amount, size, what="amount"):
    """Units to prune: an int as given, a float as a fraction of ``size`` (rounded as torch)."""
    if not isinstance(amount, numbers.Real):
        raise TypeError(f"Invalid type for amount: {amount}. Must be int or float.")
    if amount < 0:
        raise ValueError(f"amount={amount} should either be a float in the range [0, 1] or a non-negative integer")
    if isinstance(amount, numbers.Integral):
        if amount > size:
            raise ValueError(f"amount={amount} should be smaller than the number of parameters to prune={size}")
        return int(amount)
    if amount > 1:
        raise ValueError(f"amount={amount} should either be a float in the range [0, 1] or a non-negative integer")
    return round(amount * size)


def _unstructured_mask(default_mask, amount, scores, largest):
    """``default_mask`` with the ``amount`` entries of largest (or smallest) flat ``scores`` pruned."""
    k = _count(amount, scores.numel())
    mask = default_mask.clone()
    if k:
        mask.view(-1)[scores.topk(k, largest=largest).indices] = 0
    return mask


class BasePruningMethod:
    """A pruning technique: ``compute_mask(t, default_mask)`` gives the new mask; it is also the forward pre-hook."""

    PRUNING_TYPE = None
    _tensor_name = None

    def __call__(self, module, inputs):
        setattr(module, self._tensor_name, self.apply_mask(module))

    def compute_mask(self, t, default_mask):
        raise NotImplementedError

    def apply_mask(self, module):
        orig = getattr(module, self._tensor_name + "_orig")
        mask = getattr(module, self._tensor_name + "_mask")
        return mask.to(dtype=orig.dtype) * orig

    @classmethod
    def apply(cls, module, name, *args, importance_scores=None, **kwargs):
        """Prune ``module.name`` with a new ``cls(*args, **kwargs)``; returns the method (or container) hooked."""
        found = [h for h in module._forward_pre_hooks.values()
                 if isinstance(h, BasePruningMethod) and h._tensor_name == name]
        if len(found) > 1:
            raise RuntimeError(f"Found multiple pruning hooks on parameter {name}")
        old = found[0] if found else None
        method = cls(*args, **kwargs)
        method._tensor_name = name
        if old is not None:
            container = old if isinstance(old, PruningContainer) else PruningContainer(old)
            container.add_pruning_method(method)
            method = container
            for key, hook in list(module._forward_pre_hooks.items()):
                if hook is old:
                    del module._forward_pre_hooks[key]
        orig = getattr(module, name)
        scores = importance_scores if importance_scores is not None else orig
        if scores.shape != orig.shape:
            raise AssertionError(f"importance_scores should have the same shape as parameter {name} of {module}, "
                                 f"got {scores.shape} vs {orig.shape}")
        if old is None:  # first pruning: the parameter moves to name_orig, its pruned value becomes an attribute
            module.register_parameter(name + "_orig", orig)
            del module._parameters[name]
            default_mask = _creation.ones_like(orig)
        else:
            default_mask = getattr(module, name + "_mask").detach().clone()
        try:
            mask = method.compute_mask(scores.detach(), default_mask=default_mask)
        except Exception:
            if old is None:  # as torch: a first pruning that fails gives the parameter back under its own name
                module.register_parameter(name, module._parameters.pop(name + "_orig"))
            raise
        module.register_buffer(name + "_mask", mask)
        setattr(module, name, method.apply_mask(module))
        module.register_forward_pre_hook(method)
        return method

    def prune(self, t, default_mask=None, importance_scores=None):
        """``t`` times its mask, computed from ``importance_scores`` (``t`` by default)."""
        scores = importance_scores if importance_scores is not None else t
        mask = self.compute_mask(scores, default_mask if default_mask is not None else _creation.ones_like(t))
        return t * mask

    def remove(self, module):
        """Make the pruning permanent: ``name`` becomes a parameter holding ``orig * mask`` again."""
        name = self._tensor_name
        if name is None:
            raise RuntimeError(f"Module {module} has to be pruned before pruning can be removed")
        weight = self.apply_mask(module)
        if hasattr(module, name):
            delattr(module, name)
        orig = module._parameters[name + "_orig"]
        orig.data = weight.data
        del module._parameters[name + "_orig"]
        del module._buffers[name + "_mask"]
        setattr(module, name, orig)


class PruningContainer(BasePruningMethod):
    """The pruning methods applied to one parameter, in order; each new mask prunes only what is still unpruned."""

    def __init__(self, *methods):
        self._pruning_methods = ()
        for m in methods:
            self.add_pruning_method(m)

    def add_pruning_method(self, method):
        if self._tensor_name is None:
            self._tensor_name = method._tensor_name
        elif method._tensor_name != self._tensor_name:
            raise ValueError(f"Can only add pruning methods acting on the parameter named '{self._tensor_name}' to "
                             f"PruningContainer. Found '{method._tensor_name}'")
        self._pruning_methods += (method,)

    def __len__(self):
        return len(self._pruning_methods)

    def __iter__(self):
        return iter(self._pruning_methods)

    def __getitem__(self, i):
        return self._pruning_methods[i]

    def compute_mask(self, t, default_mask):
        method = self._pruning_methods[-1]
        if method.PRUNING_TYPE == "unstructured":
            keep = default_mask == 1
            new = default_mask.clone()
            new[keep] = method.compute_mask(t[keep], default_mask=default_mask[keep])
            return new
        if method.PRUNING_TYPE == "structured":
            dim, others = _dim_and_others(t, method.dim)
            alive = (default_mask.sum(others) != 0) if others else default_mask != 0
            index = [slice(None)] * t.dim()
            index[dim] = alive
            index = tuple(index)
            new = default_mask.clone()
            new[index] = method.compute_mask(t[index], default_mask=default_mask[index])
            return new
        return method.compute_mask(t, default_mask)


class Identity(BasePruningMethod):
    PRUNING_TYPE = "unstructured"

    def compute_mask(self, t, default_mask):
        return default_mask

    @classmethod
    def apply(cls, module, name):
        return super().apply(module, name)


class RandomUnstructured(BasePruningMethod):
    PRUNING_TYPE = "unstructured"

    def __init__(self, amount):
        _count(amount, 1 << 62)
        self.amount = amount

    def compute_mask(self, t, default_mask):
        return _unstructured_mask(default_mask, self.amount, _random.rand_like(t).view(-1), largest=True)

    @classmethod
    def apply(cls, module, name, amount):
        return super().apply(module, name, amount=amount)


class L1Unstructured(BasePruningMethod):
    PRUNING_TYPE = "unstructured"

    def __init__(self, amount):
        _count(amount, 1 << 62)
        self.amount = amount

    def compute_mask(self, t, default_mask):
        return _unstructured_mask(default_mask, self.amount, t.abs().reshape(-1), largest=False)

    @classmethod
    def apply(cls, module, name, amount, importance_scores=None):
        return super().apply(module, name, amount=amount, importance_scores=importance_scores)


class RandomStructured(BasePruningMethod):
    PRUNING_TYPE = "structured"

    def __init__(self, amount, dim=-1):
        _count(amount, 1 << 62)
        self.amount, self.dim = amount, dim

    def compute_mask(self, t, default_mask):
        _check_structured(t, self.dim)
        return _channel_mask(t, default_mask, self.amount, self.dim, _random.rand(t.shape[self.dim]))

    @classmethod
    def apply(cls, module, name, amount, dim=-1):
        return super().apply(module, name, amount=amount, dim=dim)


class LnStructured(BasePruningMethod):
    PRUNING_TYPE = "structured"

    def __init__(self, amount, n, dim=-1):
        _count(amount, 1 << 62)
        self.amount, self.n, self.dim = amount, n, dim

    def compute_mask(self, t, default_mask):
        _check_structured(t, self.dim)
        dim, others = _dim_and_others(t, self.dim)
        norms = t.norm(p=self.n, dim=others) if others else t.abs()
        return _channel_mask(t, default_mask, self.amount, dim, norms)

    @classmethod
    def apply(cls, module, name, amount, n, dim, importance_scores=None):
        return super().apply(module, name, amount=amount, n=n, dim=dim, importance_scores=importance_scores)


def _check_structured(t, dim):
    """torch's checks of a structured method's tensor: more than one dim, and ``dim`` below its number of dims."""
    if t.dim() <= 1:
        raise ValueError("Structured pruning can only be applied to multidimensional tensors. Found tensor of shape "
                         f"{t.shape} with {t.dim()} dims")
    if dim >= t.dim():
        raise IndexError(f"Invalid index {dim} for tensor of size {t.shape}")


def _dim_and_others(t, dim):
    """``dim`` of ``t`` made non-negative, and the list of ``t``'s other dims (those a structured score reduces)."""
    dim = dim if dim >= 0 else t.dim() + dim
    return dim, [d for d in range(t.dim()) if d != dim]


def _channel_mask(t, default_mask, amount, dim, scores):
    """Keep the ``len - k`` slices along ``dim`` with the largest ``scores``; the rest are pruned."""
    size = t.shape[dim]
    k = _count(amount, size)
    keep = size - k
    mask = _creation.zeros_like(default_mask)
    if keep:
        index = [slice(None)] * t.dim()
        index[dim] = scores.topk(keep).indices
        mask[tuple(index)] = 1
    return mask * default_mask


class CustomFromMask(BasePruningMethod):
    PRUNING_TYPE = "global"

    def __init__(self, mask):
        self.mask = mask

    def compute_mask(self, t, default_mask):
        if default_mask.shape != self.mask.shape:
            raise ValueError("CustomFromMask: the mask must have the parameter's shape")
        return default_mask * self.mask.to(dtype=default_mask.dtype)

    @classmethod
    def apply(cls, module, name, mask):
        return super().apply(module, name, mask=mask)


def identity(module, name):
    """Apply a mask of ones (prunes nothing, but sets up the reparametrization)."""
    Identity.apply(module, name)
    return module


def random_unstructured(module, name, amount):
    RandomUnstructured.apply(module, name, amount)
    return module


def l1_unstructured(module, name, amount, importance_scores=None):
    """Prune the ``amount`` entries of smallest magnitude (an int, or a fraction of the entries)."""
    L1Unstructured.apply(module, name, amount=amount, importance_scores=importance_scores)
    return module


def random_structured(module, name, amount, dim):
    RandomStructured.apply(module, name, amount, dim)
    return module


def ln_structured(module, name, amount, n, dim, importance_scores=None):
    """Prune the ``amount`` slices along ``dim`` of smallest L``n`` norm."""
    LnStructured.apply(module, name, amount, n, dim, importance_scores=importance_scores)
    return module


def global_unstructured(parameters, pruning_method, importance_scores=None, **kwargs):
    """Prune ``(module, name)`` pairs together: one mask over all their entries, by ``pruning_method``."""
    parameters = list(parameters)
    importance_scores = importance_scores or {}
    scores, masks = [], []
    for module, name in parameters:
        scores.append(importance_scores.get((module, name), getattr(module, name)).detach().reshape(-1))
        mask = getattr(module, name + "_mask", None)
        masks.append(mask.reshape(-1) if mask is not None else _creation.ones_like(scores[-1]))
    all_scores, default = _movement_copy.cat(scores), _movement_copy.cat(masks)
    method = pruning_method(**kwargs)
    method._tensor_name = "temp"
    if method.PRUNING_TYPE != "unstructured":
        raise TypeError(f'Only "unstructured" PRUNING_TYPE supported for the `pruning_method`. Found method '
                        f"{pruning_method} of type {method.PRUNING_TYPE}")
    container = PruningContainer(method)
    container._tensor_name = "temp"
    final = container.compute_mask(all_scores, default)
    start = 0
    for (module, name), s in zip(parameters, scores):
        param = getattr(module, name)
        custom_from_mask(module, name, final[start:start + s.numel()].view(param.shape))
        start += s.numel()


def custom_from_mask(module, name, mask):
    """Prune with a given mask (ones keep, zeros prune)."""
    CustomFromMask.apply(module, name, mask)
    return module


def remove(module, name):
    """Make ``module.name``'s pruning permanent: drop the hook, ``name_orig`` and ``name_mask``."""
    for key, hook in list(module._forward_pre_hooks.items()):
        if isinstance(hook, BasePruningMethod) and hook._tensor_name == name:
            hook.remove(module)
            del module._forward_pre_hooks[key]
            return module
    raise ValueError(f"Parameter '{name}' of module {module} has to be pruned before pruning can be removed")


def is_pruned(module):
    """Whether any submodule of ``module`` is pruned."""
    return any(isinstance(h, BasePruningMethod) for m in module.modules() for h in m._forward_pre_hooks.values())
