"""Everyday ops on small tensors, eager: what one call costs in jitorch against torch (CPU, one thread).

Small models (reinforcement learning, tabular nets, recurrent loops, a decoding step) spend their time in the fixed
cost of each call, not in its arithmetic. Each case runs one op on 32x32 float32 tensors (or the shapes named), no
grad unless the name says backward; a row is the median microseconds per call over interleaved samples and
jitorch/torch (< 1: jitorch is cheaper). ``bench_ops.py`` covers the same ops at model sizes.

Run: env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python bench/bench_small_ops.py [--name NAME] [name filters...]
(``--name`` names the results file: a run of another checkout, for a before/after table, must not overwrite it.)
"""
from __future__ import annotations

import sys

import common

common.single_thread()

import jitorch  # noqa: E402
import torch  # noqa: E402

common.single_thread()

N = 32
# (case, statement): the statement runs against the names `_setup` makes, for each library alike.
CASES = [
    ("add", "a + b"), ("add alpha", "a.add(b, alpha=0.1)"), ("sub", "a - b"), ("mul by number", "a * 2.0"),
    ("div", "a / b"), ("neg", "-a"), ("exp", "a.exp()"), ("abs().log()", "a.abs().log()"), ("pow 2", "a ** 2"),
    ("abs() ** 0.5", "a.abs() ** 0.5"), ("sigmoid", "a.sigmoid()"), ("tanh", "a.tanh()"), ("relu", "a.relu()"),
    ("F.gelu", "F.gelu(a)"), ("F.silu", "F.silu(a)"), ("clamp", "a.clamp(-0.5, 0.5)"),
    ("where", "lib.where(m, a, b)"), ("masked_fill", "a.masked_fill(m, 0.0)"), ("gt", "a > 0"),
    ("lerp", "a.lerp(b, 0.3)"), ("addcmul", "a.addcmul(b, b, value=0.5)"),
    ("sum", "a.sum()"), ("sum(1)", "a.sum(1)"), ("mean", "a.mean()"), ("mean(-1, keepdim)", "a.mean(-1, keepdim=True)"),
    ("var(-1)", "a.var(-1)"), ("norm", "a.norm()"), ("max(1)", "a.max(1)"), ("argmax(-1)", "a.argmax(-1)"),
    ("amax(-1)", "a.amax(-1)"), ("topk(3)", "a.topk(3)"), ("sort(-1)", "a.sort(-1)"), ("cumsum(-1)", "a.cumsum(-1)"),
    ("gather(1)", "a.gather(1, ti)"), ("(a == a).all()", "(a == a).all()"),
    ("softmax(-1)", "a.softmax(-1)"), ("F.log_softmax", "F.log_softmax(a, -1)"),
    ("F.layer_norm", "F.layer_norm(a, (N,))"), ("F.linear 32->32 with bias", "F.linear(a, b, c)"),
    ("matmul", "a @ b"), ("bmm 4x32x32", "a3 @ a3"), ("F.cross_entropy", "F.cross_entropy(a, t)"),
    ("F.mse_loss", "F.mse_loss(a, b)"),
    ("view(-1)", "a.view(-1)"), ("reshape", "a.reshape(N, N)"), ("t()", "a.t()"), ("permute", "a3.permute(2, 0, 1)"),
    ("unsqueeze(0)", "a.unsqueeze(0)"), ("expand", "c.expand(N, N)"), ("a[1:5]", "a[1:5]"), ("a[3]", "a[3]"),
    ("a[index tensor]", "a[t]"), ("a[mask]", "a[m]"), ("z[1:3] = 1.0", "z[1:3] = 1.0"),
    ("t().contiguous()", "a.t().contiguous()"), ("clone", "a.clone()"), ("to(float64)", "a.to(lib.float64)"),
    ("cat", "lib.cat([a, b])"), ("stack", "lib.stack([a, b])"), ("chunk(2)", "a.chunk(2)"),
    ("zeros", "lib.zeros(N, N)"), ("zeros_like", "lib.zeros_like(a)"), ("randn", "lib.randn(N, N)"),
    ("arange", "lib.arange(N)"), ("tensor([1., 2., 3.])", "lib.tensor([1.0, 2.0, 3.0])"), ("item", "s.item()"),
    ("z.add_(b)", "z.add_(b)"), ("z.zero_()", "z.zero_()"), ("z.copy_(b)", "z.copy_(b)"),
    ("z.fill_(1.0)", "z.fill_(1.0)"),
    ("backward: relu(x @ w).sum()", "relu_backward()"),
    ("backward: cross_entropy(x @ w)", "ce_backward()"),
    ("SGD step, 2 params 32x32 + 32", "sgd.step()"),
    ("Adam step, 2 params 32x32 + 32", "adam.step()"),
]


def _setup(lib):
    """The operands each statement reads, made from one seed in both libraries (each library's own generator: the
    values differ, the shapes and dtypes do not)."""
    lib.manual_seed(0)
    F = lib.nn.functional
    a, b, c, z = lib.randn(N, N), lib.randn(N, N), lib.randn(N), lib.zeros(N, N)
    a3, m = lib.randn(4, N, N), a > 0
    t, ti = lib.randint(0, N, (N,)), lib.randint(0, N, (N, 4))
    w = lib.randn(N, N, requires_grad=True)
    params = [lib.nn.Parameter(lib.randn(N, N)), lib.nn.Parameter(lib.randn(N))]
    for p in params:
        p.grad = lib.randn(p.shape)
    sgd = lib.optim.SGD(params, lr=0.01, momentum=0.9, weight_decay=1e-4)
    adam = lib.optim.Adam(params, lr=1e-3)

    def relu_backward():
        (a @ w).relu().sum().backward()

    def ce_backward():
        F.cross_entropy(a @ w, t).backward()

    return dict(lib=lib, F=F, N=N, a=a, b=b, c=c, z=z, a3=a3, m=m, t=t, ti=ti, s=a.sum(), sgd=sgd, adam=adam,
                relu_backward=relu_backward, ce_backward=ce_backward)


def _timer(stmt, env):
    code = compile(stmt, "<case>", "exec")
    return lambda: exec(code, env)


def main():
    args = sys.argv[1:]
    name = "small-ops"
    if args[:1] == ["--name"]:
        name, args = args[1], args[2:]
    envs = {"jitorch": _setup(jitorch), "torch": _setup(torch)}
    rows = []
    for case, stmt in CASES:
        if args and not any(f in case for f in args):
            continue
        timings = common.measure({lib: _timer(stmt, env) for lib, env in envs.items()}, repeats=11, target_s=0.01)
        j, t = timings["jitorch"]["median_s"] * 1e6, timings["torch"]["median_s"] * 1e6
        rows.append({"case": case, "jitorch_us": j, "torch_us": t, "ratio": j / t})
        print(f"  {case:34s} {j:8.2f} {t:8.2f} {j / t:6.2f}", flush=True)
    columns = [("case", "case", ""), ("jitorch (us)", "jitorch_us", ".2f"), ("torch (us)", "torch_us", ".2f"),
               ("jitorch/torch", "ratio", ".2f")]
    ratios = sorted(r["ratio"] for r in rows)
    notes = (f"Median microseconds per call over 11 interleaved samples of ~10 ms, one thread for both libraries, "
             f"32x32 float32 operands unless named. jitorch/torch < 1: jitorch is cheaper. Median ratio "
             f"{ratios[len(ratios) // 2]:.2f} over {len(rows)} cases. The machine is shared: ratios, not absolute "
             "times.")
    common.report(name, rows, columns, notes, jitorch=jitorch.__version__, torch=torch.__version__)


if __name__ == "__main__":
    main()
