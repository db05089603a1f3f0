"""How a compiled call takes its arguments: keyword order, tensors inside tuples, lists and dicts (inference and
training), NumPy scalars and arrays, objects; and copies of compiled modules. Every result is checked against the
same code run eagerly, with fresh values each call so that a stale constant shows."""
import copy
import pickle

import numpy as np
import pytest

import jitorch
from jitorch import nn


def _close(a, b):
    np.testing.assert_allclose(np.asarray(a.detach().numpy()), np.asarray(b.detach().numpy()), rtol=1e-5, atol=1e-6)


def test_keyword_arguments_in_another_order_are_another_entry():
    def f(x, *, scale, shift):
        return x * scale + shift

    cf = jitorch.compile(f)
    x, a, b = jitorch.randn(3), jitorch.randn(3), jitorch.randn(3)
    _close(cf(x, scale=a, shift=b), f(x, scale=a, shift=b))
    _close(cf(x, shift=b, scale=a), f(x, shift=b, scale=a))
    _close(cf(x, shift=a, scale=b), f(x, shift=a, scale=b))


def test_a_module_called_positionally_then_by_reordered_keywords():
    class Enc(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(10, 4)

        def forward(self, input_ids, attention_mask):
            return (self.emb(input_ids) * attention_mask[..., None]).sum(1)

    enc = Enc()
    compiled = jitorch.compile(enc)
    ids, mask = jitorch.tensor([[1, 2, 3, 4]]), jitorch.tensor([[1, 1, 0, 0]])
    with jitorch.no_grad():
        _close(compiled(ids, mask), enc(ids, mask))
        _close(compiled(attention_mask=mask, input_ids=ids), enc(attention_mask=mask, input_ids=ids))


@pytest.mark.parametrize("grad", [False, True])
def test_tensors_inside_tuples_lists_and_dicts_are_inputs(grad):
    lin = nn.Linear(4, 3)

    def f(batch, pair):
        x, extra = pair
        return (lin(batch["x"]) * batch["w"][0] + extra).sum(0) * x.shape[0]

    cf = jitorch.compile(f)
    for i in range(3):
        batch = {"x": jitorch.randn(5, 4), "w": [jitorch.randn(3)]}
        pair = (jitorch.randn(5, 3), jitorch.randn(3))
        with jitorch.set_grad_enabled(grad):
            got = cf(batch, pair)
            lin.zero_grad()
            if grad:
                up = jitorch.randn(3)
                got.backward(up)
                g = lin.weight.grad.clone()
                lin.zero_grad()
            want = f(batch, pair)
            if grad:
                want.backward(up)
                _close(g, lin.weight.grad)
        _close(got, want)
    assert len(cf.train_entries if grad else cf.entries) == 1


def test_non_tensor_arguments_of_a_training_call():
    lin = nn.Linear(6, 3)
    f = jitorch.compile(lambda x, k, name: lin(x).sum() * k if name == "a" else lin(x).sum())
    for k, name in [(2, "a"), (3.0, "a"), (2, "b")]:
        x = jitorch.randn(2, 6, requires_grad=True)
        f(x, k, name).backward()
        got = x.grad.clone()
        x.grad = None
        (lin(x).sum() * k if name == "a" else lin(x).sum()).backward()
        _close(got, x.grad)


def test_dicts_numpy_scalars_and_fresh_objects_are_guarded_by_value():
    f = jitorch.compile(lambda x, cfg: x * cfg["temp"] + cfg["bias"])
    x = jitorch.ones(2)
    for temp in (0.5, 2.0, 3.0):
        _close(f(x, {"temp": temp, "bias": 1.0}), x * temp + 1.0)

    class Cfg:
        def __init__(self, t):
            self.temp = t

    g = jitorch.compile(lambda x, c: x * c.temp)
    assert [g(x, Cfg(t)).tolist()[0] for t in (0.5, 2.0, 3.0)] == [0.5, 2.0, 3.0]
    h = jitorch.compile(lambda x, k: x[:k].sum())
    assert [h(jitorch.arange(10.0), k).item() for k in np.arange(1, 6)] == [0.0, 1.0, 3.0, 6.0, 10.0]
    table = jitorch.compile(lambda x, a: x * float(a.sum()))
    assert [table(x, np.full(3, v)).tolist()[0] for v in (1.0, 2.0)] == [3.0, 6.0]


def test_a_lower_rank_call_after_a_dynamic_entry():
    f = jitorch.compile(lambda x: x.sum(-1))
    for shape in [(4, 8), (3, 17), (5, 9), (7,), (2, 3)]:
        x = jitorch.randn(*shape)
        _close(f(x), x.sum(-1))


def test_a_call_that_makes_tensors_requiring_grad_runs_eagerly():
    def f(x):
        w = jitorch.ones(3, requires_grad=True)
        return (x * w).sum()

    cf = jitorch.compile(f)
    x = jitorch.randn(3, requires_grad=True)
    for _ in range(2):
        x.grad = None
        cf(x).backward()
        _close(x.grad, jitorch.ones(3))
    assert "makes tensors that require grad" in cf.train_entries[0].break_reason


def test_copies_and_pickles_of_a_called_compiled_module():
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3))
    compiled = jitorch.compile(model)
    x = jitorch.randn(4, 8)
    compiled(x).sum().backward()
    with jitorch.no_grad():
        compiled(x)
    twin = copy.deepcopy(compiled)
    again = pickle.loads(pickle.dumps(compiled))
    with jitorch.no_grad():
        for other in (twin, again):
            _close(other(x), model(x))
    twin._orig_mod[0].weight.data.add_(1.0)  # the copy owns its parameters
    with jitorch.no_grad():
        assert not np.allclose(twin(x).numpy(), compiled(x).numpy())
    model.eval()
    assert compiled.training is False
    compiled.train()
    assert model.training is True and compiled.training is True


def test_a_batch_dict_whose_sizes_change_gets_a_dynamic_entry():
    lin = nn.Linear(4, 3)

    def f(batch):
        return lin(batch["x"]).relu().sum(0) + batch["y"]

    cf = jitorch.compile(f)
    for n in (3, 5, 7, 9, 11):
        batch = {"x": jitorch.randn(n, 4), "y": jitorch.randn(3)}
        with jitorch.no_grad():
            _close(cf(batch), f(batch))
        x = jitorch.randn(n, 4, requires_grad=True)
        cf({"x": x, "y": batch["y"]}).sum().backward()
        got = x.grad.clone()
        x.grad = None
        f({"x": x, "y": batch["y"]}).sum().backward()
        _close(got, x.grad)
    assert [e.dynamic is not None for e in cf.entries] == [False, False, True]
    assert [e.dynamic is not None for e in cf.train_entries] == [False, False, True]


@pytest.mark.parametrize("grad", [False, True])
def test_an_argument_passed_twice_is_guarded(grad):
    def f(a, b):
        return a * 2 + b

    cf = jitorch.compile(f)
    x, y = jitorch.randn(3, requires_grad=grad), jitorch.randn(3, requires_grad=grad)
    for a, b in [(x, x), (x, y), (y, y), (y, x)]:
        _close(cf(a, b), f(a, b))


def test_self_attention_with_one_tensor_for_q_k_v_gets_a_dynamic_entry():
    def attn(q, k, v):
        return (q @ k.transpose(-2, -1) * q.shape[-1] ** -0.5).softmax(-1) @ v

    cf = jitorch.compile(attn)
    for t in range(4, 12):
        q = jitorch.randn(2, 4, t, 8)
        _close(cf(q, q, q), attn(q, q, q))
    assert len(cf.entries) == 3 and cf.entries[-1].dynamic is not None and not cf._fell_back
