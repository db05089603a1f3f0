"""How a batch travels from a worker process to the main process: structure pickled, array data in shared memory.

``encode`` pickles the batch with every tensor and NumPy array replaced by a reference (a pickle persistent id) to a
slot in a shared-memory block: arrays that collation already built in shared memory (see ``_shm.empty``) are
referenced where they are, the others are copied into one new block. Only the block names, the slots' (offset, shape,
strides, dtype) and the pickled structure go through the pipe. ``decode`` maps the blocks and rebuilds the batch
around zero-copy views (through a ``_recycle.BlockRecycler`` in a DataLoader, which gets the blocks back once the
batch is garbage); ``discard`` releases the blocks of a batch that will never be decoded.

Any structure pickle can handle works (nested containers, dataclasses, custom batch classes), not just what
``default_collate`` produces.

>>> import jitorch
>>> from jitorch.utils.data import _transport
>>> batch = {"x": jitorch.ones(2, 3), "label": [1, 2]}
>>> _transport.decode(_transport.encode(batch))
{'x': tensor([[1., 1., 1.],
        [1., 1., 1.]]), 'label': [1, 2]}
"""
from __future__ import annotations

import io
import pickle
from typing import NamedTuple

import numpy as np

from ..._tensor import Tensor
from . import _shm

__all__ = ["ShmBatch", "encode", "decode", "discard"]

_ALIGN = 64  # slot alignment inside a packed block: cache lines, and enough for any dtype


class ShmBatch(NamedTuple):
    """A batch in flight: ``blocks`` ((name, size), ...), ``slots`` (one spec per array), the pickled structure and
    the id of the worker that made it (-1 outside workers).

    A slot is ``(is_tensor, block_index, offset, shape, strides, dtype, requires_grad, device, inline)``;
    ``block_index`` is -1 for an empty array, and ``inline`` holds the array itself when shared memory is not
    available on this platform.
    """

    blocks: tuple
    slots: list
    payload: bytes
    worker_id: int = -1


class _Slot:
    __slots__ = ("is_tensor", "array", "block", "offset", "strides", "requires_grad", "device")

    def spec(self, block_index):
        inline = None if _shm.SUPPORTED else np.ascontiguousarray(self.array)
        strides = None if self.strides is None else tuple(self.strides)
        return (self.is_tensor, block_index, self.offset, tuple(self.array.shape), strides, self.array.dtype,
                self.requires_grad, self.device, inline)


class _Pickler(pickle.Pickler):
    def __init__(self, file, own_blocks):
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        # Only blocks allocated for this very batch are sent by reference: any other block may be in use elsewhere
        # (or be recycled while something still views it), so arrays in them are copied like ordinary ones.
        self.own_blocks = own_blocks
        self.slots = []
        self._ids = {}
        self._keep = []  # the objects whose id() keys ``_ids``: they must not be freed and their ids reused

    def persistent_id(self, obj):
        # Only plain tensors: a subclass (``nn.Parameter``, a user's tensor type) pickles through its own
        # ``__reduce_ex__``, which keeps its type and attributes; the array inside still travels by shared memory.
        if type(obj) is Tensor:
            slot = _Slot()
            slot.is_tensor = True
            slot.requires_grad = obj.requires_grad
            array = obj._data
            slot.device = None
            if type(array) is not np.ndarray:
                array, slot.device = obj._host(), str(obj.device)
        elif type(obj) in (np.ndarray, np.memmap) and not obj.dtype.hasobject:
            slot = _Slot()
            slot.is_tensor, slot.requires_grad, slot.device, array = False, False, None, obj
        else:
            return None
        key = id(obj)
        if key in self._ids:  # the same object twice in a batch stays one object
            return self._ids[key]
        slot.array = array
        slot.block = _shm.block_of(array) if _shm.SUPPORTED else None
        if slot.block is not None and slot.block.mapping.name not in self.own_blocks:
            slot.block = None
        slot.offset, slot.strides = 0, None
        if slot.block is not None:
            slot.offset = array.__array_interface__["data"][0] - slot.block.mapping.address
            slot.strides = array.strides
        self._ids[key] = len(self.slots)
        self._keep.append(obj)
        self.slots.append(slot)
        return self._ids[key]


def encode(obj, scope=None, worker_id=-1):
    """``obj`` as a ``ShmBatch``; ``scope`` (a ``_shm.worker_scope``) provides the blocks and records those sent."""
    buffer = io.BytesIO()
    pickler = _Pickler(buffer, set() if scope is None else {mapping.name for mapping, _ in scope.allocated})
    pickler.dump(obj)
    blocks, block_index, specs = [], {}, []

    def index_of(mapping):
        if mapping.name not in block_index:
            block_index[mapping.name] = len(blocks)
            blocks.append(mapping)
        return block_index[mapping.name]

    to_pack = []
    for slot in pickler.slots:
        if not _shm.SUPPORTED or slot.array.nbytes == 0:
            specs.append(slot.spec(-1))
        elif slot.block is not None:
            specs.append(slot.spec(index_of(slot.block.mapping)))
        else:
            to_pack.append(len(specs))
            specs.append(None)
    if to_pack:
        total = 0
        for i in to_pack:
            slot = pickler.slots[i]
            slot.offset = total
            total += -(-slot.array.nbytes // _ALIGN) * _ALIGN
        pack = scope.allocate(total) if scope is not None else _shm.create(total)
        try:
            for i in to_pack:
                slot = pickler.slots[i]
                np.copyto(_shm.as_array(_shm.Block(pack), slot.array.shape, slot.array.dtype, slot.offset),
                          slot.array)
        except BaseException:
            if scope is None:
                _shm.release(pack.name)
            raise
        index = index_of(pack)
        for i in to_pack:
            specs[i] = pickler.slots[i].spec(index)
    if scope is not None:
        scope.sent.update(block.name for block in blocks)
    return ShmBatch(tuple((block.name, block.size) for block in blocks), specs, buffer.getvalue(), worker_id)


class _Unpickler(pickle.Unpickler):
    def __init__(self, file, blocks, slots):
        super().__init__(file)
        self._blocks = blocks
        self._slots = slots
        self._built = {}

    def persistent_load(self, pid):
        if pid not in self._built:
            self._built[pid] = _build(self._slots[pid], self._blocks)
        return self._built[pid]


def _build(spec, blocks):
    is_tensor, block_index, offset, shape, strides, dtype, requires_grad, device, inline = spec
    if inline is not None:
        array = inline
    elif block_index < 0:
        array = np.empty(shape, dtype)
    else:
        array = _shm.as_array(blocks[block_index], shape, dtype, offset, strides)
    if not is_tensor:
        return array
    tensor = Tensor._make(array)
    if device is not None:
        tensor = tensor.to(device)
    if requires_grad:
        tensor.requires_grad_(True)
    return tensor


def decode(batch, recycler=None):
    """The object ``batch`` encodes, its arrays viewing the shared memory: blocks from ``recycler`` when given,
    else mapped and unlinked here."""
    if recycler is not None:
        blocks = recycler.blocks_for(batch)
    else:
        blocks = []
        try:
            for name, size in batch.blocks:
                blocks.append(_shm.attach(name, size))
        except BaseException:
            for name, _ in batch.blocks[len(blocks) + 1:]:
                _shm.release(name)
            raise
    return _Unpickler(io.BytesIO(batch.payload), blocks, batch.slots).load()


def discard(batch):
    """Release the shared memory of a batch that will not be decoded."""
    for name, _ in batch.blocks:
        _shm.release(name)
