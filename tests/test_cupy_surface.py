"""Every op row's kernel runs with NumPy restricted to CuPy's surface (``cupy_surface.py``), forward and backward.

A kernel that uses a NumPy-only name or keyword passes every CPU test and breaks on the GPU. Here the ``surface``
fixture sets ``jitorch._dispatch.CPU_XP`` to the restricted module for the whole test, so such a kernel fails on the
CPU. Each case of the data-driven sweep runs twice, with plain NumPy first and then through the surface, and the two
runs must agree exactly (outputs and input gradients): the surface only filters names, it computes the same thing.

A wrapper around every row's kernel records which rows ran with the surface; ``test_every_row_is_reached`` fails
naming the rows no case reached. The dispatcher's float fast paths call kernels they captured at import, so while the
fixture is active they are switched off (``TENSOR_TYPES`` emptied): every op then calls its row's (wrapped) kernel.

The cases are registered in ``cupy_surface_cases.py`` and ``cupy_surface_cases_nn.py``; the surface's own rules
are tested in ``test_cupy_surface_rules.py``.

Cases whose kernel lives in a file another engineer owns are marked ``xfail(strict=True)`` with the offending name,
so they turn into failures once the kernel is fixed.
"""
from __future__ import annotations

import ast
import sys
import zlib
from pathlib import Path

import numpy as np
import pytest
from cupy_surface import cupy_array_method_keywords, cupy_surface_numpy, cupy_surface_special, is_surface

import jitorch
from jitorch import _dispatch, _dispatch_fast
from jitorch.ops import OPS
from jitorch.runtime import devices as runtime_devices

from cupy_surface_cases import CASES
import cupy_surface_cases_nn  # noqa: F401  (adds the nn and random cases to CASES)

SURFACE = cupy_surface_numpy()
SPECIAL_SURFACE = cupy_surface_special()
_TENSOR_TYPES = _dispatch.TENSOR_TYPES
# Rows reached with the surface, per case id; a case adds to ``_reached`` while it runs.
REACHED: dict[str, set[str]] = {}
_reached: set[str] = set()


# -- the fixture -------------------------------------------------------------------------------------------------------
def _recording(op):
    kernel = op.kernel

    def run(xp, *arrays, **attrs):
        if is_surface(xp):
            _reached.add(op.name)
        return kernel(xp, *arrays, **attrs)
    return run


_SPECIAL_MODULE = runtime_devices.special_module


def _special_users():
    """Op modules that imported the runtime's ``special_module`` by name (kernels resolve it there at call time)."""
    return [m for name, m in list(sys.modules.items())
            if name.startswith("jitorch.ops.") and getattr(m, "special_module", None) is _SPECIAL_MODULE]


def _special_surface(xp):
    return SPECIAL_SURFACE if is_surface(xp) else _SPECIAL_MODULE(xp)


@pytest.fixture
def surface(monkeypatch):
    """Kernels get NumPy restricted to CuPy's surface (and ``scipy.special`` restricted to ``cupyx``'s) for the test."""
    monkeypatch.setattr(_dispatch, "CPU_XP", SURFACE)
    monkeypatch.setattr(_dispatch, "TENSOR_TYPES", frozenset())
    monkeypatch.setattr(_dispatch_fast, "TENSOR_TYPES", frozenset())  # the fast paths' own binding: none taken
    for op in OPS.values():
        monkeypatch.setattr(op, "kernel", _recording(op))
    for module in _special_users():
        monkeypatch.setattr(module, "special_module", _special_surface)
    return monkeypatch


# -- running a case ----------------------------------------------------------------------------------------------------
class Maker:
    """Deterministic inputs for one case: the same seed gives the same tensors in the plain and the surface run."""

    def __init__(self, seed):
        self.rng = np.random.default_rng(seed)
        self.leaves = []

    def _leaf(self, arr, grad):
        t = jitorch.tensor(arr, requires_grad=grad)
        if grad:
            self.leaves.append(t)
        return t

    def f(self, *shape, lo=-2.0, hi=2.0, dtype="float32", grad=True):
        """Uniform floats in [lo, hi)."""
        return self._leaf(self.rng.uniform(lo, hi, shape).astype(dtype), grad)

    def d(self, *shape, **kw):
        """float64 (linear algebra)."""
        return self.f(*shape, dtype="float64", **kw)

    def values(self, values, dtype="float32", grad=True):
        return self._leaf(np.asarray(values, dtype=dtype), grad)

    def i(self, *shape, lo=0, hi=5, dtype="int64"):
        return jitorch.tensor(self.rng.integers(lo, hi, shape).astype(dtype))

    def b(self, *shape):
        return jitorch.tensor(self.rng.random(shape) < 0.5)

    def spd(self, n, *batch):
        """A symmetric positive-definite float64 leaf."""
        a = self.rng.standard_normal(batch + (n, n))
        return self._leaf(a @ np.swapaxes(a, -1, -2) + n * np.eye(n), True)


def _tensors(out):
    if isinstance(out, jitorch.Tensor):
        return [out]
    if isinstance(out, (tuple, list)):
        return [t for o in out for t in _tensors(o)]
    return []


def _numpy(t):
    if t.is_sparse:  # a sparse=True embedding's weight gradient
        t = t.coalesce().to_dense()
    return np.array(t.detach().numpy(), copy=True)


def run_case(case):
    """Outputs and input gradients (after backward with a random upstream gradient) as NumPy arrays."""
    maker = Maker(zlib.crc32(case.id.encode()))
    jitorch.manual_seed(0)
    outs = _tensors(case.fn(jitorch, maker))
    results = [_numpy(o) for o in outs]
    differentiable = [o for o in outs if o.requires_grad and o.is_floating_point()]
    if differentiable:
        grads = [jitorch.tensor(np.asarray(maker.rng.standard_normal(tuple(o.shape))).astype(_numpy(o).dtype))
                 for o in differentiable]
        if len(differentiable) == 1:
            differentiable[0].backward(grads[0])
        else:
            # One root, so the engine's order of accumulating into the leaves is the same in both runs (with several
            # roots it follows a set of nodes, whose order varies with object addresses: float32 sums differ by 1 ulp).
            sum((o * g).sum() for o, g in zip(differentiable, grads)).backward()
        results += [None if leaf.grad is None else _numpy(leaf.grad) for leaf in maker.leaves]
    return results


def run_plain(case, monkeypatch):
    """``run_case`` with plain NumPy (and the dispatcher's fast paths), inside a test that holds the surface."""
    with monkeypatch.context() as m:
        m.setattr(_dispatch, "CPU_XP", np)
        m.setattr(_dispatch, "TENSOR_TYPES", _TENSOR_TYPES)
        return run_case(case)


def run_surface(case):
    global _reached
    _reached = REACHED.setdefault(case.id, set())
    try:
        return run_case(case)
    finally:
        _reached = set()


def assert_same(expected, got):
    assert len(expected) == len(got)
    for i, (e, g) in enumerate(zip(expected, got)):
        assert (e is None) == (g is None), f"result {i}: one run has no gradient"
        if e is not None:
            assert (e.shape, e.dtype) == (g.shape, g.dtype), f"result {i}"
            np.testing.assert_array_equal(g, e, err_msg=f"result {i}")


CASE_IDS = [c.id for c in CASES]
assert len(set(CASE_IDS)) == len(CASE_IDS), "duplicate case ids"


def _params():
    for c in CASES:
        marks = () if c.xfail is None else pytest.mark.xfail(strict=True, raises=(AttributeError, TypeError),
                                                             reason=c.xfail)
        yield pytest.param(c, id=c.id, marks=marks)


@pytest.mark.parametrize("case_", list(_params()))
def test_sweep(surface, case_):
    expected = run_plain(case_, surface)
    got = run_surface(case_)
    assert_same(expected, got)


def test_every_row_is_reached(surface):
    """Each row of ``OPS`` ran with the surface in some case (forward, backward or a view replay)."""
    for c in CASES:
        if c.id not in REACHED:  # not run in this process (a ``-k`` selection, or another xdist worker ran it)
            try:
                run_surface(c)
            except (AttributeError, TypeError):
                if c.xfail is None:
                    raise
    reached = set().union(*REACHED.values())
    missing = sorted(set(OPS) - reached)
    assert not missing, f"rows no case reached with the surface: {missing}"


def test_fixture_catches_a_numpy_only_kernel(surface):
    """A kernel reaching for a NumPy-only keyword fails under the fixture, also through the float fast path."""
    surface.setattr(OPS["exp"], "kernel", lambda xp, a: xp.sum(a, where=a > 0))
    with pytest.raises(TypeError, match=r"xp.sum\(\): keyword 'where'"):
        jitorch.exp(jitorch.ones(3))


def _kernel_method_calls():
    """(file, line, method, keywords) of every ``<array>.<method>(..., keyword=...)`` call in a kernel (a function
    or lambda of the op modules whose first parameter is ``xp``) where ``method`` is a ``cupy.ndarray`` method."""
    import cupy

    calls = []
    for path in sorted(Path(jitorch.ops.__file__).parent.glob("*.py")):
        tree = ast.parse(path.read_text())
        for fn in ast.walk(tree):
            if not isinstance(fn, (ast.FunctionDef, ast.Lambda)) or not fn.args.args or fn.args.args[0].arg != "xp":
                continue
            for node in ast.walk(fn):
                if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.keywords):
                    continue
                receiver, method = node.func.value, node.func.attr
                if isinstance(receiver, ast.Name) and receiver.id in ("xp", "np") or not hasattr(cupy.ndarray, method):
                    continue
                calls.append((path.name, node.lineno, method, [k.arg for k in node.keywords if k.arg]))
    return calls


def test_kernel_array_method_keywords_exist_in_cupy():
    """Array methods escape the surface (kernels get NumPy arrays): check their keywords statically instead."""
    calls = _kernel_method_calls()
    assert calls, "the scan found no array method calls: it no longer recognizes kernels"
    wrong = [f"{file}:{line}: .{method}({key}=...)" for file, line, method, keys in calls
             for key in keys if key not in (cupy_array_method_keywords(method) or {key})]
    assert not wrong, f"array method keywords CuPy's ndarray does not take: {wrong}"

