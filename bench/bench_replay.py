"""CPU graph replay on a per-op-overhead-bound loop: a tiny RNN cell, single-threaded, in one process.

The loop is ``h = tanh(h @ W + x_t @ U + b)`` for 100 steps on ``h: [1, 64]`` with 64x64 weights (issue 6). Columns:
jitorch eager, jitorch CPU graph replay (this increment: Python-level replay of the recorded kernels), NumPy, and
torch eager. Numbers are microseconds per RNN step (the whole 100-step loop divided by 100).

Run: ``python bench/bench_replay.py``. Prints a table and writes ``bench/results/replay-<date>.{json,md}``.
"""
from __future__ import annotations

import common

common.single_thread()  # before NumPy and torch load their thread pools

import numpy as np  # noqa: E402
import torch  # noqa: E402

import jitorch  # noqa: E402

common.single_thread()  # now torch is loaded: also set its intra-op pool

STEPS, HIDDEN = 100, 64


def rnn(lib, h, xs, w, u, b):
    """The benchmarked loop for jitorch and torch, which share the API."""
    for t in range(STEPS):
        h = lib.tanh(h @ w + xs[t] @ u + b)
    return h


def numpy_rnn(h, xs, w, u, b):
    for t in range(STEPS):
        h = np.tanh(h @ w + xs[t] @ u + b)
    return h


def main():
    gen = np.random.default_rng(0)
    arrays = [(gen.standard_normal(s) * 0.1).astype(np.float32)
              for s in ((1, HIDDEN), (STEPS, 1, HIDDEN), (HIDDEN, HIDDEN), (HIDDEN, HIDDEN), (1, HIDDEN))]
    jt = [jitorch.tensor(a) for a in arrays]
    th = [torch.tensor(a) for a in arrays]
    g = jitorch.cpu.CPUGraph()
    with jitorch.cpu.graph(g):
        h_static = rnn(jitorch, *jt)
    g.replay()
    expected = numpy_rnn(*arrays)
    np.testing.assert_allclose(h_static._data, expected, rtol=1e-4, atol=1e-5)  # replay computes the real loop
    fns = {
        "jitorch eager": lambda: rnn(jitorch, *jt),
        "jitorch replay": g.replay,
        "numpy": lambda: numpy_rnn(*arrays),
        "torch eager": lambda: rnn(torch, *th),
    }
    timings = common.measure(fns)
    torch_us = timings["torch eager"]["median_s"] / STEPS * 1e6
    rows = []
    for name, t in timings.items():
        us = t["median_s"] / STEPS * 1e6
        rows.append({"case": name, "us_per_step": us, "min_us_per_step": t["min_s"] / STEPS * 1e6,
                     "vs_torch_eager": torch_us / us, "number": t["number"], "repeats": t["repeats"]})
    table = common.format_table(rows, [("case", "case", "s"), ("us/step (median)", "us_per_step", ".2f"),
                                       ("us/step (min)", "min_us_per_step", ".2f"),
                                       ("speed-up vs torch eager", "vs_torch_eager", ".2f")])
    print(table)
    notes = (f"RNN cell `h = tanh(h @ W + x_t @ U + b)`, {STEPS} steps, h [1, {HIDDEN}], {HIDDEN}x{HIDDEN} weights, "
             f"float32, single thread. The graph holds {len(g)} replay steps (views of `xs` need none). Replay here "
             "is the first increment: the recorded kernels called from Python; issue 6's target (<= 1 us/step) needs "
             "the one-call native replay.")
    json_path, md_path = common.write_results("replay", rows, common.machine_facts(), table, notes)
    print(f"wrote {json_path} and {md_path}")


if __name__ == "__main__":
    main()
