"""NumPy arrays a compiled function reads (as an argument, in a container argument, by name from a global, a closure
or an object's attribute) changed in place between calls: the compiled result must match eager, as torch.compile,
which takes arrays as inputs, sees every change. Arrays over `guards._SMALL_ARRAY` elements are checked by contents
(array_contents.py); small ones by value. Also reduce-overhead's attributes on list and dict subclass arguments."""
from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

import jitorch
from jitorch._compile.guards import _SMALL_ARRAY

LARGE, SMALL = _SMALL_ARRAY + 904, 12
MODES = (None, "reduce-overhead")
# How the function reads the array: a copy into a tensor, a Python number, a tensor sharing its memory, the array
# itself in an op.
READS = {
    "tensor": lambda a: jitorch.tensor(a),
    "sum": lambda a: float(a.sum()),
    "from_numpy": lambda a: jitorch.from_numpy(a),
    "array": lambda a: a,
}
# In-place changes between calls.
MUTATIONS = {
    "scale": lambda a: a.__imul__(2),
    "one_entry": lambda a: a.__setitem__(-1, 5.0),
    "slice": lambda a: a.__setitem__(slice(0, 3), -1.0),
}


def _array(n, dtype=np.float32):
    return (np.arange(n) % 7 + 1).astype(dtype)


def _close(got, want):
    assert got.dtype == want.dtype and tuple(got.shape) == tuple(want.shape)
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6, atol=1e-6)


def _check(fn, call, arr, mutate, mode):
    """``fn`` compiled and eager over calls ``call(fn)``, the array mutated in place between them."""
    compiled = jitorch.compile(fn, mode=mode)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for step in range(4):  # reduce-overhead: warm-up, capture, replays
            _close(call(compiled), call(fn))
            if step:
                mutate(arr)
    return compiled


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("mutation", sorted(MUTATIONS))
@pytest.mark.parametrize("read", sorted(READS))
@pytest.mark.parametrize("n", [SMALL, LARGE])
def test_argument_changed_in_place(n, read, mutation, mode):
    a, x, to = _array(n), jitorch.ones(n), READS[read]
    _check(lambda x, a: x * to(a) + 1, lambda f: f(x, a), a, MUTATIONS[mutation], mode)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("read", sorted(READS))
@pytest.mark.parametrize("holder", ["list", "tuple", "dict_with_tensor", "list_no_tensor"])
def test_container_entry_changed_in_place(holder, read, mode):
    a, x, to = _array(LARGE), jitorch.ones(LARGE), READS[read]
    if holder == "dict_with_tensor":
        box = {"x": x, "a": a}
        _check(lambda d: d["x"] * to(d["a"]), lambda f: f(box), a, MUTATIONS["scale"], mode)
    else:
        box = {"list": [x, a], "tuple": (a, 2.0), "list_no_tensor": [a, 3]}[holder]
        fn = (lambda x, b: x * to(b[0])) if holder != "list" else (lambda b: b[0] * to(b[1]))
        call = (lambda f: f(x, box)) if holder != "list" else (lambda f: f(box))
        _check(fn, call, a, MUTATIONS["one_entry"], mode)


TABLE = _array(LARGE)


class _Config:
    def __init__(self):
        self.table = _array(LARGE)


CONFIG = _Config()


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("read", sorted(READS))
@pytest.mark.parametrize("where", ["global", "closure", "attribute", "module"])
def test_named_array_changed_in_place(where, read, mode):
    x, to = jitorch.ones(LARGE), READS[read]
    if where == "global":
        a, fn = TABLE, lambda x: x * to(TABLE)
    elif where == "closure":
        a = _array(LARGE)
        fn = lambda x: x * to(a)  # noqa: E731
    elif where == "attribute":
        a, fn = CONFIG.table, lambda x: x * to(CONFIG.table)
    else:
        class Scaled(jitorch.nn.Module):
            def __init__(self):
                super().__init__()
                self.table = _array(LARGE)

            def forward(self, x):
                return x * to(self.table)

        fn = Scaled()
        a = fn.table
    _check(fn, lambda f: f(x), a, MUTATIONS["scale"], mode)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", [np.float64, np.int32, np.float16])
def test_other_dtype_and_shape_arrays(dtype, mode):
    """Another array of another dtype or shape in the same place retraces; torch gives the same values."""
    fn = lambda x, a: x * jitorch.tensor(a) + float(a.sum())  # noqa: E731
    compiled = jitorch.compile(fn, mode=mode)
    x = jitorch.ones(LARGE, dtype=jitorch.float64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for a in (_array(LARGE), _array(LARGE, dtype), _array(LARGE, dtype).reshape(2, -1), _array(LARGE)):
            xs = x.reshape(a.shape)
            got, want = compiled(xs, a), fn(xs, a)
            _close(got, want)
            oracle = torch.ones(a.shape, dtype=torch.float64) * torch.tensor(a) + float(a.sum())
            np.testing.assert_allclose(got.numpy(), oracle.numpy(), rtol=1e-6)


def test_shape_changed_in_place():
    a = _array(LARGE)
    fn = lambda a: jitorch.tensor(a) * 2  # noqa: E731
    compiled = jitorch.compile(fn)
    _close(compiled(a), fn(a))
    a.shape = (2, LARGE // 2)  # the same object and bytes, another shape
    _close(compiled(a), fn(a))


@pytest.mark.parametrize("n", [SMALL, LARGE])
def test_unchanged_array_reuses_the_entry(n):
    """Contents unchanged: no retrace. A small array equal to the last is also the same entry; a large one is by
    identity (a graph may share its memory)."""
    a, x = _array(n), jitorch.ones(n)
    compiled = jitorch.compile(lambda x, a: x * jitorch.tensor(a))
    for _ in range(3):
        compiled(x, a)
    assert len(compiled.entries) == 1
    a[0] = 3.0
    compiled(x, a)
    assert len(compiled.entries) == 2
    compiled(x, a.copy())
    assert len(compiled.entries) == (2 if n == SMALL else 3)


class Batch(dict):
    pass


class Steps(list):
    pass


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("kind", ["dict", "list"])
def test_subclass_attributes_written(kind, mode):
    """``batch.calls = n`` on a list or dict subclass argument reaches the caller's object on every call."""
    def step(batch):
        x = batch["x"] if kind == "dict" else batch[0]
        batch.calls = getattr(batch, "calls", 0) + 1
        batch.size = x.shape[0]
        return x * 2

    def make(n):
        x = jitorch.full((n,), float(n))
        return Batch(x=x) if kind == "dict" else Steps([x])

    compiled = jitorch.compile(step, mode=mode)
    kept_c, kept_e = make(3), make(3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for i in range(5):
            fresh_c, fresh_e = make(3 + i % 2), make(3 + i % 2)
            _close(compiled(fresh_c), step(fresh_e))
            assert fresh_c.__dict__ == fresh_e.__dict__
            _close(compiled(kept_c), step(kept_e))
            assert kept_c.__dict__ == kept_e.__dict__


def test_function_changing_the_array_itself():
    """The function's own in-place NumPy update runs on every call, as eagerly (the change retraces)."""
    def step(x, a):
        a += 1.0
        return x * float(a[0])

    a_c, a_e, x = _array(LARGE), _array(LARGE), jitorch.ones(3)
    compiled = jitorch.compile(step)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _ in range(12):  # past recompile_limit: eager from then on, still equal
            _close(compiled(x, a_c), step(x, a_e))
            np.testing.assert_array_equal(a_c, a_e)


def test_recompile_warning_names_the_changed_array():
    buf, x = np.zeros(LARGE, np.float32), jitorch.ones(LARGE)
    compiled = jitorch.compile(lambda x, b: x + jitorch.tensor(b))
    with pytest.warns(RuntimeWarning, match=r"arg1: .*contents version.*NumPy array changed in place.*from_numpy"):
        for i in range(jitorch.compiler.config.recompile_limit + 1):
            buf[:] = i
            _close(compiled(x, buf), x + jitorch.tensor(buf))
