"""Random small programs for differential fuzzing of ``jitorch.compile`` (used by ``test_compile_fuzz.py``).

`make_program(seed)` draws 1-3 inputs (shapes with 0, 1 and odd sizes, 0-d, broadcastable pairs; float32, float64,
int64 and bool; contiguous, transposed, strided-slice or expanded layouts) and a chain of 3-12 ops written once as
Python source against a module ``lib``. Every line is checked while it is drawn by running it with torch (a line torch
refuses is drawn again), so a program is always valid torch. `check_program` runs it under torch, eager jitorch and
``jitorch.compile`` (values, dtypes, shapes; gradients with random upstream gradients for float programs) and under
``mode="reduce-overhead"`` for a few calls with new input values.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
import torch

SIZES = (1, 2, 3, 4, 5, 7, 1, 3, 0, 33)
SIZE_WEIGHTS = np.array([3, 3, 3, 2, 2, 2, 1, 1, 0.4, 0.4])
DTYPES = ("float32", "float64", "int64", "bool")
DTYPE_WEIGHTS = (0.55, 0.15, 0.18, 0.12)
LAYOUTS = ("contiguous", "transposed", "sliced", "expanded")


@dataclass
class Input:
    """One argument: ``base`` (contiguous array) and how the argument views it (``layout``, ``arg``)."""
    base: np.ndarray
    layout: str
    arg: object  # transposed: the permutation; sliced: (dim, step); expanded: the shape

    def numpy_view(self, base=None):
        base = self.base if base is None else base
        if self.layout == "transposed":
            return base.transpose(self.arg)
        if self.layout == "sliced":
            dim, step = self.arg
            return base[(slice(None),) * dim + (slice(None, None, step),)]
        if self.layout == "expanded":
            return np.broadcast_to(base, self.arg)
        return base

    def torch_view(self, base):
        if self.layout == "transposed":
            return base.permute(*self.arg)
        if self.layout == "sliced":
            dim, step = self.arg
            return base[(slice(None),) * dim + (slice(None, None, step),)]
        if self.layout == "expanded":
            return base.expand(*self.arg)
        return base


@dataclass
class Program:
    seed: int
    inputs: list
    lines: list  # source lines of the body; values are v0.. (inputs first)
    outputs: list  # names of the returned values

    @property
    def source(self):
        args = ", ".join(f"v{i}" for i in range(len(self.inputs)))
        body = "".join(f"    {line}\n" for line in self.lines)
        return f"def prog(lib, {args}):\n{body}    return ({', '.join(self.outputs)},)\n"

    def function(self, lib):
        """The program as a function of its inputs, its ops taken from ``lib`` (torch or jitorch)."""
        env = {}
        exec(self.source, env)  # noqa: S102 - the source is generated here, from a fixed grammar
        prog = env["prog"]
        return lambda *xs: prog(lib, *xs)

    @property
    def is_float(self):
        return any(i.base.dtype.kind == "f" for i in self.inputs)


def _values(rng, shape, dtype):
    if dtype == "bool":
        return np.asarray(rng.random(shape) < 0.5)
    if dtype == "int64":
        return np.asarray(rng.integers(-3, 4, shape), dtype=np.int64)
    return np.asarray(rng.uniform(-2.0, 2.0, shape), dtype=dtype)


def _shape(rng, ndim):
    return tuple(int(rng.choice(SIZES, p=SIZE_WEIGHTS / SIZE_WEIGHTS.sum())) for _ in range(ndim))


def _input(rng, shape, dtype):
    layout = LAYOUTS[rng.choice(4, p=(0.4, 0.2, 0.2, 0.2))]
    if layout == "transposed" and len(shape) >= 2:
        perm = tuple(int(p) for p in rng.permutation(len(shape)))
        inv = tuple(int(p) for p in np.argsort(perm))
        return Input(_values(rng, tuple(shape[i] for i in inv), dtype), "transposed", perm)
    if layout == "sliced" and len(shape) >= 1:
        dim, step = int(rng.integers(len(shape))), int(rng.choice((2, 3)))
        big = list(shape)
        big[dim] = shape[dim] * step
        return Input(_values(rng, tuple(big), dtype), "sliced", (dim, step))
    if layout == "expanded" and any(s > 1 for s in shape):
        small = tuple(1 if (s > 1 and rng.random() < 0.6) else s for s in shape)
        return Input(_values(rng, small, dtype), "expanded", tuple(shape))
    return Input(_values(rng, tuple(shape), dtype), "contiguous", None)


def _input_shapes(rng, count):
    first = _shape(rng, int(rng.choice(4, p=(0.1, 0.25, 0.4, 0.25))))
    shapes = [first]
    for _ in range(count - 1):
        if rng.random() < 0.8:  # broadcastable with the first: leading dims dropped, some set to 1
            keep = first[int(rng.integers(len(first) + 1)):] if rng.random() < 0.3 else first
            shapes.append(tuple(1 if rng.random() < 0.25 else s for s in keep))
        else:
            shapes.append(_shape(rng, int(rng.integers(4))))
    return shapes


# -- ops: each returns a source expression over value names, or None ----------------------------------------------
SCALARS = (2, -1, 3, 0.5, -1.5, 2.0, True)


def _scalar(rng):
    return repr(SCALARS[int(rng.integers(len(SCALARS)))])


def _dims(rng, t):
    return int(rng.integers(-t.dim(), t.dim())) if t.dim() else None


def _op_binary(rng, a, b, names):
    op = ("+", "-", "*", "/")[int(rng.integers(4))]
    r = rng.random()
    if r < 0.35:
        return f"{names[0]} {op} {_scalar(rng)}"
    if r < 0.5:
        return f"{_scalar(rng)} {op} {names[0]}"
    return f"{names[0]} {op} {names[1]}"


def _op_unary(rng, a, b, names):
    x = names[0]
    choices = (f"-{x}", f"{x}.abs()", f"lib.exp({x})", f"lib.log({x}.abs() + 1)", f"lib.sqrt({x}.abs())",
               f"lib.tanh({x})", f"lib.sigmoid({x})", f"lib.relu({x})", f"lib.nn.functional.gelu({x})",
               f"lib.nn.functional.gelu({x}, approximate='tanh')", f"lib.nn.functional.silu({x})",
               f"lib.pow({x}.abs() + 0.5, {rng.choice([2, 3, 0.5, -1.5])})", f"{x} ** 2",
               f"lib.pow({x}.abs() + 0.5, {names[1]})",
               f"lib.clamp({x}, min={rng.choice([-1.0, 0.0, -0.5])})", f"lib.clamp({x}, max={rng.choice([1, 0.5])})",
               f"{x}.clamp({rng.choice([-1, -0.5])}, {rng.choice([0.5, 1])})")
    return choices[int(rng.integers(len(choices)))]


def _op_compare(rng, a, b, names):
    op = ("<", ">", "<=", ">=", "==", "!=")[int(rng.integers(6))]
    other = names[1] if rng.random() < 0.5 else _scalar(rng)
    return f"({names[0]} {op} {other})"


def _op_select(rng, a, b, names):
    kind = int(rng.integers(3))
    if kind == 0:
        cond = f"{names[0]} > {rng.choice([0, 0.5])}"
        other = names[1] if rng.random() < 0.6 else _scalar(rng)
        return f"lib.where({cond}, {names[0]}, {other})"
    return f"lib.{('maximum', 'minimum')[kind - 1]}({names[0]}, {names[1]})"


def _reduce_dims(rng, t):
    if t.dim() == 0 or rng.random() < 0.15:
        return ""
    k = int(rng.integers(1, t.dim() + 1))
    dims = sorted(int(d) for d in rng.choice(t.dim(), size=k, replace=False))
    return f", dim={tuple(dims)!r}" if rng.random() < 0.7 else f", dim={dims[0] - t.dim()}"


def _op_reduce(rng, a, b, names):
    x = names[0]
    keep = ", keepdim=True" if rng.random() < 0.4 else ""
    name = ("sum", "mean", "amax", "amin", "prod", "var", "std")[int(rng.integers(7))]
    dims = _reduce_dims(rng, a)
    if name == "prod":  # one dim at a time, as torch's prod takes
        d = _dims(rng, a)
        return f"lib.prod({x}{'' if d is None else f', dim={d}'}{keep if d is not None else ''})"
    if name in ("var", "std"):
        corr = f", correction={rng.choice([0, 1])}"
        return f"lib.{name}({x}{dims}{corr}{keep if dims else ''})"
    if name in ("amax", "amin"):
        return f"lib.{name}({x}{dims or ''}{keep})" if dims else f"lib.{name}({x})"
    return f"lib.{name}({x}{dims}{keep if dims else ''})"


def _op_rows(rng, a, b, names):
    x, kind = names[0], int(rng.integers(4))
    if a.dim() == 0:
        return None
    if kind < 2:
        return f"lib.{('softmax', 'log_softmax')[kind]}({x}, dim={_dims(rng, a)})"
    if kind == 2:
        k = int(rng.integers(1, min(a.dim(), 2) + 1))
        return f"lib.nn.functional.layer_norm({x}, {tuple(a.shape[-k:])!r})"
    return f"lib.cumsum({x}, dim={_dims(rng, a)})"


def _op_view(rng, a, b, names):
    x, n = names[0], a.dim()
    kind = int(rng.integers(7))
    if kind == 0:
        return f"{x}.reshape(-1)" if rng.random() < 0.5 or n < 2 else f"{x}.reshape({tuple(a.shape[:-2]) + (-1,)!r})"
    if kind == 1 and n >= 2:
        return f"{x}.transpose({_dims(rng, a)}, {_dims(rng, a)})"
    if kind == 2 and n >= 2:
        return f"{x}.permute{tuple(int(p) for p in rng.permutation(n))!r}"
    if kind == 3:
        return f"{x}.unsqueeze({int(rng.integers(-n - 1, n + 1))})"
    if kind == 4 and 1 in a.shape:
        return f"{x}.expand{tuple(3 if s == 1 else -1 for s in a.shape)!r}"
    if kind == 5 and n >= 1:
        d = int(rng.integers(n))
        step = rng.choice(["1:", "::2", "1::2", ":-1", "2:5"])
        return f"{x}[{':, ' * d}{step}]"
    if kind == 6 and n >= 1 and a.shape[0] > 0:
        return f"{x}[{int(rng.integers(a.shape[0]))}]"
    return None


def _op_join(rng, a, b, names):
    if rng.random() < 0.5 and a.dim() >= 1:
        other = names[1] if rng.random() < 0.6 else names[0]
        return f"lib.cat([{names[0]}, {other}], dim={_dims(rng, a)})"
    if a.dim() >= 2:
        return f"lib.matmul({names[0]}, {names[0]}.transpose(-1, -2))" if rng.random() < 0.5 else \
            f"lib.matmul({names[0]}, {names[1]})"
    return f"lib.matmul({names[0]}, {names[1]})"


def _op_inplace(rng, a, b, names):
    x = names[0]
    kind = int(rng.integers(3))
    if kind == 0:
        return f"{x}.add_({names[1] if rng.random() < 0.5 else _scalar(rng)})"
    if kind == 1:
        return f"{x}.mul_({_scalar(rng)})"
    return f"{x}.clamp_({rng.choice([-1.0, -0.5])}, {rng.choice([0.5, 1.0])})"


OPS = ((_op_binary, 5), (_op_unary, 5), (_op_compare, 1), (_op_select, 2), (_op_reduce, 3), (_op_rows, 2),
       (_op_view, 3), (_op_join, 1.5), (_op_inplace, 1.5))
_OP_P = np.array([w for _, w in OPS]) / sum(w for _, w in OPS)


def _pick(rng, count, recent_bias=True):
    if recent_bias and rng.random() < 0.6:
        return count - 1
    return int(rng.integers(count))


def _run_line(line, env):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        exec(line, env)  # noqa: S102 - generated source


def _torch_inputs(inputs, requires_grad):
    out = []
    for inp in inputs:
        t = inp.torch_view(torch.from_numpy(inp.base.copy())).detach()
        out.append(t.requires_grad_(True) if requires_grad and t.is_floating_point() else t)
    return out


def make_program(seed):
    """A random valid program (see the module docstring); the same seed gives the same program."""
    rng = np.random.default_rng(seed)
    for _ in range(20):
        prog = _draw(rng, seed)
        if prog is not None:
            return prog
    raise RuntimeError(f"seed {seed}: no valid program in 20 draws")


def _draw(rng, seed):
    count = int(rng.choice((1, 2, 3), p=(0.3, 0.45, 0.25)))
    inputs = [_input(rng, s, DTYPES[rng.choice(4, p=DTYPE_WEIGHTS)]) for s in _input_shapes(rng, count)]
    env = {"lib": torch}
    for i, t in enumerate(_torch_inputs(inputs, False)):
        env[f"v{i}"] = t
    n = count
    owned = set()  # values the program made (not inputs nor views of them): in-place writes allowed
    lines = []
    target = int(rng.integers(3, 13))
    tries = 0
    while len(lines) < target and tries < 200:
        tries += 1
        fn = OPS[rng.choice(len(OPS), p=_OP_P)][0]
        ia = _pick(rng, n)
        if fn is _op_inplace:
            cands = sorted(owned)
            if not cands:
                continue
            ia = cands[int(rng.integers(len(cands)))]
        ib = _pick(rng, n, recent_bias=False)
        a, b = env[f"v{ia}"], env[f"v{ib}"]
        expr = fn(rng, a, b, (f"v{ia}", f"v{ib}"))
        if expr is None:
            continue
        line = f"v{n} = {expr}"
        try:
            _run_line(line, env)
        except Exception:  # noqa: BLE001 - torch refused the draw: draw another line
            env.pop(f"v{n}", None)
            continue
        out = env[f"v{n}"]
        if out.numel() > 4096 or out.dim() > 5:
            del env[f"v{n}"]
            continue
        if fn is _op_view:
            if ia in owned:
                owned.add(n)
        else:
            owned.add(n)
        lines.append(line)
        n += 1
    if len(lines) < 3:
        return None
    outputs = [f"v{n - 1}"] + [f"v{int(i)}" for i in rng.choice(n - 1, size=min(int(rng.integers(0, 3)), n - 1),
                                                              replace=False) if int(i) != n - 1]
    if rng.random() < 0.25 and env["v0"].dim() >= 1:  # an output aliasing a view of an input
        view = "v0.t()" if env["v0"].dim() == 2 else "v0[..., ::2]"
        lines.append(f"v{n} = {view}")
        outputs.append(f"v{n}")
    outputs = list(dict.fromkeys(outputs))
    prog = Program(seed, inputs, lines, outputs)
    return prog if _torch_ok(prog) else None


def _torch_ok(prog):
    """The program runs forward and backward under torch (in-place writes of saved values fail in backward)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            xs = _torch_inputs(prog.inputs, prog.is_float)
            outs = [o for o in prog.function(torch)(*xs) if o.requires_grad]
            if outs:
                torch.autograd.backward(outs, [torch.ones_like(o) for o in outs])
    except Exception:  # noqa: BLE001 - an invalid draw
        return False
    return True
