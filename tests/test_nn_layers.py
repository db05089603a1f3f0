"""Layer modules against PyTorch with identical weights (PyTorch's initialized state copied into jitorch through
NumPy): outputs, input gradients and parameter gradients with random upstream gradients, buffers (running statistics)
after training steps, train/eval mode, default initializations (statistically), ``repr`` and state_dict keys."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn as tnn

import jitorch
from jitorch.nn.modules import activation as A
from jitorch.nn.modules.batchnorm import BatchNorm1d, BatchNorm2d, BatchNorm3d, SyncBatchNorm
from jitorch.nn.modules.distance import CosineSimilarity, PairwiseDistance
from jitorch.nn.modules.dropout import AlphaDropout, Dropout, Dropout1d, Dropout2d, Dropout3d, FeatureAlphaDropout
from jitorch.nn.modules.flatten import Flatten, Unflatten
from jitorch.nn.modules.instancenorm import InstanceNorm1d, InstanceNorm2d, InstanceNorm3d
from jitorch.nn.modules.linear import Bilinear, Identity, LazyLinear, Linear
from jitorch.nn.modules.normalization import GroupNorm, LayerNorm, LocalResponseNorm, RMSNorm
from jitorch.nn.modules.sparse import Embedding, EmbeddingBag

TOL = {"atol": 1e-5, "rtol": 1e-4}


def copy_state(jt_mod, th_mod):
    """Give ``jt_mod`` ``th_mod``'s parameters and buffers (same names), through NumPy."""
    th_state = th_mod.state_dict()
    jt_state = jt_mod.state_dict()
    assert list(jt_state) == list(th_state), f"state_dict keys {list(jt_state)} != torch {list(th_state)}"
    with jitorch.no_grad():
        for name, value in th_state.items():
            jt_state[name].copy_(jitorch.tensor(value.detach().numpy()))


def assert_close(jt, th, what, tol=None):
    tol = tol or TOL
    assert tuple(jt.shape) == tuple(th.shape), f"{what}: shape {tuple(jt.shape)} != torch {tuple(th.shape)}"
    np.testing.assert_allclose(jt.detach().numpy(), th.detach().numpy(), err_msg=what, **tol)


def compare(jt_mod, th_mod, *arrays, steps=1, tol=None, **call_kwargs):
    """Run both modules on the same inputs ``steps`` times: outputs, input and parameter gradients, buffers.

    ``call_kwargs``: extra keyword arguments of the forward call, as NumPy arrays or plain values.
    """
    rng = np.random.default_rng(1)
    jt_kw = {k: jitorch.tensor(v) if isinstance(v, np.ndarray) else v for k, v in call_kwargs.items()}
    th_kw = {k: torch.tensor(v) if isinstance(v, np.ndarray) else v for k, v in call_kwargs.items()}
    for _ in range(steps):
        jt_in = [jitorch.tensor(a, requires_grad=a.dtype.kind == "f") for a in arrays]
        th_in = [torch.tensor(a, requires_grad=a.dtype.kind == "f") for a in arrays]
        jt_out, th_out = jt_mod(*jt_in, **jt_kw), th_mod(*th_in, **th_kw)
        if isinstance(th_out, tuple):
            jt_out, th_out = jt_out[0], th_out[0]
        assert_close(jt_out, th_out, "output", tol)
        if not th_out.requires_grad:
            continue
        g = rng.standard_normal(tuple(th_out.shape)).astype(np.float32)
        jt_out.backward(jitorch.tensor(g))
        th_out.backward(torch.tensor(g))
        for i, (j, t) in enumerate(zip(jt_in, th_in)):
            if t.grad is not None:
                assert_close(j.grad, t.grad, f"grad of input {i}", tol)
    th_params = dict(th_mod.named_parameters())
    for name, p in jt_mod.named_parameters():
        if th_params[name].grad is None:
            assert p.grad is None or not p.grad.numpy().any(), f"{name}: jitorch has a gradient, torch none"
        else:
            assert_close(p.grad, th_params[name].grad, f"grad of {name}", tol)
    th_buffers = dict(th_mod.named_buffers())
    for name, b in jt_mod.named_buffers():
        assert_close(b, th_buffers[name], f"buffer {name}", tol)


def pair(jt_cls, th_cls, *args, **kwargs):
    """The same module in both frameworks, jitorch's holding PyTorch's initial state."""
    th_mod = th_cls(*args, **kwargs)
    jt_kwargs = {k: jitorch.tensor(v.numpy()) if isinstance(v, torch.Tensor) else v for k, v in kwargs.items()}
    jt_mod = jt_cls(*args, **jt_kwargs)
    copy_state(jt_mod, th_mod)
    assert repr(jt_mod) == repr(th_mod)
    return jt_mod, th_mod


def data(rng, *shape, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(np.float32)


# -- linear ---------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("shape", [(4, 3), (2, 5, 3), (3,)])
def test_linear_matches_torch(bias, shape, rng):
    compare(*pair(Linear, tnn.Linear, 3, 2, bias=bias), data(rng, *shape))


def test_linear_default_init_and_factory_kwargs():
    layer = Linear(400, 300)
    w = layer.weight.detach().numpy()
    bound = 1 / math.sqrt(400)  # kaiming_uniform_(a=sqrt(5)) reduces to U(-1/sqrt(in), 1/sqrt(in))
    assert np.abs(w).max() <= bound and abs(w.std() - bound / math.sqrt(3)) < 0.02 * bound
    assert np.abs(layer.bias.detach().numpy()).max() <= bound
    assert Linear(3, 2, dtype=jitorch.float64).weight.dtype is jitorch.float64
    assert [n for n, _ in Linear(3, 2).named_parameters()] == ["weight", "bias"]
    assert Linear(3, 2, bias=False).bias is None and "bias" not in Linear(3, 2, bias=False).state_dict()


def test_lazy_linear_infers_in_features():
    layer = LazyLinear(4)
    params = list(layer.parameters())
    out = layer(jitorch.randn(2, 7))
    assert out.shape == (2, 4) and type(layer) is Linear and layer.in_features == 7
    assert params[0] is layer.weight and tuple(layer.weight.shape) == (4, 7)
    assert repr(layer) == repr(tnn.Linear(7, 4))


@pytest.mark.parametrize("bias", [True, False])
def test_bilinear_matches_torch(bias, rng):
    compare(*pair(Bilinear, tnn.Bilinear, 3, 4, 5, bias=bias), data(rng, 6, 3), data(rng, 6, 4))


def test_identity_flatten_unflatten(rng):
    x = data(rng, 2, 3, 4)
    assert Identity(1, key=2)(jitorch.tensor(x)).shape == (2, 3, 4)
    compare(*pair(Flatten, tnn.Flatten), x)
    compare(*pair(Flatten, tnn.Flatten, 0, 1), x)
    compare(*pair(Unflatten, tnn.Unflatten, 2, (2, 2)), x)
    compare(*pair(Unflatten, tnn.Unflatten, -1, [2, -1]), x)
    with pytest.raises(TypeError):
        Unflatten(1, 4)
    with pytest.raises(TypeError):
        Unflatten(1, (2, 2.0))


# -- embeddings -----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("kwargs", [{}, {"padding_idx": 0}, {"padding_idx": -1, "scale_grad_by_freq": True},
                                    {"max_norm": 1.0}])
def test_embedding_matches_torch(kwargs, rng):
    jt_mod, th_mod = pair(Embedding, tnn.Embedding, 7, 3, **kwargs)
    compare(jt_mod, th_mod, np.array([[0, 2, 6], [6, 6, 1]]), steps=2)


def test_embedding_init_and_from_pretrained():
    emb = Embedding(1000, 20, padding_idx=3)
    w = emb.weight.detach().numpy()
    assert not w[3].any() and abs(w.std() - 1) < 0.02  # N(0, 1), padding row zeroed
    table = jitorch.randn(4, 2)
    frozen = Embedding.from_pretrained(table)
    assert not frozen.weight.requires_grad and jitorch.equal(frozen(jitorch.tensor([1])), table[1:2])
    assert Embedding.from_pretrained(table, freeze=False).weight.requires_grad
    with pytest.raises(AssertionError):
        Embedding.from_pretrained(jitorch.randn(4))
    with pytest.raises(AssertionError):
        Embedding(3, 2, padding_idx=3)


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
def test_embedding_bag_matches_torch(mode, rng):
    jt_mod, th_mod = pair(EmbeddingBag, tnn.EmbeddingBag, 7, 3, mode=mode, padding_idx=1)
    compare(jt_mod, th_mod, np.array([[0, 2, 6], [1, 6, 1]]))
    jt_out = jt_mod(jitorch.tensor([0, 2, 6, 1, 4]), jitorch.tensor([0, 2]))
    th_out = th_mod(torch.tensor([0, 2, 6, 1, 4]), torch.tensor([0, 2]))
    assert_close(jt_out, th_out, "1-D input with offsets")
    assert repr(EmbeddingBag.from_pretrained(jitorch.ones(3, 2))) == repr(tnn.EmbeddingBag.from_pretrained(
        torch.ones(3, 2)))


# -- dropout --------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("cls,th_cls,shape", [(Dropout, tnn.Dropout, (4, 5)), (Dropout1d, tnn.Dropout1d, (4, 5, 6)),
                                              (Dropout2d, tnn.Dropout2d, (2, 4, 3, 3)),
                                              (Dropout3d, tnn.Dropout3d, (2, 4, 2, 2, 2)),
                                              (AlphaDropout, tnn.AlphaDropout, (4, 5)),
                                              (FeatureAlphaDropout, tnn.FeatureAlphaDropout, (2, 4, 3))])
def test_dropout_modules_train_and_eval(cls, th_cls, shape):
    jt_mod, th_mod = pair(cls, th_cls, 0.3)
    assert repr(cls(0.2, inplace=True)) == repr(th_cls(0.2, inplace=True))
    x = jitorch.randn(*shape)
    assert not jitorch.equal(jt_mod(x), x)
    jt_mod.eval()
    assert jt_mod(x) is x
    with pytest.raises(ValueError):
        cls(1.5)


# -- batch norm -----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("cls,th_cls,shape", [(BatchNorm1d, tnn.BatchNorm1d, (8, 3)),
                                              (BatchNorm1d, tnn.BatchNorm1d, (4, 3, 5)),
                                              (BatchNorm2d, tnn.BatchNorm2d, (4, 3, 2, 3)),
                                              (BatchNorm3d, tnn.BatchNorm3d, (2, 3, 2, 2, 2))])
@pytest.mark.parametrize("kwargs", [{}, {"momentum": None}, {"affine": False}, {"track_running_stats": False},
                                    {"bias": False, "momentum": 0.3, "eps": 1e-3}])
def test_batch_norm_train_then_eval_matches_torch(cls, th_cls, shape, kwargs, rng):
    jt_mod, th_mod = pair(cls, th_cls, 3, **kwargs)
    if jt_mod.affine:  # non-trivial affine parameters
        with torch.no_grad():
            th_mod.weight.normal_()
        copy_state(jt_mod, th_mod)
    x = data(rng, *shape, scale=2.0) + 1.0
    compare(jt_mod, th_mod, x, steps=3)  # running stats, num_batches_tracked and momentum=None averaging
    jt_mod.eval()
    th_mod.eval()
    compare(jt_mod, th_mod, data(rng, *shape))


def test_batch_norm_state_dict_and_errors():
    bn = BatchNorm2d(3)
    assert list(bn.state_dict()) == list(tnn.BatchNorm2d(3).state_dict())
    state = bn.state_dict()
    del state["num_batches_tracked"]
    state._metadata[""] = {"version": 1}  # checkpoints from before num_batches_tracked existed
    bn.load_state_dict(state)
    assert int(bn.num_batches_tracked) == 0
    for mod, shape in [(BatchNorm1d(3), (2, 3, 4, 5)), (BatchNorm2d(3), (2, 3)), (BatchNorm3d(3), (2, 3, 4))]:
        with pytest.raises(ValueError, match="expected"):
            mod(jitorch.ones(*shape))
    with pytest.raises(ValueError, match="more than 1 value per channel"):
        BatchNorm1d(3)(jitorch.ones(1, 3))


def test_sync_batch_norm_converts_and_runs_single_process(rng):
    net = jitorch.nn.modules.container.Sequential(Linear(3, 3), BatchNorm1d(3))
    converted = SyncBatchNorm.convert_sync_batchnorm(net)
    assert type(converted[1]) is SyncBatchNorm and converted[1].weight is net[1].weight
    compare(*pair(SyncBatchNorm, tnn.SyncBatchNorm, 3), data(rng, 5, 3, 2))


# -- other norms ----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("cls,th_cls,shape", [(InstanceNorm1d, tnn.InstanceNorm1d, (4, 3, 5)),
                                              (InstanceNorm1d, tnn.InstanceNorm1d, (3, 5)),
                                              (InstanceNorm2d, tnn.InstanceNorm2d, (2, 3, 4, 3)),
                                              (InstanceNorm3d, tnn.InstanceNorm3d, (3, 2, 2, 3))])
@pytest.mark.parametrize("kwargs", [{}, {"affine": True}, {"track_running_stats": True, "momentum": 0.4}])
def test_instance_norm_matches_torch(cls, th_cls, shape, kwargs, rng):
    jt_mod, th_mod = pair(cls, th_cls, 3, **kwargs)
    compare(jt_mod, th_mod, data(rng, *shape, scale=2.0), steps=2)
    jt_mod.eval()
    th_mod.eval()
    compare(jt_mod, th_mod, data(rng, *shape))


def test_instance_norm_channel_mismatch(rng):
    with pytest.raises(ValueError, match="num_features"):
        InstanceNorm1d(4, affine=True)(jitorch.ones(2, 3, 5))
    with pytest.warns(UserWarning, match="does not match num_features"):
        InstanceNorm1d(4)(jitorch.randn(2, 3, 5))


@pytest.mark.parametrize("kwargs", [{}, {"elementwise_affine": False}, {"bias": False}, {"eps": 1e-2}])
@pytest.mark.parametrize("shape", [4, (3, 4)])
def test_layer_norm_matches_torch(kwargs, shape, rng):
    jt_mod, th_mod = pair(LayerNorm, tnn.LayerNorm, shape, **kwargs)
    if jt_mod.elementwise_affine:
        with torch.no_grad():
            th_mod.weight.normal_()
        copy_state(jt_mod, th_mod)
    compare(jt_mod, th_mod, data(rng, 2, 3, 4, scale=3.0))


@pytest.mark.parametrize("kwargs", [{}, {"eps": 1e-3}, {"elementwise_affine": False}])
def test_rms_norm_matches_torch(kwargs, rng):
    compare(*pair(RMSNorm, tnn.RMSNorm, (3, 4), **kwargs), data(rng, 2, 3, 4))


@pytest.mark.parametrize("kwargs", [{}, {"affine": False}, {"bias": False}])
def test_group_norm_matches_torch(kwargs, rng):
    compare(*pair(GroupNorm, tnn.GroupNorm, 2, 6, **kwargs), data(rng, 3, 6, 4))
    with pytest.raises(ValueError, match="divisible"):
        GroupNorm(4, 6)


def test_local_response_norm_matches_torch(rng):
    compare(*pair(LocalResponseNorm, tnn.LocalResponseNorm, 3), data(rng, 2, 5, 4))
    compare(*pair(LocalResponseNorm, tnn.LocalResponseNorm, 4, 1e-2, 0.6, 2.0), data(rng, 2, 5, 3, 3))


def test_distance_modules_match_torch(rng):
    compare(*pair(PairwiseDistance, tnn.PairwiseDistance, 1.0), data(rng, 3, 4), data(rng, 3, 4))
    compare(*pair(CosineSimilarity, tnn.CosineSimilarity, 0), data(rng, 3, 4), data(rng, 3, 4))


# -- activations ----------------------------------------------------------------------------------------------------
ACTIVATION_MODULES = [
    ("ReLU", ()), ("ReLU6", ()), ("LeakyReLU", (0.2,)), ("ELU", (0.7,)), ("SELU", ()), ("CELU", (1.3,)),
    ("GELU", ()), ("GELU", ("tanh",)), ("SiLU", ()), ("Mish", ()), ("Softplus", (2.0, 5.0)), ("Sigmoid", ()),
    ("Tanh", ()), ("Softmax", (1,)), ("LogSoftmax", (-1,)), ("Softmin", (0,)), ("Hardtanh", (-0.5, 2.0)),
    ("Hardswish", ()), ("Hardsigmoid", ()), ("GLU", (1,)), ("Threshold", (0.3, -1.0)), ("Softsign", ()),
    ("LogSigmoid", ()), ("Tanhshrink", ()), ("Softshrink", (0.3,)), ("Hardshrink", (0.3,)), ("Softmax2d", ()),
    ("PReLU", ()), ("PReLU", (4, 0.1)),
]


@pytest.mark.parametrize("name,args", ACTIVATION_MODULES)
def test_activation_modules_match_torch(name, args, rng):
    compare(*pair(getattr(A, name), getattr(tnn, name), *args), data(rng, 3, 4, 2, 2, scale=3.0))


@pytest.mark.parametrize("name,args", [("ReLU", ()), ("LeakyReLU", (0.2,)), ("ELU", ()), ("Hardtanh", ()),
                                       ("SiLU", ()), ("Threshold", (0.1, 2.0))])
def test_inplace_activation_modules_match_torch(name, args, rng):
    jt_mod, th_mod = pair(getattr(A, name), getattr(tnn, name), *args, inplace=True)
    x = data(rng, 3, 4)
    jt_leaf, th_leaf = jitorch.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    jt_in, th_in = jt_leaf + 0, th_leaf + 0
    assert jt_mod(jt_in) is jt_in and th_mod(th_in) is th_in
    jt_in.sum().backward()
    th_in.sum().backward()
    assert_close(jt_leaf.grad, th_leaf.grad, "grad through the in-place activation")


def test_rrelu_module_train_and_eval(rng):
    jt_mod, th_mod = pair(A.RReLU, tnn.RReLU, 0.1, 0.3)
    jt_mod.eval()
    th_mod.eval()
    compare(jt_mod, th_mod, data(rng, 4, 5))
    jt_mod.train()
    out = jt_mod(-jitorch.ones(1000))
    assert float(out.min()) >= -0.3 and float(out.max()) <= -0.1 and float(out.std()) > 0.03


def test_hardtanh_deprecated_arguments_and_errors():
    with pytest.warns(FutureWarning, match="min_value"):
        assert A.Hardtanh(min_value=-2.0).min_val == -2.0
    with pytest.raises(AssertionError):
        A.Hardtanh(1.0, 0.0)
    with pytest.raises(ValueError, match="Softmax2d"):
        A.Softmax2d()(jitorch.ones(2, 3))
    with pytest.warns(UserWarning, match="Implicit dimension"):
        A.Softmax()(jitorch.ones(2, 3))


# -- multi-head attention -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("kwargs", [{}, {"batch_first": True}, {"bias": False}, {"add_bias_kv": True},
                                    {"add_zero_attn": True}, {"kdim": 5, "vdim": 3}])
@pytest.mark.parametrize("need_weights", [True, False])
def test_multihead_attention_matches_torch(kwargs, need_weights, rng):
    jt_mod, th_mod = pair(A.MultiheadAttention, tnn.MultiheadAttention, 8, 2, **kwargs)
    batch_first = kwargs.get("batch_first", False)
    q = data(rng, 2, 4, 8) if batch_first else data(rng, 4, 2, 8)
    kv_shape = (2, 6) if batch_first else (6, 2)
    k = data(rng, *kv_shape, kwargs.get("kdim", 8))
    v = data(rng, *kv_shape, kwargs.get("vdim", 8))
    mask = np.zeros((2, 6), bool)
    mask[1, 4:] = True
    compare(jt_mod, th_mod, q, k, v, key_padding_mask=mask, need_weights=need_weights)
    if need_weights:
        jt_w = jt_mod(*(jitorch.tensor(a) for a in (q, k, v)))[1]
        th_w = th_mod(*(torch.tensor(a) for a in (q, k, v)))[1]
        assert_close(jt_w, th_w, "attention weights")
        jt_w = jt_mod(*(jitorch.tensor(a) for a in (q, k, v)), average_attn_weights=False)[1]
        th_w = th_mod(*(torch.tensor(a) for a in (q, k, v)), average_attn_weights=False)[1]
        assert_close(jt_w, th_w, "per-head attention weights")


def test_multihead_self_attention_with_causal_mask_matches_torch(rng):
    jt_mod, th_mod = pair(A.MultiheadAttention, tnn.MultiheadAttention, 6, 3, batch_first=True)
    x = data(rng, 2, 5, 6)
    causal = np.triu(np.ones((5, 5), bool), 1)
    for need_weights in (True, False):
        jt_x, th_x = jitorch.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
        jt_out = jt_mod(jt_x, jt_x, jt_x, attn_mask=jitorch.tensor(causal), need_weights=need_weights,
                        is_causal=True)[0]
        th_out = th_mod(th_x, th_x, th_x, attn_mask=torch.tensor(causal), need_weights=need_weights,
                        is_causal=True)[0]
        assert_close(jt_out, th_out, "output")
        jt_out.sum().backward()
        th_out.sum().backward()
        assert_close(jt_x.grad, th_x.grad, "input grad")
    for name, p in jt_mod.named_parameters():
        assert_close(p.grad, dict(th_mod.named_parameters())[name].grad, f"grad of {name}")


# -- end to end -----------------------------------------------------------------------------------------------------
def test_small_network_trains_like_torch(rng):
    """A few SGD steps of Linear/BatchNorm/GELU/LayerNorm/Embedding layers under cross entropy, from the same start."""
    from jitorch.nn.modules.container import Sequential

    def build(nn_lin, nn_bn, nn_act, nn_ln):
        return [nn_lin(6, 8), nn_bn(8), nn_act(), nn_ln(8), nn_lin(8, 3)]
    th_layers = build(tnn.Linear, tnn.BatchNorm1d, tnn.GELU, tnn.LayerNorm)
    jt_layers = build(Linear, BatchNorm1d, A.GELU, LayerNorm)
    th_net, jt_net = tnn.Sequential(*th_layers), Sequential(*jt_layers)
    copy_state(jt_net, th_net)
    th_opt = torch.optim.SGD(th_net.parameters(), lr=0.1, momentum=0.9)
    jt_opt = jitorch.optim.SGD(jt_net.parameters(), lr=0.1, momentum=0.9)
    x, y = data(rng, 16, 6), rng.integers(0, 3, 16)
    for _ in range(5):
        for net, opt, lib, F in ((th_net, th_opt, torch, tnn.functional), (jt_net, jt_opt, jitorch,
                                                                              jitorch.nn.functional)):
            opt.zero_grad()
            F.cross_entropy(net(lib.tensor(x)), lib.tensor(y), label_smoothing=0.1).backward()
            opt.step()
    th_state = th_net.state_dict()
    for name, value in jt_net.state_dict().items():
        assert_close(value, th_state[name], name, {"atol": 1e-4, "rtol": 1e-4})
