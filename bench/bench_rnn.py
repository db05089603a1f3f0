"""Recurrent layers in eager mode: jitorch vs torch, single-threaded, in one process.

Each case is a training step's forward + ``sum()`` + ``backward()`` (or a forward under ``no_grad``) of an
``nn.LSTM``/``GRU``/``RNN``, an ``LSTMCell`` loop, or a packed batch, with the same weights and inputs in both
libraries. The sizes: the issue's repro (``LSTM(16, 32)``, 50 steps, batch 4) and a word-level language model's
(embedding 128, hidden 256, 35 steps, batch 20, 2 layers).

Run: ``python bench/bench_rnn.py [--name rnn]``. Prints a table and writes ``bench/results/<name>-<date>.{json,md}``.
"""
from __future__ import annotations

import argparse

import common

common.single_thread()  # before NumPy and torch load their thread pools

import numpy as np  # noqa: E402
import torch  # noqa: E402

import jitorch  # noqa: E402

common.single_thread()  # now torch is loaded: also set its intra-op pool

LIBS = (torch, jitorch)


def _pair(kind, *args, **kwargs):
    """The same module in both libraries, jitorch's with torch's weights."""
    torch.manual_seed(0)
    th = getattr(torch.nn, kind)(*args, **kwargs)
    jt = getattr(jitorch.nn, kind)(*args, **kwargs)
    jt.load_state_dict({k: jitorch.tensor(v.detach().numpy()) for k, v in th.state_dict().items()})
    return {torch: th, jitorch: jt}


def _input(shape, seed=0):
    return np.random.default_rng(seed).uniform(-1, 1, shape).astype(np.float32)


def _layer_case(kind, inp, hid, layers, steps, batch, train=True, **kwargs):
    mods = _pair(kind, inp, hid, layers, **kwargs)
    shape = (batch, steps, inp) if kwargs.get("batch_first") else (steps, batch, inp)
    x = _input(shape)
    fns = {}
    for lib, mod in mods.items():
        xt = lib.tensor(x)
        if train:
            def step(mod=mod, xt=xt):
                mod.zero_grad(set_to_none=True)
                out, _ = mod(xt)
                out.sum().backward()
        else:
            def step(lib=lib, mod=mod, xt=xt):
                with lib.no_grad():
                    mod(xt)
        fns[lib.__name__] = step
    return fns, mods, x


def _cell_case(inp, hid, steps, batch):
    mods = _pair("LSTMCell", inp, hid)
    x = _input((steps, batch, inp))
    fns = {}
    for lib, mod in mods.items():
        xt = lib.tensor(x)

        def step(mod=mod, xt=xt, lib=lib):
            mod.zero_grad(set_to_none=True)
            h = c = lib.zeros(batch, hid)
            total = 0
            for t in range(steps):
                h, c = mod(xt[t], (h, c))
                total = total + h.sum()
            total.backward()
        fns[lib.__name__] = step
    return fns, mods, None


def _packed_case(inp, hid, lengths):
    mods = _pair("LSTM", inp, hid)
    x = _input((max(lengths), len(lengths), inp))
    fns = {}
    for lib, mod in mods.items():
        xt, lens = lib.tensor(x), lib.tensor(lengths)
        utils = lib.nn.utils.rnn

        def step(mod=mod, xt=xt, lens=lens, utils=utils):
            mod.zero_grad(set_to_none=True)
            out, _ = mod(utils.pack_padded_sequence(xt, lens, enforce_sorted=False))
            out.data.sum().backward()
        fns[lib.__name__] = step
    return fns, mods, None


def build_cases():
    """(case name, {library name: zero-argument callable}, modules, input) for every benchmarked case."""
    lm = dict(inp=128, hid=256, layers=2, steps=35, batch=20)
    return [
        ("LSTM(16, 32), T50 B4, fwd+bwd", *_layer_case("LSTM", 16, 32, 1, 50, 4)),
        ("GRU(16, 32), T50 B4, fwd+bwd", *_layer_case("GRU", 16, 32, 1, 50, 4)),
        ("RNN(16, 32), T50 B4, fwd+bwd", *_layer_case("RNN", 16, 32, 1, 50, 4)),
        ("LSTM(16, 32) bidirectional batch_first, T50 B4, fwd+bwd",
         *_layer_case("LSTM", 16, 32, 1, 50, 4, bidirectional=True, batch_first=True)),
        ("LSTM LM 128/256 x2, T35 B20, fwd+bwd", *_layer_case("LSTM", **lm)),
        ("GRU LM 128/256 x2, T35 B20, fwd+bwd", *_layer_case("GRU", **lm)),
        ("RNN LM 128/256 x2, T35 B20, fwd+bwd", *_layer_case("RNN", **lm)),
        ("LSTM LM 128/256 x2, T35 B20, no_grad fwd", *_layer_case("LSTM", **lm, train=False)),
        ("LSTMCell(16, 32) loop, T50 B4, fwd+bwd", *_cell_case(16, 32, 50, 4)),
        ("LSTM(16, 32) packed, 8 seqs len 10-50, fwd+bwd", *_packed_case(16, 32, [50, 45, 40, 30, 25, 20, 15, 10])),
    ]


def check_agreement(cases):
    """Both libraries compute the same outputs and weight gradients (a benchmark of wrong code is useless)."""
    for name, fns, mods, x in cases:
        if x is None:
            continue
        outs = {}
        for lib, mod in mods.items():
            mod.zero_grad(set_to_none=True)
            out, _ = mod(lib.tensor(x))
            out.sum().backward()
            outs[lib] = (out.detach().numpy(), [p.grad.numpy() for p in mod.parameters()])
        (y_th, g_th), (y_jt, g_jt) = outs[torch], outs[jitorch]
        np.testing.assert_allclose(y_jt, y_th, rtol=1e-4, atol=1e-5, err_msg=name)
        for a, b in zip(g_jt, g_th):
            np.testing.assert_allclose(a, b, rtol=1e-3, atol=1e-4, err_msg=name)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--name", default="rnn", help="results file stem (e.g. rnn-before for another checkout)")
    args = parser.parse_args()
    cases = build_cases()
    check_agreement(cases)
    rows = []
    for name, fns, _, _ in cases:
        timings = common.measure(fns, repeats=15, target_s=0.05)
        row = {"case": name, "torch": timings["torch"], "jitorch": timings["jitorch"]}
        for lib in ("torch", "jitorch"):
            row[f"{lib}_ms"] = timings[lib]["median_s"] * 1e3
            row[f"{lib}_min_ms"] = timings[lib]["min_s"] * 1e3
        row["jitorch_over_torch"] = row["jitorch_ms"] / row["torch_ms"]
        row["min_ratio"] = row["jitorch_min_ms"] / row["torch_min_ms"]
        rows.append(row)
        print(f"  {name}: {row['torch_ms']:.2f} / {row['jitorch_ms']:.2f} ms", flush=True)
    columns = [("case", "case", ""), ("torch (ms)", "torch_ms", ".3f"), ("jitorch (ms)", "jitorch_ms", ".3f"),
               ("jitorch/torch", "jitorch_over_torch", ".2f"), ("torch min", "torch_min_ms", ".3f"),
               ("jitorch min", "jitorch_min_ms", ".3f"), ("min ratio", "min_ratio", ".2f")]
    notes = ("Milliseconds per training step (forward + sum + backward, gradients reset each step) or per no_grad "
             "forward: median and min over 15 samples (each sample loops until it takes ~50 ms; the libraries' "
             "samples are interleaved); one thread (torch.set_num_threads(1), OMP/OpenBLAS/MKL threads = 1, "
             "JITORCH_NUM_THREADS=1). Outputs and weight gradients are checked against torch first. The machine is "
             "shared with other work (see the load average): compare the ratios more than the absolute times.")
    common.report(args.name, rows, columns, notes, jitorch=jitorch.__file__)


if __name__ == "__main__":
    main()
