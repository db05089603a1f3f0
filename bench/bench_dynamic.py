"""Training with sizes that change: variable sequence lengths (transformer block) and a smaller last batch (MLP).

Each variant trains the same model, same initial weights and data, over a schedule of sizes: a first pass over
every size (compilation included: what a first epoch costs) and then further passes, whose per-step median is the
steady state. Variants: jitorch eager, ``jitorch.compile`` (automatic dynamic shapes, the default),
``jitorch.compile(dynamic=False)`` (every size a specialization: past ``recompile_limit`` it runs eagerly), torch
eager and ``torch.compile`` (its automatic dynamic shapes, the default).

Run: env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python bench/bench_dynamic.py [--quick]
"""
from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
import warnings

import common

common.single_thread()
# Cold compiler caches for every variant: torch's inductor cache here, jitorch's per variant below.
os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="bench-dynamic-inductor-")

import jitorch  # noqa: E402 - before NumPy, as a user's script would
import numpy as np  # noqa: E402
import torch  # noqa: E402

from bench_compile_train import block, mlp  # noqa: E402
from jitorch._compile.lower import clear_kernel_cache  # noqa: E402

torch.set_num_threads(1)
QUICK = "--quick" in sys.argv

# (label, model builder, optimizer, list of (input shape, target shape or classes) per step)
SEQ = [16, 24, 32, 40, 48, 56, 64, 72, 80, 96] if not QUICK else [16, 24, 32]
CASES = {
    "transformer block d128 b8, 10 sequence lengths 16-96 (Adam)": (
        block, lambda lib, p: lib.optim.Adam(p, lr=1e-3), [((8, t, 128), (8, t, 128)) for t in SEQ]),
    "MLP 784-512-512-10, batches 128 x 7 + 37 (SGD)": (
        mlp, lambda lib, p: lib.optim.SGD(p, lr=0.01, momentum=0.9), [((128, 784), 10)] * 7 + [((37, 784), 10)]),
}
VARIANTS = ("jitorch", "jitorch.compile", "jitorch.compile(dynamic=False)", "torch", "torch.compile")
PASSES = 7 if not QUICK else 3
WARM_PASSES = 2  # a size's first call compiles its kernels, its second its native program: steady from the third


def _batches(schedule, rng):
    out = []
    for shape, target in schedule:
        x = rng.standard_normal(shape).astype(np.float32)
        y = rng.standard_normal(target).astype(np.float32) if isinstance(target, tuple) else \
            rng.integers(0, target, shape[0])
        out.append((x, y))
    return out


def _model(build, lib):
    torch.manual_seed(0)
    ref = build(torch)
    if lib is torch:
        return ref
    model = build(jitorch)
    with jitorch.no_grad():
        for p, q in zip(model.parameters(), ref.parameters()):
            p.copy_(jitorch.tensor(q.detach().numpy()))
    return model


def _variant(variant, build, make_opt, data):
    lib = torch if variant.startswith("torch") else jitorch
    model = _model(build, lib)
    opt = make_opt(lib, model.parameters())
    run = model
    if lib is jitorch:
        # Cold kernel caches, in memory and on disk (not jitorch.compiler.reset(): it would also forget the other
        # variants' compiled entries, which then recompile during the steady passes).
        clear_kernel_cache()
        os.environ["JITORCH_CACHE_DIR"] = tempfile.mkdtemp(prefix="bench-dynamic-jitorch-")
    if variant == "torch.compile":
        torch._dynamo.reset()
        run = torch.compile(model)
    elif variant == "jitorch.compile":
        run = jitorch.compile(model)
    elif variant == "jitorch.compile(dynamic=False)":
        run = jitorch.compile(model, dynamic=False)
    batches = [(lib.tensor(x), lib.tensor(y)) for x, y in data]

    def one_pass(times, losses):
        for x, y in batches:
            start = time.perf_counter()
            opt.zero_grad()
            loss = run(x, y)
            loss.backward()
            opt.step()
            times.append(time.perf_counter() - start)
            losses.append(float(loss.item()))
    return one_pass


def run_case(label):
    build, make_opt, schedule = CASES[label]
    data = _batches(schedule, np.random.default_rng(0))
    rows, passes, losses, steady = {}, {}, {}, {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # dynamic=False reaching recompile_limit warns once
        for variant in VARIANTS:  # the passes that compile, one variant after the other (cold caches each)
            passes[variant], losses[variant], steady[variant] = _variant(variant, build, make_opt, data), [], []
            warm = []
            for _ in range(WARM_PASSES):
                times = []
                passes[variant](times, losses[variant])
                warm.append(sum(times))
            rows[variant] = {"first_pass_s": warm[0], "second_pass_s": warm[1]}
        for _ in range(PASSES - WARM_PASSES):  # steady passes interleaved: the machine's drifts hit all alike
            for variant in VARIANTS:
                passes[variant](steady[variant], losses[variant])
    ref = np.array(losses["torch"])
    for variant, row in rows.items():
        row["steady_ms"] = statistics.median(steady[variant]) * 1e3
        row["max_loss_rel_diff_vs_torch"] = float(np.max(np.abs(np.array(losses[variant]) - ref) / np.abs(ref)))
        print(f"  {variant:34s} passes 1, 2: {row['first_pass_s']:6.2f} s, {row['second_pass_s']:6.2f} s; steady "
              f"{row['steady_ms']:7.2f} ms/step", flush=True)
    return rows


def main():
    out = []
    for label in CASES:
        print(label, flush=True)
        rows = run_case(label)
        je, jc = rows["jitorch"], rows["jitorch.compile"]
        for variant, row in rows.items():
            out.append(dict(case=label, variant=variant, **row,
                            steady_vs_jitorch_eager=je["steady_ms"] / row["steady_ms"],
                            steady_vs_jitorch_compile=jc["steady_ms"] / row["steady_ms"]))
    columns = [("case", "case", ""), ("variant", "variant", ""), ("first pass (s)", "first_pass_s", ".2f"),
               ("second pass (s)", "second_pass_s", ".2f"),
               ("steady (ms/step)", "steady_ms", ".2f"), ("jitorch eager / this", "steady_vs_jitorch_eager", ".2f"),
               ("jitorch.compile / this", "steady_vs_jitorch_compile", ".2f"),
               ("max loss diff vs torch", "max_loss_rel_diff_vs_torch", ".1e")]
    notes = ("Training steps (zero_grad, forward + loss, backward, optimizer step) over a schedule of sizes. 'first "
             "pass': seconds for one pass over the schedule, compilation included (cold caches: every variant gets "
             "empty jitorch and inductor cache directories); 'second pass': the sizes' second calls (jitorch.compile "
             "traces and compiles a symbolic size there; a static entry plans its native program); 'steady': median "
             f"ms per step of the {PASSES - WARM_PASSES} passes after those, interleaved across the variants. "
             "jitorch.compile makes a dimension symbolic at its third size (a first call at a size runs eagerly, the "
             "second traces and compiles it); dynamic=False compiles each size until recompile_limit (8), then runs "
             "eagerly. Losses are compared with torch eager step by step.")
    common.report("dynamic", out, columns, notes)


if __name__ == "__main__":
    main()
