"""Training steps per second: jitorch eager vs torch eager, single-threaded, same data and same initial weights.

Cases (each one full step: ``zero_grad``, forward, loss, ``backward``, optimizer ``step``):

- MLP 784-512-512-10, batch 128, cross-entropy, SGD with momentum 0.9 — plus the same step written by hand in NumPy
  (forward, backward and momentum update with no autograd or module machinery): the floor an eager library on NumPy
  could reach, the "roofline" of this machine's BLAS.
- the same MLP with Adam.
- the digits CNN of ``examples/train_digits.py`` (conv 1->16->32, 3x3, max-pool, linear; without its dropout so the
  libraries compute the same numbers), batch 64 of 1x8x8 images, Adam.
- a 2-layer Transformer encoder (``nn.TransformerEncoder``, d=128, 4 heads, feed-forward 512, pre-norm, no dropout,
  causal mask), batch 16, sequence 64, MSE loss, Adam.

jitorch's models get torch's initial weights through ``load_state_dict``. The losses of the first two steps (the second
one after an optimizer update) are compared across libraries and recorded: a benchmark of two different computations is
useless.

Run: ``env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python bench/bench_train.py`` (OpenBLAS then picks its kernel for
the CPU it finds; the kernel is recorded). Prints a table and writes ``bench/results/train-<date>.{json,md}``.
"""
from __future__ import annotations

import argparse
import traceback

import common

common.single_thread()  # before NumPy and torch load their thread pools

import numpy as np  # noqa: E402
import torch  # noqa: E402
from threadpoolctl import threadpool_info, threadpool_limits  # noqa: E402

import jitorch  # noqa: E402

common.single_thread()  # now torch is loaded: also set its intra-op pool
# The environment variables cover pools that load later; threadpoolctl also pins the pools already loaded.
_THREAD_LIMITS = threadpool_limits(limits=1)

LIBS = {"torch": torch, "jitorch": jitorch}


# ---------------------------------------------------------------------------------------------------------------------
# Models, written once against the shared API; ``lib`` is torch or jitorch.

def mlp(lib):
    nn = lib.nn
    return nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10))


def digits_cnn(lib):
    nn = lib.nn
    return nn.Sequential(
        nn.Conv2d(1, 16, kernel_size=3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, kernel_size=3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(32 * 2 * 2, 10),
    )


class _Encoder:
    """A 2-layer pre-norm ``TransformerEncoder`` called with a causal mask (a plain function of ``lib``)."""

    def __init__(self, lib, d_model=128, nhead=4, dim_feedforward=512, num_layers=2, seq=64):
        nn = lib.nn
        layer = nn.TransformerEncoderLayer(d_model, nhead, dim_feedforward, dropout=0.0, batch_first=True,
                                           norm_first=True)
        self.module = nn.TransformerEncoder(layer, num_layers, enable_nested_tensor=False)
        self.mask = lib.triu(lib.full((seq, seq), float("-inf")), diagonal=1)

    def __call__(self, x):
        return self.module(x, mask=self.mask, is_causal=True)


# ---------------------------------------------------------------------------------------------------------------------
# Cases: build the torch model, copy its weights into jitorch's, and return one step function per library.

def _copy_weights(torch_model, jitorch_model):
    state = {k: jitorch.tensor(v.detach().numpy().copy()) for k, v in torch_model.state_dict().items()}
    jitorch_model.load_state_dict(state)


def _step_fn(model, loss_fn, optimizer, x, y):
    def step():
        optimizer.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
        return loss
    return step


def _make_case(build, data, loss_name, make_optimizer, module_of=lambda model: model):
    """({library: step}, {library: setup error}) for one case.

    ``data`` is NumPy (x, y); ``module_of(model)`` is the nn.Module inside ``model``. torch is set up first and on its
    own, so a jitorch gap costs only jitorch's column.
    """
    steps, errors, models = {}, {}, {}
    for name, lib in LIBS.items():
        try:
            torch.manual_seed(0)  # the NumPy reference draws its weights the same way
            models[name] = build(lib)
            if name == "jitorch":
                _copy_weights(module_of(models["torch"]), module_of(models["jitorch"]))
            x, y = (lib.from_numpy(a.copy()) for a in data)
            loss_fn = getattr(lib.nn, loss_name)()
            steps[name] = _step_fn(models[name], loss_fn, make_optimizer(lib, module_of(models[name])), x, y)
        except Exception as exc:  # a gap in one library must not hide the other's numbers
            traceback.print_exc()
            errors[name] = _short_error(exc)
    return steps, errors


def _sgd(lib, model):
    return lib.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)


def _adam(lib, model, lr=1e-3):
    return lib.optim.Adam(model.parameters(), lr=lr)


def _classification_data(rng, shape, batch):
    return (rng.standard_normal((batch, *shape), dtype=np.float32), rng.integers(0, 10, batch).astype(np.int64))


def numpy_mlp_sgd_step(params, buffers, x, y, lr=0.01, momentum=0.9):
    """The MLP's SGD-momentum step by hand: forward, softmax cross-entropy, backward, torch's momentum update."""
    (w1, b1), (w2, b2), (w3, b3) = params
    h1 = x @ w1.T
    h1 += b1
    np.maximum(h1, 0, out=h1)
    h2 = h1 @ w2.T
    h2 += b2
    np.maximum(h2, 0, out=h2)
    logits = h2 @ w3.T
    logits += b3
    # Softmax cross-entropy: dlogits = (softmax - onehot) / batch.
    logits -= logits.max(axis=1, keepdims=True)
    np.exp(logits, out=logits)
    logits /= logits.sum(axis=1, keepdims=True)
    rows = np.arange(len(y))
    loss = -np.log(logits[rows, y]).mean()
    grad = logits
    grad[rows, y] -= 1
    grad /= len(y)
    grads = [(grad.T @ h2, grad.sum(0))]
    grad = grad @ w3
    grad *= h2 > 0
    grads.append((grad.T @ h1, grad.sum(0)))
    grad = grad @ w2
    grad *= h1 > 0
    grads.append((grad.T @ x, grad.sum(0)))
    for (p, b), (gp, gb), (bufp, bufb) in zip(params, reversed(grads), buffers):
        for param, g, buf in ((p, gp, bufp), (b, gb, bufb)):
            buf *= momentum
            buf += g
            param -= lr * buf
    return loss


def build_cases():
    """(name, build, NumPy step or None) per case; ``build()`` returns ``_make_case``'s ({library: step}, errors)."""
    rng = np.random.default_rng(0)
    cases = []

    mlp_data = _classification_data(rng, (784,), 128)
    torch.manual_seed(0)  # as in _make_case: the hand-written step starts from torch's initial weights
    reference = mlp(torch)
    np_params = [(reference[i].weight.detach().numpy().copy(), reference[i].bias.detach().numpy().copy())
                 for i in (0, 2, 4)]
    np_buffers = [(np.zeros_like(w), np.zeros_like(b)) for w, b in np_params]
    cases.append(("MLP 784-512-512-10, b128, SGD momentum",
                  lambda: _make_case(mlp, mlp_data, "CrossEntropyLoss", _sgd),
                  lambda: numpy_mlp_sgd_step(np_params, np_buffers, *mlp_data)))
    cases.append(("MLP 784-512-512-10, b128, Adam",
                  lambda: _make_case(mlp, mlp_data, "CrossEntropyLoss", _adam), None))

    cnn_data = _classification_data(rng, (1, 8, 8), 64)
    cases.append(("digits CNN, b64, Adam",
                  lambda: _make_case(digits_cnn, cnn_data, "CrossEntropyLoss", lambda lib, m: _adam(lib, m, lr=5e-3)),
                  None))

    seq_data = (rng.standard_normal((16, 64, 128), dtype=np.float32),
                rng.standard_normal((16, 64, 128), dtype=np.float32))
    cases.append(("Transformer encoder 2x(d128, 4 heads), b16 x seq64, Adam",
                  lambda: _make_case(_Encoder, seq_data, "MSELoss", _adam, module_of=lambda m: m.module), None))
    return cases


def _short_error(exc):
    return f"{type(exc).__name__}: {exc}".splitlines()[0][:200]


def run_case(name, build, numpy_step, repeats, target_s):
    steps, errors = build()
    row = {"case": name, "errors": {f"{lib} setup": err for lib, err in errors.items()}}
    if numpy_step is not None:
        steps["numpy"] = numpy_step
    # The steps run from identical weights and data in every library: the losses of the first two (the second checks
    # the optimizer update) must agree. They double as the warm-up.
    row["first_losses"] = {}
    for lib_name, step in list(steps.items()):
        try:
            row["first_losses"][lib_name] = [float(loss.item() if hasattr(loss, "item") else loss)
                                             for loss in (step(), step())]
        except Exception as exc:
            traceback.print_exc()
            row["errors"][f"{lib_name} step"] = _short_error(exc)
            del steps[lib_name]
    losses = np.array(list(row["first_losses"].values()))
    row["losses_agree"] = bool(np.allclose(losses, losses[0], rtol=1e-3, atol=1e-4)) if len(losses) > 1 else None
    timings = common.measure(steps, repeats=repeats, target_s=target_s) if steps else {}
    for lib_name in ("numpy", "torch", "jitorch"):
        timing = timings.get(lib_name)
        row[lib_name] = timing
        row[f"{lib_name}_steps_s"] = 1.0 / timing["median_s"] if timing else None
    for a, b in (("jitorch", "torch"), ("jitorch", "numpy"), ("torch", "numpy")):
        fast, slow = row[f"{a}_steps_s"], row[f"{b}_steps_s"]
        row[f"{a}_over_{b}"] = fast / slow if fast and slow else None
    return row


def blas_facts():
    """Which BLAS/OpenMP libraries are loaded, with OpenBLAS's kernel (``architecture``) and thread counts."""
    keep = ("internal_api", "prefix", "version", "architecture", "threading_layer", "num_threads", "filepath")
    return [{k: info.get(k) for k in keep} for info in threadpool_info()]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=15, help="timed samples per library and case")
    parser.add_argument("--target-s", type=float, default=0.1, help="approximate seconds per sample")
    parser.add_argument("--only", help="run only the cases whose name contains this text")
    args = parser.parse_args()

    rows = []
    for name, build, numpy_step in build_cases():
        if args.only and args.only.lower() not in name.lower():
            continue
        print(f"  {name} ...", flush=True)
        rows.append(run_case(name, build, numpy_step, args.repeats, args.target_s))

    columns = [("case", "case", ""), ("numpy (steps/s)", "numpy_steps_s", ".1f"),
               ("torch (steps/s)", "torch_steps_s", ".1f"), ("jitorch (steps/s)", "jitorch_steps_s", ".1f"),
               ("jitorch/torch", "jitorch_over_torch", ".2f"), ("jitorch/numpy", "jitorch_over_numpy", ".2f")]
    table = common.format_table(rows, columns)
    facts = common.machine_facts()
    facts["jitorch"] = jitorch.__version__
    facts["OPENBLAS_L2_SIZE"] = common.os.environ.get("OPENBLAS_L2_SIZE")
    facts["blas"] = blas_facts()
    problems = [f"- {row['case']}: {lib}: {err}" for row in rows for lib, err in row["errors"].items()]
    problems += [f"- {row['case']}: first two losses differ: {row['first_losses']}" for row in rows
                 if row["losses_agree"] is False]
    notes = (f"Training steps per second (1 / median seconds per step over {args.repeats} samples of "
             f"~{args.target_s} s each, after a warm-up step; the libraries' samples are interleaved), higher is "
             "better; the ratio columns are speed ratios (jitorch/torch < 1: jitorch is slower). One thread everywhere "
             "(torch.set_num_threads(1), threadpoolctl limits = 1, OMP/OpenBLAS/MKL threads = 1). Same data and "
             "initial weights in every library; NumPy's row is the MLP's SGD step written by hand (no autograd), the "
             "floor for an eager library on NumPy.")
    if problems:
        notes += "\n\nProblems:\n\n" + "\n".join(problems)
    json_path, md_path = common.write_results("train", rows, facts, table, notes)
    print()
    print(table)
    if problems:
        print("\n".join(["", "problems:", *problems]))
    numpy_blas = [b for b in facts["blas"] if b["internal_api"] == "openblas"]
    print(f"\nmachine: {facts['cpu_model']}, {facts['cpu_count']} cores, numpy {facts['numpy']} "
          f"(OpenBLAS kernel {numpy_blas[0]['architecture'] if numpy_blas else 'n/a'}), torch {facts.get('torch')}, "
          f"OPENBLAS_CORETYPE={facts['OPENBLAS_CORETYPE']}, load {facts['load_average_1_5_15min']}")
    print(f"wrote {json_path} and {md_path}")


if __name__ == "__main__":
    main()
