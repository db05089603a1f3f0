"""The kernel compile cache: keys, memory and disk hits, integrity, concurrency and refusal of plantable entries."""
from __future__ import annotations

import hashlib
import json
import multiprocessing
import os
import stat
import subprocess
import sys
import threading
import warnings

import pytest

from jitorch.codegen import cache as cache_module
from jitorch.codegen.cache import CacheWarning, KernelCache, cache_key

PARTS = {"source": "kernel text", "backend": "test", "compiler": "cc-1.0", "target": "sm_90"}
OTHER_UID = 54321


def payload(seed: str = "", size: int = 1 << 16) -> bytes:
    # Deterministic, large enough that a torn write would be visible, and different per seed.
    block = hashlib.sha256(seed.encode()).digest()
    return (block * (size // len(block) + 1))[:size]


def entry_path(directory, parts=PARTS):
    return directory / f"{cache_key(parts)}.bin"


def fill(directory, parts=PARTS, data=None):
    return KernelCache(directory).get_or_compile(parts, lambda: data or payload())


def become_other_user(path, monkeypatch, follow=True):
    """Make ``path`` look owned by another user: chown as root, otherwise pretend to be someone else."""
    if os.getuid() == 0:
        (os.chown if follow else os.lchown)(path, OTHER_UID, -1)
    else:
        uid = os.getuid() + 1
        monkeypatch.setattr(cache_module.os, "getuid", lambda: uid)


def test_key_covers_every_part_and_needs_the_required_ones():
    base = cache_key(PARTS)
    for name, value in [("source", "other"), ("backend", "llvm"), ("compiler", "cc-1.1"), ("target", "sm_80")]:
        assert cache_key({**PARTS, name: value}) != base, name
    assert cache_key({**PARTS, "features": "+avx512f"}) != base
    assert cache_key(dict(reversed(list(PARTS.items())))) == base
    with pytest.raises(ValueError, match="compiler"):
        cache_key({"source": "k", "backend": "llvm", "target": "x86_64"})


def test_codegen_version_is_part_of_the_key(monkeypatch):
    base = cache_key(PARTS)
    monkeypatch.setattr(cache_module, "CODEGEN_VERSION", "999")
    assert cache_key(PARTS) != base


def test_memory_hit_compiles_once():
    cache = KernelCache(directory=False)
    calls = []
    for _ in range(3):
        assert cache.get_or_compile(PARTS, lambda: calls.append(1) or b"bin") == b"bin"
    assert len(calls) == 1 and cache.stats() == {"hits": 2, "misses": 1, "disk_hits": 0, "compiles": 1, "rejected": 0}
    with pytest.raises(TypeError, match="bytes"):
        cache.get_or_compile({**PARTS, "source": "x"}, lambda: "not bytes")


def test_disk_hit_in_a_new_cache_and_private_modes(tmp_path):
    directory = tmp_path / "a" / "cache"
    assert fill(directory) == payload()
    assert stat.S_IMODE(directory.stat().st_mode) == 0o700
    assert stat.S_IMODE(entry_path(directory).stat().st_mode) == 0o600
    second = KernelCache(directory)
    assert second.get_or_compile(PARTS, lambda: pytest.fail("must not compile")) == payload()
    assert second.get_or_compile(PARTS, lambda: pytest.fail("must not compile")) == payload()
    assert (second.disk_hits, second.hits, second.compiles) == (1, 1, 0)
    assert [p.name for p in directory.iterdir()] == [entry_path(directory).name]  # no temporary files left behind


def test_default_directory_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("JITORCH_CACHE_DIR", str(tmp_path / "env"))
    assert KernelCache().directory == tmp_path / "env"
    monkeypatch.delenv("JITORCH_CACHE_DIR")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache_module.default_directory() == tmp_path / "home" / ".cache" / "jitorch"


SUBPROCESS = """
import json, sys
from jitorch.codegen import nvrtc
from jitorch.codegen.cache import KernelCache
from jitorch.codegen.cuda_templates import elementwise_kernel
source = elementwise_kernel("add", "x0 + x1", ["float", "float"])
cache = KernelCache()
cubin = cache.get_or_compile(nvrtc.key_parts(source, "sm_90"), lambda: nvrtc.compile_cubin(source, "add", "sm_90"))
print(json.dumps({**cache.stats(), "elf": cubin[:4] == b"\\x7fELF"}))
"""


def test_a_second_process_compiles_nothing(tmp_path):
    env = {**os.environ, "JITORCH_CACHE_DIR": str(tmp_path / "cache"), "JITORCH_DEBUG": "0"}
    runs = [json.loads(subprocess.run([sys.executable, "-c", SUBPROCESS], env=env, check=True, capture_output=True,
                                      text=True).stdout) for _ in range(2)]
    assert runs[0]["compiles"] == 1 and runs[0]["disk_hits"] == 0
    assert runs[1]["compiles"] == 0 and runs[1]["disk_hits"] == 1
    assert runs[0]["elf"] and runs[1]["elf"]


@pytest.mark.parametrize("damage", ["flip", "truncate", "empty", "garbage"])
def test_corrupt_entry_is_ignored_recompiled_and_rewritten(tmp_path, damage):
    fill(tmp_path)
    path = entry_path(tmp_path)
    data = bytearray(path.read_bytes())
    if damage == "flip":
        data[-100] ^= 0xFF
    elif damage == "truncate":
        data = data[: len(data) // 2]
    elif damage == "empty":
        data = b""
    else:
        data = b"not a cache entry at all"
    path.write_bytes(bytes(data))
    cache = KernelCache(tmp_path)
    with pytest.warns(CacheWarning, match="corrupt or truncated"):
        assert cache.get_or_compile(PARTS, payload) == payload()
    assert (cache.rejected, cache.compiles, cache.disk_hits) == (1, 1, 0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        again = KernelCache(tmp_path)
        assert again.get_or_compile(PARTS, lambda: pytest.fail("rewritten entry must load")) == payload()


def _write_same_key(directory: str) -> bool:
    return KernelCache(directory).get_or_compile(PARTS, lambda: payload(size=1 << 21)) == payload(size=1 << 21)


def test_concurrent_processes_writing_the_same_key(tmp_path):
    with multiprocessing.get_context("fork").Pool(6) as pool:
        results = pool.map(_write_same_key, [str(tmp_path)] * 12)
    assert all(results)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        reader = KernelCache(tmp_path)
        assert reader.get_or_compile(PARTS, lambda: pytest.fail("entry must be whole")) == payload(size=1 << 21)
    assert [p.name for p in tmp_path.iterdir()] == [entry_path(tmp_path).name]


def test_concurrent_threads_never_read_a_partial_entry(tmp_path):
    errors, caches = [], [KernelCache(tmp_path) for _ in range(8)]

    def worker(cache):
        try:
            for _ in range(20):
                cache.clear_memory()
                if cache.get_or_compile(PARTS, lambda: payload(size=1 << 20)) != payload(size=1 << 20):
                    errors.append("wrong bytes")
        except Exception as exc:  # a thread's failure must reach the assertion below
            errors.append(repr(exc))

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        threads = [threading.Thread(target=worker, args=(c,)) for c in caches]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert not errors and sum(c.rejected for c in caches) == 0
    assert sum(c.compiles + c.disk_hits for c in caches) == 8 * 20


def test_uncreatable_directory_disables_disk_with_one_warning(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("a file, so no directory can be made under it")
    with pytest.warns(CacheWarning, match="cannot create") as record:
        cache = KernelCache(blocker / "cache")
    assert len(record) == 1 and not cache.disk_enabled
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert cache.get_or_compile(PARTS, lambda: b"x") == b"x" and cache.compiles == 1


def test_unwritable_directory_disables_disk_with_one_warning(tmp_path, monkeypatch):
    def refuse(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    # Root ignores chmod, so the refusal is simulated where the cache asks the OS for a file.
    monkeypatch.setattr(cache_module.tempfile, "mkstemp", refuse)
    cache = KernelCache(tmp_path)
    with pytest.warns(CacheWarning, match="cannot write") as record:
        cache.get_or_compile(PARTS, lambda: b"1")
        cache.get_or_compile({**PARTS, "source": "other"}, lambda: b"2")
    assert len(record) == 1 and not cache.disk_enabled and cache.compiles == 2
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("mode", [0o777, 0o770, 0o720, 0o702])
def test_directory_writable_by_group_or_others_is_refused(tmp_path, mode):
    directory = tmp_path / "shared"
    directory.mkdir()
    directory.chmod(mode)
    with pytest.warns(CacheWarning, match="writable by group or others") as record:
        cache = KernelCache(directory)
    assert len(record) == 1 and not cache.disk_enabled
    assert cache.get_or_compile(PARTS, lambda: b"x") == b"x"
    assert list(directory.iterdir()) == []


def test_private_directories_are_accepted(tmp_path):
    for mode in (0o700, 0o755):
        directory = tmp_path / f"d{mode:o}"
        directory.mkdir(mode=mode)
        directory.chmod(mode)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert KernelCache(directory).disk_enabled


def test_directory_owned_by_another_user_is_refused(tmp_path, monkeypatch):
    directory = tmp_path / "planted"
    directory.mkdir(mode=0o700)
    become_other_user(directory, monkeypatch)
    with pytest.warns(CacheWarning, match="not by the current user"):
        assert not KernelCache(directory).disk_enabled


def test_symlink_planted_by_another_user_is_refused(tmp_path, monkeypatch):
    target = tmp_path / "mine"
    target.mkdir(mode=0o700)
    link = tmp_path / "link"
    link.symlink_to(target)
    become_other_user(link, monkeypatch, follow=False)
    with pytest.warns(CacheWarning, match="refusing"):
        assert not KernelCache(link).disk_enabled


def _plant(directory, mutate):
    fill(directory, data=b"planted machine code")
    path = entry_path(directory)
    mutate(path)
    return path


@pytest.mark.parametrize("how", ["other_owner", "world_writable", "symlink"])
def test_planted_entries_are_refused_and_replaced(tmp_path, monkeypatch, how):
    directory = tmp_path / "cache"
    elsewhere = tmp_path / "evil.bin"
    if how == "other_owner":
        path = _plant(directory, lambda p: os.chown(p, OTHER_UID, -1) if os.getuid() == 0 else None)
        if os.getuid() != 0:
            uid = os.getuid()
            # The directory stays ours; only entries appear foreign, by answering fstat with another owner.
            real_fstat = os.fstat
            monkeypatch.setattr(cache_module.os, "fstat", lambda fd: os.stat_result(
                (*real_fstat(fd)[:4], uid + 1, *real_fstat(fd)[5:])))
        reason = "owned by uid"
    elif how == "world_writable":
        path = _plant(directory, lambda p: p.chmod(0o646))
        reason = "writable by others"
    else:
        path = _plant(directory, lambda p: os.replace(p, elsewhere))
        path.symlink_to(elsewhere)
        reason = "cannot open it"
    cache = KernelCache(directory)
    with pytest.warns(CacheWarning, match=reason):
        assert cache.get_or_compile(PARTS, lambda: b"honest code") == b"honest code"
    assert (cache.rejected, cache.compiles) == (1, 1)
    monkeypatch.undo()
    assert not path.is_symlink() and path.stat().st_uid == os.getuid()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert KernelCache(directory).get_or_compile(PARTS, lambda: pytest.fail("replaced entry loads")) == b"honest code"


def test_debug_logs_cache_compiles(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("JITORCH_DEBUG", "1")
    cache = KernelCache(tmp_path)
    cache.get_or_compile(PARTS, lambda: b"x")
    err = capsys.readouterr().err
    assert "cache miss" in err and "(test, sm_90): compiled in" in err


@pytest.mark.parametrize("kind", ["fifo", "directory"])
def test_entries_that_are_not_regular_files_are_refused_without_blocking(tmp_path, kind):
    """A FIFO in an entry's place used to block ``open`` forever (no writer ever comes) and a directory raised
    IsADirectoryError out of the lookup; both are refused with a warning and the kernel is compiled. The worker
    thread and its timeout turn a hang into a failure instead of a stuck test run."""
    fill(tmp_path)
    path = entry_path(tmp_path)
    path.unlink()
    os.mkfifo(path, 0o600) if kind == "fifo" else path.mkdir(mode=0o700)
    cache, result = KernelCache(tmp_path), {}

    def lookup():
        with warnings.catch_warnings(record=True) as record:
            warnings.simplefilter("always")
            try:
                result["value"] = cache.get_or_compile(PARTS, lambda: b"recompiled")
            except Exception as exc:  # reaches the assertion below
                result["value"] = exc
            result["warnings"] = [str(w.message) for w in record if issubclass(w.category, CacheWarning)]

    worker = threading.Thread(target=lookup, daemon=True)
    worker.start()
    worker.join(timeout=20)
    if worker.is_alive():
        with open(path, "wb"):  # a writer end unblocks the hung open, so the thread can finish
            pass
        pytest.fail(f"the lookup blocked on a {kind} entry")
    assert result["value"] == b"recompiled"
    assert len(result["warnings"]) == 1 and "not a regular file" in result["warnings"][0], result["warnings"]
    assert (cache.rejected, cache.compiles, cache.disk_hits) == (1, 1, 0) and cache.disk_enabled
    if kind == "fifo":  # the FIFO is replaced by a proper entry, which the next process loads
        assert stat.S_ISREG(path.lstat().st_mode)
        assert KernelCache(tmp_path).get_or_compile(PARTS, lambda: pytest.fail("must load")) == b"recompiled"
    else:  # the directory stays (it is not ours to delete); other kernels still go to disk
        assert path.is_dir()
        other = {**PARTS, "source": "other"}
        assert cache.get_or_compile(other, lambda: b"2") == b"2" and entry_path(tmp_path, other).is_file()
