"""vmap's per-sample loop, seen as PyTorch's BatchedTensors: which tensors carry the batch, and what that forbids.

`_vmap.vmap` runs ``func`` once per sample on plain tensors, so on its own it cannot tell a value that differs by
sample from one that does not. While the first sample runs, `SampleMode` (a dispatcher mode) marks the arrays
computed from the sample's mapped inputs ("batched", as torch's BatchedTensor), and with that gives torch's answers:

- an in-place write of a batched value into a tensor from outside (a captured tensor, an input with in_dim None, or
  a value computed from them) raises torch's error, where the loop would fold every sample into it in turn;
- an in-place write of an unbatched value into such a tensor happens once, as in torch: before each later sample
  the tensors the first sample wrote are put back as they were, so every sample sees what the one run of torch's
  vmap sees, and the last leaves the result torch leaves;
- reading the value of a batched tensor in the user's code (``.item()``, ``float(t)``, ``if t:``, ``t.tolist()``)
  raises torch's error. Reads inside jitorch's own functions (its kernels' Python parts) go on, per sample.

Reads of batched values being refused, every sample takes the first one's path through ``func``: the later samples
run without the mode, at eager speed, and so does a later call of a function like one whose first sample was clean
(no write into an outside tensor): the same code, closure and defaults, argument shapes, and state its Python may
have branched on (unmapped tensors' values or versions, the globals, attributes and dict entries its code names as
`NamedValues` finds them): `sample_mode` returns None for it. Other callables (modules) take the mode every call.

A tensor made by a creation function inside the call (``zeros_like(x)``, ``x.new_zeros(n)``, ``zeros(n)``) takes
batched writes per sample: torch batches the first two, and refuses the third only because it cannot.

>>> import jitorch
>>> from jitorch.func import vmap
>>> buf = jitorch.zeros(3)
>>> vmap(lambda x: buf.add_(x))(jitorch.ones(4, 3))
Traceback (most recent call last):
RuntimeError: output with shape [3] doesn't match the broadcast shape [4, 3]
>>> _ = vmap(lambda x: buf.add_(1) * x)(jitorch.ones(4, 3)); buf
tensor([1., 1., 1.])
"""
from __future__ import annotations

import functools
import os
import sys
import threading
import types
import weakref

from ._creation_watchers import WATCHERS
from ._dispatch import TENSOR_TYPES, apply, apply_inplace, eager
from ._dispatch_modes import MODES, push_mode, run_below
from ._tensor import Tensor

__all__ = ["SampleMode", "BatchedSample", "sample_mode"]

RUNNING: list = []  # the SampleModes active now, innermost last
_PKG = os.path.dirname(os.path.abspath(__file__)) + os.sep
# The Tensor method wrappers of `_overrides` (installed while a Proxy, a function mode or a user's Tensor subclass
# instance lives) stand between the user's call and the method: frames of these files are seen through.
_WRAPPERS = frozenset(os.path.join(os.path.dirname(os.path.abspath(__file__)), f) for f in ("_overrides.py",))

_ITEM = ("vmap: It looks like you're calling .item() on a Tensor. We don't support vmap over calling .item() on a "
         "Tensor, please try to rewrite what you're doing with other operations. If error is occurring somewhere "
         "inside PyTorch internals, please file a bug report.")
_CONTROL_FLOW = ("vmap: It looks like you're attempting to use a Tensor in some data-dependent control flow. We "
                 "don't support that yet, please file an issue at https://github.com/pytorch/pytorch/issues .")
_NO_STORAGE = "Cannot access data pointer of Tensor that doesn't have storage"
_UNDER_GRAD = ("vmap: It looks like you're either (1) calling .item() on a Tensor or (2) attempting to use a Tensor "
               "in some data-dependent control flow or (3) encountering this error in PyTorch internals. For (1): we "
               "don't support vmap over calling .item() on a Tensor, please try to rewrite what you're doing with "
               "other operations. For (2): we don't support data-dependent control flow in vmap yet, please file an "
               "issue at https://github.com/pytorch/pytorch/issues . For (3): please file an issue.")
_READ_ERRORS = {"__bool__": _CONTROL_FLOW, "tolist": _NO_STORAGE, "numpy": _NO_STORAGE, "__array__": _NO_STORAGE,
                "__dlpack__": _NO_STORAGE}
# torch's named batching rules for these say "inplace arithmetic ... in a vmap"; its boxed fallback names the op
# ("aten::pow_") and the vmap level.
_INPLACE_ARITHMETIC = {"sub", "mul", "div", "copy", "copy_slices", "index_put", "clamp_min", "clamp_max"}
_ALPHA_ROWS = {"add_alpha": "add", "sub_alpha": "sub"}  # add_/sub_ with alpha: torch's rules of add_/sub_


class SampleMode:
    """The dispatcher mode of one running vmap loop (see the module notes), active while its first sample runs:
    ``start(i, tensors)`` before sample ``i`` names its mapped inputs. Reads of batched values are refused, so
    every sample takes the first one's path through the function; the first sample's verdicts (a refusal, the
    captured tensors written) hold for all, and the later samples run at eager speed."""

    def __init__(self, level, size, key=None):
        self.level, self.size, self.key = level, size, key
        self.batched = {}  # id(array) -> array computed from this sample's mapped inputs (kept alive: ids stay unique)
        self.made = {}  # id(tensor) -> tensor the first sample made (by an op or a creation function)
        self.created = {}  # id(tensor) -> tensor a creation function made during the first sample
        self.saved = {}  # id(base) -> (base, its array before the first sample's first write into it)
        self.reclassed = []  # the tensors made BatchedSample
        self._watcher = None

    def start(self, index, tensors):
        if index == 0:
            self._install()
            self.batched = {}
            for t in tensors:
                self._batch(t)
            return
        if index == 1:
            self.finish()
        for base, array in self.saved.values():
            base._data[...] = array

    def _install(self):
        from .func import _DEPTH as grad_depth  # (func imports nn, which imports vmap)

        self.grad_depth, self.grad_entered = grad_depth, grad_depth[0]
        RUNNING.append(self)
        self._watcher = (threading.get_ident(), self.note_created)
        WATCHERS.append(self._watcher)
        push_mode(self)

    def finish(self):
        """The first sample ran to its end: leave the dispatcher, and remember a call that wrote into no tensor
        from outside, so the next like it (same function, same shapes) runs without the mode."""
        if self._watcher is None:
            return
        self.uninstall()
        # what only the first sample's run still holds was its own scratch: nothing to put back
        self.saved = {k: v for k, v in self.saved.items() if sys.getrefcount(v[0]) > 2}
        if not self.saved and self.key is not None:
            owner, signature, state, held = self.key
            seen = _CLEAN_CODE.setdefault(owner, {})
            if len(seen) >= _KEPT_PER_CODE:
                del seen[next(iter(seen))]
            seen[signature] = state, held

    def uninstall(self):
        """Leave the dispatcher (after the first sample, or when the loop ends or raises)."""
        if self._watcher is None:
            return
        MODES.remove(self)
        RUNNING.remove(self)
        WATCHERS.remove(self._watcher)
        self._watcher = None
        self.batched = self.made = self.created = {}
        for t in self.reclassed:
            t.__class__ = Tensor
        self.reclassed = []

    def _batch(self, t):
        self.batched[id(t._data)] = t._data
        if type(t) is Tensor:
            t.__class__ = BatchedSample
            self.reclassed.append(t)

    def is_batched(self, t):
        return id(t._data) in self.batched

    def _reads_batch(self, values):
        for v in values:
            if isinstance(v, Tensor):
                if id(v._data) in self.batched:
                    return True
            elif isinstance(v, (tuple, list)) and self._reads_batch(v):
                return True
        return False

    def dispatch(self, op, args, attrs):
        # Alone on the stack, the mode runs the op itself: the ops the kernel's Python runs come back here too.
        out = eager(op, args, attrs) if len(MODES) == 1 else run_below(self, apply, op, *args, **attrs)
        batched = self._reads_batch(args) or attrs and self._reads_batch(attrs.values())
        if type(out) is tuple:
            for o in out:
                if isinstance(o, Tensor):
                    self._made(o, batched)
        else:
            self._made(out, batched)
        return out

    def _made(self, t, batched):
        self.made[id(t)] = t
        if batched:
            self._batch(t)

    def dispatch_inplace(self, op, target, args, attrs):
        writes_batch = self._reads_batch(args) or bool(attrs) and self._reads_batch(attrs.values())
        base = target if target._base is None else target._base
        if not self.is_batched(target):
            if writes_batch:
                called = _written_by_user() if id(base) not in self.created and id(target) not in self.created \
                    else None
                if called is not None:
                    raise self._refusal(called or op.name, target, args)
            elif id(base) not in self.made and id(base) not in self.saved:
                self.saved[id(base)] = (base, base._data.copy())
        out = run_below(self, apply_inplace, op, target, *args, **attrs)
        if writes_batch or self.is_batched(target):
            self._batch(target)
            self._batch(base)
        return out

    def check_value_write(self, frame):
        """An in-place method reads a batched value to write it as a number (``fill_(x.sum())``): torch's refusal
        when the method's own tensor is one from outside."""
        target = frame.f_locals.get("self")
        if isinstance(target, Tensor) and not self.is_batched(target) and id(target) not in self.created:
            base = target if target._base is None else target._base
            called = _written_by_user()
            if id(base) not in self.created and called is not None:
                raise self._refusal(called or frame.f_code.co_name.strip("_"), target, ())

    def note_created(self, name, args, kwargs, made):
        self.created[id(made)] = self.made[id(made)] = made
        if name.endswith("_like") and args and isinstance(args[0], Tensor) and self.is_batched(args[0]):
            self._batch(made)

    def _refusal(self, name, target, args):
        name = _ALPHA_ROWS.get(name, name)
        if name == "add":  # torch's add_ rule broadcasts first: the shape check of the write refuses it
            from ._shape import broadcast_shapes

            shapes = [tuple(target.shape)] + [tuple(a.shape) for a in args if isinstance(a, Tensor)]
            return RuntimeError(f"output with shape {list(target.shape)} doesn't match the broadcast shape "
                                f"{[self.size, *broadcast_shapes(*shapes)]}")
        where = "in a vmap"
        # masked_fill_ with a batched fill value is torch's Tensor overload, which has no named rule
        if name in _INPLACE_ARITHMETIC or name == "masked_fill" and not any(
                isinstance(a, Tensor) and not a.dim() and self.is_batched(a) for a in args):
            name = "inplace arithmetic"
        elif name == "fill":
            name = "fill_"
        else:
            name, where = f"aten::{name}_", f"at level {self.level}"
        return RuntimeError(f"vmap: {name}(self, *extra_args) is not possible because there exists a Tensor `other` "
                            "in extra_args that has more elements than `self`. This happened due to `other` being "
                            f"vmapped over but `self` not being vmapped over {where}. Please try to use out-of-place "
                            f"operators instead of {name}. If said operator is being called inside the PyTorch "
                            "framework, please file a bug report instead.")


def _written_by_user():
    """None unless the in-place write running now is the user's own call (``buf.add_(x)``, ``buf[i] = x``), not one
    a jitorch function makes into its scratch tensors: the jitorch function the user's code called is an in-place
    method of Tensor (seen through the wrappers that in-place and other methods share). Then the op torch names in
    its error: the method's (``lerp``, written as other rows), or "" where the row's name is that (``mul_``)."""
    inplace, shared = _inplace_codes()
    frame, chain = sys._getframe(2), []
    while frame is not None and frame.f_code.co_filename.startswith(_PKG):
        if frame.f_code.co_filename not in _WRAPPERS:
            chain.append(frame.f_code)
        frame = frame.f_back
    if frame is None:
        return None
    for code in reversed(chain):  # from the function the user called inwards
        if code not in shared:
            return inplace.get(code)
    return None


_CODES = []


def _inplace_codes():
    """({code object of Tensor's in-place methods only: the name torch's error gives}, code objects that
    in-place and other methods share)."""
    if not _CODES:
        def is_inplace(name):
            return (name.endswith("_") and not name.startswith("__")) or name == "__setitem__" or \
                (name.startswith("__i") and name.endswith("__") and name not in ("__init__", "__index__", "__iter__",
                                                                               "__int__", "__invert__"))

        users: dict = {}
        names: dict = {}
        for name in dir(Tensor):
            method = getattr(Tensor, name, None)
            code = getattr(getattr(method, "__wrapped__", method), "__code__", None)  # (under a wrapper: its own)
            if code is not None:
                users.setdefault(code, set()).add(is_inplace(name))
                names.setdefault(code, set()).add(name)
        _CODES.append({c: _one_name(names[c]) for c, kinds in users.items() if kinds == {True}})
        _CODES.append({c for c, kinds in users.items() if len(kinds) == 2})
    return _CODES[0], _CODES[1]


def _one_name(names):
    """The op a method's error names: its own for one plain method (``lerp_``: "lerp"), else the row's ("")."""
    if len(names) != 1:
        return ""
    name = next(iter(names))
    return "" if name.startswith("__") else name.strip("_")


class BatchedSample(Tensor):
    """A tensor of the first sample's run that carries the batch: its values refuse to reach the user's Python as
    torch's BatchedTensor does (reads inside jitorch's own functions go on). Put back to Tensor after that run."""


def _refusing(name, message):
    def read(self, *args, **kwargs):
        frame = sys._getframe(1)
        while frame.f_back is not None and frame.f_code.co_filename in _WRAPPERS:
            frame = frame.f_back
        if not frame.f_code.co_filename.startswith(_PKG):
            if name != "__format__" or not self.dim():
                # torch's reads through a grad transform inside the vmap meet the level that wraps the batch
                raise RuntimeError(_UNDER_GRAD if message is not _NO_STORAGE and RUNNING and
                                   RUNNING[-1].grad_depth[0] > RUNNING[-1].grad_entered else message)
        elif RUNNING and frame.f_code in _inplace_codes()[0]:
            RUNNING[-1].check_value_write(frame)
        return getattr(Tensor, name)(self, *args, **kwargs)
    read.__name__ = name
    return read


for _name in ("item", "tolist", "numpy", "__bool__", "__int__", "__float__", "__index__", "__complex__", "__array__",
              "__dlpack__", "__format__"):
    setattr(BatchedSample, _name, _refusing(_name, _READ_ERRORS.get(_name, _ITEM)))
TENSOR_TYPES.add(BatchedSample)  # the dispatcher's fast paths take it as a plain tensor


# The calls whose first sample read no batched value and wrote into no tensor from outside: code -> {call signature
# (hashable: the batch size, the closure's and defaults' identities, the arguments' shapes and small values): the
# state that call started from (compared with ==: the values the code reads by name, `NamedValues`, tensors among
# them and the larger unmapped inputs by identity and version, all held so that their ids stay theirs)}. Reads of
# batched values being refused, every sample takes the first one's path, and so does a later call that matches.
_CLEAN_CODE: dict = {}  # code objects live as long as their module
_WATCHED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # function -> its NamedValues
_KEPT_PER_CODE = 16
_SMALL_TENSOR = 16  # elements: a tensor this small is compared by value (a new flag tensor each call matches)


def _ident(value, held, state):
    if value is None or isinstance(value, (bool, int, float, str)):
        return type(value), value
    if isinstance(value, Tensor):
        # Python may have read its values (``if flag.sum() > 0``): small ones by value, others by version
        data = value._data
        if data.size <= _SMALL_TENSOR:
            return Tensor, data.shape, data.dtype, data.tobytes()
        held.append(value)
        state.append(("tensor", id(value), value._version))
        return Tensor, data.shape, data.dtype
    held.append(value)
    return id(value)


def _watched(func, fresh):
    """``func``'s `NamedValues` (built again when ``fresh``: a helper it names may have been rebound)."""
    watched = None if fresh else _WATCHED.get(func)
    if watched is None:
        from ._compile.named_values import NamedValues  # (the compiler's package imports nn, which imports vmap)

        watched = _WATCHED[func] = NamedValues(func)
    return watched


def sample_mode(func, leaves, dims, size, level):
    """The `SampleMode` of a vmap loop over ``func``, or None for a call like one whose first sample was clean:
    the same code, closure, defaults, argument shapes (the values of small unmapped tensors, the versions of larger
    ones) and values the code reads by name (globals, attributes of the objects it names, tensors' versions)."""
    held, state = [], []
    named = ()
    if type(func) is functools.partial and type(func.func) is types.FunctionType:
        named = (*func.args, *[v for item in sorted(func.keywords.items()) for v in item])
        func = func.func
    if type(func) is not types.FunctionType:
        return SampleMode(level, size)  # a module's or object's own state is not watched: checked on every call
    try:
        named += tuple([c.cell_contents for c in func.__closure__ or ()])
    except ValueError:  # a cell not yet filled
        return SampleMode(level, size)
    named += (*(func.__defaults__ or ()), *[v for item in (func.__kwdefaults__ or {}).items() for v in item])
    named = tuple([_ident(v, held, state) for v in named])
    signature = (size, named, tuple([(x._data.shape, x._data.dtype, d) if d is not None else
                                     _ident(x, held, state) for x, d in zip(leaves, dims)]))
    seen = _CLEAN_CODE.get(func.__code__)
    remembered = None if seen is None else seen.get(signature)
    watched = _watched(func, fresh=remembered is None)
    if watched.random_source:  # Python-level random numbers may pick another path on any call
        return SampleMode(level, size)
    state += watched.values(versions=True)
    if remembered is not None and remembered[0] == state:
        return None
    return SampleMode(level, size, (func.__code__, signature, state, held))
