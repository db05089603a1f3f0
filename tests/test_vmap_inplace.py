"""``vmap`` against ``torch.func.vmap`` where torch's BatchedTensor decides: in-place writes into tensors from outside
the function (refused when the value is batched, made once when it is not), in-place writes into the batch itself,
and reads of batched values into Python (``.item()``, branches), which torch refuses. Every case runs at 4 samples
(the per-sample loop) and 12 (the batched trace first), and twice (the second call takes the remembered paths)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import jitorch

SIZES = (4, 12)


def data(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def outcome(lib, run):
    """``run(lib)``'s results as arrays, or its error as (type name, message)."""
    try:
        out = run(lib)
    except Exception as error:  # noqa: BLE001 - the error is the outcome compared
        return type(error).__name__, str(error)
    flat = lib.utils._pytree.tree_flatten(out)[0]
    return [np.array(o.detach().numpy()) if isinstance(o, lib.Tensor) else o for o in flat]


def same(run):
    """``run`` gives jitorch and torch the same results or the same error, twice in a row."""
    for _ in range(2):
        got, want = outcome(jitorch, run), outcome(torch, run)
        if isinstance(want, tuple):
            assert got == want
            continue
        assert not isinstance(got, tuple), got
        assert len(got) == len(want)
        for g, w in zip(got, want):
            if isinstance(w, np.ndarray):
                assert g.shape == w.shape and g.dtype == w.dtype
                np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-6)
            else:
                assert g == w


WRITES = {
    "add_": lambda buf, r: buf.add_(r),
    "iadd": lambda buf, r: buf.__iadd__(r),
    "mul_": lambda buf, r: buf.mul_(r),
    "sub_": lambda buf, r: buf.sub_(r),
    "copy_": lambda buf, r: buf.copy_(r),
    "setitem": lambda buf, r: buf.__setitem__(slice(0, 2), r[:2]),
    "fill_": lambda buf, r: buf.fill_(r.sum()),
    "pow_": lambda buf, r: buf.pow_(r),
    "masked_fill_": lambda buf, r: buf.masked_fill_(r > 0, r.sum()),
    "clamp_min_": lambda buf, r: buf.clamp_min_(r),
    "detached": lambda buf, r: buf.add_(r.detach()),
    "of a result": lambda buf, r: buf.mul_(2).add_(r),
}


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("captured", [True, False], ids=["captured", "in_dims-None"])
@pytest.mark.parametrize("name", list(WRITES))
def test_a_batched_write_into_an_outside_tensor_refuses_as_torch(name, captured, size):
    def run(lib):
        buf, x = lib.ones(3), lib.tensor(data(size, 3))
        try:
            if captured:
                lib.func.vmap(lambda r: WRITES[name](buf, r))(x)
            else:
                lib.func.vmap(lambda r, b: WRITES[name](b, r), in_dims=(0, None))(x, buf)
        finally:
            assert buf.tolist() == [1.0, 1.0, 1.0]  # refused before any sample wrote
    same(run)


UNBATCHED = {
    "write then read": lambda buf, r: buf.add_(1) * r,
    "read then write": lambda buf, r: (r * buf, buf.mul_(3))[0],
    "chained": lambda buf, r: buf.mul_(2).add_(1) * r,
    "through a view": lambda buf, r: (buf[:1].add_(buf[2:]), r + buf)[1],
    "returned": lambda buf, r: (buf.sub_(0.5), r.sum())[0],
}


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("name", list(UNBATCHED))
def test_an_unbatched_write_into_a_captured_tensor_happens_once(name, size):
    def run(lib):
        buf = lib.tensor([1.0, 2.0, 3.0])
        out = lib.func.vmap(lambda r: UNBATCHED[name](buf, r))(lib.tensor(data(size, 3)))
        return out, buf
    same(run)


def test_a_captured_counter_counts_calls_not_samples():
    for lib in (jitorch, torch):
        calls = lib.zeros(())
        f = lib.func.vmap(lambda r: r * calls.add_(1))
        for size in (4, 12, 4):
            out = f(lib.ones(size, 2))
        assert calls.item() == 3 and out.tolist() == [[3.0, 3.0]] * 4


INTO_THE_BATCH = {
    "mul_": lambda r: r.mul_(2),
    "add_ of its sum": lambda r: r.add_(r.sum()),
    "setitem": lambda r: (r.__setitem__(0, 5.0), r)[1],
    "relu_ of a result": lambda r: (r * 2).relu_(),
    "into zeros_like": lambda r: jitorch_or_torch(r).zeros_like(r).copy_(r * 3),
    "into new_zeros": lambda r: r.new_zeros(3).copy_(r) + 1,
    "out-of-place index_add": lambda r: jitorch_or_torch(r).zeros(3).index_add(0, jitorch_or_torch(r).tensor([0, 0]),
                                                                                r[:2]),
}


def jitorch_or_torch(t):
    return jitorch if isinstance(t, jitorch.Tensor) else torch


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("name", list(INTO_THE_BATCH))
def test_writes_into_the_batch_itself_run_as_torch(name, size):
    def run(lib):
        x = lib.tensor(data(size, 3))
        return lib.func.vmap(INTO_THE_BATCH[name])(x), x  # the input after: written through where torch writes
    same(run)


READS = {
    "item": lambda r: r * r.sum().item(),
    "float": lambda r: r * float(r.sum()),
    "int": lambda r: r * int(r[0]),
    "complex": lambda r: r * complex(r[0]).real,
    "index": lambda r: r * [1.0, 2.0][(r[0] > 0).long()],
    "bool": lambda r: r if bool(r.sum() > 0) else -r,
    "branch": lambda r: r if r.sum() > 0 else -r,
    "tolist": lambda r: r * r.tolist()[0],
    "numpy": lambda r: r * float(r.numpy()[0]),
    "of a detached value": lambda r: r * r.detach().sum().item(),
}


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("name", list(READS))
def test_a_read_of_a_batched_value_refuses_as_torch(name, size):
    same(lambda lib: lib.func.vmap(READS[name])(lib.tensor(data(size, 3))))


@pytest.mark.parametrize("size", SIZES)
def test_reads_refuse_under_every_mapping(size):
    same(lambda lib: lib.func.vmap(lambda r: r * r.sum().item(), in_dims=1)(lib.tensor(data(3, size))))
    same(lambda lib: lib.func.vmap(lib.func.vmap(lambda a: a * a.sum().item()))(lib.tensor(data(size, 3, 2))))
    same(lambda lib: lib.func.vmap(lib.func.grad(lambda a: (a * a.sum().item()).sum()))(lib.tensor(data(size, 3))))
    same(lambda lib: lib.func.vmap(lambda r: r * r.sum().item(), randomness="different")(lib.tensor(data(size, 3))))


@pytest.mark.parametrize("size", SIZES)
def test_reads_of_unbatched_values_go_on(size):
    def run(lib):
        x, n = lib.tensor(data(size, 3)), lib.tensor(2.0)
        return (lib.func.vmap(lambda r, k: r * k.item(), in_dims=(0, None))(x, n),
                lib.func.vmap(lambda r: r * n.item() if n > 0 else r)(x),
                lib.func.vmap(lambda r: r.reshape(int(r.shape[0]), 1) * float(n))(x))
    same(run)


def test_the_same_code_with_other_captured_values_is_checked_again():
    # One lambda's code, closures that write or not: a clean first call must not let the writing one through.
    def make(lib, buf, write):
        return lib.func.vmap(lambda r: buf.add_(r) if write else r + buf)
    for lib in (jitorch, torch):
        buf = lib.zeros(3)
        assert make(lib, buf, False)(lib.ones(4, 3)).shape == (4, 3)
        with pytest.raises(RuntimeError, match="broadcast shape"):
            make(lib, buf, True)(lib.ones(4, 3))
        assert buf.tolist() == [0.0, 0.0, 0.0]


# State the function reads besides its arguments' shapes and its closure's identities: a call must be checked again
# when it changed, at 4 samples (the loop) and at 64 (the trace reads ``k``'s value, so the loop there too).
def _global_flag(lib, body):
    scope = {"lib": lib, "FLAG": False}
    exec(f"def f(x, k, buf):\n    if FLAG:\n        {body}\n    return x * 2 if k.sum() > 0 else x", scope)
    return scope["f"], lambda: scope.__setitem__("FLAG", True)


def _attribute_flag(lib, body, holder):
    def f(x, k, buf):
        if holder.FLAG:
            eval(body)
        return x * 2 if k.sum() > 0 else x
    return f, lambda: setattr(holder, "FLAG", True)


def _dict_flag(lib, body):
    settings = {"flag": False}

    def f(x, k, buf):
        if settings["flag"]:
            eval(body)
        return x * 2 if k.sum() > 0 else x
    return f, lambda: settings.__setitem__("flag", True)


def _tensor_flag(lib, body):
    switch = lib.zeros(())

    def f(x, k, buf):
        if switch > 0:
            eval(body)
        return x * 2 if k.sum() > 0 else x
    return f, lambda: switch.fill_(1)


FLAGS = {
    "global": _global_flag,
    "object attribute": lambda lib, body: _attribute_flag(lib, body, type("Settings", (), {"FLAG": False})()),
    "closure dict": _dict_flag,
    "captured tensor": _tensor_flag,
}
GUARDED = {"unbatched write": "buf.add_(1)", "batched write": "buf.add_(x)", "item": "x.sum().item()"}


def _twice(lib, make, size):
    """Calls ``f`` with the state off, then on: the outputs, or the error, and the captured buffer after."""
    buf, x, k = lib.zeros(3), lib.tensor(data(size, 3)), lib.ones(2)
    f, flip = make(lib)
    mapped = lib.func.vmap(f, in_dims=(0, None, None))
    outs = [mapped(x, k, buf)]
    flip()
    try:
        outs.append(mapped(x, k, buf))
    except RuntimeError as error:
        outs.append(str(error))
    return [o.numpy() if isinstance(o, lib.Tensor) else o for o in outs] + [buf.tolist()]


def _agree(got, want):
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert type(g) is type(w), (g, w)  # an array where torch raised (or the reverse) fails here
        if isinstance(w, np.ndarray):
            np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-6)
        else:
            assert g == w


def _same_twice(make, size):
    _agree(_twice(jitorch, make, size), _twice(torch, make, size))


@pytest.mark.parametrize("size", (4, 64))
@pytest.mark.parametrize("guarded", list(GUARDED))
@pytest.mark.parametrize("flag", list(FLAGS))
def test_a_later_call_whose_named_state_changed_is_checked_again(flag, guarded, size):
    _same_twice(lambda lib: FLAGS[flag](lib, GUARDED[guarded]), size)


@pytest.mark.parametrize("size", (4, 64))
@pytest.mark.parametrize("guarded", list(GUARDED))
def test_a_flag_in_a_user_module_is_checked_again(guarded, size, tmp_path, monkeypatch):
    (tmp_path / "vmap_settings_for_test.py").write_text("FLAG = False\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import vmap_settings_for_test as settings

    def make(lib):
        settings.FLAG = False  # each library's run starts from it off
        return _attribute_flag(lib, GUARDED[guarded], settings)
    try:
        _same_twice(make, size)
    finally:
        settings.FLAG = False


@pytest.mark.parametrize("size", (4, 64))
@pytest.mark.parametrize("guarded", list(GUARDED))
def test_an_unmapped_input_read_by_value_is_checked_again(guarded, size):
    def run(lib):
        buf, x = lib.zeros(3), lib.tensor(data(size, 3))

        def h(r, flag, b):
            if flag.sum() > 0:
                eval(GUARDED[guarded], {"buf": b, "x": r})
            return r * 2
        mapped = lib.func.vmap(h, in_dims=(0, None, None))
        outs = [mapped(x, lib.zeros(2), buf)]
        try:
            outs.append(mapped(x, lib.ones(2), buf))
        except RuntimeError as error:
            outs.append(str(error))
        return [o.numpy() if isinstance(o, lib.Tensor) else o for o in outs] + [buf.tolist()]
    _agree(run(jitorch), run(torch))
