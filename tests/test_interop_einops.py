"""einops over jitorch tensors against einops over torch tensors: the ops, the layers, autograd and compile."""
from __future__ import annotations

import copy
import subprocess
import sys

import numpy as np
import pytest
import torch

import jitorch
from helpers import assert_same, check_op, make_array

einops = pytest.importorskip("einops")
from einops import EinopsError, asnumpy, pack, parse_shape, rearrange, reduce, repeat, unpack  # noqa: E402
from einops.layers import torch as torch_layers  # noqa: E402

REARRANGE = [
    ("b c h w -> b h w c", (2, 3, 4, 5), {}),
    ("b c (h p1) (w p2) -> b (h w) (p1 p2 c)", (2, 3, 4, 6), {"p1": 2, "p2": 3}),
    ("b ... c -> b c ...", (2, 3, 4, 5), {}),
    ("a b c -> (a b) c", (2, 3, 4), {}),
    ("a 1 c -> a c", (3, 1, 4), {}),
    ("a b -> a 1 b ()", (3, 4), {}),
    ("(a b) c -> b a c", (6, 4), {"a": 2}),
]


@pytest.mark.parametrize("pattern,shape,lengths", REARRANGE)
def test_rearrange(pattern, shape, lengths):
    x = make_array(shape, "float32", np.random.default_rng(0))
    fn = lambda t: rearrange(t, pattern, **lengths)
    check_op(fn, fn, [x])


@pytest.mark.parametrize("reduction", ["min", "max", "sum", "mean", "prod"])
@pytest.mark.parametrize("pattern", ["b c (h 2) (w 2) -> b c h w", "b c h w -> c", "b c h w -> b () () c"])
def test_reduce_floats(pattern, reduction):
    x = make_array((2, 3, 4, 6), "float64", np.random.default_rng(1), low=0.5, high=1.5)
    fn = lambda t: reduce(t, pattern, reduction)
    check_op(fn, fn, [x], atol=1e-10, rtol=1e-10)


@pytest.mark.parametrize("dtype,reduction", [("int64", "sum"), ("int32", "max"), ("int64", "prod"), ("bool", "any"),
                                             ("bool", "all"), ("int64", "mean")])
def test_reduce_non_floats(dtype, reduction):
    # mean of integers: einops refuses it for every backend, with the same EinopsError
    x = make_array((2, 3, 4), dtype, np.random.default_rng(2))
    fn = lambda t: reduce(t, "a b c -> c a", reduction)
    check_op(fn, fn, [x], grad=False)


@pytest.mark.parametrize("pattern,lengths", [("a b -> a b r", {"r": 3}), ("a b -> (r a) b", {"r": 2}),
                                             ("a b -> a (b r) k", {"r": 2, "k": 3}), ("a b -> b a", {})])
def test_repeat(pattern, lengths):
    x = make_array((3, 4), "float32", np.random.default_rng(3))
    fn = lambda t: repeat(t, pattern, **lengths)
    check_op(fn, fn, [x])


def test_einsum_pack_unpack_with_gradients():
    rng = np.random.default_rng(4)
    x, w, cls = (make_array(shape, "float32", rng) for shape in ((2, 5, 8), (8, 6), (2, 6)))

    def fn(x, w, cls):
        y = einops.einsum(x, w, "b n d, d e -> b n e")
        packed, shapes = pack([cls, y], "b * e")
        first, rest = unpack(packed * 2, shapes, "b * e")
        return packed, first, rest

    check_op(fn, fn, [x, w, cls], atol=1e-5)


def test_parse_shape_asnumpy_and_errors():
    x = jitorch.zeros(2, 3, 5)
    assert parse_shape(x, "b _ n") == parse_shape(torch.zeros(2, 3, 5), "b _ n") == {"b": 2, "n": 5}
    y = jitorch.arange(6.0, requires_grad=True) * 2
    arr = asnumpy(y)
    assert type(arr) is np.ndarray and arr.tolist() == [0.0, 2.0, 4.0, 6.0, 8.0, 10.0]
    messages = []
    for t in (jitorch.zeros(5, 3), torch.zeros(5, 3)):
        with pytest.raises(EinopsError) as err:
            rearrange(t, "(a b) c -> a b c", a=2)
        messages.append(str(err.value))
    assert messages[0] == messages[1].replace("torch.Size", "jitorch.Size") and "length 5" in messages[0]


def test_backend_is_jitorchs():
    backend = einops._backends.get_backend(jitorch.zeros(1))
    assert backend.framework_name == "jitorch"
    assert backend.layers().Rearrange.__module__ == "jitorch._einops_layers"
    assert einops._backends.get_backend(jitorch.nn.Parameter(jitorch.zeros(1))) is backend
    assert einops._backends.get_backend(torch.zeros(1)).framework_name == "torch"


# -- layers ------------------------------------------------------------------------------------------------------------
def _einmix_pair(pattern, **kwargs):
    from einops.layers.jitorch import EinMix

    torch.manual_seed(0)
    theirs = torch_layers.EinMix(pattern, **kwargs)
    ours = EinMix(pattern, **kwargs)
    assert sorted(ours.state_dict()) == sorted(theirs.state_dict())
    ours.load_state_dict({k: jitorch.from_numpy(v.detach().numpy().copy()) for k, v in theirs.state_dict().items()})
    return ours, theirs


@pytest.mark.parametrize("pattern,kwargs", [
    ("b t c -> b t d", {"weight_shape": "c d", "bias_shape": "d", "c": 6, "d": 5}),
    ("b (t c) -> b t d", {"weight_shape": "c d", "c": 3, "d": 4}),
    ("b t c -> b (t d)", {"weight_shape": "t c d", "bias_shape": "t d", "t": 2, "c": 6, "d": 3}),
])
def test_einmix_matches_torch_with_gradients(pattern, kwargs):
    ours, theirs = _einmix_pair(pattern, **kwargs)
    x = make_array((4, 6) if "(t c)" in pattern else (4, 2, 6), "float32", np.random.default_rng(5))
    check_op(ours, theirs, [x], atol=1e-5)
    ours.zero_grad()
    theirs.zero_grad()
    ours(jitorch.from_numpy(x)).square().sum().backward()
    theirs(torch.from_numpy(x)).square().sum().backward()
    for (name, p), q in zip(ours.named_parameters(), theirs.parameters()):
        assert_same(p.grad, q.grad, atol=1e-4, rtol=1e-5, what=f"{name}.grad")


def test_rearrange_and_reduce_layers_in_a_model():
    from einops.layers.jitorch import Rearrange, Reduce

    def build(nn, layers):
        return nn.Sequential(layers.Rearrange("b c (h p) (w q) -> b (h w) (p q c)", p=2, q=2), nn.Linear(12, 8),
                             layers.Reduce("b n d -> b d", "mean"))

    theirs = build(torch.nn, torch_layers)
    ours = build(jitorch.nn, sys.modules["einops.layers.jitorch"])
    ours.load_state_dict({k: jitorch.from_numpy(v.numpy().copy()) for k, v in theirs.state_dict().items()})
    assert isinstance(ours[0], jitorch.nn.Module) and repr(ours[0]) == repr(theirs[0])
    assert repr(Reduce("b n d -> b d", "mean")) == repr(torch_layers.Reduce("b n d -> b d", "mean"))
    x = make_array((2, 3, 4, 6), "float32", np.random.default_rng(6))
    check_op(ours, theirs, [x], atol=1e-5)
    copied = copy.deepcopy(ours)  # the mixins' __getstate__ rebuild the recipes
    assert_same(copied(jitorch.from_numpy(x)), theirs(torch.from_numpy(x)), atol=1e-5)
    with pytest.raises(EinopsError):
        Rearrange("a b -> a c")


# -- compile -----------------------------------------------------------------------------------------------------------
def _block(x, w):
    y = rearrange(x, "b (h d) n -> b h n d", h=2)
    y = einops.einsum(y, w, "b h n d, d e -> b h n e")
    z = repeat(reduce(y, "b h n e -> b n e", "mean"), "b n e -> b n e r", r=2)
    packed, shapes = pack([z, z * 2], "b n *")
    a, b = unpack(packed, shapes, "b n *")
    return (a.tanh() + b).sum(-1)


@pytest.mark.parametrize("dynamic", [None, True])
def test_compile_traces_through_einops(dynamic):
    compiled = jitorch.compile(_block, dynamic=dynamic)
    rng = np.random.default_rng(7)
    w = make_array((4, 6), "float32", rng)
    for shape in ((3, 8, 5), (4, 8, 7), (2, 8, 3)):
        x = make_array(shape, "float32", rng)
        check_op(compiled, _block, [x, w], atol=1e-5)
    explained = jitorch._dynamo.explain(_block)(jitorch.from_numpy(x), jitorch.from_numpy(w))
    assert explained.graph_break_count == 0 and explained.graph_count == 1


# -- how the backend gets defined ------------------------------------------------------------------------------------
def _run(code):
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_importing_jitorch_does_not_import_einops_and_either_order_works():
    after = _run("import sys, jitorch; loaded = 'einops' in sys.modules; import einops\n"
                 "print(loaded, einops.rearrange(jitorch.ones(2, 3), 'a b -> b a').shape)")
    assert after == "False jitorch.Size([3, 2])"
    before = _run("import einops, jitorch; print(einops.rearrange(jitorch.ones(2, 3), 'a b -> (a b)').shape)")
    assert before == "jitorch.Size([6])"


def test_einops_layers_torch_are_jitorchs_without_pytorch():
    # sys.modules["torch"] = None is how Python spells an absent package to find_spec and import
    out = _run("import sys; sys.modules['torch'] = None\nimport jitorch as torch\n"
               "from einops.layers.torch import Rearrange, EinMix\n"
               "m = torch.nn.Sequential(Rearrange('b c h w -> b (c h w)'), torch.nn.Linear(12, 2))\n"
               "mix = EinMix('b t c -> b t d', weight_shape='c d', c=4, d=3)\n"
               "print(m(torch.ones(1, 3, 2, 2)).shape, sorted(mix.state_dict()), isinstance(mix, torch.nn.Module))")
    assert out == "jitorch.Size([1, 2]) ['weight'] True"
