"""``torch.func``'s helpers that need no transform machinery: ``functionalize`` (jitorch runs eagerly, so the function
itself already gives a functionalized program's values and input mutations), ``replace_all_batch_norm_modules_``
and ``debug_unwrap``.

>>> import jitorch
>>> net = replace_all_batch_norm_modules_(jitorch.nn.Sequential(jitorch.nn.BatchNorm1d(3)))
>>> net[0].running_mean is None, net[0].track_running_stats
(True, False)
"""
from __future__ import annotations

import functools

__all__ = ["functionalize", "replace_all_batch_norm_modules_", "debug_unwrap"]


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
