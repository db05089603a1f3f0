"""CPU graph replay on per-op-overhead-bound loops (issue 6), single-threaded, every library in one process.

Two workloads:

- ``rnn``: a tiny RNN cell ``h = tanh(h @ W + x_t @ U + b)`` for 100 steps on ``h: [1, 64]`` with 64x64 weights;
  numbers are microseconds per RNN step (the whole loop divided by 100);
- ``chain``: 100 elementwise ops (mul, add, tanh, sigmoid, relu, ...) on 1000 float32 elements; microseconds per
  whole chain.

Columns: jitorch eager, jitorch CPU graph replay (one native call), ``jitorch.compile(mode="reduce-overhead")`` (the
replay plus argument checks and pointer substitution), NumPy, torch eager, ``torch.compile`` of the unrolled loop
(inductor, C++ codegen; its compile is the warm-up) and ``jax.jit`` of a ``lax.scan`` loop where JAX is installed.

Run: ``env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python bench/bench_replay.py``. Prints a table and writes
``bench/results/replay-<date>.{json,md}``.
"""
from __future__ import annotations

import time

import common

common.single_thread()  # before NumPy and torch load their thread pools

import numpy as np  # noqa: E402
import torch  # noqa: E402

import jitorch  # noqa: E402
from jitorch._compile.reduce_overhead import compile_reduce_overhead  # noqa: E402

common.single_thread()  # now torch is loaded: also set its intra-op pool

STEPS, HIDDEN, CHAIN, CHAIN_N = 100, 64, 100, 1000

try:
    import jax  # noqa: E402
    import jax.numpy as jnp  # noqa: E402
except ImportError:
    jax = None


def rnn(lib, h, xs, w, u, b):
    """The benchmarked loop for jitorch and torch, which share the API."""
    for t in range(STEPS):
        h = lib.tanh(h @ w + xs[t] @ u + b)
    return h


def numpy_rnn(h, xs, w, u, b):
    for t in range(STEPS):
        h = np.tanh(h @ w + xs[t] @ u + b)
    return h


# The chain's ops, spelled per library (index i uses op i % 8).
_CHAIN_TENSOR = (lambda v: v * 1.01, lambda v: v + 0.1, lambda v: v.tanh(), lambda v: v.sigmoid(),
                 lambda v: v.relu(), lambda v: v - 0.05, lambda v: v * v, lambda v: v.exp() * 0.5)
_CHAIN_NUMPY = (lambda v: v * np.float32(1.01), lambda v: v + np.float32(0.1), np.tanh,
                lambda v: 1 / (1 + np.exp(-v)), lambda v: np.maximum(v, 0), lambda v: v - np.float32(0.05),
                lambda v: v * v, lambda v: np.exp(v) * np.float32(0.5))


def chain(ops, v):
    for i in range(CHAIN):
        v = ops[i % len(ops)](v)
    return v


def _jax_cases(arrays, x_chain):
    """jax.jit of the RNN as a ``lax.scan`` and of the unrolled chain (None without JAX)."""
    if jax is None:
        return {}
    h, xs, w, u, b = (jnp.asarray(a) for a in arrays)

    @jax.jit
    def scan_rnn(h, xs):
        def cell(h, x):
            return jnp.tanh(h @ w + x @ u + b), None
        return jax.lax.scan(cell, h, xs)[0]

    ops = (lambda v: v * 1.01, lambda v: v + 0.1, jnp.tanh, jax.nn.sigmoid, jax.nn.relu, lambda v: v - 0.05,
           lambda v: v * v, lambda v: jnp.exp(v) * 0.5)
    jchain = jax.jit(lambda v: chain(ops, v))
    xc = jnp.asarray(x_chain)
    return {"rnn": lambda: scan_rnn(h, xs).block_until_ready(), "chain": lambda: jchain(xc).block_until_ready()}


def main():
    gen = np.random.default_rng(0)
    arrays = [(gen.standard_normal(s) * 0.1).astype(np.float32)
              for s in ((1, HIDDEN), (STEPS, 1, HIDDEN), (HIDDEN, HIDDEN), (HIDDEN, HIDDEN), (1, HIDDEN))]
    x_chain = gen.standard_normal(CHAIN_N).astype(np.float32)
    jt = [jitorch.tensor(a) for a in arrays]
    th = [torch.tensor(a) for a in arrays]
    jc, tc = jitorch.tensor(x_chain), torch.tensor(x_chain)

    # jitorch: a CPU graph of each workload, and reduce-overhead on fresh inputs (pointer substitution).
    g_rnn, g_chain = jitorch.cpu.CPUGraph(), jitorch.cpu.CPUGraph()
    with jitorch.cpu.graph(g_rnn):
        h_static = rnn(jitorch, *jt)
    with jitorch.cpu.graph(g_chain):
        c_static = chain(_CHAIN_TENSOR, jc)
    g_rnn.replay()
    g_chain.replay()
    np.testing.assert_allclose(h_static._data, numpy_rnn(*arrays), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(c_static._data, chain(_CHAIN_NUMPY, x_chain), rtol=1e-4, atol=1e-5)
    assert g_rnn.native and g_chain.native, (g_rnn.native_report(), g_chain.native_report())
    ro_rnn = compile_reduce_overhead(lambda h, xs: rnn(jitorch, h, xs, *jt[2:]))
    ro_chain = compile_reduce_overhead(lambda v: chain(_CHAIN_TENSOR, v))
    h_in, xs_in = jitorch.tensor(arrays[0]), jitorch.tensor(arrays[1])
    for _ in range(3):
        ro_rnn(h_in, xs_in)
        ro_chain(jc)
    np.testing.assert_allclose(ro_rnn(h_in, xs_in)._data, numpy_rnn(*arrays), rtol=1e-4, atol=1e-5)

    # torch.compile of the unrolled loops (inductor); the first call compiles.
    compile_s = {}
    t_rnn = torch.compile(lambda h, xs, w, u, b: rnn(torch, h, xs, w, u, b))
    t_chain = torch.compile(lambda v: chain(_CHAIN_TENSOR, v))
    for name, fn in (("rnn", lambda: t_rnn(*th)), ("chain", lambda: t_chain(tc))):
        start = time.perf_counter()
        fn()
        compile_s[name] = time.perf_counter() - start
    jax_fns = _jax_cases(arrays, x_chain)

    cases = {
        "rnn": {
            "jitorch eager": lambda: rnn(jitorch, *jt),
            "jitorch replay": g_rnn.replay,
            "jitorch.compile reduce-overhead": lambda: ro_rnn(h_in, xs_in),
            "numpy": lambda: numpy_rnn(*arrays),
            "torch eager": lambda: rnn(torch, *th),
            "torch.compile (unrolled)": lambda: t_rnn(*th),
        },
        "chain": {
            "jitorch eager": lambda: chain(_CHAIN_TENSOR, jc),
            "jitorch replay": g_chain.replay,
            "jitorch.compile reduce-overhead": lambda: ro_chain(jc),
            "numpy": lambda: chain(_CHAIN_NUMPY, x_chain),
            "torch eager": lambda: chain(_CHAIN_TENSOR, tc),
            "torch.compile (unrolled)": lambda: t_chain(tc),
        },
    }
    for workload, fn in jax_fns.items():
        cases[workload]["jax.jit (scan)" if workload == "rnn" else "jax.jit"] = fn
    rows = []
    for workload, fns in cases.items():
        per = STEPS if workload == "rnn" else 1
        timings = common.measure(fns)
        torch_us = timings["torch eager"]["median_s"] / per * 1e6
        for name, t in timings.items():
            us = t["median_s"] / per * 1e6
            rows.append({"workload": workload, "case": name, "us": us, "min_us": t["min_s"] / per * 1e6,
                         "vs_torch_eager": torch_us / us, "number": t["number"], "repeats": t["repeats"]})
    table = common.format_table(rows, [("workload", "workload", "s"), ("case", "case", "s"),
                                       ("us (median)", "us", ".2f"), ("us (min)", "min_us", ".2f"),
                                       ("speed-up vs torch eager", "vs_torch_eager", ".2f")])
    print(table)
    rep_rnn, rep_chain = g_rnn.native_report(), g_chain.native_report()
    notes = (f"rnn: `h = tanh(h @ W + x_t @ U + b)`, {STEPS} steps, h [1, {HIDDEN}], {HIDDEN}x{HIDDEN} weights, "
             f"float32, single thread; us per RNN step. chain: {CHAIN} elementwise ops on {CHAIN_N} float32 "
             "elements; us per chain. jitorch replay is ONE native call per replay: the RNN graph has "
             f"{len(g_rnn)} recorded steps lowered to {rep_rnn['calls']} native calls (two products and one fused "
             f"add-add-tanh loop per step), the chain's {len(g_chain)} steps to {rep_chain['calls']} fused loop. "
             f"torch.compile warm-up (compile) took {compile_s['rnn']:.1f} s (rnn) and {compile_s['chain']:.1f} s "
             "(chain). " + ("" if jax is not None else "JAX is not installed here, so there is no jax.jit column."))
    json_path, md_path = common.write_results("replay", rows, common.machine_facts(), table, notes)
    print(f"wrote {json_path} and {md_path}")


if __name__ == "__main__":
    main()
