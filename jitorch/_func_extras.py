"""``torch.func``'s helpers that need no transform machinery: ``functionalize`` (jitorch runs eagerly, so the function
itself already gives a functionalized program's values and input mutations), ``replace_all_batch_norm_modules_``,
``stack_module_state`` and ``debug_unwrap``.

>>> import jitorch
>>> net = replace_all_batch_norm_modules_(jitorch.nn.Sequential(jitorch.nn.BatchNorm1d(3)))
>>> net[0].running_mean is None, net[0].track_running_stats
(True, False)
"""
from __future__ import annotations

import functools

__all__ = ["functionalize", "replace_all_batch_norm_modules_", "stack_module_state", "debug_unwrap"]


def functionalize(func, *, remove="mutations"):
    """``func`` with torch's signature: a functionalized function computes the same values and copies its mutations
    back to the inputs, which eager ``func`` does by itself."""
    if remove not in ("mutations", "mutations_and_views"):
        raise RuntimeError(f"functionalize(f, remove='mutations'): received invalid argument for remove={remove}. "
                           "Valid options are:\n     remove='mutations': all inplace and out= operators will be "
                           "removed from the program, and replaced with their out-of-place equivalents.\n     "
                           "remove='mutations_and_views': In addition to the above, all aliasing operators {view} "
                           "will be replaced with their non-aliasing counterparts, {view}_copy.\n")

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        return func(*args, **kwargs)
    return wrapper


def replace_all_batch_norm_modules_(root):
    """Drop the running statistics of every batch norm in ``root`` (in place), so that ``vmap`` over it does not
    write one buffer from every sample; returns ``root``."""
    from .nn.modules.batchnorm import _BatchNorm

    for module in root.modules():
        if isinstance(module, _BatchNorm) and module.track_running_stats:
            module.running_mean = None
            module.running_var = None
            module.num_batches_tracked = None
            module.track_running_stats = False
    return root


def debug_unwrap(tensor, *, recurse=True):
    """The plain tensor under a transform's wrapper: jitorch's transforms wrap nothing."""
    return tensor


def stack_module_state(models):
    """``(params, buffers)``: each parameter and buffer of same-structured ``models`` stacked along a new first
    dimension, by name (for ``vmap`` over ``functional_call``, ensembling). The stacked parameters are new leaves.

    >>> import jitorch
    >>> params, buffers = stack_module_state([jitorch.nn.Linear(3, 2) for _ in range(4)])
    >>> params["weight"].shape, params["weight"].requires_grad
    (jitorch.Size([4, 2, 3]), True)
    """
    from ._movement import stack

    models = list(models)
    if not models:
        raise RuntimeError("stack_module_state: Expected at least one model, got 0.")
    if any(m.training != models[0].training for m in models):
        raise RuntimeError("stack_module_state: Expected all models to have the same training/eval mode.")
    names = [n for n, _ in models[0].named_parameters()]
    if any([n for n, _ in m.named_parameters()] != names for m in models):
        raise RuntimeError("stack_module_state: Expected all models to be of the same class.")
    params = {n: stack([dict(m.named_parameters())[n].detach() for m in models]).requires_grad_(
        dict(models[0].named_parameters())[n].requires_grad) for n in names}
    buffers = {n: stack([dict(m.named_buffers())[n] for m in models]) for n, _ in models[0].named_buffers()}
    return params, buffers
