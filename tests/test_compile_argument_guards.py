"""jitorch.compile's guards on what arguments hold, against eager and torch.compile(backend="eager"): list and dict
subclass arguments (an EasyDict whose ``__setattr__`` also stores items; attributes the code reads changed between
calls) and large NumPy arrays, baked into the graph (``jitorch.tensor(a)``, ``float(a[0])``: a change retraces) or
read zero-copy through ``jitorch.from_numpy`` (the graph reads their memory on every call: a change needs no retrace,
so a buffer updated every call stays compiled)."""
from __future__ import annotations

import warnings

import numpy as np
import torch

import jitorch
from jitorch._compile.guards import _SMALL_ARRAY

LARGE = _SMALL_ARRAY + 904


def _close(got, want, atol=1e-6):
    np.testing.assert_allclose(np.asarray(got.tolist()), want.detach().numpy(), rtol=1e-6, atol=atol)


def _easy_dict():
    class EasyDict(dict):  # the easydict package's pattern: attributes are items too
        def __setattr__(self, name, value):
            super().__setattr__(name, value)
            super().__setitem__(name, value)
    return EasyDict


def _tagged_list():
    class TaggedList(list):
        pass
    return TaggedList


def _summed(b):
    return sum(v.sum() for v in b.values()) + len(b)


def test_an_easydict_argument_keeps_its_items():
    easy = _easy_dict()
    mine, theirs = jitorch.compile(_summed), torch.compile(_summed, backend="eager")
    b_j, b_t = easy(), easy()
    for lib, b in ((jitorch, b_j), (torch, b_t)):
        b.x = lib.ones(2)
        b.y = lib.ones(2) * 2
    for _ in range(3):
        _close(mine(b_j), theirs(b_t))
        _close(mine(b_j), _summed(b_t))
    assert list(b_j) == list(b_t) == ["x", "y"] and set(b_j.__dict__) == {"x", "y"}


def test_an_easydict_attribute_set_by_the_function_reaches_the_caller_as_item_and_attribute():
    easy = _easy_dict()

    def step(x, b):
        b.h = b.x + x
        return b.h.sum()

    mine, theirs = jitorch.compile(step), torch.compile(step, backend="eager")
    b_j, b_t = easy(), easy()
    b_j.x, b_t.x = jitorch.ones(3), torch.ones(3)
    for i in range(3):
        _close(mine(jitorch.full((3,), float(i)), b_j), theirs(torch.full((3,), float(i)), b_t))
        _close(b_j["h"], b_t["h"])
        _close(b_j.h, b_t.h)
    assert sorted(b_j) == sorted(b_t) == ["h", "x"]


def test_a_list_subclass_attribute_changed_between_calls_is_read_again():
    tagged = _tagged_list()

    def scaled(lst):
        return lst[0] * lst.scale

    mine, theirs = jitorch.compile(scaled), torch.compile(scaled, backend="eager")
    l_j, l_t = tagged([jitorch.ones(2)]), tagged([torch.ones(2)])
    for scale in (2.0, 3.0, 3.0, -1.5):
        l_j.scale = l_t.scale = scale
        _close(mine(l_j), theirs(l_t))
        _close(mine(l_j), scaled(l_t))


def test_a_dict_subclass_attribute_changed_between_calls_is_read_again_without_tensors_inside():
    class Settings(dict):
        pass

    def shifted(x, s):
        return x * s["w"] + s.shift

    mine, theirs = jitorch.compile(shifted), torch.compile(shifted, backend="eager")
    s_j, s_t = Settings(w=2.0), Settings(w=2.0)
    for shift in (1.0, 4.0, -2.0):
        s_j.shift = s_t.shift = shift
        _close(mine(jitorch.ones(3), s_j), theirs(torch.ones(3), s_t))


def test_an_attribute_the_code_never_reads_changing_keeps_one_entry():
    tagged = _tagged_list()
    f = jitorch.compile(lambda lst: lst[0] * lst.scale)
    lst = tagged([jitorch.ones(2)])
    lst.scale = 2.0
    for step in range(10):
        lst.step_counter = step  # never read by the code
        _close(f(lst), torch.full((2,), 2.0))
    assert len(f.entries) == 1 and not f._fell_back


def _buffer_sum(x, buf):
    return x + jitorch.from_numpy(buf).sum() if isinstance(x, jitorch.Tensor) else x + torch.from_numpy(buf).sum()


def test_a_buffer_read_zero_copy_and_updated_every_call_stays_compiled_and_correct():
    x_j, x_t = jitorch.zeros(2), torch.zeros(2)
    buf_j, buf_t = np.zeros(LARGE, np.float32), np.zeros(LARGE, np.float32)
    mine, theirs = jitorch.compile(_buffer_sum), torch.compile(_buffer_sum, backend="eager")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no recompile_limit warning
        for i in range(jitorch.compiler.config.recompile_limit + 4):
            buf_j[i] = buf_t[i] = i + 1.0
            _close(mine(x_j, buf_j), theirs(x_t, buf_t))
    assert len(mine.entries) == 1 and not mine._fell_back


def test_a_strided_array_baked_in_is_read_again_after_an_in_place_change_and_kept_while_unchanged():
    def first(x, a):
        return x * float(a[1])

    base_j, base_t = np.arange(2.0 * LARGE).astype(np.float32), np.arange(2.0 * LARGE).astype(np.float32)
    base_j[5::2] = base_t[5::2] = np.nan  # NaNs compare equal to themselves as stored bits: no retrace
    a_j, a_t = base_j[::2], base_t[::2]
    mine, theirs = jitorch.compile(first), torch.compile(first, backend="eager")
    x_j, x_t = jitorch.ones(3), torch.ones(3)
    for _ in range(3):
        _close(mine(x_j, a_j), theirs(x_t, a_t))
    assert len(mine.entries) == 1
    a_j[1] = a_t[1] = -7.0
    _close(mine(x_j, a_j), theirs(x_t, a_t))
    assert len(mine.entries) == 2


def test_an_array_both_copied_and_read_zero_copy_in_different_calls_is_guarded_per_entry():
    def step(x, a, live):
        return x + (jitorch.from_numpy(a) if live else jitorch.tensor(a)).sum()

    a = np.ones(LARGE, np.float32)
    f, x = jitorch.compile(step), jitorch.zeros(1)
    for i in range(4):
        for live in (True, False):
            a[i] = 3.0
            _close(f(x, a, live), torch.zeros(1) + torch.from_numpy(a).sum(), atol=1e-3)


def test_the_default_dtype_is_guarded_a_graph_traced_under_float64_is_not_reused_under_float32():
    # ``arange(2.)`` and Python floats take the default dtype at trace time: a call under another default retraces.
    def f(x):
        return x + jitorch.arange(2.0) * 0.5

    compiled = jitorch.compile(f)
    try:
        for default in (torch.float64, torch.float32, torch.float64):
            jitorch.set_default_dtype(getattr(jitorch, str(default).split(".")[1]))
            torch.set_default_dtype(default)
            for dtype in ("float32", "float64"):
                x = np.ones(2, dtype)
                got, want = compiled(jitorch.tensor(x)), torch.tensor(x) + torch.arange(2.0) * 0.5
                assert got.dtype == getattr(jitorch, str(want.dtype).split(".")[1]) == f(jitorch.tensor(x)).dtype
                _close(got, want)
    finally:
        jitorch.set_default_dtype(jitorch.float32)
        torch.set_default_dtype(torch.float32)
