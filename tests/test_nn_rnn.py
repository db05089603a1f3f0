"""RNN, LSTM, GRU and their cells against PyTorch with identical weights: outputs, final states and all gradients."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import jitorch
from helpers import make_array
from jitorch.nn.modules import rnn as jrnn
from nn_oracle import check_call, check_module, copy_weights, same_parameter_names
from nn_oracle import torch_single_thread  # noqa: F401 - an autouse fixture: one oracle thread

TOL = dict(atol=1e-5, rtol=1e-5)


def arr(*shape, seed=0):
    return make_array(shape, "float32", np.random.default_rng(seed), low=-1.0, high=1.0)


def pair(name, *args, **kwargs):
    torch.manual_seed(0)
    th = getattr(torch.nn, name)(*args, **kwargs)
    jt = getattr(jrnn, name)(*args, **kwargs)
    assert repr(jt) == repr(th)
    same_parameter_names(jt, th)
    return jt, th


CONFIGS = [
    {}, {"num_layers": 2}, {"bidirectional": True}, {"num_layers": 2, "bidirectional": True, "batch_first": True},
    {"num_layers": 3, "batch_first": True, "bias": False}, {"num_layers": 2, "bidirectional": True, "dropout": 0.5},
]


@pytest.mark.parametrize("name,extra", [("RNN", {}), ("RNN", {"nonlinearity": "relu"}), ("LSTM", {}), ("GRU", {})])
@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: "-".join(f"{k}={v}" for k, v in c.items()) or "default")
def test_recurrent_layers_match_torch(name, extra, config):
    # Eval mode where dropout is set (random masks cannot match torch's; p=1 in training is checked below).
    train = not config.get("dropout")
    jt, th = pair(name, 4, 5, **extra, **config)
    shape = (3, 6, 4) if config.get("batch_first") else (6, 3, 4)
    check_module(jt, th, [arr(*shape)], train=train, **TOL)


@pytest.mark.parametrize("name", ["RNN", "LSTM", "GRU"])
@pytest.mark.parametrize("config", [{"num_layers": 2, "bidirectional": True, "batch_first": True}, {}])
def test_given_initial_states(name, config):
    jt, th = pair(name, 4, 5, **config)
    layers = config.get("num_layers", 1) * (2 if config.get("bidirectional") else 1)
    shape = (3, 6, 4) if config.get("batch_first") else (6, 3, 4)
    h0 = arr(layers, 3, 5, seed=1)
    hx = (h0, arr(layers, 3, 5, seed=2)) if name == "LSTM" else h0
    # Initial states are leaves too: their gradients are compared.
    jt_out, th_out = _run_with_states(jt, th, arr(*shape), hx)
    assert jt_out and th_out


def _run_with_states(jt, th, x, hx):
    """Initial states are positional leaves too, so their gradients are compared."""
    states = hx if isinstance(hx, tuple) else (hx,)
    return check_call(jt, th, _call_with_states, [x, *states], **TOL)


def _call_with_states(mod, x, *states):
    return mod(x, states if len(states) == 2 else states[0])


def test_lstm_projections_match_torch():
    jt, th = pair("LSTM", 4, 6, num_layers=2, bidirectional=True, proj_size=3, batch_first=True)
    check_module(jt, th, [arr(2, 5, 4)], **TOL)
    hx = (arr(4, 2, 3, seed=1), arr(4, 2, 6, seed=2))
    _run_with_states(jt, th, arr(2, 5, 4), hx)


@pytest.mark.parametrize("name", ["RNN", "LSTM", "GRU"])
def test_unbatched_input(name):
    jt, th = pair(name, 4, 5, num_layers=2, bidirectional=True)
    check_module(jt, th, [arr(6, 4)], **TOL)
    h0 = arr(4, 5, seed=1)
    _run_with_states(jt, th, arr(6, 4), (h0, arr(4, 5, seed=2)) if name == "LSTM" else h0)


@pytest.mark.parametrize("name", ["RNN", "LSTM", "GRU"])
def test_dropout_between_layers(name):
    # p=1 drops every activation between layers: deterministic, so it must match torch exactly.
    jt, th = pair(name, 4, 5, num_layers=2, dropout=1.0)
    check_module(jt, th, [arr(6, 3, 4)], train=True, **TOL)
    jt_p = getattr(jrnn, name)(4, 5, num_layers=2, dropout=0.5)
    x = jitorch.tensor(arr(6, 3, 4))
    a, b = jt_p(x)[0], jt_p(x)[0]
    assert not np.allclose(a.detach().numpy(), b.detach().numpy())  # fresh masks per call
    jt_p.eval()
    np.testing.assert_array_equal(jt_p(x)[0].detach().numpy(), jt_p(x)[0].detach().numpy())


@pytest.mark.parametrize("name,kwargs", [("RNNCell", {}), ("RNNCell", {"nonlinearity": "relu"}), ("LSTMCell", {}),
                                         ("GRUCell", {}), ("GRUCell", {"bias": False})])
def test_cells_match_torch(name, kwargs):
    jt, th = pair(name, 4, 5, **kwargs)
    check_module(jt, th, [arr(3, 4)], **TOL)  # zero initial state
    check_module(jt, th, [arr(4)], **TOL)  # unbatched
    h = arr(3, 5, seed=1)
    _run_with_states(jt, th, arr(3, 4), (h, arr(3, 5, seed=2)) if name == "LSTMCell" else h)


def test_gradcheck_float64():
    for name in ("LSTM", "GRU", "RNN"):
        mod = getattr(jrnn, name)(2, 3, num_layers=2, bidirectional=True, batch_first=True, dtype=jitorch.float64)
        x = jitorch.tensor(arr(2, 3, 2).astype(np.float64), requires_grad=True)
        h0 = jitorch.tensor(arr(4, 2, 3, seed=1).astype(np.float64), requires_grad=True)
        if name == "LSTM":
            c0 = jitorch.tensor(arr(4, 2, 3, seed=2).astype(np.float64), requires_grad=True)
            fn = lambda x, h, c: mod(x, (h, c))[0]  # noqa: E731
            args = (x, h0, c0)
        else:
            fn = lambda x, h: mod(x, h)  # noqa: E731
            args = (x, h0)
        assert jitorch.autograd.gradcheck(fn, args, eps=1e-6, atol=1e-5)
    cell = jrnn.GRUCell(2, 3, dtype=jitorch.float64)
    assert jitorch.autograd.gradgradcheck(lambda x: cell(x), (jitorch.tensor(arr(2, 2).astype(np.float64),
                                                                              requires_grad=True),))


def test_parameters_init_and_helpers():
    lstm = jrnn.LSTM(4, 5, num_layers=2, bidirectional=True, proj_size=2)
    names = [n for n, _ in lstm.named_parameters()]
    assert names[:5] == ["weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0", "weight_hr_l0"]
    assert names[5] == "weight_ih_l0_reverse" and names[-1] == "weight_hr_l1_reverse"
    assert [len(ws) for ws in lstm.all_weights] == [5, 5, 5, 5]
    assert lstm.all_weights[1][0] is lstm.weight_ih_l0_reverse
    assert lstm.flatten_parameters() is None
    bound = 1 / np.sqrt(5)
    for p in lstm.parameters():
        assert np.abs(p.detach().numpy()).max() <= bound
    gru = jrnn.GRU(3, 4, dtype=jitorch.float64)
    assert gru.weight_ih_l0.shape == (12, 3) and gru.weight_ih_l0.dtype == jitorch.float64
    assert repr(jrnn.RNNCell(3, 4, bias=False, nonlinearity="relu")) == repr(
        torch.nn.RNNCell(3, 4, bias=False, nonlinearity="relu"))


@pytest.mark.parametrize("make,call,match", [
    (lambda m: m.LSTM(4, 5), lambda m, lib: m(lib.zeros(2, 3, 4, 1)), "Expected input to be 2D or 3D"),
    (lambda m: m.GRU(4, 5), lambda m, lib: m(lib.zeros(6, 3, 5)), "input.size(-1) must be equal to input_size"),
    (lambda m: m.RNN(4, 5, 2), lambda m, lib: m(lib.zeros(6, 3, 4), lib.zeros(1, 3, 5)),
     "Expected hidden size (2, 3, 5), got [1, 3, 5]"),
    (lambda m: m.RNN(4, 5), lambda m, lib: m(lib.zeros(6, 4), lib.zeros(1, 3, 5)),
     "For unbatched 2-D input, hx should also be 2-D but got 3-D tensor"),
    (lambda m: m.LSTM(4, 5), lambda m, lib: m(lib.zeros(6, 3, 4), (lib.zeros(1, 3, 5), lib.zeros(1, 2, 5))),
     "Expected hidden[1] size (1, 3, 5), got [1, 2, 5]"),
    (lambda m: m.LSTM(4, 5), lambda m, lib: m(lib.zeros(6, 3, 4, dtype=lib.float64)), "does not match weight dtype"),
    (lambda m: m.GRUCell(4, 5), lambda m, lib: m(lib.zeros(2, 3, 4)), "GRUCell: Expected input to be 1D or 2D"),
    (lambda m: m.GRU(4, 5, proj_size=2), None, "proj_size argument is only supported for LSTM"),
    (lambda m: m.LSTM(4, 5, proj_size=5), None, "proj_size has to be smaller than hidden_size"),
    (lambda m: m.RNN(4, 5, nonlinearity="gelu"), None, "Unknown nonlinearity 'gelu'"),
    (lambda m: m.LSTM(4, 5, dropout=1.5), None, "dropout should be a number in range [0, 1]"),
])
def test_errors_match_torch(make, call, match):
    errors = []
    for mod, lib in ((torch.nn, torch), (jrnn, jitorch)):
        try:
            layer = make(mod)
            call(layer, lib)
        except Exception as e:  # noqa: BLE001 - the exception type is what is compared
            errors.append(e)
        else:
            errors.append(None)
    th_err, jt_err = errors
    assert th_err is not None and jt_err is not None
    assert type(jt_err) is type(th_err), f"{type(jt_err).__name__} vs torch {type(th_err).__name__}"
    assert match in str(jt_err) and match in str(th_err)


def test_sequence_classifier_training_step_matches_torch():
    """Embedding-free sequence model: bidirectional 2-layer GRU + linear head, one SGD step, identical updates."""
    torch.manual_seed(0)
    th_rnn, th_head = torch.nn.GRU(4, 6, 2, batch_first=True, bidirectional=True), torch.nn.Linear(12, 3)
    jt_rnn = jrnn.GRU(4, 6, 2, batch_first=True, bidirectional=True)
    from jitorch.nn.modules.linear import Linear

    jt_head = Linear(12, 3)
    copy_weights(jt_rnn, th_rnn)
    copy_weights(jt_head, th_head)
    x = arr(5, 7, 4)
    target = np.random.default_rng(3).integers(0, 3, 5)
    losses = []
    for lib, rnn, head in ((torch, th_rnn, th_head), (jitorch, jt_rnn, jt_head)):
        params = list(rnn.parameters()) + list(head.parameters())
        opt = lib.optim.SGD(params, lr=0.5)
        out, h = rnn(lib.tensor(x))
        logits = head(out[:, -1])
        loss = -logits.log_softmax(-1)[lib.arange(5), lib.tensor(target)].mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert abs(losses[0] - losses[1]) < 1e-5
    th_state = th_rnn.state_dict()
    for k, v in jt_rnn.state_dict().items():
        np.testing.assert_allclose(v.numpy(), th_state[k].numpy(), atol=1e-5, rtol=1e-5, err_msg=k)
