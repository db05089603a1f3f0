"""Per-phase times of the compiled training steps (forward + loss, backward, optimizer step): jitorch eager vs
jitorch.compile, with and without the native runner of compiled graphs.

Same cases, weights and data as bench_compile_train.py; each step is timed phase by phase, the variants interleaved
step by step, medians over the samples. Adds a "phases" section to bench/results/compile-train-2026-11-29.{md,json}
(run bench_compile_train.py first: it writes those files).

Run: env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python bench/bench_compile_train_phases.py
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import common

common.single_thread()
os.environ.setdefault("JITORCH_NUM_THREADS", "1")

import numpy as np  # noqa: E402

import jitorch  # noqa: E402
from bench_compile_train import CASES, _data  # noqa: E402
from jitorch._compile import native_runner  # noqa: E402

PHASES = ("forward", "backward", "optimizer", "step")


def _variant(label, kind):
    name, build, make_opt = CASES[label]
    xd, yd = _data(name, np.random.default_rng(0))
    x, y = jitorch.tensor(xd), jitorch.tensor(yd)
    jitorch.manual_seed(0)
    model = build(jitorch)
    opt = make_opt(jitorch, model.parameters())
    run = model if kind == "eager" else jitorch.compile(model)
    native = kind != "compile, Python runner"
    samples = {p: [] for p in PHASES}

    def step():
        native_runner.ENABLED = native
        t0 = time.perf_counter()
        opt.zero_grad()
        loss = run(x, y)
        t1 = time.perf_counter()
        loss.backward()
        t2 = time.perf_counter()
        opt.step()
        t3 = time.perf_counter()
        for p, v in zip(PHASES, (t1 - t0, t2 - t1, t3 - t2, t3 - t0)):
            samples[p].append(v)
    for _ in range(4):  # compiles, plans the native runner, warms caches
        step()
    for v in samples.values():
        v.clear()
    return step, samples


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=40)
    args = parser.parse_args()
    kinds = ("eager", "compile (native runner)", "compile, Python runner")
    rows = []
    for label in CASES:
        print(f"  {label} ...", flush=True)
        variants = {k: _variant(label, k) for k in kinds}
        steps = args.steps if "transformer" not in label else max(args.steps // 4, 8)
        for _ in range(steps):
            for step, _ in variants.values():
                step()
        for kind, (_, samples) in variants.items():
            rows.append({"case": label, "variant": kind,
                         **{f"{p}_ms": statistics.median(samples[p]) * 1e3 for p in PHASES}})
    native_runner.ENABLED = True
    columns = [("case", "case", ""), ("variant", "variant", "")] + \
        [(f"{p} (ms)", f"{p}_ms", ".2f") for p in PHASES]
    table = common.format_table(rows, columns)
    print()
    print(table)
    base = common.RESULTS_DIR / "compile-train-2026-11-29"
    if base.with_suffix(".json").exists():
        data = json.loads(base.with_suffix(".json").read_text())
        data["phases"] = rows
        base.with_suffix(".json").write_text(json.dumps(data, indent=2) + "\n")
        md = base.with_suffix(".md").read_text().split("\n## Phases")[0].rstrip("\n")
        md += ("\n\n## Phases\n\nMedian milliseconds per phase over steps interleaved variant by variant (bench/"
               "bench_compile_train_phases.py; the step column includes zero_grad). \"Python runner\": "
               "jitorch.compile with `native_runner.ENABLED = False` (each graph node run from Python).\n\n"
               + table + "\n")
        base.with_suffix(".md").write_text(md)


if __name__ == "__main__":
    main()
