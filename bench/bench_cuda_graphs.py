"""CUDA graph replay versus eager CUDA: a tiny RNN cell, h = tanh(h @ W + x_t @ U + b), [1,64] state, 64x64
weights, 100 steps per call (about 500 tiny kernels: launch and Python dispatch overhead dominate).

Cases, each timed per 100-step call with a device synchronisation at the end:

- ``jitorch eager``: the loop in jitorch ops on CUDA tensors (dispatch + one CuPy launch per op);
- ``jitorch graph replay``: the same loop captured once with ``jitorch.cuda.graph``, then ``g.replay()``;
- ``cupy eager``: the loop in raw CuPy (the floor of eager launches from Python, no jitorch dispatch);
- ``torch eager`` / ``torch graph replay``: the same with torch and ``torch.cuda.graph`` when torch has CUDA.

Target (issue 6): jitorch graph replay >= 5x jitorch eager. Replay results are checked against eager first.
Without a GPU it prints "no GPU" and exits 0. Run: ``python bench/bench_cuda_graphs.py`` (bench/gpu_check.sh does).
"""
from __future__ import annotations

import common

common.single_thread()

import sys  # noqa: E402

import numpy as np  # noqa: E402

import jitorch  # noqa: E402

STEPS, H = 100, 64
TARGET = 5.0


def inputs():
    rng = np.random.default_rng(0)
    return {"W": rng.standard_normal((H, H), np.float32) * 0.1, "U": rng.standard_normal((H, H), np.float32) * 0.1,
            "b": rng.standard_normal((1, H), np.float32) * 0.1, "xs": rng.standard_normal((STEPS, 1, H), np.float32),
            "h0": rng.standard_normal((1, H), np.float32)}


def rnn(xs, h, W, U, b, tanh):
    for t in range(STEPS):
        h = tanh(h @ W + xs[t] @ U + b)
    return h


def jitorch_cases(data, sync):
    t = {k: jitorch.from_numpy(v).cuda() for k, v in data.items()}

    def eager():
        return rnn(t["xs"], t["h0"], t["W"], t["U"], t["b"], jitorch.tanh)

    want = eager()
    g = jitorch.cuda.CUDAGraph()
    with jitorch.cuda.graph(g):
        out = eager()
    out.zero_()
    g.replay()
    np.testing.assert_allclose(out.cpu().numpy(), want.cpu().numpy(), rtol=1e-5, atol=1e-6)
    return {"jitorch eager": lambda: (eager(), sync()), "jitorch graph replay": lambda: (g.replay(), sync())}


def cupy_cases(data, sync):
    import cupy

    c = {k: cupy.asarray(v) for k, v in data.items()}
    return {"cupy eager": lambda: (rnn(c["xs"], c["h0"], c["W"], c["U"], c["b"], cupy.tanh), sync())}


def torch_cases(data):
    torch, note = common.torch_cuda()
    if torch is None:
        return {}, note
    t = {k: torch.from_numpy(v).cuda() for k, v in data.items()}

    def eager():
        return rnn(t["xs"], t["h0"], t["W"], t["U"], t["b"], torch.tanh)

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            eager()
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        eager()
    sync = torch.cuda.synchronize
    return {"torch eager": lambda: (eager(), sync()), "torch graph replay": lambda: (g.replay(), sync())}, note


def main():
    if not jitorch.cuda.is_available():
        print("no GPU: jitorch.cuda.is_available() is False; nothing to measure")
        return 0
    import cupy

    sync = cupy.cuda.Device().synchronize
    data = inputs()
    fns = jitorch_cases(data, sync)
    fns.update(cupy_cases(data, sync))
    extra, torch_note = torch_cases(data)
    fns.update(extra)
    timings = common.measure(fns, repeats=15, target_s=0.05)
    eager_s = timings["jitorch eager"]["median_s"]
    rows = [{"case": name, "ms_per_call": t["median_s"] * 1e3, "us_per_step": t["median_s"] / STEPS * 1e6,
             "speedup_vs_jitorch_eager": eager_s / t["median_s"]} for name, t in timings.items()]
    ratio = eager_s / timings["jitorch graph replay"]["median_s"]
    verdict = "PASS" if ratio >= TARGET else "FAIL"
    notes = (f"RNN cell h = tanh(h @ W + x_t @ U + b), [1,{H}] state, {H}x{H}, {STEPS} steps per call; medians of 15 "
             f"samples with a device sync per call. jitorch graph replay is {ratio:.1f}x jitorch eager (target "
             f">= {TARGET:.0f}x: {verdict}). Peers: {torch_note}.")
    common.report("cuda_graphs", rows, [("case", "case", ""), ("ms/call (median)", "ms_per_call", ".3f"),
                                        ("us/step", "us_per_step", ".2f"),
                                        ("x vs jitorch eager", "speedup_vs_jitorch_eager", ".1f")], notes,
                  gpu=jitorch.cuda.get_device_name())


if __name__ == "__main__":
    sys.exit(main())
