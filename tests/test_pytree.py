"""``jitorch.utils._pytree`` against ``torch.utils._pytree``: the same trees flatten to the same leaves, specs print,
compare and serialise the same way, and the map/all/any helpers and key paths agree, errors included."""
from collections import OrderedDict, defaultdict, deque, namedtuple

import pytest
import torch
import torch.utils._pytree as tp

import jitorch
import jitorch.utils._pytree as jp

Point = namedtuple("Point", "x y")


def trees(lib):
    """Trees built the same way in either library (op results, Sizes and tensors included)."""
    return [
        1, None, [], (), {}, (1,), [1, [2, (3, None)]], {"b": 1, "a": [2, 3]},
        Point(1, [2, 3]), OrderedDict(k=4, j=(5,)), defaultdict(list, {"z": 5}), deque([6, 7], maxlen=3),
        {"r": lib.max(lib.ones(2, 2), 0), "s": lib.Size([2, 3]), "t": lib.ones(2)},
        [Point(x={"p": 1}, y=deque([2])), OrderedDict(q=None)],
    ]


def _plain(leaves):
    return [x.tolist() if isinstance(x, (torch.Tensor, jitorch.Tensor)) else x for x in leaves]


def _spec_text(spec):
    return repr(spec).replace("jitorch", "torch")


@pytest.mark.parametrize("index", range(len(trees(torch))))
def test_flatten_unflatten_and_spec_match_torch(index):
    t_tree, j_tree = trees(torch)[index], trees(jitorch)[index]
    t_leaves, t_spec = tp.tree_flatten(t_tree)
    j_leaves, j_spec = jp.tree_flatten(j_tree)
    assert _plain(j_leaves) == _plain(t_leaves)
    assert _spec_text(j_spec) == _spec_text(t_spec)
    assert (j_spec.num_leaves, j_spec.num_nodes, j_spec.num_children) == \
        (t_spec.num_leaves, t_spec.num_nodes, t_spec.num_children)
    assert jp.treespec_pprint(j_spec).replace("jitorch", "torch") == tp.treespec_pprint(t_spec)
    rebuilt = jp.tree_unflatten(j_leaves, j_spec)
    assert type(rebuilt) is type(j_tree) and repr(rebuilt) == repr(j_tree)
    assert [jp.keystr(k) for k, _ in jp.tree_flatten_with_path(j_tree)[0]] == \
        [tp.keystr(k) for k, _ in tp.tree_flatten_with_path(t_tree)[0]]
    assert jp.tree_structure(j_tree) == j_spec and hash(j_spec) == hash(jp.tree_structure(j_tree))


def test_spec_equality_and_json_round_trip_match_torch():
    for lib, p in ((torch, tp), (jitorch, jp)):
        assert p.tree_structure({"a": 1}) == p.tree_structure({"a": 2})
        assert p.tree_structure({"a": 1}) != p.tree_structure({"b": 1})
        assert p.tree_structure((1, 2)) != p.tree_structure([1, 2])
    tree = {"a": [1, (2,)], "d": defaultdict(list, {"z": 1}), "o": OrderedDict(k=1), "q": deque([1], maxlen=4)}
    text = jp.treespec_dumps(jp.tree_structure(tree))
    assert text == tp.treespec_dumps(tp.tree_structure(tree))
    assert jp.treespec_loads(text) == jp.tree_structure(tree)
    assert repr(jp.treespec_loads(text)) == repr(tp.treespec_loads(text))
    with pytest.raises(NotImplementedError, match="serializ"):
        jp.treespec_dumps(jp.tree_structure(Point(1, 2)))


def test_maps_and_predicates_match_torch():
    tree = {"w": [1, 2.5, "s"], "b": (3, None), "p": Point(4, 5)}
    for name, args in [("tree_map", (lambda x: (x, 0),)), ("tree_map_only", (int, lambda x: -x)),
                       ("tree_map_only", ((int, float), lambda x: x * 2)),
                       ("tree_map_only", (lambda x: x is None, lambda x: "none"))]:
        assert getattr(jp, name)(*args, tree) == getattr(tp, name)(*args, tree)
    assert jp.tree_map(lambda a, b: a + b, (1, [2]), (10, [20])) == (11, [22])
    assert jp.tree_map(lambda a, b: (a, b), {"a": 1, "b": 2}, {"b": 3, "a": 4}) == \
        tp.tree_map(lambda a, b: (a, b), {"a": 1, "b": 2}, {"b": 3, "a": 4})
    assert jp.tree_map(lambda a, b: (a, b), 3, [1, 2]) == tp.tree_map(lambda a, b: (a, b), 3, [1, 2])
    for fn in ("tree_all", "tree_any"):
        for pred in (lambda x: isinstance(x, int), lambda x: x is None):
            assert getattr(jp, fn)(pred, tree) == getattr(tp, fn)(pred, tree)
    for fn in ("tree_all_only", "tree_any_only"):
        assert getattr(jp, fn)(int, lambda x: x > 3, tree) == getattr(tp, fn)(int, lambda x: x > 3, tree)
    assert jp.tree_leaves([1, [2]], is_leaf=lambda x: isinstance(x, list) and len(x) == 1) == [1, [2]]
    seen = []
    assert jp.tree_map_(seen.append, tree) is tree and seen == tp.tree_leaves(tree)
    assert jp.tree_map_with_path(lambda kp, x: jp.keystr(kp), tree) == \
        tp.tree_map_with_path(lambda kp, x: tp.keystr(kp), tree)
    path = jp.tree_leaves_with_path(tree)[3][0]
    assert jp.key_get(tree, path) == tp.key_get(tree, tp.tree_leaves_with_path(tree)[3][0]) == 3


@pytest.mark.parametrize("call", [
    lambda p: p.tree_map(lambda a, b: a, (1, 2), (1, 2, 3)),
    lambda p: p.tree_map(lambda a, b: a, {"a": 1}, {"b": 1}),
    lambda p: p.tree_map(lambda a, b: a, [1, 2], 3),
    lambda p: p.tree_map(lambda a, b: a, (1, 2), [1, 2]),
    lambda p: p.tree_unflatten([1, 2], 5),
    lambda p: p.tree_unflatten([1], p.tree_structure((1, 2))),
    lambda p: p.register_pytree_node(dict, lambda d: (list(d.values()), list(d)), lambda v, c: dict(zip(c, v))),
])
def test_errors_match_torch(call):
    with pytest.raises(Exception) as want:
        call(tp)
    with pytest.raises(type(want.value)) as got:
        call(jp)
    assert str(got.value).split("(")[0] == str(want.value).split("(")[0]


def test_registered_node_types_flatten_and_map():
    class Pair:
        def __init__(self, a, b):
            self.a, self.b = a, b

    class TorchPair(Pair):
        pass

    for p, cls in ((jp, Pair), (tp, TorchPair)):
        p.register_pytree_node(cls, lambda o: ([o.a, o.b], "ctx"), lambda v, c, cls=cls: cls(*v),
                               flatten_with_keys_fn=lambda o, p=p: ([(p.GetAttrKey("a"), o.a),
                                                                     (p.GetAttrKey("b"), o.b)], "ctx"))
    leaves, spec = jp.tree_flatten([Pair(1, (2, 3))])
    assert leaves == [1, 2, 3] and repr(spec) == repr(tp.tree_structure([TorchPair(1, (2, 3))])).replace("Torch", "")
    doubled = jp.tree_map(lambda x: 2 * x, Pair(1, (2, 3)))
    assert isinstance(doubled, Pair) and (doubled.a, doubled.b) == (2, (4, 6))
    assert [jp.keystr(k) for k, _ in jp.tree_flatten_with_path(Pair(1, 2))[0]] == [".a", ".b"]
    with pytest.raises(ValueError, match="already registered"):
        jp.register_pytree_node(Pair, lambda o: ([], None), lambda v, c: None)


def test_tensors_are_leaves_and_shapes_are_nodes():
    x = jitorch.ones(2, 3)
    assert jp.tree_leaves({"x": x, "shape": x.shape})[1:] == [2, 3]
    assert jp.tree_map(lambda d: d * 2, x.shape) == jitorch.Size([4, 6])
    assert isinstance(jp.tree_map(lambda d: d, x.shape), jitorch.Size)
    assert repr(jp.tree_map(str, x.shape)) == repr(tp.tree_map(str, torch.ones(2, 3).shape)) == "('2', '3')"
    assert jp.tree_leaves(x)[0] is x


@pytest.mark.parametrize("call", [
    lambda p: p.tree_map(lambda a, b: (a, b), {"a": 1, "b": 2}, OrderedDict(b=3, a=4)),
    lambda p: p.tree_map(lambda a, b: (a, b), OrderedDict(b=3, a=4), {"a": 1, "b": 2}),
    lambda p: p.tree_map(lambda a, b: (a, b), {"a": 1}, defaultdict(list, a=2)),
    lambda p: p.tree_map(lambda a, b: (a, b), deque([1], maxlen=2), deque([5], maxlen=3)),
    lambda p: p.tree_map(lambda a, b: (a, b), Point(1, 2), namedtuple("Other", "x y")(1, 2)),
    lambda p: p.tree_map(lambda a, b: (a, b), (1, 2), Point(1, 2)),
    lambda p: p.tree_map(lambda a, b: (a, b), Point(1, 2), (1, 2)),
    lambda p: p.tree_map(lambda a, b: (a, b), OrderedDict(a=1), [1]),
    lambda p: p.SUPPORTED_NODES[dict].flatten_with_keys_fn({"a": 1}),
    lambda p: p.SUPPORTED_NODES[namedtuple].flatten_with_keys_fn(Point(1, 2)),
])
def test_matching_other_trees_follows_torchs_node_rules(call):
    """dict, OrderedDict and defaultdict match by keys alone; a deque's maxlen is not compared; the built-in
    flatten_with_keys_fn take the object, as torch's."""
    try:
        want = repr(call(tp))
    except ValueError as e:
        want = f"ValueError {e}"
    try:
        got = repr(call(jp))
    except ValueError as e:
        got = f"ValueError {e}"
    assert got == want  # (both name collections.namedtuple, the same marker object, in a mismatch)
