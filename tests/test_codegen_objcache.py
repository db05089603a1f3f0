"""LLVM object-code caching: a new process loads cached kernels without compiling; keys, corruption, names."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

from jitorch.codegen import llvm_compile, llvm_objcache
from jitorch.codegen.cache import CacheWarning, KernelCache
from jitorch.codegen.ir import Buffer, Kernel, Store, const, load, op
from jitorch.codegen.llvm_compile import compile_function, compile_kernel

ROOT = Path(__file__).resolve().parents[1]
C = 0.7978845608028654


def gelu_kernel(n=257, dtype="f32"):
    """tanh-GELU over a contiguous vector, written directly in the codegen IR."""
    x = load(0, dtype)
    cube = op("mul", op("mul", op("mul", const(0.044715, dtype), x), x), x)
    inner = op("mul", const(C, dtype), op("add", x, cube))
    y = op("mul", op("mul", const(0.5, dtype), x), op("add", const(1, dtype), op("tanh", inner)))
    return Kernel((n,), (Buffer(dtype, (1,)), Buffer(dtype, (1,))), (Store(1, y),))


# Run in a fresh process: one kernel through compile_kernel with an explicit cache, and GELU through jitorch.compile
# (which uses the default cache in $JITORCH_CACHE_DIR); prints the counters and the outputs' bytes.
SCRIPT = r"""
import json, sys
import numpy as np
import jitorch
from jitorch.codegen.cache import KernelCache
from jitorch.codegen.llvm_compile import compile_kernel
from jitorch.codegen.llvm_objcache import default_cache
sys.path.insert(0, sys.argv[2])
from test_codegen_objcache import gelu_kernel

cache = KernelCache(sys.argv[1])
x = np.linspace(-6, 6, 257, dtype=np.float32)
out = np.zeros_like(x)
compile_kernel(gelu_kernel(), cache=cache).run([x, out])
f = jitorch.compile(lambda t: 0.5 * t * (1 + jitorch.tanh(0.7978845608028654 * (t + 0.044715 * t * t * t))))
y = f(jitorch.tensor(x)).numpy()
print(json.dumps({"direct": cache.stats(), "compiled": default_cache().stats(), "out": out.tobytes().hex(),
                  "y": y.tobytes().hex()}))
"""


def run_fresh_process(direct_dir, default_dir):
    env = dict(os.environ, JITORCH_CACHE_DIR=str(default_dir))
    proc = subprocess.run([sys.executable, "-c", SCRIPT, str(direct_dir), str(ROOT / "tests")], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1]), proc.stderr


def test_a_second_process_loads_the_objects_without_compiling(tmp_path):
    direct, default = tmp_path / "direct", tmp_path / "default"
    first, _ = run_fresh_process(direct, default)
    assert (first["direct"]["compiles"], first["compiled"]["compiles"]) == (1, 1)
    second, _ = run_fresh_process(direct, default)
    assert (second["direct"]["compiles"], second["direct"]["disk_hits"]) == (0, 1)
    assert (second["compiled"]["compiles"], second["compiled"]["disk_hits"]) == (0, 1)
    assert (second["out"], second["y"]) == (first["out"], first["y"])
    x = np.linspace(-6, 6, 257, dtype=np.float32)
    expect = 0.5 * x * (1 + np.tanh(C * (x + 0.044715 * x ** 3)))
    np.testing.assert_allclose(np.frombuffer(bytes.fromhex(first["out"]), np.float32), expect, rtol=1e-5, atol=1e-6)

    # A corrupt entry is refused and recompiled (not loaded), and the rewritten entry serves the next process.
    for entry in list(direct.glob("*.bin")) + list(default.glob("*.bin")):
        data = bytearray(entry.read_bytes())
        data[-100] ^= 0xFF
        entry.write_bytes(bytes(data))
    third, stderr = run_fresh_process(direct, default)
    assert "corrupt" in stderr
    for name in ("direct", "compiled"):
        assert (third[name]["rejected"], third[name]["compiles"]) == (1, 1)
    assert (third["out"], third["y"]) == (first["out"], first["y"])
    fourth, _ = run_fresh_process(direct, default)
    assert (fourth["direct"]["compiles"], fourth["compiled"]["compiles"]) == (0, 0)


def test_changed_cpu_features_or_compiler_miss(tmp_path, monkeypatch):
    cache = KernelCache(tmp_path)
    kernel = gelu_kernel(n=19)
    compile_kernel(kernel, cache=cache)
    compile_kernel(kernel, cache=cache)
    assert (cache.compiles, cache.hits) == (1, 1)
    host = llvm_compile.target_info()
    flipped = host["features"].replace("+", "~").replace("-", "+").replace("~", "-") or "+sse2"
    monkeypatch.setattr(llvm_compile, "target_info", lambda: {**host, "features": flipped})
    ck = compile_kernel(kernel, cache=cache)
    assert (cache.compiles, cache.misses) == (2, 2) and len(list(tmp_path.glob("*.bin"))) == 2
    x, out = np.linspace(-3, 3, 19, dtype=np.float32), np.zeros(19, np.float32)
    ck.run([x, out])
    np.testing.assert_allclose(out, 0.5 * x * (1 + np.tanh(C * (x + 0.044715 * x ** 3))), rtol=1e-5, atol=1e-6)

    ir = ck.llvm_ir
    base = llvm_objcache.key_parts(ir, host)
    for change in ({"cpu": "generic"}, {"triple": "aarch64-unknown-linux-gnu"}):
        assert llvm_objcache.key_parts(ir, {**host, **change})["target"] != base["target"]
    monkeypatch.setattr(llvm_objcache, "compiler_version", lambda: "llvmlite 0.0.0, LLVM 1.0.0")
    assert llvm_objcache.key_parts(ir, host)["compiler"] != base["compiler"]


def test_kernel_names_hash_the_code_and_one_name_one_definition():
    a, b = compile_kernel(gelu_kernel(n=5)), compile_kernel(gelu_kernel(n=5))
    c = compile_kernel(gelu_kernel(n=5, dtype="f64"))
    assert a.name == b.name and a.address == b.address and c.name != a.name
    # Sizes are arguments of the code (size-generic kernels): another length is the same function.
    d = compile_kernel(gelu_kernel(n=6))
    assert d.name == a.name and d.address == a.address and (a.values[0], d.values[0]) == (5, 6)
    for ck, n in ((a, 5), (d, 6)):
        x, out = np.linspace(-3, 3, n, dtype=np.float32), np.zeros(n + 1, np.float32)
        ck(0, ck.outer, x.ctypes.data, out.ctypes.data)
        np.testing.assert_allclose(out[:n], 0.5 * x * (1 + np.tanh(C * (x + 0.044715 * x ** 3))), rtol=1e-5,
                                   atol=1e-6)
        assert out[n] == 0  # the loop stops at this kernel's own size
    assert a.name.startswith("jitorch_kernel_") and f"define void @{a.name}(" in a.llvm_ir
    twice = "define i64 @{0}(i64 %x) {{\n  %y = mul i64 %x, {1}\n  ret i64 %y\n}}"
    compile_function(twice.format("objcache_test_fn", 2), "objcache_test_fn")
    with pytest.raises(ValueError, match="different LLVM IR"):
        compile_function(twice.format("objcache_test_fn", 3), "objcache_test_fn")


def test_default_cache_follows_the_variable_and_an_unusable_directory_only_disables_disk(tmp_path, monkeypatch):
    monkeypatch.setenv("JITORCH_CACHE_DIR", str(tmp_path / "c"))
    cache = llvm_objcache.default_cache()
    assert cache.directory == tmp_path / "c" and llvm_objcache.default_cache() is cache
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("JITORCH_CACHE_DIR", str(blocker / "c"))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        off = llvm_objcache.default_cache()
    assert not off.disk_enabled and any(issubclass(w.category, CacheWarning) for w in caught)
    x, out = np.linspace(-1, 1, 7, dtype=np.float32), np.zeros(7, np.float32)
    compile_kernel(gelu_kernel(n=7), cache=off).run([x, out])
    assert off.compiles == 1 and not list(tmp_path.glob("**/*.bin"))
