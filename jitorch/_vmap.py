"""``torch.func.vmap``: ``func`` mapped over a dimension of its inputs, with PyTorch's argument rules and errors.

From 8 samples on (with ``randomness='error'`` and no ``chunk_size``) it first tries the batched path
(`_vmap_batched`): the primitives ``func`` runs on one sample, traced, then run once over the whole batch through
batching rules (per-sample gradients of an MLP at 256 samples: 40x faster than the loop). Otherwise, and wherever
that path gives up, it runs ``func`` once per sample and stacks the results (what PyTorch's vmap does for an op
without a batching rule): the values, gradients and error messages are vmap's, the cost is a Python loop over the
batch. `_vmap_taint` follows which values carry the batch while the loop runs, for torch's refusals (``.item()`` or
a branch on a batched value, an in-place write of one into a captured tensor) and its one-time writes of unbatched
values; nested transforms (``vmap(grad(f))`` for per-sample gradients, ``vmap(vmap(f))``) compose.

``in_dims`` is an int, or a tuple with one entry per positional argument, each an int, None (not mapped) or a nested
structure matching that argument (a dict of dims for a dict of tensors); keyword arguments are not mapped.
``out_dims`` is an int or one entry per output. ``randomness``: 'error' (a random op inside raises, as in PyTorch),
'different' (each sample draws its own numbers) or 'same' (every sample gets the numbers the first one drew).

>>> import jitorch
>>> x, w = jitorch.arange(6.0).reshape(3, 2), jitorch.tensor([1.0, 10.0])
>>> vmap(lambda row, w: (row * w).sum(), in_dims=(0, None))(x, w)
tensor([10., 32., 54.])
"""
from __future__ import annotations

import functools

from . import _random
from ._tensor import Tensor
from ._vmap_batched import MIN_BATCH, run_batched
from ._vmap_taint import sample_mode
from .utils._pytree import tree_flatten, tree_unflatten

__all__ = ["vmap"]

_RANDOMNESS = ("error", "different", "same")


def vmap(func, in_dims=0, out_dims=0, randomness="error", *, chunk_size=None):
    """``func`` over a batch dimension of its inputs (see the module notes)."""
    if randomness not in _RANDOMNESS:
        raise RuntimeError(f"Only allowed values for randomness are 'error', 'different', or 'same'. Got {randomness}")
    if chunk_size is not None and (not isinstance(chunk_size, int) or chunk_size <= 0):
        raise ValueError(f"vmap: chunk_size should be None or greater than 0. (got {chunk_size})")
    name = _name(func)
    _check_out_dims(name, out_dims, out_dims)

    @functools.wraps(func)
    def mapped(*args, **kwargs):
        if not args:
            raise ValueError(f"vmap({name})(<inputs>): got no inputs. Maybe you forgot to add inputs, or you are "
                             "trying to vmap over a function with no inputs. The latter is unsupported.")
        leaves, dims, spec = _mapped_inputs(name, in_dims, args)
        size = _batch_size(name, in_dims, leaves, dims)
        if size >= MIN_BATCH and randomness == "error" and chunk_size is None:
            _SAMPLES.append(set())  # the trace's sample is no input either: batch norm's check sends it to the loop
            try:
                with _RandomnessMode("error"):  # a draw in the trace refuses as in the loop (and draws nothing)
                    out = run_batched(func, leaves, dims, spec, kwargs, size, out_dims)
            finally:
                _SAMPLES.pop()
            if out is not None:
                return out
        outs = []
        batch = sample_mode(func, leaves, dims, size, len(_SAMPLES) + 1)  # None: a call like one seen clean
        with _RandomnessMode(randomness) as mode:
            try:
                for i in range(max(size, 1)):  # a batch of 0 still runs once, on zeros, for the outputs' layout
                    mode.next_sample()
                    sample = [x if d is None else _take(x, d, i, size) for x, d in zip(leaves, dims)]
                    if batch is not None:
                        batch.start(i, [x for x, d in zip(sample, dims) if d is not None])
                    _SAMPLES.append({id(x) for x, d in zip(sample, dims) if d is not None})
                    try:
                        outs.append(func(*tree_unflatten(sample, spec), **kwargs))
                    finally:
                        _SAMPLES.pop()
                if batch is not None:
                    batch.finish()
            finally:
                if batch is not None:
                    batch.uninstall()
        return _stacked(name, outs, out_dims, size)
    return mapped


_SAMPLES = []  # per running vmap loop, innermost last: the ids of the current sample's mapped inputs


def unmapped_in_vmap(*tensors):
    """True inside vmap's per-sample loop when one of ``tensors`` is not one of the sample's mapped inputs: an op
    that writes it in place (batch norm's running statistics) would fold every sample into it in turn, where
    PyTorch's batching rule refuses."""
    return bool(_SAMPLES) and any(t is not None and id(t) not in _SAMPLES[-1] for t in tensors)


def _name(func):
    if hasattr(func, "__name__"):
        return func.__name__
    if isinstance(func, functools.partial):
        return f"functools.partial({_name(func.func)}, ...)"
    return repr(func)  # a module, a callable object


def _check_out_dims(name, out_dims, whole):
    if out_dims is None or isinstance(out_dims, int):
        return
    if isinstance(out_dims, (tuple, list, dict)):
        for d in (out_dims.values() if isinstance(out_dims, dict) else out_dims):
            _check_out_dims(name, d, whole)
        return
    raise ValueError(f"vmap({name}, ..., out_dims={whole}): `out_dims` must be an int, None or a python collection "
                     "of ints representing where in the outputs the vmapped dimension should appear.")


def _take(x, dim, i, size):
    if size == 0:
        from ._creation import zeros

        shape = list(x.shape)
        del shape[dim]
        return zeros(shape, dtype=x.dtype, device=x.device)
    return x.select(dim, i)


def _mapped_inputs(name, in_dims, args):
    """``(leaves, dims, spec)``: the positional arguments' leaves, the dim each is mapped over (None: not mapped)."""
    where = f"vmap({name}, in_dims={in_dims}, ...)(<inputs>)"
    if isinstance(in_dims, int) and not isinstance(in_dims, bool):
        per_arg = (in_dims,) * len(args)
    elif isinstance(in_dims, tuple):
        if len(in_dims) != len(args):
            raise _structure_error(where, "in_dims", "inputs", in_dims, tuple(args))(in_dims, args)
        per_arg = in_dims
    else:
        raise ValueError(f"{where}: expected `in_dims` to be int or a (potentially nested) tuple matching the "
                         f"structure of inputs, got: {type(in_dims)}.")
    leaves, spec = tree_flatten(tuple(args))
    dims = []
    for arg, dim in zip(args, per_arg):
        dims += _broadcast(dim, arg, _structure_error(where, "in_dims", "inputs", in_dims, tuple(args)))
    for x, d in zip(leaves, dims):
        if d is None:
            continue
        if not isinstance(d, int):
            raise ValueError(f"{where}: Got in_dim={d} for an input but in_dim must be either an integer dimension "
                             "or None.")
        if not isinstance(x, Tensor):
            raise ValueError(f"{where}: Got in_dim={d} for an input but the input is of type {type(x)}. We cannot "
                             "vmap over non-Tensor arguments, please use None as the respective in_dim")
        if not -x.dim() <= d < x.dim():
            raise ValueError(f"{where}: Got in_dim={d} for some input, but that input is a Tensor of dimensionality "
                             f"{x.dim()} so expected in_dim to satisfy -{x.dim()} <= in_dim < {x.dim()}.")
    return leaves, [None if d is None else d % x.dim() for x, d in zip(leaves, dims)], spec


def _structure_error(where, dims_name, what, whole_dims, whole_values):
    """torch's error naming both whole structures (``dim``/``arg``: the part that did not match)."""
    def error(dim, arg):
        return ValueError(f"{where}: {dims_name} is not compatible with the structure of `{what}`. {dims_name} has "
                          f"structure {tree_flatten(whole_dims)[1]} but {what} has structure "
                          f"{tree_flatten(whole_values)[1]}.")
    return error


def _broadcast(dim, arg, error):
    """One dim per leaf of ``arg``: a dim that is no structure (an int, None) applies to the whole argument, a
    structure maps into it (its leaves are checked by the caller)."""
    if not isinstance(dim, (tuple, list, dict)):
        return [dim] * len(tree_flatten(arg)[0])
    if isinstance(dim, (tuple, list)) and isinstance(arg, (tuple, list)) and len(dim) == len(arg) and \
            isinstance(dim, list) == isinstance(arg, list):  # torch's pytrees: a list is no tuple
        return [d for sub_dim, sub in zip(dim, arg) for d in _broadcast(sub_dim, sub, error)]
    if isinstance(dim, dict) and isinstance(arg, dict) and dim.keys() == arg.keys():
        return [d for k in arg for d in _broadcast(dim[k], arg[k], error)]
    raise error(dim, arg)


def _batch_size(name, in_dims, leaves, dims):
    sizes = [x.shape[d] for x, d in zip(leaves, dims) if d is not None]
    if not sizes:
        raise ValueError("vmap: Expected at least one Tensor to vmap over")
    if len(set(sizes)) > 1:
        raise ValueError(f"vmap: Expected all tensors to have the same size in the mapped dimension, got sizes "
                         f"{sizes} for the mapped dimension")
    return sizes[0]


def _stacked(name, outs, out_dims, size):
    from ._creation import empty
    from ._movement import stack

    leaves0, spec = tree_flatten(outs[0])
    per_out = _output_dims(name, out_dims, outs[0])
    columns = [tree_flatten(o)[0] for o in outs]
    result = []
    for j, (first, dim) in enumerate(zip(leaves0, per_out)):
        samples = [c[j] for c in columns]
        if dim is None:
            # Not mapped: the output must not depend on the sample (PyTorch refuses a batched one).
            if not all(_same(s, first) for s in samples[1:]):
                raise ValueError(f"vmap({name}, ...): `{name}` can not return a BatchedTensor when out_dim is None")
            result.append(first)
            continue
        if not isinstance(first, Tensor):
            raise ValueError(f"vmap({name}, ...): `{name}` must only return Tensors, got type {type(first)}. Did you "
                             "mean to set out_dims= to None for output?")
        if not -first.dim() - 1 <= dim <= first.dim():
            raise IndexError(f"Dimension out of range (expected to be in range of [{-first.dim() - 1}, "
                             f"{first.dim()}], but got {dim})")
        d = dim % (first.dim() + 1)
        if size == 0:
            shape = list(first.shape)
            shape.insert(d, 0)
            result.append(empty(shape, dtype=first.dtype, device=first.device))
        else:
            result.append(stack(samples, d))
    return tree_unflatten(result, spec)


def _output_dims(name, out_dims, first):
    """One out_dim per leaf of the first sample's output ``first`` (torch takes ``(d,)`` for a single tensor)."""
    if isinstance(first, Tensor) and isinstance(out_dims, tuple) and len(out_dims) == 1:
        out_dims = out_dims[0]
    return _broadcast(out_dims, first, _structure_error(f"vmap({name}, ..., out_dims={out_dims})(<inputs>)",
                                                        "out_dims", "outputs", out_dims, first))


def _same(a, b):
    if a is b:
        return True
    if isinstance(a, Tensor) and isinstance(b, Tensor):
        return a.shape == b.shape and a.dtype == b.dtype and bool(((a == b) | ((a != a) & (b != b))).all())
    return not isinstance(a, Tensor) and not isinstance(b, Tensor) and a == b


_RANDOM_ERROR = ("vmap: called random operation while in randomness error mode. Please either use the 'same' or "
                 "'different' randomness flags on vmap or perform the randomness operation out of vmap")


class _RefusingStream:
    """Stands in for the default CPU generator's stream in 'error' mode: the random rows (dropout's mask, ``randn``)
    draw from it directly, not through `_random._rng`. Its state may still be read and put back (a compiled
    function saves it around its run): that draws nothing."""

    def __init__(self, stream):
        self.bit_generator = stream.bit_generator

    def __getattr__(self, name):
        raise RuntimeError(_RANDOM_ERROR)


class _RandomnessMode:
    """Watches the draws of one vmap call: the default CPU generator's stream (which the random rows read directly)
    and `_random._rng` (where the other samplers draw). 'error' refuses them; 'same' puts the default generator, and
    every generator the first sample drew from, back where the first sample found it before each later sample, so
    all samples see the same numbers."""

    def __init__(self, randomness):
        self.randomness = randomness
        self.sample = -1
        self.start_states = {}  # id(generator) -> (generator, its state before the first sample drew from it)

    def __enter__(self):
        self._saved = _random._rng
        self._default = _random.default_generator
        if self.randomness == "error":
            self._stream = self._default._rng
            self._default._rng = _RefusingStream(self._stream)
        if self.randomness != "different":
            _random._rng = self._draw
        return self

    def __exit__(self, *exc):
        _random._rng = self._saved
        if self.randomness == "error":
            self._default._rng = self._stream
        return False

    def next_sample(self):
        self.sample += 1
        if self.randomness != "same":
            return
        if self.sample == 0:
            self.start_states[id(self._default)] = (self._default, self._default.get_state())
        else:
            for gen, state in self.start_states.values():
                gen.set_state(state)

    def _draw(self, generator):
        if self.randomness == "error":
            raise RuntimeError(_RANDOM_ERROR)
        gen = generator or _random.default_generator
        if self.sample == 0 and id(gen) not in self.start_states:
            self.start_states[id(gen)] = (gen, gen.get_state())
        return self._saved(generator)
