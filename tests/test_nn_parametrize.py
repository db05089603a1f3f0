"""Weight norm, spectral norm (hook and parametrization forms) and ``parametrize`` against torch: state-dict keys
and values, forward and backward, removal, and the parametrize protocol (right_inverse, caching, chaining)."""
from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

import jitorch


def _layer(m, kind):
    rng = np.random.default_rng(0)
    layer = {"linear": lambda: m.nn.Linear(4, 3), "conv": lambda: m.nn.Conv2d(2, 3, 3),
             "convT": lambda: m.nn.ConvTranspose2d(3, 2, 3)}[kind]().double()
    layer.load_state_dict({k: m.tensor(rng.standard_normal(tuple(v.shape))) for k, v in layer.state_dict().items()})
    return layer


def _input(m, kind):
    shape = {"linear": (5, 4), "conv": (2, 2, 5, 5), "convT": (2, 3, 4, 4)}[kind]
    return m.tensor(np.random.default_rng(1).standard_normal(shape))


def _np_state(layer):
    return {k: v.detach().numpy().copy() for k, v in layer.state_dict().items()}


def _assert_states(mine, theirs):
    assert list(mine) == list(theirs)
    for k in theirs:
        np.testing.assert_allclose(mine[k], theirs[k], rtol=1e-10, atol=1e-12, err_msg=k)


def _run(layer, m, kind, steps=3):
    """Outputs and parameter gradients over a few forward/backward passes (weights fixed)."""
    outs = []
    for _ in range(steps):
        out = layer(_input(m, kind))
        out.pow(2).sum().backward()
        outs.append(out.detach().numpy().copy())
    grads = {n: p.grad.numpy().copy() for n, p in layer.named_parameters()}
    return outs, grads


def _compare_runs(a, b):
    for x, y in zip(a[0], b[0]):
        np.testing.assert_allclose(x, y, rtol=1e-10, atol=1e-10)
    assert list(a[1]) == list(b[1])
    for k in b[1]:
        np.testing.assert_allclose(a[1][k], b[1][k], rtol=1e-10, atol=1e-10, err_msg=k)


@pytest.mark.parametrize("kind,dim", [("linear", 0), ("linear", 1), ("linear", None), ("conv", 0), ("conv", 2),
                                      ("convT", 1)])
@pytest.mark.parametrize("form", ["hook", "parametrization"])
def test_weight_norm_matches_torch(kind, dim, form):
    results = []
    for m in (jitorch, torch):
        layer = _layer(m, kind)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            if form == "hook":
                m.nn.utils.weight_norm(layer, dim=dim)
            else:
                m.nn.utils.parametrizations.weight_norm(layer, dim=dim)
        state = _np_state(layer)
        run = _run(layer, m, kind)
        if form == "hook":
            m.nn.utils.remove_weight_norm(layer)
        else:
            m.nn.utils.parametrize.remove_parametrizations(layer, "weight")
        results.append((state, run, _np_state(layer), type(layer).__name__))
    (s1, r1, after1, n1), (s2, r2, after2, n2) = results
    _assert_states(s1, s2)
    _compare_runs(r1, r2)
    _assert_states(after1, after2)
    assert n1 == n2


def test_old_weight_norm_checkpoint_loads_into_the_parametrization():
    old = _layer(jitorch, "linear")
    with pytest.warns(FutureWarning, match="parametrizations.weight_norm"):
        jitorch.nn.utils.weight_norm(old)
    new = jitorch.nn.utils.parametrizations.weight_norm(jitorch.nn.Linear(4, 3).double())
    new.load_state_dict(old.state_dict())
    x = _input(jitorch, "linear")
    np.testing.assert_allclose(new(x).detach().numpy(), old(x).detach().numpy(), rtol=1e-12)


@pytest.mark.parametrize("kind", ["linear", "conv", "convT"])
@pytest.mark.parametrize("form", ["hook", "parametrization"])
def test_spectral_norm_matches_torch(kind, form):
    """The random start vectors are torch's (copied through the state dict); power iteration runs in training only."""
    layers = []
    for m in (torch, jitorch):
        layer = _layer(m, kind)
        (m.nn.utils.spectral_norm if form == "hook" else m.nn.utils.parametrizations.spectral_norm)(layer)
        layers.append(layer)
    theirs, mine = layers
    mine.load_state_dict({k: jitorch.tensor(v) for k, v in _np_state(theirs).items()})
    _assert_states(_np_state(mine), _np_state(theirs))
    _compare_runs(_run(mine, jitorch, kind), _run(theirs, torch, kind))
    _assert_states(_np_state(mine), _np_state(theirs))  # the u, v buffers advanced alike
    for layer in layers:
        layer.eval()
    _compare_runs(_run(mine, jitorch, kind, 1), _run(theirs, torch, kind, 1))
    if form == "hook":
        jitorch.nn.utils.remove_spectral_norm(mine)
        torch.nn.utils.remove_spectral_norm(theirs)
        _assert_states(_np_state(mine), _np_state(theirs))


class _Symmetric:
    @staticmethod
    def make(m):
        class Symmetric(m.nn.Module):
            def forward(self, X):
                return X.triu() + X.triu(1).transpose(-1, -2)

            def right_inverse(self, A):
                return A.triu()

        class Scale(m.nn.Module):
            def forward(self, X):
                return X * 2

            def right_inverse(self, A):
                return A / 2

        return Symmetric, Scale


def _parametrize_story(m):
    Symmetric, Scale = _Symmetric.make(m)
    P = m.nn.utils.parametrize
    layer = _layer(m, "linear")
    layer.weight = m.nn.Parameter(layer.weight.detach()[:3, :3].clone())
    original = layer.weight
    P.register_parametrization(layer, "weight", Symmetric())
    P.register_parametrization(layer, "weight", Scale())
    story = [type(layer).__name__, P.type_before_parametrizations(layer).__name__, list(layer.state_dict()),
             P.is_parametrized(layer), P.is_parametrized(layer, "bias"),
             layer.parametrizations.weight.original is original, layer.weight.detach().numpy().copy()]
    with P.cached():
        story.append(layer.weight is layer.weight)
    story.append(layer.weight is layer.weight)
    layer.weight = m.tensor(np.arange(9.0).reshape(3, 3))  # through both right_inverses
    story += [layer.parametrizations.weight.original.detach().numpy().copy(), layer.weight.detach().numpy().copy()]
    P.remove_parametrizations(layer, "weight", leave_parametrized=False)
    story += [type(layer).__name__, list(layer.state_dict()), layer.weight.detach().numpy().copy(),
              isinstance(layer.weight, m.nn.Parameter)]
    return story


def test_parametrize_protocol_matches_torch():
    mine, theirs = _parametrize_story(jitorch), _parametrize_story(torch)
    assert len(mine) == len(theirs)
    for a, b in zip(mine, theirs):
        if isinstance(b, np.ndarray):
            np.testing.assert_allclose(a, b, rtol=1e-12)
        else:
            assert a == b


@pytest.mark.parametrize("call", [
    lambda m: m.nn.utils.parametrize.register_parametrization(m.nn.Linear(2, 3), "weight", m.nn.Flatten(0)),
    lambda m: m.nn.utils.parametrize.register_parametrization(m.nn.Linear(2, 3), "nothing", m.nn.Identity()),
    lambda m: m.nn.utils.parametrize.remove_parametrizations(m.nn.Linear(2, 3), "weight"),
    lambda m: m.nn.utils.remove_weight_norm(m.nn.Linear(2, 3)),
    lambda m: m.nn.utils.spectral_norm(m.nn.utils.spectral_norm(m.nn.Linear(2, 3))),
])
def test_errors_like_torch(call):
    with pytest.raises(Exception) as theirs:
        call(torch)
    with pytest.raises(type(theirs.value)) as mine:
        call(jitorch)
    if "Module" not in str(theirs.value) and "in Linear" not in str(theirs.value):  # reprs of modules differ
        assert str(mine.value).replace("jitorch.", "torch.") == str(theirs.value)


def test_nn_modules_utils_helpers():
    from torch.nn.modules import utils as theirs

    from jitorch.nn.modules import utils as mine
    for name in ("_single", "_pair", "_triple", "_quadruple"):
        for value in (3, (1, 2), [4, 5, 6]):
            assert getattr(mine, name)(value) == getattr(theirs, name)(value)
    assert mine._reverse_repeat_tuple((1, 2, 3), 2) == theirs._reverse_repeat_tuple((1, 2, 3), 2)
    sd_mine, sd_theirs = {"module.a": 1, "b": 2}, {"module.a": 1, "b": 2}
    mine.consume_prefix_in_state_dict_if_present(sd_mine, "module.")
    theirs.consume_prefix_in_state_dict_if_present(sd_theirs, "module.")
    assert sd_mine == sd_theirs


def _orthogonal_linear(m, shape, omap, triv, state=None):
    layer = m.nn.Linear(shape[1], shape[0]).double()
    rng = np.random.default_rng(0)
    layer.load_state_dict({k: m.tensor(rng.standard_normal(tuple(v.shape))) for k, v in layer.state_dict().items()})
    m.nn.utils.parametrizations.orthogonal(layer, orthogonal_map=omap, use_trivialization=triv)
    if state is not None:  # a wide/tall trivialization's base is completed with random columns: take torch's
        layer.load_state_dict({k: m.tensor(v) for k, v in state.items()})
    return layer


@pytest.mark.parametrize("shape", [(3, 3), (5, 3), (3, 5)])
@pytest.mark.parametrize("omap,triv", [(None, True), ("matrix_exp", True), ("cayley", True), ("cayley", False),
                                       ("householder", True), ("householder", False)])
def test_orthogonal_matches_torch(shape, omap, triv):
    theirs = _orthogonal_linear(torch, shape, omap, triv)
    state = _np_state(theirs)
    copy = triv and shape[0] != shape[1]
    mine = _orthogonal_linear(jitorch, shape, omap, triv, state if copy else None)
    _assert_states(_np_state(mine), state)  # right_inverse at registration (QR, geqrf's reflectors) as torch's
    x = np.random.default_rng(1).standard_normal((4, shape[1]))
    # a step away from the initial point; not on the diagonal, which holds householder's signs
    step = np.linspace(-0.5, 0.5, 15)[:np.prod(shape)].reshape(shape)
    np.fill_diagonal(step, 0.0)
    results = []
    for m, layer in ((jitorch, mine), (torch, theirs)):
        with torch.no_grad(), jitorch.no_grad():
            layer.parametrizations.weight.original.add_(m.tensor(step))
        out = layer(m.tensor(x))
        out.pow(2).sum().backward()
        results.append(([out.detach().numpy()], {n: p.grad.numpy() for n, p in layer.named_parameters()}))
    _compare_runs(*results)
    w = mine.weight.detach().numpy()
    gram = w.T @ w if shape[0] >= shape[1] else w @ w.T
    np.testing.assert_allclose(gram, np.eye(min(shape)), atol=1e-10)
