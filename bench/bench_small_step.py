"""Python overhead of a small training step: jitorch eager vs torch eager, single-threaded, in one process.

At these sizes the arithmetic takes a few microseconds; what is measured is the library's bookkeeping around it
(module calls, the loss, the optimizer's state lookups and hyperparameter reads, ``zero_grad``, gradient clipping).

Cases:

- (a) MLP 32-64-10, batch 64, Adam: ``zero_grad``, forward, ``cross_entropy``, ``backward``, ``step``.
- (b) the same MLP with SGD (momentum 0.9) and ``clip_grad_norm_(max_norm=1.0)`` before the step.
- (c) a small CNN (Conv2d 1->8 3x3, ReLU, MaxPool2d(2), Flatten, Linear(8*5*5, 10)), batch 32 of 1x12x12 images,
  AdamW.
- (d) ``Module.__call__`` of a 10-layer ``Sequential`` of ``Linear(16, 16)`` on a 4x16 input, forward only.
- (e) ``optimizer.step()`` alone: Adam over 20 parameters of 16x16 with fixed gradients.

jitorch's models get torch's initial weights through ``load_state_dict``; the losses of the first steps are compared
across libraries before timing (a benchmark of two different computations is useless).

Run: ``python bench/bench_small_step.py [--profile CASE]``. Prints a table and writes
``bench/results/small-step-<date>.{json,md}``; ``--profile a`` prints jitorch's cProfile of that case instead.
"""
from __future__ import annotations

import argparse

import common

common.single_thread()  # before NumPy and torch load their thread pools

import numpy as np  # noqa: E402
import torch  # noqa: E402

import jitorch  # noqa: E402

common.single_thread()  # now torch is loaded: also set its intra-op pool

LIBS = {"torch": torch, "jitorch": jitorch}


def mlp(lib):
    nn = lib.nn
    return nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 10))


def cnn(lib):
    nn = lib.nn
    return nn.Sequential(nn.Conv2d(1, 8, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(8 * 5 * 5, 10))


def deep_linear(lib):
    nn = lib.nn
    return nn.Sequential(*[nn.Linear(16, 16) for _ in range(10)])


def _copy_weights(torch_model, jitorch_model):
    state = {k: jitorch.tensor(v.detach().numpy().copy()) for k, v in torch_model.state_dict().items()}
    jitorch_model.load_state_dict(state)


def _models(build):
    torch.manual_seed(0)
    models = {"torch": build(torch), "jitorch": build(jitorch)}
    _copy_weights(models["torch"], models["jitorch"])
    return models


def _train_step(lib, model, opt, x, y, clip=None):
    F = lib.nn.functional

    def step():
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        if clip is not None:
            lib.nn.utils.clip_grad_norm_(model.parameters(), clip)
        opt.step()
        return loss
    return step


def _train_case(build, make_opt, x_shape, batch, clip=None):
    """{library: step} for one training case, same weights and data in both libraries."""
    models = _models(build)
    rng = np.random.default_rng(0)
    xn = rng.standard_normal((batch, *x_shape)).astype(np.float32)
    yn = rng.integers(0, 10, batch)
    steps = {}
    for name, lib in LIBS.items():
        model = models[name]
        opt = make_opt(lib, model.parameters())
        steps[name] = _train_step(lib, model, opt, lib.tensor(xn), lib.tensor(yn), clip)
    return steps


def _forward_case():
    models = _models(deep_linear)
    xn = np.random.default_rng(1).standard_normal((4, 16)).astype(np.float32)
    fns = {}
    for name, lib in LIBS.items():
        model, x = models[name], lib.tensor(xn)
        fns[name] = lambda model=model, x=x: model(x)
    return fns


def _step_only_case():
    rng = np.random.default_rng(2)
    ws = [rng.standard_normal((16, 16)).astype(np.float32) for _ in range(20)]
    gs = [rng.standard_normal((16, 16)).astype(np.float32) for _ in range(20)]
    fns = {}
    for name, lib in LIBS.items():
        params = [lib.nn.Parameter(lib.tensor(w.copy())) for w in ws]
        for p, g in zip(params, gs):
            p.grad = lib.tensor(g)
        fns[name] = lib.optim.Adam(params, lr=1e-3).step
    return fns


def build_cases():
    """(key, case name, {library: zero-argument callable}) for every benchmarked case."""
    return [
        ("a", "MLP 32-64-10 b64, Adam: zero_grad+fwd+CE+bwd+step",
         _train_case(mlp, lambda lib, ps: lib.optim.Adam(ps, lr=1e-3), (32,), 64)),
        ("b", "MLP 32-64-10 b64, SGD m0.9 + clip_grad_norm_",
         _train_case(mlp, lambda lib, ps: lib.optim.SGD(ps, lr=0.01, momentum=0.9), (32,), 64, clip=1.0)),
        ("c", "CNN conv1->8 3x3/pool/linear b32 12x12, AdamW",
         _train_case(cnn, lambda lib, ps: lib.optim.AdamW(ps, lr=1e-3), (1, 12, 12), 32)),
        ("d", "Sequential 10x Linear(16,16) on 4x16, forward", _forward_case()),
        ("e", "Adam.step() alone, 20 params of 16x16", _step_only_case()),
    ]


def check_agreement(cases):
    """The training cases compute the same losses in both libraries over their first three steps."""
    for key, name, fns in cases:
        if key not in "abc":
            continue
        losses = {lib: [float(fns[lib]().item()) for _ in range(3)] for lib in LIBS}
        np.testing.assert_allclose(losses["jitorch"], losses["torch"], rtol=1e-4, atol=1e-5, err_msg=name)


def profile(cases, key, seconds=2.0):
    import cProfile
    import pstats
    import time

    fn = next(f for k, _, f in cases if k == key)["jitorch"]
    fn()
    prof = cProfile.Profile()
    end = time.perf_counter() + seconds
    prof.enable()
    n = 0
    while time.perf_counter() < end:
        fn()
        n += 1
    prof.disable()
    print(f"{n} calls")
    pstats.Stats(prof).sort_stats("tottime").print_stats(30)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", metavar="CASE", help="print jitorch's cProfile of case a-e instead of timing")
    parser.add_argument("--label", default="", help="suffix of the result files (e.g. 'before')")
    args = parser.parse_args()
    cases = build_cases()
    if args.profile:
        profile(cases, args.profile)
        return
    check_agreement(cases)
    rows = []
    for key, name, fns in cases:
        timings = common.measure(fns)
        row = {"case": f"({key}) {name}"}
        for lib_name in LIBS:
            row[lib_name] = timings[lib_name]
            row[f"{lib_name}_us"] = timings[lib_name]["median_s"] * 1e6
        row["jitorch_over_torch"] = row["jitorch_us"] / row["torch_us"]
        rows.append(row)
        print(f"  {row['case']}: done", flush=True)
    columns = [("case", "case", ""), ("torch (us)", "torch_us", ".1f"), ("jitorch (us)", "jitorch_us", ".1f"),
               ("jitorch/torch", "jitorch_over_torch", ".2f")]
    notes = ("Median microseconds per call over 31 samples (each sample loops until it takes ~10 ms; the libraries' "
             "samples are interleaved); one thread (torch.set_num_threads(1), OMP/OpenBLAS/MKL threads = 1), CPU, "
             "eager. Same initial weights and data in both libraries; the first three losses agree.")
    name = "small-step" + (f"-{args.label}" if args.label else "")
    common.report(name, rows, columns, notes)


if __name__ == "__main__":
    main()
