"""Eager per-op overhead: jitorch vs torch eager vs NumPy, single-threaded, in one process.

Cases: ``a + b`` on 1 and 1000 float32 elements (with and without requires_grad), an 11-op elementwise chain on 1000
elements forward only (with and without recording), and forward + ``sum()`` + ``backward()``. NumPy's backward is the
chain's derivative written by hand: the floor an autograd engine on NumPy could reach. Then the small-module calls
``F.linear`` (8x32 input, 16x32 weight, bias) and ``F.layer_norm`` (8x32 over the last dim, weight and bias), forward
and forward + ``sum()`` + ``backward()`` (NumPy: the forward only).

Run: ``python bench/bench_eager.py``. Prints a table and writes ``bench/results/eager-<date>.{json,md}``.
"""
from __future__ import annotations

import common

common.single_thread()  # before NumPy and torch load their thread pools

import numpy as np  # noqa: E402
import torch  # noqa: E402

import jitorch  # noqa: E402

common.single_thread()  # now torch is loaded: also set its intra-op pool


def chain(lib, x, y):
    """The benchmarked chain (11 elementwise ops) for jitorch and torch, which share the API."""
    h = (x * 1.5 + 1).tanh() * y
    h = lib.sigmoid(h - 0.5).exp() / 2
    return lib.relu(h).sin() + x


def numpy_chain(x, y):
    h = np.tanh(x * np.float32(1.5) + np.float32(1)) * y
    h = np.exp(1 / (1 + np.exp(-(h - np.float32(0.5))))) / np.float32(2)
    return np.sin(np.maximum(h, np.float32(0))) + x


def numpy_chain_backward(x, y):
    """Forward, ``sum()`` and the gradients of x and y, by hand (what autograd computes)."""
    one = np.float32(1)
    a1 = x * np.float32(1.5) + one
    a2 = np.tanh(a1)
    a3 = a2 * y
    a5 = one / (one + np.exp(-(a3 - np.float32(0.5))))
    a6 = np.exp(a5)
    a7 = a6 / np.float32(2)
    a8 = np.maximum(a7, np.float32(0))
    loss = (np.sin(a8) + x).sum()
    g7 = np.cos(a8) * (a7 > 0)
    g3 = g7 / np.float32(2) * a6 * a5 * (one - a5)
    gx = g3 * y * (one - a2 * a2) * np.float32(1.5) + one
    gy = g3 * a2
    return loss, gx, gy


def _data(n, seed):
    return np.random.default_rng(seed).uniform(-1, 1, n).astype(np.float32)


def _tensors(lib, n, requires_grad):
    return (lib.tensor(_data(n, 0), requires_grad=requires_grad),
            lib.tensor(_data(n, 1), requires_grad=requires_grad))


def _backward_step(lib, x, y):
    def step():
        x.grad = None
        y.grad = None
        chain(lib, x, y).sum().backward()
    return step


# The small-module cases: a batch of 8 rows of 32 features (a layer's call overhead, not its arithmetic).
ROWS, FEATURES, OUT_FEATURES = 8, 32, 16


def _module_inputs(lib, requires_grad):
    """(x, linear weight, linear bias, norm weight, norm bias) as ``lib`` tensors."""
    rng = np.random.default_rng(2)
    arrays = [rng.standard_normal(shape).astype(np.float32)
              for shape in ((ROWS, FEATURES), (OUT_FEATURES, FEATURES), (OUT_FEATURES,), (FEATURES,), (FEATURES,))]
    if lib is None:
        return arrays
    return [lib.tensor(a, requires_grad=requires_grad) for a in arrays]


def numpy_layer_norm(x, w, b, eps=np.float32(1e-5)):
    mean = x.mean(-1, keepdims=True)
    centered = x - mean
    return centered / np.sqrt((centered * centered).mean(-1, keepdims=True) + eps) * w + b


def _module_cases():
    x, w, b, nw, nb = _module_inputs(None, False)
    linear = {"numpy": lambda: x @ w.T + b}
    norm = {"numpy": lambda: numpy_layer_norm(x, nw, nb)}
    linear_bw, norm_bw = {"numpy": None}, {"numpy": None}
    for lib in (torch, jitorch):
        F = lib.nn.functional
        tx, tw, tb, tnw, tnb = _module_inputs(lib, False)
        linear[lib.__name__] = lambda F=F, tx=tx, tw=tw, tb=tb: F.linear(tx, tw, tb)
        norm[lib.__name__] = lambda F=F, tx=tx, tnw=tnw, tnb=tnb: F.layer_norm(tx, (FEATURES,), tnw, tnb)
        gx, gw, gb, gnw, gnb = _module_inputs(lib, True)
        linear_bw[lib.__name__] = _grad_step(lambda F=F, gx=gx, gw=gw, gb=gb: F.linear(gx, gw, gb), (gx, gw, gb))
        norm_bw[lib.__name__] = _grad_step(lambda F=F, gx=gx, gnw=gnw, gnb=gnb: F.layer_norm(gx, (FEATURES,), gnw, gnb),
                                           (gx, gnw, gnb))
    return [(f"F.linear {ROWS}x{FEATURES} -> {OUT_FEATURES}", linear),
            (f"F.linear {ROWS}x{FEATURES} -> {OUT_FEATURES} + sum + backward", linear_bw),
            (f"F.layer_norm {ROWS}x{FEATURES}", norm),
            (f"F.layer_norm {ROWS}x{FEATURES} + sum + backward", norm_bw)]


def _grad_step(forward, leaves):
    def step():
        for t in leaves:
            t.grad = None
        forward().sum().backward()
    return step


def build_cases():
    """(case name, {library: zero-argument callable}) for every benchmarked case."""
    cases = []
    for n in (1, 1000):
        an, bn = _data(n, 0), _data(n, 1)
        entry = {"numpy": lambda a=an, b=bn: a + b}
        for lib in (torch, jitorch):
            a, b = _tensors(lib, n, False)
            entry[lib.__name__] = lambda a=a, b=b: a + b
        cases.append((f"a + b, {n} elem", entry))
    for n in (1, 1000):
        entry = {"numpy": None}
        for lib in (torch, jitorch):
            a, b = _tensors(lib, n, True)
            entry[lib.__name__] = lambda a=a, b=b: a + b
        cases.append((f"a + b, {n} elem, requires_grad", entry))

    xn, yn = _data(1000, 0), _data(1000, 1)
    entry = {"numpy": lambda: numpy_chain(xn, yn)}
    for lib in (torch, jitorch):
        x, y = _tensors(lib, 1000, False)
        entry[lib.__name__] = lambda lib=lib, x=x, y=y: chain(lib, x, y)
    cases.append(("chain forward, 1000 elem", entry))

    entry = {"numpy": None}
    for lib in (torch, jitorch):
        x, y = _tensors(lib, 1000, True)
        entry[lib.__name__] = lambda lib=lib, x=x, y=y: chain(lib, x, y)
    cases.append(("chain forward, 1000 elem, requires_grad", entry))

    entry = {"numpy": lambda: numpy_chain_backward(xn, yn)}
    for lib in (torch, jitorch):
        x, y = _tensors(lib, 1000, True)
        entry[lib.__name__] = _backward_step(lib, x, y)
    cases.append(("chain + sum + backward, 1000 elem", entry))
    return cases + _module_cases()


def check_agreement():
    """The three implementations compute the same values and gradients (a benchmark of wrong code is useless)."""
    xn, yn = _data(1000, 0), _data(1000, 1)
    loss_np, gx_np, gy_np = numpy_chain_backward(xn, yn)
    np.testing.assert_allclose(numpy_chain(xn, yn).sum(), loss_np, rtol=1e-5)
    for lib in (torch, jitorch):
        x, y = _tensors(lib, 1000, True)
        loss = chain(lib, x, y).sum()
        loss.backward()
        np.testing.assert_allclose(loss.item(), loss_np, rtol=1e-4, err_msg=lib.__name__)
        np.testing.assert_allclose(x.grad.numpy(), gx_np, rtol=1e-4, atol=1e-5, err_msg=lib.__name__)
        np.testing.assert_allclose(y.grad.numpy(), gy_np, rtol=1e-4, atol=1e-5, err_msg=lib.__name__)
    x, w, b, nw, nb = _module_inputs(None, False)
    for lib in (torch, jitorch):
        F = lib.nn.functional
        tx, tw, tb, tnw, tnb = _module_inputs(lib, False)
        np.testing.assert_allclose(F.linear(tx, tw, tb).numpy(), x @ w.T + b, rtol=1e-5, atol=1e-5,
                                   err_msg=lib.__name__)
        np.testing.assert_allclose(F.layer_norm(tx, (FEATURES,), tnw, tnb).numpy(), numpy_layer_norm(x, nw, nb),
                                   rtol=1e-4, atol=1e-5, err_msg=lib.__name__)


def main():
    check_agreement()
    rows = []
    for name, fns in build_cases():
        row = {"case": name}
        timings = common.measure({k: fn for k, fn in fns.items() if fn is not None})
        for lib_name in ("numpy", "torch", "jitorch"):
            timing = timings.get(lib_name)
            row[lib_name] = timing
            row[f"{lib_name}_us"] = timing["median_s"] * 1e6 if timing else None
        row["jitorch_over_torch"] = row["jitorch_us"] / row["torch_us"]
        rows.append(row)
        print(f"  {name}: done", flush=True)

    columns = [("case", "case", ""), ("numpy (us)", "numpy_us", ".2f"), ("torch (us)", "torch_us", ".2f"),
               ("jitorch (us)", "jitorch_us", ".2f"), ("jitorch/torch", "jitorch_over_torch", ".2f")]
    table = common.format_table(rows, columns)
    facts = common.machine_facts()
    notes = ("Median microseconds per call over 31 samples (each sample loops until it takes ~10 ms; the libraries' "
             "samples are interleaved); one thread "
             "(torch.set_num_threads(1), OMP/OpenBLAS/MKL threads = 1). NumPy has no autograd: its backward row is "
             "the chain's gradient written by hand, and it has no requires_grad rows.")
    json_path, md_path = common.write_results("eager", rows, facts, table, notes)
    print()
    print(table)
    print()
    print(f"machine: {facts['cpu_model']}, {facts['cpu_count']} cores, numpy {facts['numpy']}, "
          f"torch {facts.get('torch')}, python {facts['python']}, OPENBLAS_CORETYPE={facts['OPENBLAS_CORETYPE']}")
    print(f"wrote {json_path} and {md_path}")


if __name__ == "__main__":
    main()
