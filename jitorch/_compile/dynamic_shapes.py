"""Automatic dynamic shapes: one compiled specialization for every size of the dimensions that changed.

A call that misses every guard only in the sizes of some tensor arguments' dimensions, when such a dimension has
changed twice (its third size; ``dynamic=None``, the default, and
``jitorch.compiler.config.dynamic_after_changes``), or any first call with ``dynamic=True`` (every dimension of size
>= 2), makes those dimensions symbols; dimensions of equal size share one (torch's duck sizing) and stay equal. The
call is traced again at probe sizes next to its own (the grid ``R + {0, 1, 2}^n``, at most 2 symbols), on inputs
tiled from its data, and once more at ``R + 3`` to check; `shape_fit.Fit` turns the traces into one template graph
whose integers are polynomials of the symbols. A symbol whose probe fails (an error, another graph) stays
specialized; when nothing is left, or the check fails, the call compiles static as before, and the dimensions are
tried again at the next sizes (3 attempts). Later calls with sizes >= 2 in those dimensions (sizes 0 and 1 stay
specialized) take the template, with the Python comparisons on sizes it recorded (``if x.shape[1] > 64``) checked
for their sizes, without counting against ``recompile_limit``. A size's first call runs eagerly
(``jitorch.compiler.config.dynamic_eager_calls``); its second traces the call once more, checks the trace against
the template's prediction and compiles that size's kernels (kept per size). That trace is what runs: the template
decides which calls belong to the specialization, never what a size computes.

>>> import jitorch
>>> f = jitorch.compile(lambda x: (x * 2).sum(-1))
>>> [f(jitorch.ones(n, 3)).shape[0] for n in (4, 5, 6, 7, 6)]
[4, 5, 6, 7, 6]
>>> len(f.entries), f.entries[-1].dynamic.describe()
(3, 'arg0.shape[0] -> s0')
"""
from __future__ import annotations

import itertools
from collections import OrderedDict

import numpy as np

from .._tensor import Tensor
from ..runtime.devices import array_module_for, is_cpu_array
from .guards import argument_names
from .shape_fit import DEGREE, Fit, Signature, rebuild
from .sym_sizes import NotDynamic, recording_sizes

__all__ = ["EAGER", "Sym", "DynamicSpec", "changed_dims", "every_dim", "build_dynamic", "NotDynamic", "MAX_SYMBOLS"]

MAX_SYMBOLS = 2  # probes grow as 3^n
MAX_SIZES = 64  # instantiated sizes kept per dynamic specialization
# A full specialization makes room for a new size only by dropping one unused for this many lookups (times
# MAX_SIZES): a generation loop cycling through more sizes than it keeps would otherwise rebuild an instance (a
# trace and a plan, ~17 ms for a 2-block GPT against ~1 ms eagerly) on every step, and runs those sizes eagerly.
STALE_LOOKUPS = 4
EAGER = object()  # `DynamicSpec.lookup`: run this call eagerly (a size not seen often enough yet to compile)


class Sym:
    """A symbolic size in a dynamic specialization's guards (``s0``, ``s1``...)."""

    __slots__ = ("index",)

    def __init__(self, index):
        self.index = index

    def __eq__(self, other):
        return isinstance(other, Sym) and other.index == self.index

    def __hash__(self):
        return hash(("Sym", self.index))

    def __repr__(self):
        return f"s{self.index}"


def changed_dims(entries, guards, changes=2):
    """``[(argument name, dim)]`` that took more than ``changes`` sizes over this call and the entries whose guards
    differ from its own only in sizes (a dimension that changed ``changes`` times; a dynamic entry's symbols are
    no sizes)."""
    seen = {}
    for entry in entries:
        if len(entry.guards) != len(guards):
            continue
        dims, same = [], True
        for (name, old), (name2, new) in zip(entry.guards, guards):
            if name != name2:
                same = False
            elif name.endswith(".shape") and len(old) == len(new):
                dims += [((name[:-6], d), a, b) for d, (a, b) in enumerate(zip(old, new))]
            elif old != new and not name.endswith(".stride"):  # strides follow sizes; contiguity is checked later
                same = False
            if not same:
                break
        if same:
            for dim, a, b in dims:
                if not isinstance(a, Sym):
                    seen.setdefault(dim, {b}).add(a)
    return sorted(dim for dim, sizes in seen.items() if len(sizes) > changes)


def every_dim(args, kwargs):
    """``dynamic=True``: every dimension of size >= 2 of every tensor argument."""
    return [(name, d) for name, a in zip(argument_names(args, kwargs), list(args) + list(kwargs.values()))
            if isinstance(a, Tensor) for d, n in enumerate(a._data.shape) if n >= 2]


def _tiled(t, resize):
    """``t`` with dimension ``d`` tiled to ``n`` for each ``(d, n)`` of ``resize`` (values stay in range)."""
    data = t._data
    xp = np if is_cpu_array(data) else array_module_for("cuda")
    for d, n in resize:
        data = data.take(xp.arange(n) % data.shape[d], axis=d)
    out = Tensor._make(xp.ascontiguousarray(data))
    return out.requires_grad_() if t._requires_grad else out


def tiled_inputs(flat, resize):
    """``flat`` with argument ``i`` tiled per ``resize[i]`` (``[(dim, size)]``): one tiled tensor per argument
    object, so an argument passed twice stays one tensor (``q = k = v``), as the probes of a trace need."""
    tiled, out = {}, []
    for i, a in enumerate(flat):
        if i in resize and id(a) not in tiled:
            tiled[id(a)] = _tiled(a, resize[i])
        out.append(tiled[id(a)] if i in resize else a)
    return out


class DynamicSpec:
    """The symbols of a dynamic specialization, its fitted template, and its instantiations per size.

    ``dims``: ``[(argument name, flat index, dim, symbol)]``; ``build(gm)`` makes what runs one size from a graph
    of that size; ``trace(flat)`` traces a call as the probes did (its side effects undone) and returns its
    `Signature`, or raises `NotDynamic`.
    """

    def __init__(self, dims, fit, template, build, guards, trace):
        self.dims, self.fit, self.template, self.build, self.trace = dims, fit, template, build, trace
        self.mismatches = []  # sizes whose own trace differed from the template's prediction, and how
        self.n = fit.n
        self._by_name = {}
        for name, _, d, k in dims:
            self._by_name.setdefault(name, {})[d] = Sym(k)
        self.guards = self.key(guards)
        self._key = [v for _, v in self.guards]
        self._sizes = OrderedDict()
        self._seen = {}  # calls at sizes not compiled yet
        self._clock, self._used = 0, {}  # lookups so far; each instantiated size's last one

    def describe(self):
        return ", ".join(f"{name}.shape[{d}] -> s{k}" for name, _, d, k in self.dims)

    def key(self, guards):
        """``guards`` with the symbolic sizes as `Sym` and the strides of their tensors as ``"contiguous"``."""
        out = []
        for name, value in guards:
            base, _, what = name.rpartition(".")
            syms = self._by_name.get(base)
            if syms is not None and what == "shape":
                value = tuple(syms.get(d, v) for d, v in enumerate(value))
            elif syms is not None and what == "stride":
                value = "contiguous"
            out.append((name, value))
        return out

    def sizes(self, flat):
        """Each symbol's size in this call, or ``None`` when the call is not one of this specialization's."""
        sizes = [None] * self.n
        for _, i, d, k in self.dims:
            if i >= len(flat) or not isinstance(flat[i], Tensor) or d >= flat[i]._data.ndim:
                return None  # another argument structure or rank: the other guards decide
            data = flat[i]._data
            n = data.shape[d]
            if n < 2 or (sizes[k] is not None and sizes[k] != n) or not data.flags.c_contiguous:
                return None
            sizes[k] = n
        return tuple(sizes)

    def lookup(self, guards, flat, eager_calls=0):
        """What runs this call, `EAGER` while its sizes have had fewer than ``eager_calls`` calls (they compile on
        the next), or ``None`` when the guards say no."""
        sizes = self.sizes(flat)
        if sizes is None or [v for _, v in self.key(guards)] != self._key or not self.fit.holds(sizes):
            return None
        if sizes not in self._sizes:
            seen = self._seen.get(sizes, 0)
            if seen < eager_calls:
                if len(self._seen) > 4 * MAX_SIZES:
                    self._seen.clear()
                self._seen[sizes] = seen + 1
                return EAGER
            self._seen.pop(sizes, None)
        return self.at(sizes, flat)

    def at(self, sizes, flat=None):
        """What runs ``sizes``, built (graph and kernels) on its first use: from a trace of the call ``flat``,
        checked against the template (the probes cannot see every floor of jitorch's own size arithmetic: a
        size whose trace differs runs its own graph, and the difference is kept in ``mismatches``), or from the
        template alone when no call is given (the call that built the template, whose trace it is)."""
        self._clock += 1
        found = self._sizes.get(sizes)
        if found is None:
            if len(self._sizes) >= MAX_SIZES:
                oldest = next(iter(self._sizes))
                if self._clock - self._used[oldest] <= STALE_LOOKUPS * MAX_SIZES:
                    return EAGER  # every kept size is in use: this one runs eagerly, nothing is rebuilt
                del self._sizes[oldest], self._used[oldest]
            if flat is None:
                graph = rebuild(self.template, self.fit.at(sizes))
            else:
                try:
                    sig = self.trace(flat)
                except NotDynamic as err:
                    self.mismatches.append((sizes, str(err)))
                    found = self._sizes[sizes] = EAGER
                    self._used[sizes] = self._clock
                    return found
                why = self.fit.check(sizes, sig)
                if why is not None:
                    self.mismatches.append((sizes, why))
                graph = rebuild(sig, sig.ints)  # the trace itself, its sizes plain ints again
            found = self._sizes[sizes] = self.build(graph)
        else:
            self._sizes.move_to_end(sizes)
        self._used[sizes] = self._clock
        return found


def _symbols(dims, names, flat):
    """``(dims with flat index and symbol, each symbol's size)``: equal sizes share a symbol. The dimensions are
    of contiguous tensor arguments and of size >= 2 (`dynamic_compile.dims_to_make_dynamic` picked them)."""
    index = {n: i for i, n in enumerate(names)}
    values, out = [], []
    for name, d in dims:
        i = index[name]
        n = flat[i]._data.shape[d]
        if n not in values:
            values.append(n)
        out.append((name, i, d, values.index(n)))
    return out, values


def _probe(builder, flat, dims, sizes):
    """The builder's ``(Signature, extra)`` on ``flat`` with each symbol's dimensions tiled to ``sizes``."""
    resize = {}
    for _, i, d, k in dims:
        if flat[i]._data.shape[d] != sizes[k]:
            resize.setdefault(i, []).append((d, sizes[k]))
    with recording_sizes() as rec:
        gm, extra = builder(tiled_inputs(flat, resize))
    return Signature(gm, rec), extra


def build_dynamic(builder, args, kwargs, dims, build, guards, restoring):
    """A `DynamicSpec` over ``dims`` (``[(argument name, dim)]``), or `NotDynamic` saying why not.

    ``builder(flat)`` traces the call on flat arguments and returns ``(graph module, extra)``: the graph is fitted,
    ``extra`` (output structure, buffers written) must be equal at every probe. ``restoring(fn)`` runs ``fn()``
    with the call's side effects (buffer updates, random draws) undone afterwards: a later size's own trace.
    """
    names, flat = argument_names(args, kwargs), list(args) + list(kwargs.values())
    dims, real = _symbols(dims, names, flat)
    try:
        base_sig, base_extra = _probe(builder, flat, dims, real)
    except NotDynamic:
        raise
    except Exception as err:  # noqa: BLE001 - code that cannot take a traced size: the static path traces it
        raise NotDynamic(f"tracing with symbolic sizes failed: {type(err).__name__}: {err}") from err

    def attempt(sizes):
        try:
            sig, extra = _probe(builder, flat, dims, sizes)
        except Exception as err:  # noqa: BLE001 - a probe the function rejects keeps that size specialized
            return None, f"at sizes {tuple(sizes)}: {type(err).__name__}: {err}"
        if extra != base_extra:
            return None, f"at sizes {tuple(sizes)}: another output structure"
        why = base_sig.mismatch(sig)
        return (sig, None) if why is None else (None, f"at sizes {tuple(sizes)}: {why}")

    probes = {}

    def probe(sizes):  # each point traced once, however often the grid is laid again
        key = tuple(sizes)
        if key not in probes:
            probes[key] = attempt(sizes)
        return probes[key]

    alive, reasons = [], []
    for k in range(len(real)):
        sig, why = probe([v + (j == k) for j, v in enumerate(real)])
        (reasons.append(why) if sig is None else alive.append(k))
    while True:
        if not alive:
            raise NotDynamic(reasons[0])
        if len(alive) > MAX_SYMBOLS:
            raise NotDynamic(f"{len(alive)} symbolic sizes (at most {MAX_SYMBOLS})")
        # Renumber the symbols left; the dropped ones' dimensions keep their exact guards.
        renumber = {k: n for n, k in enumerate(alive)}

        def sizes_at(offset):
            return [v + offset[renumber[k]] if k in renumber else v for k, v in enumerate(real)]

        fitted, dropped = {}, None
        for offset in itertools.product(range(DEGREE + 1), repeat=len(alive)):
            sig, why = (base_sig, None) if not any(offset) else probe(sizes_at(offset))
            if sig is None:
                moving = [alive[n] for n, o in enumerate(offset) if o]
                if len(moving) > 1:
                    raise NotDynamic(why)
                dropped = moving[0]  # this symbol alone fails further out (``x.shape[0] > 4``): it stays static
                reasons.append(why)
                break
            fitted[offset] = sig
        if dropped is None:
            break
        alive.remove(dropped)
    kept = [(name, i, d, renumber[k]) for name, i, d, k in dims if k in renumber]
    fit = Fit([real[k] for k in alive], fitted)
    check = (DEGREE + 1,) * len(alive)
    sig, why = probe(sizes_at(check))
    why = why or fit.check([real[k] + DEGREE + 1 for k in alive], sig)
    if why is not None:
        raise NotDynamic(why)

    def trace(flat):
        sig, extra = restoring(lambda: _probe(builder, flat, [], []))
        if extra != base_extra:
            raise NotDynamic("another output structure")
        return sig

    return DynamicSpec(kept, fit, base_sig, build, guards, trace)
