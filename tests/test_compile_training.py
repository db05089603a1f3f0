"""jitorch.compile with autograd: a compiled forward + backward pair per specialization, equal to eager (models
trained compiled and eager side by side). Gradients of tensors reached by name or passed twice, and the fallbacks to
eager, are in test_compile_training_inputs.py."""
import copy

import numpy as np
import pytest

import jitorch
import jitorch.nn.functional as F
from jitorch import nn
from training_helpers import train_like_eager


class Net(nn.Module):
    """An MLP and its loss in one module, so the compiled graph ends in a scalar."""

    def __init__(self, loss):
        super().__init__()
        self.mlp = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))
        self.loss = loss

    def forward(self, x, y):
        return self.loss(self.mlp(x), y)


def _close(a, b):
    np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("loss, target", [
    (F.mse_loss, lambda: jitorch.randn(6, 3)),
    (F.cross_entropy, lambda: jitorch.tensor([0, 2, 1, 1, 0, 2])),
])
def test_compiled_mlp_trains_like_eager_for_three_sgd_steps(loss, target):
    jitorch.manual_seed(0)
    eager = Net(loss)
    model = copy.deepcopy(eager)
    compiled = jitorch.compile(model)
    opt_e = jitorch.optim.SGD(eager.parameters(), lr=0.1)
    opt_c = jitorch.optim.SGD(model.parameters(), lr=0.1)
    x, y = jitorch.randn(6, 4), target()
    for _ in range(3):
        le, lc = eager(x, y), compiled(x, y)
        _close(lc, le)
        opt_e.zero_grad()
        opt_c.zero_grad()
        le.backward()
        lc.backward()
        for pe, pc in zip(eager.parameters(), model.parameters()):
            _close(pc.grad, pe.grad)
        opt_e.step()
        opt_c.step()
    cf = compiled._compiled_call
    # One training specialization, compiled (not a fallback) and reused by every step; no inference entry.
    assert len(cf.train_entries) == 1 and cf.train_entries[0].run is not None and cf.entries == []
    assert cf.train_entries[0].break_reason is None


def test_compiled_module_output_gets_upstream_gradient():
    jitorch.manual_seed(1)
    mlp = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))
    compiled = jitorch.compile(copy.deepcopy(mlp))
    x = jitorch.randn(5, 4)
    F.mse_loss(mlp(x), jitorch.ones(5, 3)).backward()
    out = compiled(x)
    assert out.grad_fn is not None
    F.mse_loss(out, jitorch.ones(5, 3)).backward()
    for pe, pc in zip(mlp.parameters(), compiled.parameters()):
        _close(pc.grad, pe.grad)


def chain(x, y):
    return ((x.sin() * y + 1).tanh() * x).sum()


def test_pointwise_chain_gradients_equal_eager():
    x, y = jitorch.randn(5, requires_grad=True), jitorch.randn(5)
    xe = x.detach().clone().requires_grad_(True)
    f = jitorch.compile(chain)
    for _ in range(2):  # the second call reuses the compiled pair
        x.grad = xe.grad = None
        out = f(x, y)
        _close(out, chain(xe, y))
        out.backward()
        chain(xe, y).backward()
        _close(x.grad, xe.grad)
    assert len(f.train_entries) == 1 and f.entries == []
    assert f.train_entries[0].guards[-1] == ("requires_grad", (True, False))


def test_two_tensor_outputs_and_requires_grad_guard():
    f = jitorch.compile(lambda a, b: (a * b, (a - b).exp()))
    a, b = jitorch.randn(3, requires_grad=True), jitorch.randn(3, requires_grad=True)
    p, q = f(a, b)
    (p.sum() + 2 * q.sum()).backward()
    ad, bd = a.detach(), b.detach()
    _close(a.grad, bd + 2 * (ad - bd).exp())
    _close(b.grad, ad - 2 * (ad - bd).exp())
    f(a, b.detach())  # b no longer requires grad: a second training specialization
    assert len(f.train_entries) == 2


def test_non_differentiable_outputs_beside_the_loss_compile_in_one_graph():
    """``return loss, logits.argmax(1), loss.detach()`` (an accuracy, a logged value) as eager returns them: no
    graph break; the extra outputs do not require grad; gradients, and a double backward, equal eager."""
    rng = np.random.default_rng(7)
    net = nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 4))
    twin = copy.deepcopy(net)

    def step(model, x, y):
        logits = model(x)
        loss = F.cross_entropy(logits, y)
        return loss, logits.argmax(1), (logits.argmax(1) == y).sum(), loss.detach() * 2

    compiled = jitorch.compile(lambda x, y: step(net, x, y))
    report = jitorch.compiler.explain(lambda x, y: step(twin, x, y))(jitorch.randn(5, 6),
                                                                     jitorch.tensor([0, 1, 2, 3, 0]))
    assert (report.graph_count, report.graph_break_count) == (1, 0), report
    for _ in range(3):
        x, y = jitorch.tensor(rng.standard_normal((5, 6)).astype(np.float32)), jitorch.tensor(rng.integers(0, 4, 5))
        got, want = compiled(x, y), step(twin, x, y)
        assert [o.requires_grad for o in got] == [o.requires_grad for o in want] == [True, False, False, False]
        assert [o.dtype for o in got] == [o.dtype for o in want]
        for g, w in zip(got, want):
            _close(g.detach(), w.detach())
        scale = float(rng.uniform(0.5, 2))
        got[0].backward(jitorch.tensor(scale))
        want[0].backward(jitorch.tensor(scale))
        for p, q in zip(net.parameters(), twin.parameters()):
            _close(p.grad, q.grad)
            p.grad, q.grad = None, None
    assert compiled.train_entries[0].plan is not None
    w = net[0].weight
    (g,) = jitorch.autograd.grad(compiled(x, y)[0], w, create_graph=True)
    (h,) = jitorch.autograd.grad(step(twin, x, y)[0], twin[0].weight, create_graph=True)
    _close(g.detach(), h.detach())
    (gg,) = jitorch.autograd.grad((g * g).sum(), w)
    (hh,) = jitorch.autograd.grad((h * h).sum(), twin[0].weight)
    _close(gg, hh)


class _Heads(nn.Module):
    """A model that returns a dict (as Hugging Face models do), with a named tuple, a list, a number and None."""

    Pair = __import__("collections").namedtuple("Pair", "mean spread")

    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(6, 8), nn.GELU(), nn.Linear(8, 4))

    def forward(self, x, y):
        logits = self.body(x)
        loss = F.cross_entropy(logits, y)
        return {"loss": loss, "logits": logits, "stats": self.Pair(logits.mean(), logits.std()),
                "extra": [None, (logits.argmax(1) == y).sum(), x.shape[0]]}


def test_structured_outputs_train_compiled_like_eager():
    rng = np.random.default_rng(11)
    eager = _Heads()
    model = copy.deepcopy(eager)
    compiled = jitorch.compile(model)
    x0, y0 = jitorch.randn(5, 6), jitorch.tensor([0, 1, 2, 3, 0])
    report = jitorch.compiler.explain(copy.deepcopy(eager))(x0, y0)
    assert (report.graph_count, report.graph_break_count) == (1, 0), report
    for _ in range(3):
        x, y = jitorch.tensor(rng.standard_normal((5, 6)).astype(np.float32)), jitorch.tensor(rng.integers(0, 4, 5))
        got, want = compiled(x, y), eager(x, y)
        assert list(got) == list(want) and type(got["stats"]) is _Heads.Pair and isinstance(got["extra"], list)
        assert got["extra"][0] is None and got["extra"][2] == 5
        pairs = [(got["loss"], want["loss"]), (got["logits"], want["logits"]), (got["stats"].mean, want["stats"].mean),
                 (got["stats"].spread, want["stats"].spread), (got["extra"][1], want["extra"][1])]
        for g, w in pairs:
            assert g.requires_grad == w.requires_grad and g.dtype == w.dtype
            _close(g.detach(), w.detach())
        # Every differentiable output gets a random upstream gradient.
        seeds = [jitorch.tensor(rng.standard_normal(tuple(g.shape)).astype(np.float32)) for g, _ in pairs[:4]]
        jitorch.autograd.backward([g for g, _ in pairs[:4]], seeds)
        jitorch.autograd.backward([w for _, w in pairs[:4]], seeds)
        for p, q in zip(model.parameters(), eager.parameters()):
            _close(p.grad, q.grad)
            p.grad, q.grad = None, None
    assert compiled._compiled_call.train_entries[0].plan is not None


def test_explain_reports_forward_and_backward_kernels():
    x, y = jitorch.randn(5, requires_grad=True), jitorch.randn(5)
    report = jitorch.compiler.explain(chain)(x, y)
    assert (report.graph_count, report.graph_break_count) == (1, 0)
    assert report.kernels == [["sin", "mul", "add", "tanh", "mul", "sum"]]  # the sum fuses as an epilogue
    # The whole backward of the chain is one kernel (the tangent's broadcast runs eagerly before it).
    assert len(report.backward_kernels) == 1 and "tanh_backward" in report.backward_kernels[0]
    assert "Backward kernel count: 1" in str(report)
    mlp = jitorch.compiler.explain(nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3)))(jitorch.randn(2, 4))
    assert mlp.kernels == [["relu"]] and mlp.backward_kernels == [["threshold_backward"]]


def test_backward_recomputes_elementwise_chains_instead_of_saving_them():
    import torch

    from jitorch._compile.training import compile_training

    def gelu_mlp(x, w):
        h = x @ w
        return 0.5 * h * (1 + jitorch.tanh(0.7978845608028654 * (h + 0.044715 * h * h * h)))

    rng = np.random.default_rng(0)
    xd, wd, gd = (rng.standard_normal(s).astype(np.float32) for s in ((4, 5), (5, 6), (4, 6)))
    x, w = jitorch.tensor(xd), jitorch.tensor(wd, requires_grad=True)
    saving = compile_training(gelu_mlp, (x, w), {}, None, None, recompute=False)
    recomputing = compile_training(gelu_mlp, (x, w), {}, None, None)
    # Without recomputation the backward keeps h and six of GELU's intermediates; with it, only x and h.
    assert (saving.n_saved, recomputing.n_saved) == (7, 2)
    assert "tanh" in recomputing.backward_kernels[0] and "tanh" not in saving.backward_kernels[0]
    wt = torch.tensor(wd, requires_grad=True)
    torch.nn.functional.gelu(torch.tensor(xd) @ wt, approximate="tanh").backward(torch.tensor(gd))
    for plan in (saving, recomputing):
        w.grad = None
        plan((x, w)).backward(jitorch.tensor(gd))
        np.testing.assert_allclose(w.grad.numpy(), wt.grad.numpy(), rtol=1e-4, atol=1e-5)


class Block(nn.Module):
    """A pre-norm transformer block (attention + GELU MLP) ending in a loss, as bench_compile_train.py runs it."""

    def __init__(self, d=16, heads=2):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc1, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x, y):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        att = F.softmax(q @ k.transpose(-2, -1) / (d // self.heads) ** 0.5, dim=-1)
        x = x + self.proj((att @ v).transpose(1, 2).reshape(b, t, d))
        x = x + self.fc2(F.gelu(self.fc1(self.ln2(x)), approximate="tanh"))
        return F.mse_loss(x, y)


def test_compiled_transformer_block_trains_like_eager_for_three_adam_steps():
    jitorch.manual_seed(3)
    eager = Block()
    model = copy.deepcopy(eager)
    compiled = jitorch.compile(model)
    opt_e = jitorch.optim.Adam(eager.parameters(), lr=1e-2)
    opt_c = jitorch.optim.Adam(model.parameters(), lr=1e-2)
    x, y = jitorch.randn(2, 5, 16), jitorch.randn(2, 5, 16)
    for _ in range(3):
        le, lc = eager(x, y), compiled(x, y)
        np.testing.assert_allclose(lc.item(), le.item(), rtol=1e-5)
        opt_e.zero_grad()
        opt_c.zero_grad()
        le.backward()
        lc.backward()
        for pe, pc in zip(eager.parameters(), model.parameters()):
            np.testing.assert_allclose(pc.grad.numpy(), pe.grad.numpy(), rtol=1e-4, atol=1e-6)
        opt_e.step()
        opt_c.step()
    entry = compiled._compiled_call.train_entries[0]
    assert entry.run is not None and entry.break_reason is None and entry.backward_kernel_ops


def test_embedding_model_compiles_as_one_graph_and_checks_indices_in_the_graph():
    # embedding's range check lives in index_select's kernel: no value read into Python, so no graph break.
    class Tagger(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb, self.head = nn.Embedding(7, 4), nn.Linear(4, 7)

        def forward(self, idx, y):
            return F.cross_entropy(self.head(self.emb(idx)).view(-1, 7), y.view(-1))

    rng = np.random.default_rng(5)
    batches = [tuple(jitorch.tensor(rng.integers(0, 7, (2, 5))) for _ in range(2)) for _ in range(3)]
    entry = train_like_eager(Tagger, batches)
    assert entry.plan is not None and entry.break_reason is None
    compiled = jitorch.compile(Tagger())
    compiled(*batches[0]).backward()
    with pytest.raises(IndexError, match="out of bounds|out of range"):
        compiled(jitorch.tensor([[0, 9, 1, 2, 3], [0, 1, 2, 3, 4]]), jitorch.zeros(2, 5, dtype=jitorch.int64))


@pytest.mark.parametrize("bad, error", [(-1, "Class values must be non-negative"),
                                        (7, "Class values must be smaller than num_classes"),
                                        (9, "embedding_bag: index 1 of input takes value 9")])
def test_one_hot_and_embedding_bag_check_values_in_the_graph_without_a_break(bad, error):
    # Their range checks are a row (check_range), not a Python ``if`` on a value read.
    class Bags(nn.Module):
        def __init__(self):
            super().__init__()
            self.bag, self.head = nn.EmbeddingBag(7, 4, mode="mean"), nn.Linear(4, 7)

        def forward(self, idx, y):
            target = F.one_hot(y, 7).float()
            return F.binary_cross_entropy_with_logits(self.head(self.bag(idx)), target)

    rng = np.random.default_rng(9)
    batches = [(jitorch.tensor(rng.integers(0, 7, (3, 4))), jitorch.tensor(rng.integers(0, 7, 3))) for _ in range(3)]
    entry = train_like_eager(Bags, batches)
    assert entry.plan is not None and entry.break_reason is None
    compiled = jitorch.compile(Bags())
    compiled(*batches[0]).backward()
    idx, y = batches[0][0].clone(), batches[0][1].clone()
    if "embedding_bag" in error:
        idx[0, 1] = bad
    else:
        y[0] = bad
    with pytest.raises(RuntimeError, match=error):
        compiled(idx, y)


def test_stacked_layer_norms_in_nn_transformer_train_like_eager_with_every_backward_decomposed():
    # The decoder's layer norm reads the encoder's final norm: one decomposed backward feeds the next.
    class Seq2Seq(nn.Module):
        def __init__(self):
            super().__init__()
            self.net = nn.Transformer(8, 2, 1, 1, 16, dropout=0.0, batch_first=True)

        def forward(self, src, tgt):
            return (self.net(src, tgt) ** 2).mean()

    rng = np.random.default_rng(11)
    batches = [tuple(jitorch.tensor(rng.standard_normal((2, 5, 8)).astype(np.float32)) for _ in range(2))
               for _ in range(3)]
    entry = train_like_eager(Seq2Seq, batches)
    assert entry.run is not None and entry.break_reason is None
    rows = {n.target.op.name for n in entry.plan.bwd.gm.graph.nodes if hasattr(n.target, "op")}
    assert "native_layer_norm_backward" not in rows
