"""The compile cache: compiled kernels (cubins, object code) kept in memory and on disk.

Key: sha256 over the canonical kernel text, the backend, jitorch's codegen version, the compiler version and the
target (triple + CPU name + features, or SM arch), plus any extra parts the caller adds. Disk entries live in
``$JITORCH_CACHE_DIR`` (default ``~/.cache/jitorch``) as ``<key>.bin``: a magic line, the sha256 of the payload,
then the payload. Writes go to a temporary file that is renamed into place, so readers see a whole entry or none.

The cache holds machine code that jitorch will run, so it must not be plantable by another local user (PyTorch
Inductor once used a predictable shared path another user could fill first). The directory is created 0700; a
directory not owned by us or writable by group/others is refused (one warning, memory cache only); an entry not
owned by us or writable by others is ignored, recompiled and replaced. A corrupt or truncated entry is treated
the same way, and so is one that is not a regular file (a FIFO is opened without blocking; a directory in an entry's
place is left there, and that one kernel is kept in memory only). If the directory cannot be created or written,
the disk cache is switched off with one warning.

>>> import tempfile
>>> cache = KernelCache(tempfile.mkdtemp())
>>> parts = {"source": "k", "backend": "test", "compiler": "none", "target": "none"}
>>> cache.get_or_compile(parts, lambda: b"code"), cache.get_or_compile(parts, lambda: b"other")
(b'code', b'code')
>>> cache.stats()
{'hits': 1, 'misses': 1, 'disk_hits': 0, 'compiles': 1, 'rejected': 0}
"""
from __future__ import annotations

import hashlib
import json
import os
import stat
import tempfile
import threading
import time
import warnings
from pathlib import Path
from typing import Callable

from . import debug

__all__ = ["CODEGEN_VERSION", "REQUIRED_KEY_PARTS", "CacheWarning", "KernelCache", "cache_key", "default_directory"]

# Bump when generated code changes meaning for the same key parts (a new lowering, a changed calling convention).
CODEGEN_VERSION = "1"
REQUIRED_KEY_PARTS = ("source", "backend", "compiler", "target")
_MAGIC = b"JITORCH-KERNEL-1\n"
_DIGEST_LEN = 64  # hex sha256


class CacheWarning(RuntimeWarning):
    """The disk cache was switched off or an entry was refused; jitorch carries on, compiling instead."""


def cache_key(key_parts: dict) -> str:
    """The hex sha256 naming a compiled kernel; ``key_parts`` needs `REQUIRED_KEY_PARTS`, more keys are allowed.

    Values must be JSON-serializable; the codegen version is added here, so callers cannot forget it.

    >>> k = cache_key({"source": "k", "backend": "llvm", "compiler": "llvm-20", "target": "x86_64 znver4 +avx512f"})
    >>> len(k), k == cache_key({"target": "x86_64 znver4 +avx512f", "compiler": "llvm-20", "backend": "llvm",
    ...                         "source": "k"})
    (64, True)
    """
    missing = [name for name in REQUIRED_KEY_PARTS if name not in key_parts]
    if missing:
        raise ValueError(f"cache key parts lack {missing}; every compiled kernel must be keyed by "
                         f"{', '.join(REQUIRED_KEY_PARTS)}")
    canonical = json.dumps({**key_parts, "codegen_version": CODEGEN_VERSION}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def default_directory() -> Path:
    """``$JITORCH_CACHE_DIR``, or ``~/.cache/jitorch``: per user, never a shared path like ``/tmp``.

    >>> import os
    >>> configured = os.environ.pop("JITORCH_CACHE_DIR", None)
    >>> default_directory().relative_to(Path.home()).as_posix()
    '.cache/jitorch'
    >>> if configured is not None:
    ...     os.environ["JITORCH_CACHE_DIR"] = configured
    """
    configured = os.environ.get("JITORCH_CACHE_DIR")
    return Path(configured).expanduser() if configured else Path.home() / ".cache" / "jitorch"


def _unsafe_reason(info: os.stat_result, what: str, forbidden_bits: int) -> str | None:
    if info.st_uid != os.getuid():
        return f"{what} is owned by uid {info.st_uid}, not by the current user (uid {os.getuid()})"
    if info.st_mode & forbidden_bits:
        return f"{what} is writable by {'group or others' if forbidden_bits & stat.S_IWGRP else 'others'} " \
               f"(mode {stat.S_IMODE(info.st_mode):o})"
    return None


class KernelCache:
    """Compiled kernels by key: a dict in front of an optional disk directory; safe to share between threads.

    ``directory=None`` uses `default_directory`; ``directory=False`` keeps the cache in memory only. Counters:
    ``hits`` (memory), ``disk_hits``, ``misses`` (found nowhere), ``compiles`` (``compile_fn`` calls) and
    ``rejected`` (disk entries refused as corrupt or unsafe).

    >>> cache = KernelCache(directory=False)
    >>> parts = {"source": "k", "backend": "test", "compiler": "none", "target": "none"}
    >>> cache.get_or_compile(parts, lambda: b"x")
    b'x'
    >>> cache.disk_enabled, cache.compiles
    (False, 1)
    """

    def __init__(self, directory: str | os.PathLike | None | bool = None):
        self._memory: dict[str, bytes] = {}
        self._lock = threading.Lock()
        self._warned = False
        self.hits = self.misses = self.disk_hits = self.compiles = self.rejected = 0
        self.directory: Path | None = None
        if directory is not False:
            self.directory = self._prepare(default_directory() if directory in (None, True) else Path(directory))

    @property
    def disk_enabled(self) -> bool:
        """Whether entries are read from and written to disk (False after a refused or unwritable directory)."""
        return self.directory is not None

    def stats(self) -> dict[str, int]:
        """The counters as a dict (what a test or ``JITORCH_DEBUG`` report shows)."""
        return {"hits": self.hits, "misses": self.misses, "disk_hits": self.disk_hits, "compiles": self.compiles,
                "rejected": self.rejected}

    def get_or_compile(self, key_parts: dict, compile_fn: Callable[[], bytes]) -> bytes:
        """Return the cached binary for ``key_parts``, calling ``compile_fn`` (and storing its bytes) on a miss.

        >>> cache = KernelCache(directory=False)
        >>> parts = {"source": "s", "backend": "b", "compiler": "c", "target": "t"}
        >>> cache.get_or_compile(parts, lambda: b"1") + cache.get_or_compile(parts, lambda: b"2")
        b'11'
        """
        key = cache_key(key_parts)
        with self._lock:
            if key in self._memory:
                self.hits += 1
                return self._memory[key]
        binary = self._load(key)
        if binary is not None:
            with self._lock:
                self.disk_hits += 1
                self._memory[key] = binary
            return binary
        start = time.perf_counter()
        binary = compile_fn()
        if not isinstance(binary, bytes):
            raise TypeError(f"compile_fn must return bytes, got {type(binary).__name__}")
        debug.log(f"cache miss {key[:12]} ({key_parts['backend']}, {key_parts['target']}): "
                  f"compiled in {(time.perf_counter() - start) * 1e3:.1f} ms")
        with self._lock:
            self.misses += 1
            self.compiles += 1
            self._memory[key] = binary
        self._store(key, binary)
        return binary

    def clear_memory(self) -> None:
        """Forget the in-memory entries (the disk stays), e.g. to show the next lookup is served from disk."""
        with self._lock:
            self._memory.clear()

    def path_for(self, key_parts: dict) -> Path | None:
        """The file that holds (or would hold) this entry; None when the disk cache is off."""
        return self.directory / f"{cache_key(key_parts)}.bin" if self.directory else None

    # -- disk ---------------------------------------------------------------------------------------------------

    def _disable(self, reason: str) -> None:
        self.directory = None
        if not self._warned:
            self._warned = True
            warnings.warn(f"jitorch kernel cache: {reason}; the disk cache is off (kernels compile every run)",
                          CacheWarning, stacklevel=4)

    def _prepare(self, directory: Path) -> Path | None:
        try:
            # mode applies to the leaf only; parents such as ~/.cache get the usual umask defaults.
            directory.mkdir(mode=0o700, parents=True, exist_ok=True)
            link = directory.lstat()
            info = directory.stat()
        except OSError as exc:
            self._disable(f"cannot create {directory} ({exc})")
            return None
        if not stat.S_ISDIR(info.st_mode):
            self._disable(f"{directory} is not a directory")
            return None
        # A symlink planted by someone else could point at a directory they control, so its owner counts too.
        reason = _unsafe_reason(link, f"{directory} (a symlink)", 0) if stat.S_ISLNK(link.st_mode) else None
        reason = reason or _unsafe_reason(info, str(directory), stat.S_IWGRP | stat.S_IWOTH)
        if reason:
            self._disable(f"refusing {reason}")
            return None
        return directory

    def _refuse(self, path: Path, reason: str) -> None:
        with self._lock:
            self.rejected += 1
        warnings.warn(f"jitorch kernel cache: ignoring {path}: {reason}; recompiling", CacheWarning, stacklevel=4)

    def _load(self, key: str) -> bytes | None:
        if self.directory is None:
            return None
        path = self.directory / f"{key}.bin"
        try:
            # O_NOFOLLOW: a symlink entry could point at any file. O_NONBLOCK: opening a FIFO planted as an entry
            # would otherwise wait forever for a writer. fstat then checks the file actually opened is a regular one
            # (a directory opens fine and fails only on read).
            fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
        except FileNotFoundError:
            return None
        except OSError as exc:
            self._refuse(path, f"cannot open it ({exc})")
            return None
        try:
            info = os.fstat(fd)  # before any fdopen, which raises IsADirectoryError itself
            reason = None if stat.S_ISREG(info.st_mode) else f"not a regular file ({stat.filemode(info.st_mode)})"
            reason = reason or _unsafe_reason(info, "the entry", stat.S_IWOTH)
            if not reason:
                with os.fdopen(fd, "rb", closefd=False) as file:
                    data = file.read()
        except OSError as exc:
            reason = f"cannot read it ({exc})"
        finally:
            os.close(fd)
        if reason:
            self._refuse(path, reason)
            return None
        header = len(_MAGIC) + _DIGEST_LEN + 1
        payload = data[header:]
        digest = data[len(_MAGIC):len(_MAGIC) + _DIGEST_LEN].decode("ascii", errors="replace")
        if not data.startswith(_MAGIC) or hashlib.sha256(payload).hexdigest() != digest:
            self._refuse(path, "corrupt or truncated (integrity hash mismatch)")
            return None
        return payload

    def _store(self, key: str, binary: bytes) -> None:
        if self.directory is None:
            return
        digest = hashlib.sha256(binary).hexdigest().encode()
        tmp = None
        try:
            # mkstemp makes the file 0600 with a unique name, so concurrent writers never share a temporary file;
            # os.replace is atomic, so the last complete write wins and readers never see a partial entry.
            fd, tmp = tempfile.mkstemp(dir=self.directory, prefix=f".{key[:16]}-", suffix=".tmp")
            with os.fdopen(fd, "wb") as file:
                file.write(_MAGIC + digest + b"\n" + binary)
            os.replace(tmp, self.directory / f"{key}.bin")
            tmp = None
        except IsADirectoryError:
            pass  # a directory in the entry's place, refused by `_load`: this key stays in memory, the rest on disk
        except OSError as exc:
            self._disable(f"cannot write to {self.directory} ({exc})")
        finally:
            if tmp is not None:
                try:
                    os.unlink(tmp)
                except OSError:
                    pass
