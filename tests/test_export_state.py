"""jitorch.export and the module's state against torch.export: buffers that ``forward`` reassigns (the EMA pattern),
what exporting leaves untouched, tied parameters, the exported module's ``train``/``eval``, one tensor passed
as several inputs of a dynamic export, and the state library code makes inside the call (an RNN's zero initial state,
a causal mask): made in the graph at the input's size, not lifted as constants of the traced size.

torch's programs are compared after ``run_decompositions()`` (see tests/test_export.py).
"""
from __future__ import annotations

import copy
import io

import numpy as np
import pytest
import torch

import jitorch
from jitorch.export import Dim

LIBS = (jitorch, torch)


def _np(t):
    return t.detach().numpy()


def _rand(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _same_weights(jm, tm):
    jm.load_state_dict({k: jitorch.tensor(_np(v)) for k, v in tm.state_dict().items()})


def _out_specs(ep):
    return [(s.kind.name, s.target) for s in ep.graph_signature.output_specs]


def _in_specs(ep):
    return [(s.kind.name, s.target, s.arg.name, s.persistent) for s in ep.graph_signature.input_specs]


# -- buffers reassigned in forward -------------------------------------------------------------------------------------
def ema(T):
    nn = T.nn

    class EMA(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(3, 3)
            self.register_buffer("avg", T.zeros(3))
            self.register_buffer("steps", T.zeros((), dtype=T.int64))

        def forward(self, x):
            self.avg = self.avg * 0.9 + x.mean(0) * 0.1
            self.steps = self.steps + 1
            return self.lin(x) - self.avg
    return EMA()


def _ema_pair():
    torch.manual_seed(0)
    tm, jm = ema(torch), ema(jitorch)
    _same_weights(jm, tm)
    return jm, tm


def test_reassigned_buffer_is_a_buffer_mutation_like_torch():
    jm, tm = _ema_pair()
    eager = copy.deepcopy(jm)  # ep.state_dict shares the module's tensors, as torch's: the program's writes show
    x0 = _rand(4, 3)
    avg, steps = jm.avg, jm.steps
    ep = jitorch.export.export(jm, (jitorch.tensor(x0),))
    tep = torch.export.export(tm, (torch.tensor(x0),)).run_decompositions()
    assert _out_specs(ep) == _out_specs(tep) == [("BUFFER_MUTATION", "avg"), ("BUFFER_MUTATION", "steps"),
                                                 ("USER_OUTPUT", None)]
    assert _in_specs(ep) == _in_specs(tep)
    # exporting leaves the module as it was: the same buffer objects, the same values (torch's as well)
    assert jm.avg is avg and jm.steps is steps
    np.testing.assert_array_equal(_np(jm.avg), _np(tm.avg))
    assert int(jm.steps) == int(tm.steps) == 0
    m, tmod = ep.module(), tep.module()
    for step in range(3):  # the program carries the state from call to call, as torch's and eager's
        x = _rand(4, 3, seed=step + 1)
        got, want = m(jitorch.tensor(x)), tmod(torch.tensor(x))
        np.testing.assert_allclose(_np(got), _np(want), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(_np(got), _np(eager(jitorch.tensor(x))), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(_np(m.avg), _np(tmod.avg), rtol=1e-5, atol=1e-6)
    assert int(m.steps) == int(tmod.steps) == 3


def test_reassigned_buffer_with_a_dynamic_batch():
    jm, tm = _ema_pair()
    x0 = _rand(4, 3)
    ep = jitorch.export.export(jm, (jitorch.tensor(x0),), dynamic_shapes={"x": {0: Dim("batch", min=2, max=32)}})
    tep = torch.export.export(tm, (torch.tensor(x0),),
                              dynamic_shapes={"x": {0: torch.export.Dim("batch", min=2, max=32)}})
    assert _out_specs(ep) == _out_specs(tep.run_decompositions())
    assert int(jm.steps) == 0 and not jm.avg.any()  # the probe traces left the module alone
    m, tmod = ep.module(), tep.module()
    for n in (7, 2, 11):
        x = _rand(n, 3, seed=n)
        np.testing.assert_allclose(_np(m(jitorch.tensor(x))), _np(tmod(torch.tensor(x))), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(_np(m.avg), _np(tmod.avg), rtol=1e-5, atol=1e-6)
    assert int(m.steps) == int(tmod.steps) == 3


def test_buffer_reassigned_in_a_submodule_follows_eager():
    # torch.export (2.13) finds reassigned buffers of the top module only (a submodule's new value is dropped);
    # jitorch's are found at every level, so the program follows eager.
    def build(T):
        class Counter(T.nn.Module):
            def __init__(self):
                super().__init__()
                self.register_buffer("seen", T.zeros((), dtype=T.int64))
                self.register_buffer("total", T.zeros(3))

            def forward(self, x):
                self.seen = self.seen + x.shape[0]
                self.total = self.total + x.sum(0)
                return x * self.total
        return T.nn.Sequential(Counter(), T.nn.Tanh())
    jm, eager, tm = build(jitorch), build(jitorch), build(torch)
    x0 = _rand(4, 3)
    ep = jitorch.export.export(jm, (jitorch.tensor(x0),), dynamic_shapes=({0: Dim("batch", min=2, max=16)},))
    assert _out_specs(ep) == [("BUFFER_MUTATION", "0.seen"), ("BUFFER_MUTATION", "0.total"), ("USER_OUTPUT", None)]
    assert int(jm[0].seen) == 0 and not jm[0].total.any()
    m = ep.module()
    for n in (4, 6, 3):
        x = _rand(n, 3, seed=n)
        want = tm(torch.tensor(x))  # eager torch
        np.testing.assert_allclose(_np(m(jitorch.tensor(x))), _np(want), rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(_np(eager(jitorch.tensor(x))), _np(want), rtol=1e-5, atol=1e-5)
    assert int(m.get_buffer("0.seen")) == int(tm[0].seen) == 13
    np.testing.assert_allclose(_np(m.get_buffer("0.total")), _np(tm[0].total), rtol=1e-5, atol=1e-5)


# -- what exporting leaves untouched -----------------------------------------------------------------------------------
def projected(T):
    nn = T.nn

    class Projected(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(4, 4)
            self.bn = nn.BatchNorm1d(4)
            self.drop = nn.Dropout(0.5)

        def forward(self, x):
            with T.no_grad():
                self.lin.weight.clamp_(-0.1, 0.1)  # a constraint applied in forward: an in-place parameter write
            x.mul_(2)
            return self.drop(self.bn(self.lin(x)))
    return Projected()


@pytest.mark.parametrize("dynamic", [False, True])
def test_export_leaves_parameters_buffers_inputs_and_rng_alone(dynamic):
    for T in LIBS:
        T.manual_seed(0)
        m = projected(T)
        with T.no_grad():
            m.lin.weight.uniform_(-1, 1)
        before = {k: _np(v).copy() for k, v in m.state_dict().items()}
        x = T.tensor(_rand(6, 4))
        x0 = _np(x).copy()
        T.manual_seed(123)
        dims = ({0: T.export.Dim("B", min=2, max=64)},) if dynamic else None
        T.export.export(m, (x,), dynamic_shapes=dims)
        after_rand = T.rand(1).item()
        T.manual_seed(123)
        assert after_rand == T.rand(1).item(), T.__name__
        for k, v in m.state_dict().items():
            np.testing.assert_array_equal(_np(v), before[k], err_msg=f"{T.__name__}: {k}")
        np.testing.assert_array_equal(_np(x), x0)


def test_expanded_buffer_exports_like_torch():
    """Hugging Face's ``register_buffer("position_ids", arange(n).expand((1, -1)), persistent=False)``: restoring the
    buffers after the trace wrote into its read-only (expanded) array (ValueError)."""
    outs = []
    for T in (torch, jitorch):
        class Embed(T.nn.Module):
            def __init__(self):
                super().__init__()
                self.pos = T.nn.Embedding(8, 3)
                self.register_buffer("position_ids", T.arange(8).expand((1, -1)), persistent=False)

            def forward(self, x):
                return x + self.pos(self.position_ids[:, :x.shape[1]])

        m = Embed()
        if outs:
            _same_weights(m, outs[0][0])
        x = T.tensor(_rand(2, 5, 3))
        ep = T.export.export(m, (x,))
        outs.append((m, ep.module()(x), [s.target for s in ep.graph_signature.input_specs]))
    np.testing.assert_allclose(_np(outs[1][1]), _np(outs[0][1]), rtol=1e-6)
    assert outs[1][2] == outs[0][2]
    np.testing.assert_array_equal(_np(outs[1][0].position_ids), np.arange(8)[None])


def test_parameter_written_in_forward_is_a_parameter_mutation():
    torch.manual_seed(0)
    tm, jm = projected(torch).eval(), projected(jitorch).eval()
    _same_weights(jm, tm)
    with torch.no_grad():
        tm.lin.weight.uniform_(-1, 1)
    _same_weights(jm, tm)
    x0 = _rand(6, 4)
    ep = jitorch.export.export(jm, (jitorch.tensor(x0),))
    tep = torch.export.export(tm, (torch.tensor(x0),))
    assert _out_specs(ep) == _out_specs(tep.run_decompositions())
    assert ("PARAMETER_MUTATION", "lin.weight") in _out_specs(ep)
    # (torch's decomposed program's module fails here: its copy_ into the parameter records autograd)
    m, tmod = ep.module(), tep.module()
    np.testing.assert_allclose(_np(m(jitorch.tensor(x0))), _np(tmod(torch.tensor(x0))), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(_np(m.lin.weight), _np(tmod.lin.weight))
    assert float(m.lin.weight.abs().max()) == np.float32(0.1)


# -- tied parameters ---------------------------------------------------------------------------------------------------
def tied(T):
    nn = T.nn

    class Tied(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(5, 4)
            self.head = nn.Linear(4, 5, bias=False)
            self.head.weight = self.emb.weight
            self.register_buffer("scale", T.full((4,), 2.0))
            self.sub = nn.Module()
            self.sub.register_buffer("scale", self.scale)

        def forward(self, ids):
            return self.head(self.emb(ids) * self.sub.scale + self.scale)
    return Tied()


def test_tied_weights_keep_every_name_like_torch(tmp_path):
    torch.manual_seed(0)
    tm, jm = tied(torch), tied(jitorch)
    _same_weights(jm, tm)
    ids = np.array([1, 4, 0])
    ep = jitorch.export.export(jm, (jitorch.tensor(ids),))
    tep = torch.export.export(tm, (torch.tensor(ids),))
    assert _in_specs(ep) == _in_specs(tep)
    assert list(ep.state_dict) == list(tep.state_dict)
    assert ep.state_dict["emb.weight"] is ep.state_dict["head.weight"]
    assert [n for n, _ in ep.named_parameters()] == [n for n, _ in tep.named_parameters()]
    path = tmp_path / "tied.pt2"
    jitorch.export.save(ep, path)
    for prog in (ep, jitorch.export.load(path)):
        m, tmod = prog.module(), tep.module()
        assert m.emb.weight is m.head.weight and m.scale is m.sub.scale
        assert [n for n, _ in m.named_parameters()] == [n for n, _ in tmod.named_parameters()]
        assert [n for n, _ in m.named_parameters(remove_duplicate=False)] == \
            [n for n, _ in tmod.named_parameters(remove_duplicate=False)]
        assert sorted(m.state_dict()) == sorted(tmod.state_dict())
        np.testing.assert_allclose(_np(m(jitorch.tensor(ids))), _np(tmod(torch.tensor(ids))), rtol=1e-5, atol=1e-6)


# -- the exported module -----------------------------------------------------------------------------------------------
def test_exported_module_refuses_train_and_eval_like_torch():
    mods = [T.export.export(T.nn.Linear(2, 2), (T.ones(1, 2),)).module() for T in LIBS]
    for call in (lambda m: m.eval(), lambda m: m.train(), lambda m: m.train(False)):
        errors = []
        for m in mods:
            with pytest.raises(NotImplementedError) as err:
                call(m)
            errors.append(str(err.value))
        assert errors[0] == errors[1]
    assert mods[0](jitorch.ones(1, 2)).shape == (1, 2)  # still callable
    buf = io.BytesIO()
    jitorch.export.save(jitorch.export.export(jitorch.nn.Linear(2, 2), (jitorch.ones(1, 2),)), buf)
    buf.seek(0)
    with pytest.raises(NotImplementedError, match=r"Calling eval\(\) is not supported yet."):
        jitorch.export.load(buf).module().eval()


# -- one tensor passed as several inputs -------------------------------------------------------------------------------
def self_attention(T):
    class SelfAttention(T.nn.Module):
        def __init__(self):
            super().__init__()
            self.mha = T.nn.MultiheadAttention(8, 2, batch_first=True)

        def forward(self, q, k, v):
            return self.mha(q, k, v, need_weights=False)[0]
    return SelfAttention()


def test_same_tensor_as_several_dynamic_inputs():
    torch.manual_seed(0)
    tm, jm = self_attention(torch).eval(), self_attention(jitorch).eval()
    _same_weights(jm, tm)
    x0 = _rand(2, 5, 8)
    x, xt = jitorch.tensor(x0), torch.tensor(x0)
    seq, tseq = Dim("S", min=2, max=64), torch.export.Dim("S", min=2, max=64)
    ep = jitorch.export.export(jm, (x, x, x), dynamic_shapes=({1: seq},) * 3)
    tep = torch.export.export(tm, (xt, xt, xt), dynamic_shapes=({1: tseq},) * 3)
    assert len(ep.range_constraints) == len(tep.range_constraints) == 1
    for n in (9, 3):
        y = _rand(2, n, 8, seed=n)
        y1, z = jitorch.tensor(y), jitorch.tensor(_rand(2, n, 8, seed=n + 1))
        want = tm(torch.tensor(y), torch.tensor(y), torch.tensor(y))
        np.testing.assert_allclose(_np(ep.module()(y1, y1, y1)), _np(want), rtol=1e-5, atol=1e-5)
        # the program is the one of three inputs: distinct tensors give torch's values too
        np.testing.assert_allclose(_np(ep.module()(y1, z, z)),
                                   _np(tep.module()(torch.tensor(y), torch.tensor(_np(z)), torch.tensor(_np(z)))),
                                   rtol=1e-5, atol=1e-5)


# -- tensors library code makes inside the call --------------------------------------------------------------------
def rnn(T, kind):
    class Net(T.nn.Module):
        def __init__(self):
            super().__init__()
            self.rnn = getattr(T.nn, kind)(4, 6, num_layers=2, batch_first=True)

        def forward(self, x):
            out, state = self.rnn(x)  # no initial state: nn makes zeros of the batch's size (_creation.zeros)
            return (out, state) if kind == "GRU" else (out, *state)
    return Net()


def _rnn_pair(kind):
    torch.manual_seed(0)
    tm, jm = rnn(torch, kind), rnn(jitorch, kind)
    _same_weights(jm, tm)
    return jm, tm


def _kinds(ep):
    return [s.kind.name for s in ep.graph_signature.input_specs]


@pytest.mark.parametrize("kind", ["GRU", "LSTM"])
def test_rnn_zero_state_follows_a_dynamic_batch(kind):
    jm, tm = _rnn_pair(kind)
    x0 = _rand(3, 5, 4)
    ep = jitorch.export.export(jm, (jitorch.tensor(x0),), dynamic_shapes={"x": {0: Dim("batch", min=2, max=16)}})
    tep = torch.export.export(tm, (torch.tensor(x0),),
                              dynamic_shapes={"x": {0: torch.export.Dim("batch", min=2, max=16)}})
    assert _kinds(ep) == _kinds(tep)
    for b in (2, 7):
        x = _rand(b, 5, 4, seed=b)
        got, want = ep.module()(jitorch.tensor(x)), tep.module()(torch.tensor(x))
        assert len(got) == len(want)
        for g, w in zip(got, want):
            assert tuple(g.shape) == tuple(w.shape)
            np.testing.assert_allclose(_np(g), _np(w), rtol=1e-5, atol=1e-6)


def test_static_lstm_export_lifts_no_zero_state():
    jm, tm = _rnn_pair("LSTM")
    x0 = _rand(3, 5, 4)
    ep = jitorch.export.export(jm, (jitorch.tensor(x0),))
    tep = torch.export.export(tm, (torch.tensor(x0),))
    assert _kinds(ep) == _kinds(tep)
    assert "CONSTANT_TENSOR" not in _kinds(ep) and not ep.constants
    for g, w in zip(ep.module()(jitorch.tensor(x0)), tm(torch.tensor(x0))):
        np.testing.assert_allclose(_np(g), _np(w), rtol=1e-5, atol=1e-6)


def test_causal_mask_follows_a_dynamic_sequence():
    def encoder(T):
        class Enc(T.nn.Module):
            def __init__(self):
                super().__init__()
                self.layer = T.nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True)

            def forward(self, x):
                mask = T.nn.Transformer.generate_square_subsequent_mask(x.shape[1])  # made by _creation.full
                return self.layer(x, src_mask=mask, is_causal=True)
        return Enc().eval()

    torch.manual_seed(0)
    tm, jm = encoder(torch), encoder(jitorch)
    _same_weights(jm, tm)
    ep = jitorch.export.export(jm, (jitorch.tensor(_rand(2, 5, 8)),), dynamic_shapes=({1: Dim("S", min=2, max=32)},))
    assert "CONSTANT_TENSOR" not in _kinds(ep)
    for n in (3, 9):
        x = _rand(2, n, 8, seed=n)
        np.testing.assert_allclose(_np(ep.module()(jitorch.tensor(x))), _np(tm(torch.tensor(x))), rtol=1e-5,
                                   atol=1e-5)
