"""Random small programs for differential fuzzing of ``jitorch.compile`` (used by ``test_compile_fuzz.py``).

`make_program(seed)` draws 1-3 inputs (shapes with 0, 1 and odd sizes, 0-d, broadcastable pairs; float32, float64,
float16, bfloat16, int64 and bool, so half values meet wider ones and promote; contiguous, transposed,
strided-slice or expanded layouts) and a chain of 3-12 ops (`compile_fuzz_ops`: arithmetic, transcendentals, casts
among the float types, selects, comparisons, reductions, softmax-like rows, views, joins, in-place writes) written
once as Python source against a module ``lib``. Every line is checked while it is drawn by running it with torch (a
line torch refuses is drawn again), so a program is always valid torch. `compile_fuzz_check` runs it under torch,
eager jitorch, ``jitorch.compile`` and ``mode="reduce-overhead"``.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass

import ml_dtypes
import numpy as np
import torch
from compile_fuzz_ops import is_exact
import compile_fuzz_ops as ops

SIZES = (1, 2, 3, 4, 5, 7, 1, 3, 0, 33)
SIZE_WEIGHTS = np.array([3, 3, 3, 2, 2, 2, 1, 1, 0.4, 0.4])
DTYPES = ("float32", "float64", "int64", "bool", "float16", "bfloat16")
DTYPE_WEIGHTS = (0.35, 0.1, 0.13, 0.1, 0.16, 0.16)
EXACT_SHARE = 0.3  # programs drawn from exact ops only
# Half types live in ``Input.base`` as float32 values they represent exactly; the arguments are converted (exactly).
HALF = {"float16": np.float16, "bfloat16": ml_dtypes.bfloat16}
LAYOUTS = ("contiguous", "transposed", "sliced", "expanded")


@dataclass
class Input:
    """One argument: ``base`` (contiguous array) and how the argument views it (``layout``, ``arg``); ``dtype`` names
    the argument's dtype (float16/bfloat16 arguments are converted from their float32 ``base``)."""
    base: np.ndarray
    layout: str
    arg: object  # transposed: the permutation; sliced: (dim, step); expanded: the shape
    dtype: str = ""

    def __post_init__(self):
        self.dtype = self.dtype or str(self.base.dtype)

    def tensor(self, lib, base=None):
        """The argument as a ``lib`` tensor (a fresh copy of ``base``, default ``self.base``), viewed as drawn."""
        t = lib.from_numpy(np.array(self.base if base is None else base, order="C"))
        return self.torch_view(t.to(getattr(lib, self.dtype)) if self.dtype in HALF else t).detach()

    def values(self, rng):
        """New values for this argument (same shape and dtype)."""
        return _values(rng, self.base.shape, self.dtype)

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

    @property
    def exact(self):
        """Whether every line is exact in float32 (`compile_fuzz_ops.is_exact`): half results must be torch's bits."""
        return all(is_exact(line.split(" = ", 1)[1]) for line in self.lines)

    @property
    def half(self):
        """The half types among the inputs and casts (values the checks compare with half-type tolerances)."""
        source = "".join(self.lines).replace(".half()", "float16")
        return {i.dtype for i in self.inputs if i.dtype in HALF} | {name for name in HALF if name in source}


def _values(rng, shape, dtype):
    if dtype == "bool":
        return np.asarray(rng.random(shape) < 0.5)
    if dtype == "int64":
        return np.asarray(rng.integers(-3, 4, shape), dtype=np.int64)
    if dtype in HALF:  # float32 values the half type holds exactly
        return np.asarray(rng.uniform(-2.0, 2.0, shape), dtype=HALF[dtype]).astype(np.float32)
    return np.asarray(rng.uniform(-2.0, 2.0, shape), dtype=dtype)


def _shape(rng, ndim):
    return tuple(int(rng.choice(SIZES, p=SIZE_WEIGHTS / SIZE_WEIGHTS.sum())) for _ in range(ndim))


def _input(rng, shape, dtype):
    layout = LAYOUTS[rng.choice(4, p=(0.4, 0.2, 0.2, 0.2))]
    if layout == "transposed" and len(shape) >= 2:
        perm = tuple(int(p) for p in rng.permutation(len(shape)))
        inv = tuple(int(p) for p in np.argsort(perm))
        return Input(_values(rng, tuple(shape[i] for i in inv), dtype), "transposed", perm, dtype)
    if layout == "sliced" and len(shape) >= 1:
        dim, step = int(rng.integers(len(shape))), int(rng.choice((2, 3)))
        big = list(shape)
        big[dim] = shape[dim] * step
        return Input(_values(rng, tuple(big), dtype), "sliced", (dim, step), dtype)
    if layout == "expanded" and any(s > 1 for s in shape):
        small = tuple(1 if (s > 1 and rng.random() < 0.6) else s for s in shape)
        return Input(_values(rng, small, dtype), "expanded", tuple(shape), dtype)
    return Input(_values(rng, tuple(shape), dtype), "contiguous", None, dtype)


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


OPS = ((ops.op_binary, 5), (ops.op_unary, 4), (ops.op_math, 3), (ops.op_cast, 2.5), (ops.op_compare, 1),
       (ops.op_select, 2.5), (ops.op_reduce, 3), (ops.op_rows, 2), (ops.op_view, 3), (ops.op_join, 1.5),
       (ops.op_inplace, 1.5))
_OP_P = np.array([w for _, w in OPS]) / sum(w for _, w in OPS)


def _pick(rng, count, recent_bias=True):
    if recent_bias and rng.random() < 0.6:
        return count - 1
    return int(rng.integers(count))


def _run_line(line, env):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        exec(line, env)  # noqa: S102 - generated source


def _torch_inputs(inputs, requires_grad, lib=torch, bases=None):
    """The arguments as ``lib`` tensors (from ``bases``, default each input's own), float ones requiring grad."""
    out = []
    for k, inp in enumerate(inputs):
        t = inp.tensor(lib, None if bases is None else bases[k])
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
    inputs = [_input(rng, s, DTYPES[rng.choice(len(DTYPES), p=DTYPE_WEIGHTS)]) for s in _input_shapes(rng, count)]
    env = {"lib": torch}
    for i, t in enumerate(_torch_inputs(inputs, False)):
        env[f"v{i}"] = t
    n = count
    owned = set()  # values the program made (not inputs nor views of them): in-place writes allowed
    lines = []
    target = int(rng.integers(3, 13))
    # (from its own stream, so that the other programs stay those of the seeds without the share)
    exact_only = np.random.default_rng([seed, 1]).random() < EXACT_SHARE  # half results held to torch's bits
    tries = 0
    while len(lines) < target and tries < 200:
        tries += 1
        fn = OPS[rng.choice(len(OPS), p=_OP_P)][0]
        ia = _pick(rng, n)
        if fn is ops.op_inplace:
            cands = sorted(owned)
            if not cands:
                continue
            ia = cands[int(rng.integers(len(cands)))]
        ib = _pick(rng, n, recent_bias=False)
        a, b = env[f"v{ia}"], env[f"v{ib}"]
        expr = fn(rng, a, b, (f"v{ia}", f"v{ib}"))
        if expr is None or exact_only and not is_exact(expr):
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
        if fn is ops.op_view:
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
