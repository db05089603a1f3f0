"""``default_collate`` (a list of samples -> one batch) and ``default_convert`` (NumPy -> tensors, no batching).

Follows PyTorch's rules: tensors and NumPy arrays are stacked along a new first dimension, Python ints become an int64
tensor, floats a float64 tensor, bools a bool tensor, strings and bytes stay a list, and mappings, namedtuples and
sequences are collated field by field (tuples become lists). ``collate(batch, collate_fn_map=...)`` is the
extensible core: the map sends an element type to the function that collates a batch of it.

>>> from jitorch.utils.data import default_collate
>>> default_collate([(0, 1.5, "a"), (1, 2.5, "b")])
[tensor([0, 1]), tensor([1.5000, 2.5000], dtype=jitorch.float64), ('a', 'b')]
"""
from __future__ import annotations

import collections.abc
import copy
import re

import numpy as np

from ... import _creation, _dtype
from ..._movement import stack
from ..._tensor import Tensor
from . import _shm

__all__ = ["collate", "default_collate", "default_convert", "default_collate_fn_map", "collate_tensor_fn",
           "collate_numpy_array_fn", "collate_numpy_scalar_fn", "collate_float_fn", "collate_int_fn",
           "collate_str_fn", "default_collate_err_msg_format", "np_str_obj_array_pattern"]

# NumPy dtypes that cannot become tensors: byte and unicode strings, and Python objects.
np_str_obj_array_pattern = re.compile(r"[SaUO]")

default_collate_err_msg_format = ("default_collate: batch must contain tensors, numpy arrays, numbers, dicts or lists; "
                                  "found {}")


def default_convert(data):
    """Turn every NumPy array (and NumPy scalar) inside ``data`` into a tensor; everything else is left as is."""
    elem_type = type(data)
    if isinstance(data, Tensor):
        return data
    # As torch: NumPy byte strings are not excluded, so ``as_tensor`` refuses them.
    if elem_type.__module__ == "numpy" and elem_type.__name__ not in ("str_", "string_"):
        if elem_type.__name__ == "ndarray" and np_str_obj_array_pattern.search(data.dtype.str) is not None:
            return data
        return _creation.as_tensor(data)
    if isinstance(data, collections.abc.Mapping):
        try:
            if isinstance(data, collections.abc.MutableMapping):
                # A shallow copy keeps the mapping's own type and attributes (e.g. an OrderedDict subclass).
                clone = copy.copy(data)
                clone.update({key: default_convert(data[key]) for key in data})
                return clone
            return elem_type({key: default_convert(data[key]) for key in data})
        except TypeError:  # the mapping type cannot be built from a dict
            return {key: default_convert(data[key]) for key in data}
    if isinstance(data, tuple) and hasattr(data, "_fields"):  # namedtuple
        return elem_type(*(default_convert(d) for d in data))
    if isinstance(data, tuple):
        return [default_convert(d) for d in data]  # PyTorch's backwards-compatible choice
    if isinstance(data, collections.abc.Sequence) and not isinstance(data, (str, bytes)):
        try:
            if isinstance(data, collections.abc.MutableSequence):
                clone = copy.copy(data)
                for i, d in enumerate(data):
                    clone[i] = default_convert(d)
                return clone
            return elem_type([default_convert(d) for d in data])
        except TypeError:
            return [default_convert(d) for d in data]
    return data


def collate(batch, *, collate_fn_map=None):
    """Collate ``batch`` (a list of samples of one structure), dispatching element types through ``collate_fn_map``.

    An element type found in the map (exactly, else the first key it is an instance of, in insertion order) is
    handed to that function as ``fn(batch, collate_fn_map=collate_fn_map)``; containers are recursed into.
    """
    elem = batch[0]
    elem_type = type(elem)
    if collate_fn_map is not None:
        if elem_type in collate_fn_map:
            return collate_fn_map[elem_type](batch, collate_fn_map=collate_fn_map)
        for collate_type in collate_fn_map:
            if isinstance(elem, collate_type):
                return collate_fn_map[collate_type](batch, collate_fn_map=collate_fn_map)
    if isinstance(elem, collections.abc.Mapping):
        try:
            if isinstance(elem, collections.abc.MutableMapping):
                clone = copy.copy(elem)
                clone.update({key: collate([d[key] for d in batch], collate_fn_map=collate_fn_map) for key in elem})
                return clone
            return elem_type({key: collate([d[key] for d in batch], collate_fn_map=collate_fn_map) for key in elem})
        except TypeError:
            return {key: collate([d[key] for d in batch], collate_fn_map=collate_fn_map) for key in elem}
    if isinstance(elem, tuple) and hasattr(elem, "_fields"):  # namedtuple
        return elem_type(*(collate(samples, collate_fn_map=collate_fn_map) for samples in zip(*batch)))
    if isinstance(elem, collections.abc.Sequence):
        it = iter(batch)
        elem_size = len(next(it))
        if not all(len(e) == elem_size for e in it):
            raise RuntimeError("each element in list of batch should be of equal size")
        transposed = list(zip(*batch))
        if isinstance(elem, tuple):
            return [collate(samples, collate_fn_map=collate_fn_map) for samples in transposed]
        try:
            if isinstance(elem, collections.abc.MutableSequence):
                clone = copy.copy(elem)
                for i, samples in enumerate(transposed):
                    clone[i] = collate(samples, collate_fn_map=collate_fn_map)
                return clone
            return elem_type([collate(samples, collate_fn_map=collate_fn_map) for samples in transposed])
        except TypeError:
            return [collate(samples, collate_fn_map=collate_fn_map) for samples in transposed]
    raise TypeError(default_collate_err_msg_format.format(elem_type))


def collate_tensor_fn(batch, *, collate_fn_map=None):
    """Stack equal-shaped tensors along a new dim 0 (in shared memory when running in a DataLoader worker)."""
    elem = batch[0]
    if elem.is_nested:
        raise RuntimeError("Batches of nested tensors are not currently supported by the default collate_fn; please "
                           "provide a custom collate_fn to handle them appropriately.")
    if isinstance(batch, Tensor) or not all(isinstance(t, Tensor) for t in batch):
        # raises torch's TypeError: a tensor is not a batch, or names the first non-tensor element
        return stack(batch if isinstance(batch, Tensor) else list(batch), 0)
    arrays = [t._data for t in batch]
    # The common case is stacked by NumPy straight into the output (a shared-memory block in a worker, so the batch
    # reaches the main process without another copy). Anything else (autograd, mixed dtypes or shapes, device
    # arrays) takes ``jitorch.stack``, which also raises PyTorch's errors.
    if (any(t.requires_grad for t in batch) or any(type(a) is not np.ndarray for a in arrays)
            or any(a.dtype != arrays[0].dtype or a.shape != arrays[0].shape for a in arrays)):
        return stack(list(batch), 0)
    out = _shm.empty((len(arrays),) + arrays[0].shape, arrays[0].dtype)
    np.stack(arrays, 0, out=out)
    return Tensor._make(out)


def collate_numpy_array_fn(batch, *, collate_fn_map=None):
    elem = batch[0]
    if np_str_obj_array_pattern.search(elem.dtype.str) is not None:
        raise TypeError(default_collate_err_msg_format.format(elem.dtype))
    return collate([_creation.as_tensor(b) for b in batch], collate_fn_map=collate_fn_map)


def collate_numpy_scalar_fn(batch, *, collate_fn_map=None):
    return _creation.as_tensor(batch)


def collate_float_fn(batch, *, collate_fn_map=None):
    return _creation.tensor(batch, dtype=_dtype.float64)


def collate_int_fn(batch, *, collate_fn_map=None):
    # bools reach here too (bool subclasses int) and become a bool tensor, as in PyTorch.
    return _creation.tensor(batch)


def collate_str_fn(batch, *, collate_fn_map=None):
    return batch


default_collate_fn_map = {
    Tensor: collate_tensor_fn,
    np.ndarray: collate_numpy_array_fn,
    (np.bool_, np.number, np.object_): collate_numpy_scalar_fn,
    float: collate_float_fn,
    int: collate_int_fn,
    str: collate_str_fn,
    bytes: collate_str_fn,
}


def default_collate(batch):
    """Merge a list of samples into a batch: tensors/arrays/numbers stacked along a new dim 0, containers recursed.

    ``Tensor`` / NumPy array -> stacked tensor; ``float`` -> float64 tensor; ``int`` -> int64 tensor; ``bool`` ->
    bool tensor; ``str`` / ``bytes`` -> unchanged list; ``Mapping`` -> same mapping of collated values; namedtuple ->
    same namedtuple of collated fields; other sequences -> list of collated positions.
    """
    return collate(batch, collate_fn_map=default_collate_fn_map)
