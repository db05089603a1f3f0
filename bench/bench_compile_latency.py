"""Compile latency of a tanh-GELU kernel: cold (empty cache) and warm (disk cache filled by an earlier process).

Every sample is a fresh Python process (``--child``), so nothing is cached in memory and the numbers are what a new
program sees. Two cases: the kernel through ``codegen.compile_kernel`` with a `KernelCache` (the LLVM compile alone,
including making the target machine and engine), and the first call of a ``jitorch.compile``'d GELU on 1024 floats
(tracing, fusion, lowering and the compile; the imports are timed apart). Cold samples each get a new, empty cache
directory; warm samples reuse the directory of the cold sample before them. The compiled function's second call
plans its native program, which compiles the program's call sequence (its kernel is a function already), so a cold
``jitorch.compile`` sample compiles twice. The issue's targets: cold compile of the GELU function < 200 ms, < 20 ms
in a fresh process with a warm disk cache.

Run: ``python bench/bench_compile_latency.py [--repeats N]``; writes bench/results/compile-latency-<date>.md/.json.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import platform
import subprocess
import sys
import tempfile
import time

import common

C = 0.7978845608028654
# Whether children run programs through the native pool: more than one thread (JITORCH_NUM_THREADS, else the CPU
# count) where the platform has the pool.
POOL = int(os.environ.get("JITORCH_NUM_THREADS", 0) or os.cpu_count() or 1) > 1 and \
    sys.platform.startswith("linux") and platform.machine().lower() in ("x86_64", "amd64", "aarch64", "arm64")
N = 1024


def child(case, cache_dir):
    """Measure one fresh process; prints a JSON line of seconds."""
    start = time.perf_counter()
    import numpy as np

    import jitorch
    from jitorch.codegen.cache import KernelCache
    from jitorch.codegen.ir import Buffer, Kernel, Store, const, load, op
    from jitorch.codegen.llvm_compile import compile_kernel
    from jitorch.codegen.llvm_objcache import default_cache
    result = {"import_s": time.perf_counter() - start}
    x = np.linspace(-4, 4, N, dtype=np.float32)
    if case == "kernel":
        v = load(0, "f32")
        cube = op("mul", op("mul", op("mul", const(0.044715, "f32"), v), v), v)
        y = op("mul", op("mul", const(0.5, "f32"), v),
               op("add", const(1, "f32"), op("tanh", op("mul", const(C, "f32"), op("add", v, cube)))))
        kernel = Kernel((N,), (Buffer("f32", (1,)), Buffer("f32", (1,))), (Store(1, y),))
        cache = KernelCache(cache_dir)
        start = time.perf_counter()
        compile_kernel(kernel, cache=cache).run([x, np.zeros_like(x)])
        result["first_s"] = time.perf_counter() - start
    else:
        cache = default_cache()  # jitorch.compile's cache: $JITORCH_CACHE_DIR, set by the parent
        f = jitorch.compile(lambda t: 0.5 * t * (1 + jitorch.tanh(C * (t + 0.044715 * t * t * t))))
        t = jitorch.tensor(x)
        start = time.perf_counter()
        f(t)
        result["first_s"] = time.perf_counter() - start
        start = time.perf_counter()
        f(t)
        result["second_s"] = time.perf_counter() - start
    result["stats"] = cache.stats()
    print(json.dumps(result))


def sample(case, cache_dir):
    env = dict(os.environ, JITORCH_CACHE_DIR=cache_dir)
    # Python writes bytecode as on a user's machine: with PYTHONDONTWRITEBYTECODE set (this machine sets it), each
    # process would compile the modules jitorch imports at the first call (jitorch.fx.codegen) from source, ~6 ms.
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, __file__, "--child", case, cache_dir], env=env, capture_output=True,
                          text=True, check=True)
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    result["process_s"] = time.perf_counter() - start
    return result


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--child", nargs=2, metavar=("CASE", "DIR"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(*args.child)
    samples = {(case, state): [] for case in ("kernel", "jitorch.compile") for state in ("cold", "warm")}
    with tempfile.TemporaryDirectory(prefix="jitorch-bench-") as root:
        for i in range(args.repeats):
            for case in ("kernel", "jitorch.compile"):
                directory = os.path.join(root, f"{case}-{i}")  # new and empty: a cold cache
                for state in ("cold", "warm"):
                    result = sample(case, directory)
                    # jitorch.compile: the kernel at the first call, the native program at the second; at more
                    # than one thread the program calls its kernel through the native pool, whose code (one module
                    # and the kernel signature's trampoline, compiled once per cache) comes with the first program.
                    expect = 0 if state == "warm" else 1 if case == "kernel" else 2 + 2 * POOL
                    if result["stats"]["compiles"] != expect:
                        raise RuntimeError(f"{case} {state}: expected {expect} compiles, got {result['stats']}")
                    samples[case, state].append(result)
    rows = []
    for (case, state), results in samples.items():
        med = {key: statistics.median(r[key] for r in results) * 1e3 for key in results[0] if key.endswith("_s")}
        rows.append({"case": case, "cache": state, "first_call_ms": med["first_s"],
                     "first_call_min_ms": min(r["first_s"] for r in results) * 1e3,
                     "second_call_ms": med.get("second_s"), "import_ms": med["import_s"],
                     "process_ms": med["process_s"], "samples": len(results)})
    table = common.format_table(rows, [("case", "case", "s"), ("disk cache", "cache", "s"),
                                       ("first call ms (median)", "first_call_ms", ".1f"),
                                       ("first call ms (min)", "first_call_min_ms", ".1f"),
                                       ("second call ms", "second_call_ms", ".3f"),
                                       ("imports ms", "import_ms", ".0f"), ("process ms", "process_ms", ".0f")])
    print(table)
    import llvmlite
    facts = dict(common.machine_facts(), llvmlite=llvmlite.__version__)
    notes = (f"tanh-GELU on {N} float32, each sample a fresh process; median of {args.repeats}. 'kernel' is "
             "codegen.compile_kernel with a KernelCache (LLVM only, target machine creation included); "
             "'jitorch.compile' is the first call of the compiled function (trace, fuse, lower, compile, run); its "
             "second call plans and compiles the native program (the call sequence). "
             "Imports are timed apart. Children run without PYTHONDONTWRITEBYTECODE (bytecode cached, as Python "
             f"does by default; the parent's was {os.environ.get('PYTHONDONTWRITEBYTECODE')!r}). "
             "Targets (issue 7): cold < 200 ms, warm < 20 ms.")
    paths = common.write_results("compile-latency", rows, facts, table, notes)
    print("wrote", *paths)


if __name__ == "__main__":
    main()
