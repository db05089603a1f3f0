"""torch.quasirandom.SobolEngine: jitorch's engine draws torch's points, bit for bit, through every call sequence."""
import numpy as np
import pytest
import torch

import jitorch


def _dtype_name(t):
    return str(t.dtype).rpartition(".")[2]


def _assert_same(got, want):
    assert _dtype_name(got) == _dtype_name(want)
    assert tuple(got.shape) == tuple(want.shape)
    np.testing.assert_array_equal(got.numpy(), want.numpy())


def _engines(dimension, scramble, seed):
    if scramble and seed is None:       # the scramble then draws from the default generator
        torch.manual_seed(11)
        jitorch.manual_seed(11)
    return (torch.quasirandom.SobolEngine(dimension, scramble=scramble, seed=seed),
            jitorch.quasirandom.SobolEngine(dimension, scramble=scramble, seed=seed))


CALLS = [("draw", 1, None), ("draw", 5, None), ("fast_forward", 3), ("draw", 7, "float64"), ("draw_base2", 4),
         ("draw_base2", 5), ("draw", 1, None), ("draw_base2", 2),
         ("fast_forward", 1), ("draw", 2, None), ("reset",), ("draw", 1, "float64"), ("draw", 33, None),
         ("fast_forward", 1000), ("draw", 3, None)]


@pytest.mark.parametrize("dimension", [1, 3, 40])
@pytest.mark.parametrize("scramble,seed", [(False, None), (True, 0), (True, 123), (True, None)])
def test_call_sequences_give_torchs_points_and_state(dimension, scramble, seed):
    theirs, ours = _engines(dimension, scramble, seed)
    np.testing.assert_array_equal(ours.sobolstate.numpy(), theirs.sobolstate.numpy())
    np.testing.assert_array_equal(ours.shift.numpy(), theirs.shift.numpy())
    for name, *args in CALLS:
        if name == "draw":
            n, dtype = args
            _assert_same(ours.draw(n, dtype=getattr(jitorch, dtype) if dtype else None),
                         theirs.draw(n, dtype=getattr(torch, dtype) if dtype else None))
        elif name == "draw_base2":
            try:
                want = theirs.draw_base2(*args)
            except ValueError as refusal:
                with pytest.raises(ValueError) as got:
                    ours.draw_base2(*args)
                assert str(got.value) == str(refusal)
            else:
                _assert_same(ours.draw_base2(*args), want)
        else:
            getattr(theirs, name)(*args)
            getattr(ours, name)(*args)
        assert ours.num_generated == theirs.num_generated
        np.testing.assert_array_equal(ours.quasi.numpy(), theirs.quasi.numpy())


def test_draw_base2_out_and_the_first_point_under_a_float64_default():
    theirs, ours = _engines(5, True, 3)
    _assert_same(ours.draw_base2(3), theirs.draw_base2(3))
    _assert_same(ours.draw_base2(3), theirs.draw_base2(3))
    out_t, out_j = torch.empty(1), jitorch.empty(1)
    theirs.draw(4, out=out_t)
    assert ours.draw(4, out=out_j) is out_j
    _assert_same(out_j, out_t)
    old = torch.get_default_dtype()
    try:
        torch.set_default_dtype(torch.float64)
        jitorch.set_default_dtype(jitorch.float64)
        theirs, ours = _engines(4, True, 9)
        _assert_same(ours.draw(6), theirs.draw(6))
    finally:
        torch.set_default_dtype(old)
        jitorch.set_default_dtype(getattr(jitorch, str(old).rpartition(".")[2]))


def test_the_largest_dimension_matches_torchs_direction_numbers():
    theirs, ours = _engines(21201, False, None)
    np.testing.assert_array_equal(ours.sobolstate.numpy()[-50:], theirs.sobolstate.numpy()[-50:])
    _assert_same(ours.draw(3)[:, -20:], theirs.draw(3)[:, -20:])


def test_bad_arguments_are_refused_by_name():
    with pytest.raises(ValueError, match=r"\[1, 21201\]"):
        jitorch.quasirandom.SobolEngine(0)
    with pytest.raises(NotImplementedError, match="SobolEngine.draw: dtype .*float16"):
        jitorch.quasirandom.SobolEngine(2).draw(2, dtype=jitorch.float16)
    assert tuple(jitorch.quasirandom.SobolEngine(2).draw(0).shape) == (0, 2)
    assert repr(jitorch.quasirandom.SobolEngine(2, scramble=True, seed=1)) == \
        repr(torch.quasirandom.SobolEngine(2, scramble=True, seed=1))
