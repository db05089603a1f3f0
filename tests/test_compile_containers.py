"""Compiled functions receive the containers they were called with: an OrderedDict or defaultdict argument stays
one (its default_factory too), in the default and reduce-overhead modes; and a call whose containers differ from
the captured call's (a list where a tensor was) captures again instead of replaying the other structure's graph."""
from collections import OrderedDict, defaultdict

import pytest

import jitorch


def _kind_and_double(d):
    extra = d["missing"] if isinstance(d, defaultdict) else None
    return type(d).__name__, d["a"] * 2, extra


@pytest.mark.parametrize("mode", [None, "reduce-overhead"])
def test_dict_subclasses_reach_the_function_as_themselves(mode):
    f = jitorch.compile(_kind_and_double, mode=mode)
    t = jitorch.ones(2)
    for arg, kind, extra in ((OrderedDict(a=t), "OrderedDict", None), (defaultdict(list, a=t), "defaultdict", []),
                             ({"a": t}, "dict", None), ({"a": t}, "dict", None)):
        got_kind, doubled, got_extra = f(arg)
        assert (got_kind, got_extra) == (kind, extra)
        assert doubled.tolist() == [2.0, 2.0]


@pytest.mark.parametrize("mode", [None, "reduce-overhead"])
def test_other_containers_with_the_same_leaves_are_another_call(mode):
    f = jitorch.compile(lambda x: x[0] * 2 if isinstance(x, list) else x * 3, mode=mode)
    t = jitorch.ones(2)
    assert [f([t]).tolist() for _ in range(2)] == [[2.0, 2.0]] * 2
    assert [f(t).tolist() for _ in range(2)] == [[3.0, 3.0]] * 2
