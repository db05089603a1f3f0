"""Tensors in shared memory: ``Tensor.share_memory_()``, ``Module.share_memory()`` and how such tensors travel to
other processes (Hogwild training: workers updating one model's parameters in place).

``share_memory_()`` moves a CPU tensor's values into a POSIX shared-memory segment (`multiprocessing.shared_memory`)
and points the tensor at it. A process forked afterwards maps the same pages; a tensor sent to another process
through multiprocessing (a ``Process`` argument under ``spawn``, a ``Queue``) is pickled as the segment's name, and
the receiver maps it: writes on either side are seen by both, as with torch's shared storages. Other tensors pickle
by value. The creating process unlinks the segment once its array is freed.

Unlike torch, which moves the storage itself, only the tensor it is called on follows: views of it taken before
keep the old memory (``share_memory()`` on a module's parameters and buffers, the usual call, has none).

>>> import jitorch
>>> t = jitorch.zeros(3)
>>> t.share_memory_() is t, t.is_shared()
(True, True)
"""
from __future__ import annotations

import atexit
import os
import warnings
import weakref
from multiprocessing import shared_memory
from multiprocessing.reduction import ForkingPickler

import numpy as np

from ..cpu._steps import root_of

__all__ = ["share_memory_", "is_shared"]

_segments: dict = {}  # id(root array) -> (weakref to it, SharedMemory, the pid that created it or None)


def _segment_of(array):
    root = root_of(array)
    entry = _segments.get(id(root))
    if entry is None or entry[0]() is not root:
        return None
    return entry[1]


def _shared_array(shape, dtype, strides, offset, shm):
    return np.ndarray(shape, dtype, buffer=shm.buf, offset=offset, strides=strides)


def _release(key, shm, creator):
    """The array is gone: unmap the segment, and unlink it in the process that made it (a forked child that drops
    its inherited copy must not remove the parent's segment)."""
    _segments.pop(key, None)
    try:
        shm.close()
    except BufferError:  # an exported view is still alive somewhere: the mapping goes with the process
        pass
    _unlink(shm, creator)


def _unlink(shm, creator):
    if creator == os.getpid():
        try:
            shm.unlink()
        except FileNotFoundError:
            pass


@atexit.register
def _unlink_at_exit():
    # Never unmap at exit: a tensor read during teardown (a __del__, a daemon thread) still maps the segment, and
    # unmapping under it would crash; the name is removed, the pages go with the process.
    for ref, shm, creator in list(_segments.values()):
        _unlink(shm, creator)


def _adopt(array, shm, creator):
    root = root_of(array)
    _segments[id(root)] = (weakref.ref(root), shm, creator)
    weakref.finalize(root, _release, id(root), shm, creator).atexit = False


def share_memory_(self):
    """Move this CPU tensor's values into shared memory (see the module notes); CUDA and meta tensors are left as
    they are (CUDA memory is shared through IPC handles in torch, a no-op for the call)."""
    data = self._data
    if type(data) is not np.ndarray or _segment_of(data) is not None:
        return self
    if self._base is not None:
        warnings.warn("share_memory_() on a view: only this tensor moves to shared memory; its base and other views "
                      "keep their own memory (torch moves the whole storage). Share the base tensor instead.",
                      stacklevel=3)
    layout = np.empty_like(data)  # the same order of dimensions in memory: a transposed tensor keeps its strides
    shm = shared_memory.SharedMemory(create=True, size=max(layout.nbytes, 1))
    shared = _shared_array(data.shape, data.dtype, layout.strides, 0, shm)
    shared[...] = data
    _adopt(shared, shm, os.getpid())
    self._data = shared
    return self


def is_shared(self):
    """Whether the tensor's values are in a shared-memory segment (`share_memory_`)."""
    return type(self._data) is np.ndarray and _segment_of(self._data) is not None


def _rebuild(name, shape, dtype, strides, offset, requires_grad, cls):
    from .._tensor import Tensor

    # (Attaching registers the name with the resource tracker again: processes started by multiprocessing share
    # the creator's tracker, where the name already is, and only the creator unlinks and unregisters it.)
    shm = shared_memory.SharedMemory(name=name)
    array = _shared_array(shape, dtype, strides, offset, shm)
    _adopt(array, shm, None)
    t = Tensor._make(array)
    if cls is not Tensor:
        t = cls(t, requires_grad=requires_grad) if _is_parameter(cls) else t.as_subclass(cls)
    t.requires_grad_(requires_grad)
    return t


def _is_parameter(cls):
    from ..nn.parameter import Parameter

    return issubclass(cls, Parameter)


def _reduce(t):
    data = t._data
    shm = _segment_of(data) if type(data) is np.ndarray else None
    if shm is None:
        return t.__reduce_ex__(2)
    offset = data.__array_interface__["data"][0] - root_of(data).__array_interface__["data"][0]
    return _rebuild, (shm.name, data.shape, data.dtype, data.strides, offset, t._requires_grad, type(t))


def _register_reducers():
    """Pickle shared tensors by segment name in multiprocessing's pickler (``Queue``, ``spawn`` arguments): done
    when this module is first imported, by ``share_memory_`` or by a process unpickling a shared tensor (which may
    send it on)."""
    from .._tensor import Tensor
    from ..nn.parameter import Parameter

    for cls in (Tensor, Parameter):
        ForkingPickler.register(cls, _reduce)


_register_reducers()
