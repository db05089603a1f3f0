"""Named shared-memory blocks that carry DataLoader batches from worker processes to the main process.

A worker puts a batch's arrays in blocks and sends only the block names with each array's (offset, shape, strides,
dtype); the main process maps the blocks and wraps them as zero-copy NumPy arrays (see ``_transport``).

Fresh shared memory is expensive: the kernel allocates and zeroes every page on first touch, which costs more than
copying the data itself. So blocks are recycled: when the main process has dropped every array of a batch, it hands
the blocks back to the worker that made them (``_recycle``), and both processes keep their mappings so the pages stay
warm. The main process is the only one that unlinks a block once a worker has sent it.

Blocks are mapped with libc's ``mmap`` through ctypes rather than the ``mmap`` module: an ``mmap.mmap`` keeps a
duplicated file descriptor open for its whole life, and a loop that keeps thousands of batches (every label of an
epoch, say) would run out of descriptors. Every block is registered with multiprocessing's resource tracker from its
creation until it is unlinked, so blocks are removed even if the whole program dies.

>>> from jitorch.utils.data import _shm
>>> block = _shm.Block(_shm.create(64)); _shm.as_array(block, (8,), "float64")[:] = 1.0
>>> float(_shm.as_array(_shm.attach(block.mapping.name, 64), (8,), "float64").sum())
8.0
"""
from __future__ import annotations

import ctypes
import mmap
import os
import secrets
import weakref

import numpy as np

try:
    import _posixshmem
    from multiprocessing import resource_tracker

    _libc = ctypes.CDLL(None, use_errno=True)
    _libc.mmap.restype = ctypes.c_void_p
    _libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    _libc.munmap.restype = ctypes.c_int
    _libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    SUPPORTED = True
except (ImportError, OSError, AttributeError):  # Windows: batches are pickled instead (see _transport)
    SUPPORTED = False

__all__ = ["SUPPORTED", "owner_pid", "Mapping", "Block", "create", "open_block", "attach", "release", "as_array",
           "block_of", "empty", "prepare", "worker_scope", "worker_blocks"]

_MAP_FAILED = ctypes.c_void_p(-1).value
_RTYPE = "shared_memory"  # the resource tracker's kind for names that shm_unlink removes
# Map every page at once: far cheaper than one fault per page, and the pages are about to be written or read.
_MAP_FLAGS = mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0)

# Block names carry the pid of the process that receives them (a worker's DataLoader process), so that a leftover
# block in /dev/shm says whose it was.
owner_pid = os.getpid()


class Mapping:
    """This process's mapping of one named block; unmapped when garbage-collected."""

    __slots__ = ("name", "size", "address", "__weakref__")

    def __init__(self, name, address, size):
        self.name, self.address, self.size = name, address, size
        unmap = weakref.finalize(self, _libc.munmap, address, size)
        # At interpreter exit arrays may outlive the finalizers: leave the mapping to the OS rather than risk a crash.
        unmap.atexit = False

    def __repr__(self):
        return f"Mapping({self.name!r}, size={self.size})"


class Block:
    """What the arrays of one batch hold on to: a ``Mapping`` (kept alive) exposed as a byte buffer to NumPy.

    In the main process a ``weakref.finalize`` on it returns the block for reuse once every array is gone.
    """

    __slots__ = ("mapping", "__array_interface__", "__weakref__")

    def __init__(self, mapping):
        self.mapping = mapping
        self.__array_interface__ = {"data": (mapping.address, False), "shape": (mapping.size,), "typestr": "|u1",
                                    "version": 3}


def prepare():
    """Start the resource tracker in this process, so that worker processes forked later share it."""
    if SUPPORTED:
        resource_tracker.ensure_running()


def _map(fd, size):
    address = _libc.mmap(None, size, mmap.PROT_READ | mmap.PROT_WRITE, _MAP_FLAGS, fd, 0)
    if address is None or address == _MAP_FAILED:
        err = ctypes.get_errno()
        raise OSError(err, f"mmap of a {size}-byte shared-memory block failed: {os.strerror(err)}")
    return address


def create(size):
    """A new block of ``size`` (> 0) bytes, registered with the resource tracker until someone calls ``release``."""
    while True:
        # Short names: macOS allows 31 characters.
        name = f"/jtdl_{owner_pid:x}_{secrets.token_hex(6)}"
        try:
            fd = _posixshmem.shm_open(name, os.O_CREAT | os.O_EXCL | os.O_RDWR, mode=0o600)
        except FileExistsError:
            continue
        break
    try:
        resource_tracker.register(name, _RTYPE)
        os.ftruncate(fd, size)
        address = _map(fd, size)
    except BaseException:
        release(name)
        raise
    finally:
        os.close(fd)
    return Mapping(name, address, size)


def open_block(name, size):
    """Map the existing block ``name`` (its name stays linked)."""
    fd = _posixshmem.shm_open(name, os.O_RDWR, mode=0o600)
    try:
        return Mapping(name, _map(fd, size), size)
    finally:
        os.close(fd)


def release(name):
    """Unlink the block ``name`` (mappings stay valid) and stop tracking it."""
    try:
        _posixshmem.shm_unlink(name)
    except FileNotFoundError:
        pass
    resource_tracker.unregister(name, _RTYPE)


def attach(name, size):
    """Map the block ``name`` and unlink it at once: its memory now lives exactly as long as its arrays."""
    try:
        return Block(open_block(name, size))
    finally:
        release(name)


def as_array(block, shape, dtype, offset=0, strides=None):
    """A NumPy array viewing ``block``'s memory (zero-copy); it keeps the block alive."""
    return np.ndarray(shape, dtype, buffer=np.asarray(block), offset=offset, strides=strides)


def block_of(array):
    """The ``Block`` whose memory ``array`` views, or None."""
    base = array
    while isinstance(base, np.ndarray):
        base = base.base
    return base if isinstance(base, Block) else None


# -- the worker side -----------------------------------------------------------------------------------------------
class _WorkerBlocks:
    """A worker's blocks in the recycling loop: the ones it sent (still mapped) and those handed back for reuse."""

    def __init__(self):
        self.mapped = {}  # name -> Mapping, for every block sent and not yet forgotten
        self.free = []  # names handed back by the main process

    def update(self, give_back=(), forget=()):
        for name in forget:  # unlinked by the main process: drop the mapping so the memory is freed
            self.mapped.pop(name, None)
            if name in self.free:
                self.free.remove(name)
        self.free.extend(name for name in give_back if name in self.mapped)

    def take(self, nbytes):
        """A free block of at least ``nbytes`` (and not wastefully larger), or None."""
        fits = [name for name in self.free if nbytes <= self.mapped[name].size <= 2 * nbytes]
        if not fits:
            return None
        name = min(fits, key=lambda n: self.mapped[n].size)
        self.free.remove(name)
        return self.mapped[name]


worker_blocks = _WorkerBlocks()
_scope = None


class worker_scope:
    """One batch in a worker: ``allocate`` reuses free blocks or creates new ones; on exit, blocks that were not
    sent go back to the free list (reused ones) or are released (new ones), and new sent ones join the loop."""

    def __init__(self):
        self.allocated = []  # (mapping, is_new)
        self.sent = set()

    def allocate(self, nbytes):
        mapping = worker_blocks.take(nbytes)
        self.allocated.append((mapping, False) if mapping is not None else (create(nbytes), True))
        return self.allocated[-1][0]

    def __enter__(self):
        global _scope
        _scope = self if SUPPORTED else None
        return self

    def __exit__(self, *exc):
        global _scope
        _scope = None
        for mapping, is_new in self.allocated:
            if mapping.name in self.sent:
                if is_new:
                    worker_blocks.mapped[mapping.name] = mapping
            elif is_new:
                release(mapping.name)
            else:
                worker_blocks.free.append(mapping.name)
        self.allocated.clear()
        return False


def empty(shape, dtype):
    """``np.empty``, in shared memory when called while a worker fetches a batch (so the batch needs no copy)."""
    dtype = np.dtype(dtype)
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if _scope is None or nbytes == 0:
        return np.empty(shape, dtype)
    return as_array(Block(_scope.allocate(nbytes)), shape, dtype)
