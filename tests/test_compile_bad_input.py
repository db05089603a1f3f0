"""Bad input to a compiled function whose code is already compiled (and, under ``mode="reduce-overhead"``, captured
and replayed natively): it raises eager's error (PyTorch's exception class, eager jitorch's message naming the op)
instead of returning a value or a row's raw error, and the function keeps working for good calls afterwards. Each
call here passes the guards of the good calls before it (same shapes, dtypes and layouts)."""
import numpy as np
import pytest
import torch

import jitorch

from helpers import make_array


def _lib_args(args, lib):
    return [lib.from_numpy(a.copy()) if isinstance(a, np.ndarray) else a(lib) if callable(a) else a for a in args]


def _error(fn, args):
    try:
        fn(*args)
    except Exception as e:  # noqa: BLE001
        return e
    raise AssertionError("expected an error")


def _check_compiled_error(fn, good, bad, mode=None):
    """``fn(lib, *args)`` compiled and warmed on ``good`` raises on ``bad`` as torch (class) and eager jitorch (class
    and message) do, then still equals eager on ``good``."""
    compiled = jitorch.compile(lambda *a: fn(jitorch, *a), mode=mode)
    for _ in range(3):
        compiled(*_lib_args(good, jitorch))
    torch_err = _error(lambda *a: fn(torch, *a), _lib_args(bad, torch))
    eager_err = _error(lambda *a: fn(jitorch, *a), _lib_args(bad, jitorch))
    got = _error(compiled, _lib_args(bad, jitorch))
    assert isinstance(got, type(torch_err)), f"torch raised {torch_err!r}; compiled jitorch raised {got!r}"
    assert type(got) is type(eager_err) and str(got) == str(eager_err), f"eager {eager_err!r}, compiled {got!r}"
    after = compiled(*_lib_args(good, jitorch))
    want = fn(torch, *_lib_args(good, torch))
    np.testing.assert_allclose(after.numpy(), want.numpy(), rtol=1e-5, atol=1e-6)


X = make_array((3, 4), "float32", np.random.default_rng(0))
SRC = make_array((2, 4), "float32", np.random.default_rng(1))
W = make_array((5, 3), "float32", np.random.default_rng(2))


def _i(values):
    return np.array(values, dtype=np.int64)


INDEX_CASES = {
    # name: (fn(lib, *args), good args, bad args)
    "gather above": (lambda L, x, i: L.gather(x * 2, 1, i) + 1, [X, _i([[0, 1], [2, 3], [1, 1]])],
                     [X, _i([[0, 1], [2, 4], [1, 1]])]),
    "gather negative": (lambda L, x, i: L.gather(x * 2, 1, i) + 1, [X, _i([[0, 1], [2, 3], [1, 1]])],
                        [X, _i([[0, 1], [2, -1], [1, 1]])]),
    "scatter": (lambda L, x, i: (x * 1).scatter(1, i, x[:, :1] * 3), [X, _i([[0], [1], [3]])],
                [X, _i([[0], [4], [3]])]),
    "scatter_add": (lambda L, x, i: (x + 1).scatter_add(1, i, x * 2), [X, _i([[0, 1], [1, 2], [3, 3]])],
                    [X, _i([[0, 1], [1, 7], [3, 3]])]),
    "index_select": (lambda L, x, i: L.index_select(x * 3, 0, i).sum(1), [X, _i([0, 2, 1])], [X, _i([0, 3, 1])]),
    "index_select dim 1": (lambda L, x, i: L.index_select(x * 3, 1, i) + 1, [X, _i([0, 2, 1])], [X, _i([0, 4, 1])]),
    "index_add_": (lambda L, x, i, v: (x * 1).index_add_(0, i, v * 2), [X, _i([0, 2]), SRC], [X, _i([0, 3]), SRC]),
    "index_copy": (lambda L, x, i, v: (x * 1).index_copy(0, i, v * 2), [X, _i([0, 2]), SRC], [X, _i([0, 3]), SRC]),
    "index_fill dim 1": (lambda L, x, i: (x * 1).index_fill(1, i, 5.0), [X, _i([0, 2])], [X, _i([0, 4])]),
    "embedding": (lambda L, w, i: L.nn.functional.embedding(i, w * 2).relu(), [W, _i([0, 4, 2])],
                  [W, _i([0, 5, 2])]),
    "embedding negative": (lambda L, w, i: L.nn.functional.embedding(i, w * 2).relu(), [W, _i([0, 4, 2])],
                           [W, _i([0, -1, 2])]),
    "x[idx]": (lambda L, x, i: (x * 2)[i] + 1, [X, _i([0, 2])], [X, _i([0, 3])]),
    "index_put_": (lambda L, x, i, v: (x * 1).index_put_((i,), v), [X, _i([0, 2]), SRC], [X, _i([0, -4]), SRC]),
    "cross_entropy target": (lambda L, x, t: L.nn.functional.cross_entropy(x * 2, t), [X, _i([0, 3, 1])],
                             [X, _i([0, 4, 1])]),
    "one_hot": (lambda L, i: L.nn.functional.one_hot(i * 1, 4) * 2, [_i([0, 3, 2])], [_i([0, 4, 2])]),
}


@pytest.mark.parametrize("mode", [None, "reduce-overhead"])
@pytest.mark.parametrize("name", sorted(INDEX_CASES))
def test_compiled_index_out_of_range_raises_eagers_error(name, mode):
    fn, good, bad = INDEX_CASES[name]
    _check_compiled_error(fn, good, bad, mode)


def test_replayed_cross_entropy_checks_the_new_target():
    # The replay took the new target by address while its range check read the captured one: a target of 400000
    # counted as ignored and the loss came back as a value.
    compiled = jitorch.compile(lambda x, t: jitorch.nn.functional.cross_entropy(x * 2, t), mode="reduce-overhead")
    x = jitorch.from_numpy(X.copy())
    for _ in range(3):
        compiled(x, jitorch.tensor([0, 3, 1]))
    with pytest.raises(IndexError, match="Target 400000 is out of bounds"):
        compiled(x, jitorch.tensor([0, 400000, 1]))
    want = torch.nn.functional.cross_entropy(torch.from_numpy(X.copy()) * 2, torch.tensor([2, 0, 3]))
    got = compiled(x, jitorch.tensor([2, 0, 3]))
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5)


def test_replayed_inplace_write_into_expanded_argument_raises():
    def fn(x):
        x.add_(1)
        return x * 2

    compiled = jitorch.compile(fn, mode="reduce-overhead")
    for _ in range(3):
        compiled(jitorch.from_numpy(X.copy()))
    with pytest.raises(RuntimeError) as torch_err:
        fn(torch.from_numpy(X[:1].copy()).expand(3, 4))
    assert "single memory location" in str(torch_err.value)
    with pytest.warns(UserWarning, match="expanded tensor"), pytest.raises(RuntimeError, match="add_: unsupported"):
        compiled(jitorch.from_numpy(X[:1].copy()).expand(3, 4))
    got = compiled(jitorch.from_numpy(X.copy()))
    np.testing.assert_allclose(got.numpy(), (X + 1) * 2, rtol=1e-6)


@pytest.mark.parametrize("mode", [None, "reduce-overhead"])
@pytest.mark.parametrize("op", ["floordiv", "remainder"])
def test_compiled_integer_division_by_zero_raises(op, mode):
    def fn(L, a, b):
        return (a + 1) // b if op == "floordiv" else (a + 1) % b
    a, b = np.array([7, -7, 5, 3], np.int32), np.array([2, 3, -2, 1], np.int32)
    compiled = jitorch.compile(lambda *t: fn(jitorch, *t), mode=mode)
    for _ in range(3):
        compiled(jitorch.from_numpy(a), jitorch.from_numpy(b))
    zero = np.array([2, 0, -2, 1], np.int32)
    with pytest.raises(RuntimeError):
        fn(torch, torch.from_numpy(a), torch.from_numpy(zero))
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        compiled(jitorch.from_numpy(a), jitorch.from_numpy(zero))
    want = fn(torch, torch.from_numpy(a), torch.from_numpy(b)).numpy()
    np.testing.assert_array_equal(compiled(jitorch.from_numpy(a), jitorch.from_numpy(b)).numpy(), want)


def _nan_input():
    x = X.copy()
    x[0, 1], x[1, :], x[2, 2] = np.nan, -np.inf, np.inf
    return x


NAN_CASES = {
    "softmax": lambda L, x: (x * 2).softmax(1),
    "log_softmax": lambda L, x: (x * 2).log_softmax(1),
    "layer_norm": lambda L, x: L.nn.functional.layer_norm(x * 1, (4,)),
    "argmax": lambda L, x: (x * 1).argmax(1),
    "argmin": lambda L, x: (x * 1).argmin(1),
    "amax": lambda L, x: (x * 1).amax(1),
    "max indices": lambda L, x: (x * 1).max(1).indices,
    "cross_entropy none": lambda L, x: L.nn.functional.cross_entropy(x * 1, L.tensor([0, 1, 2]), reduction="none"),
    "log of negatives": lambda L, x: (x - 1).log() + (x - 1).sqrt(),
}


@pytest.mark.parametrize("mode", [None, "reduce-overhead"])
@pytest.mark.parametrize("name", sorted(NAN_CASES))
def test_compiled_nan_and_inf_propagate_as_torch(name, mode):
    fn = NAN_CASES[name]
    compiled = jitorch.compile(lambda x: fn(jitorch, x), mode=mode)
    for _ in range(3):
        compiled(jitorch.from_numpy(X.copy()))
    bad = _nan_input()
    got = compiled(jitorch.from_numpy(bad.copy())).numpy()
    want = fn(torch, torch.from_numpy(bad.copy())).numpy()
    assert got.dtype == want.dtype
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, equal_nan=True)


@pytest.mark.parametrize("target", [4, -1])
def test_replayed_training_step_refuses_an_out_of_range_class(target):
    # A captured SGD step took such a batch's targets by address and trained on it, the check reading old targets.
    jitorch.manual_seed(0)
    model = jitorch.nn.Sequential(jitorch.nn.Linear(8, 16), jitorch.nn.ReLU(), jitorch.nn.Linear(16, 4))
    opt = jitorch.optim.SGD(model.parameters(), lr=0.1)

    def step(x, t):
        opt.zero_grad()
        loss = jitorch.nn.functional.cross_entropy(model(x), t)
        loss.backward()
        opt.step()
        return loss.detach()

    compiled = jitorch.compile(step, mode="reduce-overhead")
    x, t = jitorch.randn(6, 8), jitorch.tensor([0, 1, 2, 3, 0, 1])
    for _ in range(3):
        compiled(x, t)
    before = [p.detach().clone() for p in model.parameters()]
    with pytest.raises(IndexError, match=f"Target {target} is out of bounds"):
        compiled(x, jitorch.tensor([0, 1, 2, target, 0, 1]))
    assert all(jitorch.equal(a, b) for a, b in zip(before, model.parameters()))
    want = jitorch.nn.functional.cross_entropy(model(x), t).detach()
    np.testing.assert_allclose(compiled(x, t).numpy(), want.numpy(), rtol=1e-6)
