"""jitorch.export against torch.export on the same models and weights.

Each model is written once against a namespace ``T`` (``jitorch`` or ``torch``); the weights are copied through
NumPy. torch's programs are compared after ``run_decompositions()``, whose functional form (buffer writes as
``BUFFER_MUTATION`` outputs) is the one jitorch's primitive graphs have from the start.
"""
from __future__ import annotations

import copy
import io

import numpy as np
import pytest
import torch

import jitorch
from jitorch.export import ExportedProgram, GuardOnDataDependentSymNode


# -- models ------------------------------------------------------------------------------------------------------------
def mlp(T):
    return T.nn.Sequential(T.nn.Linear(4, 16), T.nn.ReLU(), T.nn.Linear(16, 3))


def cnn(T):
    nn = T.nn

    class CNN(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 4, 3, padding=1)
            self.bn = nn.BatchNorm2d(4)
            self.fc = nn.Linear(4, 5)

        def forward(self, x):
            return self.fc(T.relu(self.bn(self.conv(x))).mean((2, 3)))
    return CNN()


def encoder(T):
    return T.nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True)


def with_buffers(T):
    nn = T.nn

    class WithBuffers(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(4, 4)
            self.register_buffer("scale", T.full((4,), 2.0))
            self.register_buffer("steps", T.zeros((), dtype=T.int64))
            self.register_buffer("cache", T.zeros(4), persistent=False)

        def forward(self, x):
            self.steps.add_(1)
            self.cache.copy_(x.mean(0))
            return self.lin(x) * self.scale + self.cache
    return WithBuffers()


def heads(T):
    nn = T.nn

    class Heads(nn.Module):
        def __init__(self):
            super().__init__()
            self.body, self.cls, self.reg = nn.Linear(4, 8), nn.Linear(8, 3), nn.Linear(8, 1)

        def forward(self, x):
            h = T.tanh(self.body(x))
            return {"logits": self.cls(h), "aux": (self.reg(h), h.mean())}
    return Heads()


MODELS = {  # name: (builder, example input shape, train mode)
    "mlp": (mlp, (5, 4), True),
    "cnn_train": (cnn, (2, 3, 6, 6), True),
    "cnn_eval": (cnn, (2, 3, 6, 6), False),
    "encoder": (encoder, (2, 5, 16), False),
    "buffers": (with_buffers, (3, 4), True),
    "heads": (heads, (3, 4), True),
}


def pair(name, seed=0):
    """``(jitorch model, torch model, input shape)`` with the same weights and buffers."""
    build, shape, train = MODELS[name]
    torch.manual_seed(seed)
    tm = build(torch).train(train)
    jm = build(jitorch).train(train)
    jm.load_state_dict({k: jitorch.tensor(v.detach().numpy()) for k, v in tm.state_dict().items()})
    return jm, tm, shape


def inputs(shape, seed=1):
    x = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    return jitorch.tensor(x), torch.tensor(x)


def leaves(out):
    if isinstance(out, dict):
        return [y for v in out.values() for y in leaves(v)]
    if isinstance(out, (tuple, list)):
        return [y for v in out for y in leaves(v)]
    return [out]


def assert_close(got, want, atol=2e-5, rtol=1e-4):
    got, want = leaves(got), leaves(want)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        w = w.detach().numpy() if isinstance(w, torch.Tensor) else w.detach().numpy()
        np.testing.assert_allclose(g.detach().numpy(), w, atol=atol, rtol=rtol)


def specs(sig):
    return ([(s.kind.name, s.target, s.arg.name) for s in sig.input_specs],
            [(s.kind.name, s.target) for s in sig.output_specs])


def state(m):
    return {k: v.detach().numpy().copy() for k, v in m.state_dict().items()}


# -- whole models ------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(MODELS))
def test_module_matches_eager_and_torch(name):
    jm, tm, shape = pair(name)
    x, xt = inputs(shape)
    before = state(jm)
    eager_j, eager_t = copy.deepcopy(jm), copy.deepcopy(tm)
    ep = jitorch.export.export(jm, (x,))
    tep = torch.export.export(copy.deepcopy(tm), (xt,))
    assert isinstance(ep, ExportedProgram)
    ep.graph.lint()
    for k, v in state(jm).items():  # exporting runs the model but leaves its buffers as they were
        np.testing.assert_array_equal(v, before[k])
    out = ep.module()(x)
    assert_close(out, eager_j(x), atol=0, rtol=0)
    assert_close(out, tep.module()(xt))
    assert_close(out, eager_t(xt))


@pytest.mark.parametrize("name", sorted(MODELS))
def test_signature_matches_torch(name):
    jm, tm, shape = pair(name)
    x, xt = inputs(shape)
    ep = jitorch.export.export(jm, (x,))
    tep = torch.export.export(tm, (xt,)).run_decompositions()
    (j_in, j_out), (t_in, t_out) = specs(ep.graph_signature), specs(tep.graph_signature)
    assert j_in == t_in  # kinds, targets (FQNs) and placeholder names (p_conv_weight, b_bn_running_mean, x...)
    assert j_out == t_out  # BUFFER_MUTATION targets, in torch's order, then the user outputs
    assert [s.persistent for s in ep.graph_signature.input_specs] == \
        [s.persistent for s in tep.graph_signature.input_specs]
    assert list(ep.state_dict) == list(tep.state_dict)
    assert sorted(ep.constants) == sorted(tep.constants)
    assert [n for n, _ in ep.named_parameters()] == [n for n, _ in tep.named_parameters()]
    assert [n for n, _ in ep.named_buffers()] == [n for n, _ in tep.named_buffers()]


@pytest.mark.parametrize("name", ["cnn_train", "buffers"])
def test_buffer_mutation_applied(name):
    jm, tm, shape = pair(name)
    x, xt = inputs(shape)
    initial = state(tm)
    ep = jitorch.export.export(jm, (x,))
    eager_j, eager_t = copy.deepcopy(jm), copy.deepcopy(tm)
    tmod = torch.export.export(copy.deepcopy(tm), (xt,)).module()
    m = ep.module()
    for _ in range(2):
        assert_close(m(x), eager_j(x), atol=0, rtol=0)
        tmod(xt), eager_t(xt)
    got = {k: v.numpy() for k, v in m.state_dict().items()}
    for k, v in state(eager_t).items():  # the written buffers (running stats, counters) as torch's after 2 steps
        np.testing.assert_allclose(got[k], v, atol=1e-6, rtol=1e-5)
        np.testing.assert_allclose(got[k], state(tmod)[k], atol=1e-6, rtol=1e-5)
    written = {s.target for s in ep.graph_signature.output_specs if s.kind.name == "BUFFER_MUTATION"}
    assert written and all(not np.array_equal(got[k], initial[k]) for k in written if k in got)
    # ep.module() shares the program's tensors (as torch's): its state_dict saw the writes too
    for k in written & set(ep.state_dict):
        np.testing.assert_array_equal(ep.state_dict[k].numpy(), got[k])


def test_input_mutation_kinds_and_write_back():
    def build(T):
        class Inplace(T.nn.Module):
            def forward(self, x, y):
                x.mul_(2)
                return x + y
        return Inplace()
    x, xt = inputs((3,))
    y, yt = inputs((3,), seed=2)
    ep = jitorch.export.export(build(jitorch), (x.clone(), y))
    tep = torch.export.export(build(torch), (xt.clone(), yt)).run_decompositions()
    assert specs(ep.graph_signature) == specs(tep.graph_signature)
    assert [s.kind.name for s in ep.graph_signature.output_specs] == ["USER_INPUT_MUTATION", "USER_OUTPUT"]
    a, at = x.clone(), xt.clone()
    out, tout = ep.module()(a, y), tep.module()(at, yt)
    assert_close(out, tout)
    assert_close(a, at)  # written back into the caller's tensor
    np.testing.assert_array_equal(a.numpy(), 2 * x.numpy())


def test_nested_inputs_kwargs_and_constants_match_torch():
    def build(T):
        class Nested(T.nn.Module):
            def __init__(self):
                super().__init__()
                self.lin = T.nn.Linear(4, 4)

            def forward(self, x, ys, scale=1.0, *, k):
                c = T.tensor([1.0, 2.0, 3.0, 4.0])
                return self.lin(x) * scale + ys[0] + ys[1]["z"] + k + c, T.zeros(x.shape[0])
        return Nested()
    jm, tm = build(jitorch), build(torch)
    jm.load_state_dict({k: jitorch.tensor(v.detach().numpy()) for k, v in tm.state_dict().items()})
    vals = [inputs(s, seed=i) for i, s in enumerate([(3, 4), (4,), (4,), (4,)])]
    j_args = (vals[0][0], [vals[1][0], {"z": vals[2][0]}], 2.0)
    t_args = (vals[0][1], [vals[1][1], {"z": vals[2][1]}], 2.0)
    ep = jitorch.export.export(jm, j_args, {"k": vals[3][0]})
    tep = torch.export.export(tm, t_args, {"k": vals[3][1]}).run_decompositions()
    assert specs(ep.graph_signature) == specs(tep.graph_signature)
    assert [s.arg.name for s in ep.graph_signature.input_specs][-5:] == ["x", "ys_0", "ys_1_z", "scale", "k"]
    assert_close(ep.module()(*j_args, k=vals[3][0]), tep.module()(*t_args, k=vals[3][1]))
    with pytest.raises(AssertionError, match="Guard failed: scale == 2.0"):
        ep.module()(j_args[0], j_args[1], 3.0, k=vals[3][0])
    with pytest.raises(ValueError, match="Trying to flatten user inputs"):
        ep.module()(j_args[0], [vals[1][0]], 2.0, k=vals[3][0])


# -- shapes and guards -------------------------------------------------------------------------------------------------
def test_static_dim_mismatch_refused_like_torch():
    jm, tm, _ = pair("mlp")
    x, xt = inputs((2, 4))
    m = jitorch.export.export(jm, (x,)).module()
    tmod = torch.export.export(tm, (xt,)).module()
    with pytest.raises(AssertionError) as torch_err:
        tmod(torch.randn(3, 4))
    with pytest.raises(AssertionError) as err:
        m(jitorch.randn(3, 4))
    assert str(err.value).startswith(str(torch_err.value))  # "Guard failed: input.size()[0] == 2", then advice
    assert "input.size()[0] == 2" in str(err.value)
    with pytest.raises(AssertionError, match=r"input.dim\(\) == 2"):
        m(jitorch.randn(2, 4, 1))


def test_data_dependent_control_flow_raises():
    def build(T):
        class DataDependent(T.nn.Module):
            def forward(self, x):
                if x.sum() > 0:
                    return x + 1
                return x - 1
        return DataDependent()
    x, xt = inputs((3,))
    with pytest.raises(Exception, match="data-dependent"):
        torch.export.export(build(torch), (xt,))
    with pytest.raises(GuardOnDataDependentSymNode) as err:
        jitorch.export.export(build(jitorch), (x,))
    assert isinstance(err.value, RuntimeError)
    assert "test_export.py" in str(err.value) and "if x.sum() > 0:" in str(err.value)


# -- the program object ------------------------------------------------------------------------------------------------
def test_repr_and_properties():
    jm, tm, shape = pair("cnn_train")
    x, xt = inputs(shape)
    ep = jitorch.export.export(jm, (x,))
    text = str(ep)
    assert text.startswith("ExportedProgram:\n    class GraphModule(jitorch.nn.Module):\n        def forward(self, ")
    assert 'p_conv_weight: "f32[4, 3, 3, 3]"' in text and 'x: "f32[2, 3, 6, 6]"' in text
    assert 'convolution: "f32[2, 4, 6, 6]" = _convolution(x, p_conv_weight, p_conv_bias' in text
    assert "b_bn_running_mean: BUFFER target='bn.running_mean' persistent=True" in text
    assert "BUFFER_MUTATION target='bn.num_batches_tracked'" in text and "Range constraints: {}" in text
    tsig = str(torch.export.export(tm, (xt,)).run_decompositions().graph_signature)
    assert str(ep.graph_signature).split("# outputs")[0] == tsig.split("# outputs")[0]
    assert ep.example_inputs[0][0] is x and ep.call_spec.in_spec == jitorch.utils._pytree.tree_structure(((x,), {}))
    assert ep.module_call_graph[0].fqn == "" and {e.fqn for e in ep.module_call_graph[1:]} == {"conv", "bn", "fc"}
    with pytest.raises(RuntimeError, match="Unable to call ExportedProgram directly"):
        ep(x)
    assert ep.graph_module(*ep.state_dict.values(), x)[-1].shape == (2, 5)  # the lifted graph runs as it is


def test_run_decompositions():
    jm, _, shape = pair("cnn_eval")
    x, _ = inputs(shape)
    ep = jitorch.export.export(jm, (x,))
    same = ep.run_decompositions()
    assert isinstance(same, ExportedProgram) and same is not ep and str(same) == str(ep)
    dec = ep.run_decompositions({"relu": lambda t: t * (t > 0)})
    targets = [n.target.__name__ for n in dec.graph.nodes if n.op == "call_function"]
    assert "relu" not in targets and "gt" in targets
    assert specs(dec.graph_signature) == specs(ep.graph_signature)
    assert_close(dec.module()(x), jm(x), atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("name", ["cnn_train", "heads", "buffers"])
def test_save_load_round_trip(name):
    jm, _, shape = pair(name)
    x, _ = inputs(shape)
    ep = jitorch.export.export(jm, (x,))
    buf, extra = io.BytesIO(), {"note": "hello"}
    jitorch.export.save(ep, buf, extra_files=extra)
    buf.seek(0)
    got = {"note": ""}
    loaded = jitorch.export.load(buf, extra_files=got)
    assert got == extra
    assert str(loaded) == str(ep)
    assert specs(loaded.graph_signature) == specs(ep.graph_signature)
    loaded.graph.lint()
    for k, v in ep.state_dict.items():
        np.testing.assert_array_equal(loaded.state_dict[k].detach().numpy(), v.detach().numpy())
    assert_close(loaded.module()(x), ep.module()(x), atol=0, rtol=0)
    assert all(isinstance(p, jitorch.nn.Parameter) for _, p in loaded.named_parameters())
