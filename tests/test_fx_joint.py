"""jitorch.fx.joint: one graph of primitives for forward + backward, checked against eager autograd on fresh inputs."""
from __future__ import annotations

import copy
import operator

import pytest
from test_fx_helpers import assert_close

import jitorch
import jitorch.nn.functional as F
from jitorch import fx, nn
from jitorch._dispatch import MODES
from jitorch.fx.joint import make_joint, make_joint_for_module
from jitorch.fx.make_fx import Primitive


def _eager_joint(fn, args, tangents=None):
    """Eager reference: ``(*outputs, *grads)`` of ``fn`` with ``jitorch.autograd.grad``, as make_joint defines it."""
    args = [a.detach().requires_grad_(a.requires_grad) if isinstance(a, jitorch.Tensor) else a for a in args]
    result = fn(*args)
    outs = list(result) if isinstance(result, (tuple, list)) else [result]
    wrt = [a for a in args if isinstance(a, jitorch.Tensor) and a.requires_grad]
    roots = outs if tangents is not None else outs[:1]
    grads = jitorch.autograd.grad(roots, wrt, grad_outputs=tangents, allow_unused=True)
    return [o.detach() for o in outs] + list(grads)


def _fresh(args):
    """New random values of the same shapes and requires_grad (integer tensors, e.g. class targets, are kept)."""
    return [jitorch.randn(*a.shape).requires_grad_(a.requires_grad)
            if isinstance(a, jitorch.Tensor) and a.is_floating_point() else a for a in args]


def _check_graph(gm):
    """Lint, and check the joint graph is made of op-table primitives (getitem only picks a multi-output row's part)."""
    gm.graph.lint()
    assert not MODES  # the recording mode is popped
    for n in gm.graph.nodes:
        assert n.op in ("placeholder", "get_attr", "call_function", "output"), n.format_node()
        if n.op == "call_function":
            assert isinstance(n.target, Primitive) or (
                n.target is operator.getitem and isinstance(n.args[0].target, Primitive)), n.format_node()


def _check_joint(fn, args, tangents=None):
    """Record at ``args``; the Interpreter and the GraphModule must equal eager on the traced and on fresh inputs."""
    gm = make_joint(fn)(*args, tangents=tangents)
    _check_graph(gm)
    fresh_tangents = None if tangents is None else _fresh(tangents)
    for trial_args, trial_tangents in ((args, tangents), (_fresh(args), fresh_tangents)):
        expected = _eager_joint(fn, trial_args, trial_tangents)
        flat = [a.detach() if isinstance(a, jitorch.Tensor) else a for a in trial_args] + list(trial_tangents or ())
        assert_close(list(fx.Interpreter(gm).run(*flat)), expected, atol=1e-4)
        assert_close(list(gm(*flat)), expected, atol=1e-4)
    return gm


def _phases(gm, op="call_function"):
    counts = {}
    for n in gm.graph.nodes:
        if n.op == op:
            counts[n.meta["phase"]] = counts.get(n.meta["phase"], 0) + 1
    return counts


def _names(gm, phase):
    return [n.target.__name__ for n in gm.graph.nodes if n.op == "call_function" and n.meta["phase"] == phase]


def test_elementwise_chain_marks_forward_and_backward():
    def f(x, y):
        return ((x * y).sin() + x.exp() / (y * y + 1)).tanh().sum()

    args = (jitorch.randn(4, 3, requires_grad=True), jitorch.randn(4, 3, requires_grad=True))
    gm = _check_joint(f, args)
    forward = fx.make_fx(f)(*[a.detach() for a in args])
    forward_calls = [n for n in forward.graph.nodes if n.op == "call_function"]
    counts = _phases(gm)
    assert counts["forward"] == len(forward_calls) == 9  # the plain forward trace, op for op
    assert counts["backward"] > counts["forward"]
    assert _names(gm, "forward") == [n.target.__name__ for n in forward_calls]
    assert {"cos", "mul", "div"} <= set(_names(gm, "backward"))
    assert _phases(gm, "placeholder") == {"forward": 2}
    assert [n.meta["phase"] for n in gm.graph.nodes if n.op == "output"] == ["output"]
    # The partition the compiler cuts at: no forward node reads a backward node.
    for n in gm.graph.nodes:
        if n.meta["phase"] == "forward":
            assert all(i.meta["phase"] == "forward" for i in n.all_input_nodes), n.format_node()


def test_only_inputs_requiring_grad_get_gradients_and_make_fx_joint_flag():
    def f(x, scale):
        return (x.relu() * scale).pow(2).mean()

    x, scale = jitorch.randn(5, requires_grad=True), jitorch.randn(5)
    gm = _check_joint(f, (x, scale))
    assert len(gm(x.detach(), scale)) == 2  # loss and the grad of x only
    gm2 = fx.make_fx(f, joint=True)(x, scale)
    _check_graph(gm2)
    fresh = (jitorch.randn(5), jitorch.randn(5))
    assert_close(list(gm2(*fresh)), list(gm(*fresh)))


def test_explicit_tangents_and_aux_outputs():
    def f(a, b):
        return a @ b, (a * 2).sum(1)

    args = (jitorch.randn(3, 4, requires_grad=True), jitorch.randn(4, 2, requires_grad=True))
    gm = _check_joint(f, args, tangents=(jitorch.randn(3, 2), jitorch.randn(3)))
    assert _phases(gm, "placeholder") == {"forward": 2, "backward": 2}  # the tangents feed only the backward

    def with_aux(x):  # no tangents: the first output is the loss, the second is returned as is
        y = x.sigmoid()
        return y.sum(), y
    _check_joint(with_aux, (jitorch.randn(2, 3, requires_grad=True),))


def test_mlp_cross_entropy_and_mse():
    w1, b1 = jitorch.randn(8, 5, requires_grad=True), jitorch.randn(8, requires_grad=True)
    w2, b2 = jitorch.randn(3, 8, requires_grad=True), jitorch.randn(3, requires_grad=True)
    x, target = jitorch.randn(6, 5), jitorch.tensor([0, 2, 1, 1, 0, 2])

    def nll(w1, b1, w2, b2, x):
        logits = (x @ w1.t() + b1).relu() @ w2.t() + b2
        return F.nll_loss(F.log_softmax(logits, dim=1), target)

    gm = _check_joint(nll, (w1, b1, w2, b2, x))
    names = set(_names(gm, "forward"))
    # log_softmax and nll_loss are fused rows (primitives), recorded as such; the public wrappers never appear.
    assert {"matmul", "relu", "log_softmax", "nll_loss"} <= names
    assert _phases(gm)["backward"] > 0

    def mse(w1, b1, w2, b2, x, y):
        return F.mse_loss(F.linear(F.relu(F.linear(x, w1, b1)), w2, b2), y)
    _check_joint(mse, (w1, b1, w2, b2, x, jitorch.randn(6, 3)))


def test_module_parameters_are_lifted_to_placeholders():
    model = nn.Sequential(nn.Linear(5, 8), nn.ReLU(), nn.Linear(8, 3))
    x, target = jitorch.randn(4, 5), jitorch.tensor([2, 0, 1, 1])
    gm = make_joint_for_module(model, F.cross_entropy)(x, target)
    _check_graph(gm)
    # Constants are only what creation functions made (an ``arange`` for the targets' rows, a NaN), never a parameter.
    constants = [getattr(gm, n.target) for n in gm.graph.nodes if n.op == "get_attr"]
    assert not any(c is p or c._data is p._data for c in constants for p in model.parameters())
    assert _phases(gm, "placeholder") == {"forward": 6}  # 4 parameters, x, target

    # Fresh parameters, inputs and targets: compare with a copy of the model holding them, in eager autograd.
    other = copy.deepcopy(model)
    with jitorch.no_grad():
        for p in other.parameters():
            p.copy_(jitorch.randn(*p.shape))
    x2, target2 = jitorch.randn(4, 5), jitorch.tensor([1, 1, 0, 2])
    loss = F.cross_entropy(other(x2), target2)
    expected = [loss, *jitorch.autograd.grad(loss, list(other.parameters()))]
    params = [p.detach() for p in other.parameters()]
    assert_close(list(gm(*params, x2, target2)), expected, atol=1e-4)
    assert_close(list(fx.Interpreter(gm).run(*params, x2, target2)), expected, atol=1e-4)


def _attention_block(x, wq, wk, wv, wo, ln_w, ln_b):
    """A pre-norm single-head attention block with a residual (layer_norm and softmax are fused rows)."""
    h = F.layer_norm(x, (x.shape[-1],), ln_w, ln_b)
    q, k, v = h @ wq, h @ wk, h @ wv
    attn = (q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5).softmax(-1)
    return x + (attn @ v) @ wo


def test_transformer_block_with_tangent_and_with_loss():
    d = 6
    weights = [jitorch.randn(d, d, requires_grad=True) for _ in range(4)]
    ln = [jitorch.randn(d, requires_grad=True), jitorch.randn(d, requires_grad=True)]
    x = jitorch.randn(2, 5, d, requires_grad=True)
    gm = _check_joint(_attention_block, (x, *weights, *ln), tangents=(jitorch.randn(2, 5, d),))
    names = set(_names(gm, "forward"))
    assert {"matmul", "softmax", "native_layer_norm"} <= names
    assert len(gm(x.detach(), *[w.detach() for w in weights + ln], jitorch.randn(2, 5, d))) == 8

    def loss(*args):
        return _attention_block(*args).pow(2).mean()
    _check_joint(loss, (x, *weights, *ln))


def test_errors_name_the_problem():
    with pytest.raises(RuntimeError, match="requires grad"):
        make_joint(lambda x: x.sum())(jitorch.randn(2))
    with pytest.raises(RuntimeError, match="scalar loss"):
        make_joint(lambda x: x * 2)(jitorch.randn(2, requires_grad=True))
    assert not MODES


def test_an_unused_input_gets_none():
    x, y = jitorch.randn(3, requires_grad=True), jitorch.randn(2, requires_grad=True)
    gm = make_joint(lambda x, y: x.exp().sum())(x, y)
    _check_graph(gm)
    loss, gx, gy = gm(jitorch.zeros(3), jitorch.zeros(2))
    assert_close([loss, gx], [jitorch.tensor(3.0), jitorch.ones(3)])
    assert gy is None
