"""What decides whether a reduce-overhead call is captured: the eager warm-up's findings and the arguments' checks.

Split from ``reduce_overhead.py`` (for size): `_warm_up` runs the first call eagerly and notes what a capture would
not repeat (values read back into Python, a reseeded generator, output written, optimizers whose step cannot be
replayed); the argument checks say whether tensors share memory and whether a call's arguments are the captured ones.
"""
from __future__ import annotations

import numpy as np

from .._random_generator import Generator
from .._tensor import Tensor
from ..runtime.host_pointer import byte_span
from ..optim._step_capture import noting_optimizer_steps
from .guards import _constant
from .python_output import noting_output
from .reduce_overhead_replay import spans_overlap


def _warm_up(fn, args, kwargs):
    """``fn(*args, **kwargs)`` eagerly, whether it read a tensor's value back into Python (`cpu._hooks`'s list:
    what a capture refuses), and why the optimizers it stepped could not be replayed (their
    ``_capture_refusal``), and the first output it wrote (``print``, logging: a capture would not repeat it).
    Knowing it before the capture means no capture starts and stops half-way."""
    from ..cpu._hooks import FORBIDDEN

    originals = {name: Tensor.__dict__[name] for name in FORBIDDEN if name in Tensor.__dict__}
    seen, printed = [], []

    def noting(name, method):
        def read(self, *a, **k):
            seen.append(name)
            return method(self, *a, **k)
        return read
    # Reseeding a generator (``manual_seed`` in the function) is Python state a replay would not set again.
    reseeds = {name: getattr(Generator, name) for name in ("manual_seed", "seed", "set_state")}

    def reseeding(name, method):
        def reseed(self, *a, **k):
            printed.append(_RESEEDED.format(name))
            return method(self, *a, **k)
        return reseed
    for name, method in originals.items():
        setattr(Tensor, name, noting(name, method))
    for name, method in reseeds.items():
        setattr(Generator, name, reseeding(name, method))
    try:
        with noting_optimizer_steps() as stepped, noting_output(printed.append):
            out = fn(*args, **kwargs)
    finally:
        for name, method in originals.items():
            setattr(Tensor, name, method)
        for name, method in reseeds.items():
            setattr(Generator, name, method)
    refusals = [r for r in (o._capture_refusal() for o in stepped) if r is not None]
    return out, bool(seen), refusals, printed[:1]

_RESEEDED = "reseeds a random generator (Generator.{}())"


def _describe(t):
    return f"shape {list(t.shape)}, dtype {t.dtype}, device {t.device}, contiguous={t.is_contiguous()}"


def _aliased(arrays):
    """Whether two of ``arrays`` (NumPy) may share memory (their byte ranges overlap)."""
    return spans_overlap(byte_span(a) for a in arrays)


def _self_overlapping(leaves):
    """Whether a tensor of ``leaves`` repeats memory along a dim (a zero stride over more than one element)."""
    return any(isinstance(t, Tensor) and t._data.size > 1 and
               any(st == 0 and n > 1 for st, n in zip(t._data.strides, t._data.shape)) for t in leaves)


def _same_value(new, static, key):
    """Whether a non-tensor argument is what the capture baked in: NumPy arrays by `guards._constant` (``key``: by
    value, large ones by identity and contents), other values by identity or ``==``."""
    if key is not None:
        return type(new) is np.ndarray and _constant(new) == key
    return new is static or (type(new) is type(static) and new == static)
