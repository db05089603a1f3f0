"""Bad input raises as PyTorch does (same exception class), with a message naming the op; failed in-place writes and
failed ``load_state_dict`` calls leave the state as PyTorch leaves it. Each case here once returned a value or
raised an unrelated NumPy/internal error."""
import numpy as np
import pytest
import torch

import jitorch

from helpers import check_error, make_array


def _lib_case(fn):
    """``fn(lib)`` as the (jitorch, torch) pair ``check_error`` takes."""
    return (lambda: fn(jitorch)), (lambda: fn(torch))


CASES = {
    # (case, op name the message must carry, fn(lib))
    "roll shifts longer than dims": ("roll", lambda L: L.roll(L.ones(3, 3), (1, 2), (0,))),
    "roll two shifts, no dims": ("roll", lambda L: L.roll(L.ones(3, 3), (1, 2))),
    "roll no shifts": ("roll", lambda L: L.roll(L.ones(3, 3), (), ())),
    "tensor_split zero sections": ("tensor_split", lambda L: L.tensor_split(L.ones(6), 0)),
    "tensor_split negative sections": ("tensor_split", lambda L: L.tensor_split(L.ones(6), -1)),
    "tensor_split 2-d index tensor": ("tensor_split", lambda L: L.tensor_split(L.ones(6), L.tensor([[1]]))),
    "copy_ from more dims": ("copy_", lambda L: L.ones(3).copy_(L.ones(2, 3))),
    "copy_ from leading 1": ("copy_", lambda L: L.ones(3).copy_(L.ones(1, 3))),
    "copy_ not broadcastable, more dims": ("copy_", lambda L: L.ones(3).copy_(L.ones(2, 4))),
    "repeat negative": ("repeat", lambda L: L.ones(2, 3).repeat(2, -1)),
    "tile negative": ("repeat", lambda L: L.ones(3).tile((-1,))),
    "unflatten sizes do not multiply": ("unflatten", lambda L: L.ones(6).unflatten(0, (4, 2))),
    "unflatten with -1 not dividing": ("unflatten", lambda L: L.ones(6).unflatten(0, (4, -1))),
    "unflatten empty sizes": ("unflatten", lambda L: L.ones(6).unflatten(0, ())),
    "view dtype last dim not divisible": ("view(dtype)", lambda L: L.ones(3).view(L.float64)),
    "view dtype of a 0-d tensor": ("view(dtype)", lambda L: L.ones(()).view(L.float64)),
    "diff negative order": ("diff", lambda L: L.diff(L.ones(3), n=-1)),
    "triu_indices negative row": ("triu_indices", lambda L: L.triu_indices(-1, 3)),
    "tril_indices negative col": ("tril_indices", lambda L: L.tril_indices(3, -1)),
    "renorm dim out of range": ("renorm", lambda L: L.renorm(L.ones(3, 3), 2, 2, 1.0)),
    "cumulative_trapezoid dim out of range": ("cumulative_trapezoid",
                                              lambda L: L.cumulative_trapezoid(L.ones(3), dim=1)),
    "linspace fractional steps": ("linspace", lambda L: L.linspace(0, 1, 2.5)),
    "adaptive_avg_pool2d negative size": ("adaptive_avg_pool2d",
                                          lambda L: L.nn.AdaptiveAvgPool2d(-1)(L.ones(1, 1, 4, 4))),
    "adaptive_avg_pool3d negative size": ("adaptive_avg_pool3d",
                                          lambda L: L.nn.functional.adaptive_avg_pool3d(L.ones(1, 1, 4, 4, 4), -1)),
    "adaptive_max_pool2d negative size": ("adaptive_max_pool2d",
                                          lambda L: L.nn.functional.adaptive_max_pool2d(L.ones(1, 1, 4, 4), -1)),
    "binary_cross_entropy int64 target": ("binary_cross_entropy", lambda L: L.nn.functional.binary_cross_entropy(
        L.tensor([0.5, 0.5]), L.tensor([0, 1]))),
    "binary_cross_entropy float64 target": ("binary_cross_entropy", lambda L: L.nn.functional.binary_cross_entropy(
        L.tensor([0.5, 0.5]), L.tensor([0.0, 1.0], dtype=L.float64))),
    "nll_loss 1-d input, 2 targets": ("nll_loss", lambda L: L.nn.functional.nll_loss(L.ones(3), L.tensor([0, 1]))),
    "cross_entropy 1-d input, 2 targets": ("nll_loss", lambda L: L.nn.functional.cross_entropy(
        L.ones(3), L.tensor([0, 1]))),
    "linear 0-d input": ("linear", lambda L: L.nn.functional.linear(L.ones(()), L.ones(2, 4))),
    "linear 0-d weight": ("linear", lambda L: L.nn.functional.linear(L.ones(4), L.ones(()))),
    "rrelu lower above upper": ("rrelu", lambda L: L.nn.functional.rrelu(L.ones(3), 0.5, 0.1, training=True)),
    "layer_norm int64": ("LayerNormKernelImpl", lambda L: L.nn.functional.layer_norm(
        L.ones(3, dtype=L.int64), (3,))),
    "group_norm int64": ("GroupNormKernelImpl", lambda L: L.nn.functional.group_norm(
        L.ones(2, 4, dtype=L.int64), 2)),
    "rms_norm int64": ("rms_norm", lambda L: L.nn.functional.rms_norm(L.ones(2, 4, dtype=L.int64), (4,))),
    "embedding_bag decreasing offsets": ("embedding_bag", lambda L: L.nn.functional.embedding_bag(
        L.tensor([0, 1, 2]), L.ones(4, 2), L.tensor([0, 2, 1]))),
    "sign of complex": ("torch.sign", lambda L: L.sign(L.tensor([1 + 1j]))),
    "round of complex": ("round", lambda L: L.round(L.tensor([1 + 1j]))),
    "floor of complex": ("floor", lambda L: L.floor(L.tensor([1 + 1j]))),
    "ceil of complex": ("ceil", lambda L: L.ceil(L.tensor([1 + 1j]))),
    "trunc of complex": ("trunc", lambda L: L.trunc(L.tensor([1 + 1j]))),
    "frac of complex": ("frac", lambda L: L.frac(L.tensor([1 + 1j]))),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_input_raises_like_torch(case):
    name, fn = CASES[case]
    jt_fn, th_fn = _lib_case(fn)
    threads = torch.get_num_threads()
    # torch checks embedding_bag's offsets only in its parallel loop: on one thread it reads out of bounds instead
    torch.set_num_threads(max(threads, 2))
    try:
        check_error(jt_fn, th_fn, match=name)
    finally:
        torch.set_num_threads(threads)


CELL_CASES = {
    "input size": ("input has inconsistent input_size: got 5 expected 4", lambda L, m: m(L.ones(2, 5))),
    "hidden batch": ("Input batch size 2 doesn't match hidden0 batch size 3",
                     lambda L, m: m(L.ones(2, 4), (L.ones(3, 3), L.ones(2, 3)) if isinstance(m, L.nn.LSTMCell)
                                    else L.ones(3, 3))),
    "hidden size": ("hidden0 has inconsistent hidden_size: got 4, expected 3",
                    lambda L, m: m(L.ones(2, 4), (L.ones(2, 4), L.ones(2, 3)) if isinstance(m, L.nn.LSTMCell)
                                   else L.ones(2, 4))),
}


@pytest.mark.parametrize("cell", ["RNNCell", "LSTMCell", "GRUCell"])
@pytest.mark.parametrize("case", sorted(CELL_CASES))
def test_rnn_cell_shape_errors(cell, case):
    message, call = CELL_CASES[case]
    check_error(lambda: call(jitorch, getattr(jitorch.nn, cell)(4, 3)),
                lambda: call(torch, getattr(torch.nn, cell)(4, 3)), match=(cell, message))


def test_lstm_cell_cell_state_size():
    check_error(lambda: jitorch.nn.LSTMCell(4, 3)(jitorch.ones(2, 4), (jitorch.ones(2, 3), jitorch.ones(2, 4))),
                lambda: torch.nn.LSTMCell(4, 3)(torch.ones(2, 4), (torch.ones(2, 3), torch.ones(2, 4))),
                match=("LSTMCell", "hidden1 has inconsistent hidden_size: got 4, expected 3"))


def test_valid_neighbours_still_work():
    """The checks above refuse only what torch refuses: the nearby valid calls give torch's values."""
    x = make_array((3, 4))
    for jt, th in [
        (jitorch.roll(jitorch.tensor(x), 1), torch.roll(torch.tensor(x), 1)),
        (jitorch.roll(jitorch.tensor(x), (1,), ()), torch.roll(torch.tensor(x), (1,), ())),
        (jitorch.ones(6, 2).unflatten(0, (2, -1)), torch.ones(6, 2).unflatten(0, (2, -1))),
        (jitorch.ones(0, 3).repeat(-1, 1), torch.ones(0, 3).repeat(-1, 1)),
        (jitorch.tensor(x).view(jitorch.float64), torch.tensor(x).view(torch.float64)),
        (jitorch.diff(jitorch.tensor(x), n=0), torch.diff(torch.tensor(x), n=0)),
        (jitorch.triu_indices(0, 3), torch.triu_indices(0, 3)),
        (jitorch.nn.functional.adaptive_avg_pool2d(jitorch.tensor(x)[None], (None, 0)),
         torch.nn.functional.adaptive_avg_pool2d(torch.tensor(x)[None], (None, 0))),
        (jitorch.linspace(0, 1, jitorch.tensor(3)), torch.linspace(0, 1, torch.tensor(3))),
        (jitorch.sgn(jitorch.tensor([3 + 4j])), torch.sgn(torch.tensor([3 + 4j]))),
    ]:
        np.testing.assert_allclose(jt.numpy(), th.numpy(), rtol=1e-6, atol=0)
        assert tuple(jt.shape) == tuple(th.shape)
    a, b = jitorch.ones(2, 3), torch.ones(2, 3)
    a.copy_(jitorch.full((3,), 2.0)), b.copy_(torch.full((3,), 2.0))
    np.testing.assert_array_equal(a.numpy(), b.numpy())
    tgt = np.array([0.0, 1.0], np.float32)
    np.testing.assert_allclose(
        jitorch.nn.functional.binary_cross_entropy(jitorch.tensor([0.3, 0.6]), jitorch.tensor(tgt)).item(),
        torch.nn.functional.binary_cross_entropy(torch.tensor([0.3, 0.6]), torch.tensor(tgt)).item(), rtol=1e-6)


@pytest.mark.parametrize("op", ["add_", "copy_", "mul_int", "index_put_", "scatter_", "index_add_", "put_"])
def test_failed_inplace_keeps_destination(op):
    """A refused in-place write changes nothing (torch may have written part of the indexed ones before raising:
    jitorch writes all or nothing, so its destination equals the input)."""
    calls = {
        "add_": lambda L, a: a.add_(L.ones(2, 3)),
        "copy_": lambda L, a: a.copy_(L.ones(2, 3)),
        "mul_int": lambda L, a: a.long().mul_(0.5),
        "index_put_": lambda L, a: a.index_put_((L.tensor([1, 2, 9]),), L.tensor(7.0)),
        "scatter_": lambda L, a: a.scatter_(0, L.tensor([0, 5]), L.ones(2)),
        "index_add_": lambda L, a: a.index_add_(0, L.tensor([0, 5]), L.ones(2)),
        "put_": lambda L, a: a.put_(L.tensor([0, 7]), L.ones(2)),
    }
    x = make_array((3,))
    a = jitorch.tensor(x)
    check_error(lambda: calls[op](jitorch, a), lambda: calls[op](torch, torch.tensor(x)))
    np.testing.assert_array_equal(a.numpy(), x)


@pytest.mark.parametrize("strict", [True, False])
@pytest.mark.parametrize("state", ["missing bias", "weight shape", "unexpected key"])
def test_failed_load_state_dict_copies_what_torch_copies(state, strict):
    """Torch copies every entry that fits before it reports the rest; jitorch copies the same ones."""
    def run(L):
        m = L.nn.Linear(3, 2)
        with L.no_grad():
            m.weight.fill_(5.0), m.bias.fill_(5.0)
        sd = {"missing bias": {"weight": L.ones(2, 3)},
              "weight shape": {"weight": L.ones(3, 3), "bias": L.ones(2)},
              "unexpected key": {"weight": L.ones(2, 3), "bias": L.ones(2), "extra": L.ones(1)}}[state]
        try:
            m.load_state_dict(sd, strict=strict)
            raised = None
        except RuntimeError as e:
            raised = str(e)
        return raised, m.weight.detach().numpy().copy(), m.bias.detach().numpy().copy()

    (jt_err, jt_w, jt_b), (th_err, th_w, th_b) = run(jitorch), run(torch)
    assert (jt_err is None) == (th_err is None), (jt_err, th_err)
    if th_err is not None:
        assert "Error(s) in loading state_dict for Linear" in jt_err
    np.testing.assert_array_equal(jt_w, th_w)
    np.testing.assert_array_equal(jt_b, th_b)
