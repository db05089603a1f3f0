"""Compiled training steps: jitorch.compile vs jitorch eager vs torch eager vs torch.compile.

Cases: an MLP 784-512-512-10 (batch 128, cross-entropy, SGD), a pre-norm transformer block (d_model 128, 4 heads,
seq 64, batch 16, GELU MLP, MSE loss, Adam), a small CNN on 28x28 images (two convolutions, BatchNorm, max-pooling,
dropout; SGD), and the MLP with ``Adam(fused=True)`` in every library. The loss is
inside the compiled module, so one compiled call covers the forward, and its backward runs the compiled backward.
Same initial weights and data in every library.

Run: env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python bench/bench_compile_train.py [--threads 2]
"""
from __future__ import annotations

import argparse
import time

import os

import sys

import common

# --threads N (default 1) must reach BLAS and OpenMP before NumPy or torch load: they read it once. Only when run
# as the script: a profiling script importing CASES keeps its own thread settings.
THREADS = int(sys.argv[sys.argv.index("--threads") + 1]) if "--threads" in sys.argv else 1
if __name__ == "__main__":
    for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMEXPR_NUM_THREADS",
                 "JITORCH_NUM_THREADS"):  # compiled kernels too: as many threads as every peer here
        os.environ.setdefault(_var, str(THREADS))

import jitorch  # noqa: E402 - before NumPy, as a user's script would: jitorch sets OpenBLAS's thread policy
from jitorch.codegen.llvm_objcache import default_cache  # noqa: E402
from jitorch.codegen.llvm_program import Gemm, PackedGemm, compile_program  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402

if __name__ == "__main__":
    torch.set_num_threads(THREADS)


def mlp(lib):
    nn, F = lib.nn, lib.nn.functional

    class MLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.net = nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10))

        def forward(self, x, y):
            return F.cross_entropy(self.net(x), y)

    return MLP()


def block(lib, d=128, heads=4):
    nn, F = lib.nn, lib.nn.functional

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.fc1, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

        def forward(self, x, y):
            b, t, _ = x.shape
            q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
            q, k, v = (z.view(b, t, heads, d // heads).transpose(1, 2) for z in (q, k, v))
            att = F.softmax(q @ k.transpose(-2, -1) / (d // heads) ** 0.5, dim=-1)
            x = x + self.proj((att @ v).transpose(1, 2).reshape(b, t, d))
            x = x + self.fc2(F.gelu(self.fc1(self.ln2(x)), approximate="tanh"))
            return F.mse_loss(x, y)

    return Block()


def cnn(lib):
    nn, F = lib.nn, lib.nn.functional

    class CNN(nn.Module):
        def __init__(self):
            super().__init__()
            self.net = nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
                                     nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                                     nn.Dropout(0.1), nn.Linear(32 * 7 * 7, 10))

        def forward(self, x, y):
            return F.cross_entropy(self.net(x), y)

    return CNN()


def _data(name, rng):
    if name == "cnn":
        return rng.standard_normal((128, 1, 28, 28)).astype(np.float32), rng.integers(0, 10, 128)
    if name == "mlp":
        return rng.standard_normal((128, 784)).astype(np.float32), rng.integers(0, 10, 128)
    return rng.standard_normal((16, 64, 128)).astype(np.float32), rng.standard_normal((16, 64, 128)).astype(np.float32)


CASES = {"MLP 784-512-512-10 b128 (SGD)": ("mlp", mlp, lambda lib, p: lib.optim.SGD(p, lr=0.01, momentum=0.9)),
         "transformer block d128 seq64 b16 (Adam)": ("block", block, lambda lib, p: lib.optim.Adam(p, lr=1e-3)),
         "CNN conv-BN-pool x2, dropout, 28x28 b128 (SGD)": ("cnn", cnn,
                                                            lambda lib, p: lib.optim.SGD(p, lr=0.01, momentum=0.9)),
         # Every column here uses the fused optimizer (jitorch eager too): the compile speedup is the model's alone.
         "MLP 784-512-512-10 b128 (Adam fused=True)": ("mlp", mlp,
                                                       lambda lib, p: lib.optim.Adam(p, lr=1e-3, fused=True))}


# "+opt": the optimizer's step compiled too (torch.compile(opt.step) / jitorch.compile(opt.step)), as a compiled
# training loop would; the plain ".compile" variants compile the model only. "step": the whole training step
# (zero_grad, forward, backward, optimizer step) is one compiled function, mode="reduce-overhead": jitorch captures
# it once as a CPU graph and replays it as native code; torch.compile traces it with its graph breaks at backward.
VARIANTS = ("torch", "torch.compile", "torch.compile+opt", "torch.compile step", "jitorch", "jitorch.compile",
            "jitorch.compile+opt", "jitorch.compile step")


def _step(model, opt, opt_step, x, y):
    def step():
        opt.zero_grad()
        loss = model(x, y)
        loss.backward()
        opt_step()
        return loss
    return step


def _compiled_step(lib, eager_step):
    # Through a closure cell, as a training script's step reads its global model and optimizer: the compiled step
    # reaches them (and checks their state on every call). A default argument would hide them.
    return lib.compile(lambda: eager_step().detach(), mode="reduce-overhead")


def _products_only(step):
    """The captured step's matrix products alone, replayed in order on the step's own buffers: the BLAS floor of
    the step, which no fusion can go below (the ceiling of a compiled step's speedup is eager / this)."""
    replay = step.graph._build()
    program = compile_program([c for c in replay.program_calls if isinstance(c, (Gemm, PackedGemm))],
                              default_cache())
    address = replay.table_address
    return lambda: program(address)


def run_case(label, repeats, target_s):
    name, build, make_opt = CASES[label]
    xd, yd = _data(name, np.random.default_rng(0))
    torch.manual_seed(0)
    steps, losses, compile_s, errors = {}, {}, {}, {}
    for lib_name in VARIANTS:
        lib = torch if lib_name.startswith("torch") else jitorch
        model = build(lib)
        if lib is jitorch:  # the torch model's initial weights
            torch.manual_seed(0)
            ref = build(torch)
            with jitorch.no_grad():
                for p, q in zip(model.parameters(), ref.parameters()):
                    p.copy_(jitorch.tensor(q.detach().numpy()))
        else:
            torch.manual_seed(0)
            model = build(torch)
        opt = make_opt(lib, model.parameters())
        x, y = lib.tensor(xd), lib.tensor(yd)
        run, opt_step = model, opt.step
        if lib_name.endswith(" step"):
            # The step is bound now: a closure over the loop's variable would call the last variant's step (the
            # torch.compile column once measured torch.compile tracing jitorch's step).
            step = _compiled_step(lib, _step(model, opt, opt.step, x, y))
        else:
            if ".compile" in lib_name:
                run = lib.compile(model)
            if lib_name.endswith("+opt"):
                opt_step = lib.compile(opt.step)
            step = _step(run, opt, opt_step, x, y)
        try:
            start = time.perf_counter()
            losses[lib_name] = [float(step().item()) for _ in range(2)]
            compile_s[lib_name] = time.perf_counter() - start
            steps[lib_name] = step
        except Exception as exc:  # a peer that cannot run this case is reported, not fatal
            errors[lib_name] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:120]}"
            continue
        if lib_name == "jitorch.compile step" and step.graph is not None and name != "cnn":
            # (the CNN's convolutions are generated kernels, not products: a products-only floor says nothing)
            try:
                steps["jitorch products only"] = _products_only(step)
            except Exception as exc:  # the floor is extra: its failure must not hide the step's own timing
                errors["jitorch products only"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:120]}"
    timings = common.measure(steps, repeats=repeats, target_s=target_s)
    row = {"case": label, "errors": errors, "first_two_losses": losses,
           "first_two_steps_s": {k: round(v, 3) for k, v in compile_s.items()}}
    for lib_name, t in timings.items():
        row[f"{lib_name}_ms"] = t["median_s"] * 1e3
    je, jc, jo = row.get("jitorch_ms"), row.get("jitorch.compile_ms"), row.get("jitorch.compile+opt_ms")
    te, tc, to = row.get("torch_ms"), row.get("torch.compile_ms"), row.get("torch.compile+opt_ms")
    js, ts = row.get("jitorch.compile step_ms"), row.get("torch.compile step_ms")
    row["step_over_eager"] = je / js if je and js else None
    floor = row.get("jitorch products only_ms")
    row["eager_over_products"] = je / floor if je and floor else None
    row["step_over_torch_compile_step"] = ts / js if ts and js else None
    row["compile_over_eager"] = je / jc if je and jc else None
    row["compile_opt_over_eager"] = je / jo if je and jo else None
    row["jitorch_compile_over_torch"] = te / jc if te and jc else None
    row["jitorch_compile_over_torch_compile"] = tc / jc if tc and jc else None
    row["jitorch_compile_opt_over_torch_compile_opt"] = to / jo if to and jo else None
    return row


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=11)
    parser.add_argument("--target-s", type=float, default=0.2)
    parser.add_argument("--threads", type=int, default=1, help="BLAS, OpenMP, torch and jitorch kernel threads")
    args = parser.parse_args()
    rows = []
    for label in CASES:
        print(f"  {label} ...", flush=True)
        rows.append(run_case(label, args.repeats, args.target_s))
    columns = [("case", "case", ""), ("jitorch eager (ms)", "jitorch_ms", ".2f"),
               ("jitorch.compile (ms)", "jitorch.compile_ms", ".2f"),
               ("jitorch.compile +opt (ms)", "jitorch.compile+opt_ms", ".2f"), ("torch eager (ms)", "torch_ms", ".2f"),
               ("torch.compile (ms)", "torch.compile_ms", ".2f"),
               ("torch.compile +opt (ms)", "torch.compile+opt_ms", ".2f"),
               ("jitorch.compile step (ms)", "jitorch.compile step_ms", ".2f"),
               ("torch.compile step (ms)", "torch.compile step_ms", ".2f"),
               ("compile / jitorch eager", "compile_over_eager", ".2f"),
               ("compile +opt / jitorch eager", "compile_opt_over_eager", ".2f"),
               ("compile vs torch eager", "jitorch_compile_over_torch", ".2f"),
               ("compile vs torch.compile", "jitorch_compile_over_torch_compile", ".2f"),
               ("+opt vs torch.compile +opt", "jitorch_compile_opt_over_torch_compile_opt", ".2f"),
               ("step / jitorch eager", "step_over_eager", ".2f"),
               ("products only (ms)", "jitorch products only_ms", ".2f"),
               ("ceiling: eager / products", "eager_over_products", ".2f"),
               ("step vs torch.compile step", "step_over_torch_compile_step", ".2f")]
    table = common.format_table(rows, columns)
    facts = common.machine_facts()
    facts["jitorch"] = jitorch.__version__
    problems = [f"- {r['case']}: {lib}: {err}" for r in rows for lib, err in r["errors"].items()]
    notes = (f"Median milliseconds per training step (zero_grad, forward + loss, backward, optimizer step) over "
             f"{args.repeats} interleaved samples of ~{args.target_s} s, after two warm-up steps (which include "
             "compilation; see first_two_steps_s in the JSON). Speedup columns: other time / jitorch.compile time "
             "(> 1: jitorch.compile is faster). \"+opt\": the optimizer step is compiled too "
             "(`jitorch.compile(opt.step)`, `torch.compile(opt.step)`), as a compiled training loop does; the plain "
             "compile columns compile the model only. \"step\": the whole training step is one function compiled "
             "with mode=\"reduce-overhead\" (jitorch: captured once as a CPU graph, replayed as native code; torch: "
             "traced with graph breaks at backward); the capture sets capturable=True on the Adam it steps, as "
             "torch.compile does. "
             "\"products only\": the captured step's matrix products (BLAS and register-loop GEMMs) replayed "
             "alone, in order, on the step's buffers: the floor no fusion goes below, so eager / products bounds "
             "any compiled speedup (not given for the CNN, whose convolutions are generated kernels). "
             "Threads: see the machine facts. Target: a compiled training step >= 1.2x jitorch eager.")
    if problems:
        notes += "\n\nProblems:\n\n" + "\n".join(problems)
    common.write_results("compile-train" if args.threads == 1 else f"compile-train-{args.threads}threads", rows,
                         facts, table, notes)
    print()
    print(table)
    if problems:
        print("\n".join(["", "problems:", *problems]))


if __name__ == "__main__":
    main()
