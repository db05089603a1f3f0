"""CPU graph replay of row ops, batched products and view-gradient scatters as native kernels, against torch.

Each case captures a forward and its backward (random upstream gradients) on static leaves, then replays on new
inputs copied into them; outputs and gradients are zeroed before each replay, so a replay that writes nothing fails.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

import jitorch
from jitorch.cpu import CPUGraph, graph
from training_helpers import zero

REPLAYS = 3


def _capture(fn, shapes, gen, dtype):
    """Leaves of ``shapes``, an upstream gradient, and a graph capturing ``fn``'s forward and backward."""
    leaves = [jitorch.tensor(gen.standard_normal(s).astype(dtype), requires_grad=True) for s in shapes]
    with jitorch.no_grad():
        probe = fn(jitorch, *leaves)
    up = jitorch.tensor(gen.standard_normal(tuple(probe.shape)).astype(dtype))
    g = CPUGraph()
    with graph(g):
        for t in leaves:
            t.grad = None
        out = fn(jitorch, *leaves)
        out.backward(up)
    return g, leaves, up, out


def _replays_like_torch(fn, shapes, dtype=np.float32, seed=0, tol=None):
    gen = np.random.default_rng(seed)
    g, leaves, up, out = _capture(fn, shapes, gen, dtype)
    tol = tol or (dict(rtol=1e-5, atol=1e-5) if dtype == np.float32 else dict(rtol=1e-10, atol=1e-10))
    grads = [t.grad for t in leaves]
    for _ in range(REPLAYS):
        values = [gen.standard_normal(s).astype(dtype) for s in shapes]
        new_up = gen.standard_normal(tuple(up.shape)).astype(dtype)
        with jitorch.no_grad():
            for t, v in zip(leaves, values):
                t.copy_(jitorch.tensor(v))
            up.copy_(jitorch.tensor(new_up))
        for t in [out] + grads:
            zero(t)
        g.replay()
        ref = [torch.tensor(v, requires_grad=True) for v in values]
        want = fn(torch, *ref)
        want.backward(torch.tensor(new_up))
        np.testing.assert_allclose(out._data, want.detach().numpy(), **tol)
        for got, r in zip(grads, ref):
            np.testing.assert_allclose(got._data, r.grad.numpy(), **tol)
    return g.native_report()


def _fallback_ops(report):
    return {desc.split("= ", 1)[1].split("(", 1)[0] for desc, _ in report["fallbacks"]}


ROWS = {
    "softmax": (lambda lib, x: lib.softmax(x, dim=-1), [(6, 33)], {"softmax", "softmax_backward_data"}),
    "log_softmax-3d": (lambda lib, x: lib.log_softmax(x, dim=2), [(2, 5, 17)],
                       {"log_softmax", "log_softmax_backward_data"}),
    "softmax-of-transpose": (lambda lib, x: lib.softmax(x.transpose(0, 1) * 2, dim=-1), [(9, 4)], {"softmax"}),
    "layer_norm-affine": (lambda lib, x, w, b: lib.nn.functional.layer_norm(x, (24,), w, b), [(3, 5, 24), (24,), (24,)],
                          {"native_layer_norm", "native_layer_norm_backward"}),
    "layer_norm-2-dims": (lambda lib, x: lib.nn.functional.layer_norm(x, (4, 6)), [(5, 4, 6)], {"native_layer_norm"}),
}


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("name", sorted(ROWS))
def test_row_ops_replay_natively_like_torch(name, dtype):
    fn, shapes, native_ops = ROWS[name]
    report = _replays_like_torch(fn, shapes, dtype)
    assert report["error"] is None
    assert not (_fallback_ops(report) & native_ops), report["fallbacks"]


def test_softmax_over_a_middle_dim_replays_in_python_with_a_reason():
    report = _replays_like_torch(lambda lib, x: lib.softmax(x, dim=1), [(3, 4, 5)])
    reasons = dict((desc.split("= ", 1)[1].split("(", 1)[0], why) for desc, why in report["fallbacks"])
    assert "only the last dim is native" in reasons["softmax"]


@pytest.mark.parametrize("shapes", [[(2, 3, 4, 5), (5, 6)], [(3, 1, 4, 5), (2, 5, 6)], [(4, 7, 3), (4, 3, 2)]],
                         ids=["batch-by-matrix", "broadcast-batches", "bmm"])
def test_batched_matmul_replays_as_one_product_per_entry(shapes):
    report = _replays_like_torch(lambda lib, a, b: a @ b, shapes)
    assert "matmul" not in _fallback_ops(report), report["fallbacks"]


def test_a_view_gradient_scatter_replays_natively():
    """``x[:, 1:3]``'s backward is ``copy_slices(zeros, g, chain)``; with it native the whole step is one call."""
    report = _replays_like_torch(lambda lib, x, w: (x[:, 1:3] * w).tanh(), [(4, 5), (4, 2)])
    assert report["native"] and report["segments"] == 1, report


def test_a_training_step_with_layer_norm_and_softmax_is_one_native_call():
    def net(lib, x, w1, w2):
        h = lib.nn.functional.layer_norm(x @ w1, (16,)).relu()
        return lib.softmax(h @ w2, dim=-1)
    report = _replays_like_torch(net, [(8, 12), (12, 16), (16, 5)])
    assert report["native"] and report["segments"] == 1, report


@pytest.mark.parametrize("shapes", [[(3, 5, 24), (24,), (24,)], [(7, 4, 6), (4, 6), (4, 6)], [(1, 33), (33,), (33,)]],
                         ids=["rows-3d", "two-normalized-dims", "one-row"])
def test_affine_layer_norm_backward_replays_as_a_row_and_a_column_kernel(shapes):
    """The input gradient reduces along rows; the weight and bias gradients across them (a second kernel)."""
    report = _replays_like_torch(lambda lib, x, w, b: lib.nn.functional.layer_norm(x, shapes[1], w, b) * 1.5, shapes)
    assert report["native"] and report["segments"] == 1, report["fallbacks"]


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("ignore", [False, True], ids=["all-valid", "ignore-index"])
def test_cross_entropy_replays_natively_like_torch(reduction, ignore):
    gen = np.random.default_rng(11)
    n, c = 9, 5
    x = jitorch.tensor(gen.standard_normal((n, c)).astype(np.float32), requires_grad=True)
    target = jitorch.tensor(gen.integers(0, c, n))
    up = jitorch.tensor(gen.standard_normal(() if reduction != "none" else (n,)).astype(np.float32))
    g = CPUGraph()
    with graph(g):
        x.grad = None
        loss = jitorch.nn.functional.cross_entropy(x, target, reduction=reduction, ignore_index=2 if ignore else -100)
        loss.backward(up)
    report = g.native_report()
    assert report["native"] and report["segments"] == 1, report["fallbacks"]
    for _ in range(REPLAYS):
        xd, td = gen.standard_normal((n, c)).astype(np.float32), gen.integers(0, c, n)
        ud = gen.standard_normal(tuple(up.shape)).astype(np.float32)
        with jitorch.no_grad():
            x.copy_(jitorch.tensor(xd))
            target.copy_(jitorch.tensor(td))
            up.copy_(jitorch.tensor(ud))
        zero(loss)
        zero(x.grad)
        g.replay()
        tx = torch.tensor(xd, requires_grad=True)
        want = torch.nn.functional.cross_entropy(tx, torch.tensor(td), reduction=reduction,
                                                 ignore_index=2 if ignore else -100)
        want.backward(torch.tensor(ud))
        np.testing.assert_allclose(loss._data, want.detach().numpy(), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(x.grad._data, tx.grad.numpy(), rtol=1e-5, atol=1e-6)


def test_an_out_of_range_target_stops_a_captured_training_step_before_the_update():
    gen = np.random.default_rng(12)
    net = jitorch.nn.Linear(4, 3)
    opt = jitorch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    x, target = jitorch.tensor(gen.standard_normal((6, 4)).astype(np.float32)), jitorch.tensor([0, 1, 2, 0, 1, 2])

    def step():
        opt.zero_grad()
        jitorch.nn.functional.cross_entropy(net(x), target).backward()
        opt.step()
    step()
    g = CPUGraph()
    with graph(g):
        step()
    assert g.native
    g.replay()
    before = [p.detach().clone() for p in net.parameters()]
    target.copy_(jitorch.tensor([0, 1, 3, 0, 1, 2]))
    with pytest.raises(IndexError, match="Target 3 is out of bounds"):
        g.replay()
    assert all(bool((p == q).all()) for p, q in zip(net.parameters(), before))  # nothing ran


@pytest.mark.parametrize("n", [6, 5000])  # a small batch's check reads a memoryview, a large one NumPy
@pytest.mark.parametrize("bad", [3, -1, -7])
def test_one_target_check_per_replay_with_eager_errors_and_ignored_entries(n, bad):
    """The forward and backward of cross_entropy check the same targets: a replay runs the check once. Entries equal
    to ignore_index pass (a negative one too), any other class out of range stops the replay with eager's error."""
    gen = np.random.default_rng(n)
    net = jitorch.nn.Linear(4, 3)
    x = jitorch.tensor(gen.standard_normal((n, 4)).astype(np.float32))
    target = jitorch.tensor(gen.integers(0, 3, n))
    target[1] = -7  # ignored below: the check passes it

    def loss_fn():
        return jitorch.nn.functional.cross_entropy(net(x), target, ignore_index=-7)
    loss_fn().backward()
    g = CPUGraph()
    with graph(g):
        loss = loss_fn()
        loss.backward()
    assert g.native and len(g._build().checks) == 1
    g.replay()
    tx = torch.tensor(x._data)
    tw, tb = (torch.tensor(p.detach()._data) for p in net.parameters())
    want = torch.nn.functional.cross_entropy(tx @ tw.T + tb, torch.tensor(target._data), ignore_index=-7)
    np.testing.assert_allclose(loss._data, want.numpy(), rtol=1e-5)
    if bad == -7:
        target[2] = bad
        g.replay()  # (another ignored entry)
        return
    target[n - 1] = bad
    with pytest.raises(IndexError, match=f"Target {bad} is out of bounds"):
        g.replay()
    with pytest.raises(IndexError, match=f"Target {bad} is out of bounds"):
        loss_fn()


def test_targets_made_inside_the_capture_keep_the_python_step():
    """The range check runs before the replay, so it needs targets the replay does not write."""
    x = jitorch.randn(5, 4, requires_grad=True)
    labels = jitorch.tensor([0, 1, 2, 3, 0])
    g = CPUGraph()
    with graph(g):
        loss = jitorch.nn.functional.cross_entropy(x, (labels + 1) % 4)
    reasons = {desc.split("= ", 1)[1].split("(", 1)[0]: why for desc, why in g.native_report()["fallbacks"]}
    assert reasons.get("nll_loss") == "its target check reads an array the replay writes"
    labels.copy_(jitorch.tensor([3, 2, 1, 0, 3]))
    g.replay()
    want = torch.nn.functional.cross_entropy(torch.tensor(x._data), torch.tensor([0, 3, 2, 1, 0]))
    np.testing.assert_allclose(loss._data, want.numpy(), rtol=1e-6)


@pytest.mark.parametrize("view", [False, True], ids=["tensor", "view"])
def test_an_in_place_product_saves_the_old_value_at_every_replay(view):
    """``y.mul_(w)``'s gradient for ``w`` reads y before the write: autograd's copy of it is a replay step too."""
    def run(lib, x, w):
        y = x * 2
        (y[:, :2] if view else y).mul_(w)
        (y * y).sum().backward()
    x, w = jitorch.ones(2, 3, requires_grad=True), jitorch.ones(2 if view else 3, requires_grad=True)
    g = CPUGraph()
    with graph(g):
        x.grad = w.grad = None
        run(jitorch, x, w)
    for xv, wv in ((3.0, 5.0), (-1.0, 2.0)):
        with jitorch.no_grad():
            x.copy_(jitorch.full((2, 3), xv))
            w.copy_(jitorch.full(tuple(w.shape), wv))
        g.replay()
        tx, tw = torch.full((2, 3), xv, requires_grad=True), torch.full(tuple(w.shape), wv, requires_grad=True)
        run(torch, tx, tw)
        np.testing.assert_allclose(w.grad._data, tw.grad.numpy(), rtol=1e-6)
        np.testing.assert_allclose(x.grad._data, tx.grad.numpy(), rtol=1e-6)


def test_an_in_place_op_under_no_grad_records_no_saved_value():
    """No autograd node: nothing to snapshot (an earlier node's saved input must not be overwritten)."""
    x, w = jitorch.ones(3, requires_grad=True), jitorch.ones(3, requires_grad=True)
    g = CPUGraph()
    with graph(g):
        y = x * w
        with jitorch.no_grad():
            y.mul_(2)
    with jitorch.no_grad():
        x.copy_(jitorch.full((3,), 3.0))
        w.copy_(jitorch.full((3,), 5.0))
    g.replay()
    assert y._data.tolist() == [30.0] * 3 and x._data.tolist() == [3.0] * 3


@pytest.mark.parametrize("kind, dim", [("cat", 0), ("cat", -1), ("cat", 1), ("stack", 0), ("stack", -1),
                                       ("stack", 2)])
def test_cat_and_stack_replay_natively_on_new_values(kind, dim):
    """The backward of split/unbind is a cat/stack: it lowers to one copy per input (an empty or transposed input
    included), so a captured training step stays one native call."""
    gen = np.random.default_rng(dim + 7)
    shape = (3, 4, 5)
    a = jitorch.tensor(gen.standard_normal(shape).astype(np.float32))
    b = jitorch.tensor(gen.standard_normal(shape[::-1]).astype(np.float32)).permute(2, 1, 0)  # non-contiguous
    empty_shape = list(shape)
    empty_shape[dim] = 0
    parts = [a, b] if kind == "stack" else [a, jitorch.zeros(empty_shape), b, jitorch.zeros(0)]
    fn = getattr(jitorch, kind)
    g = CPUGraph()
    with graph(g):
        out = fn([p * 2 for p in parts], dim)
    assert g.native, g.native_report()["fallbacks"]
    a.copy_(jitorch.tensor(gen.standard_normal(shape).astype(np.float32)))
    b.copy_(jitorch.tensor(gen.standard_normal(shape).astype(np.float32)))
    g.replay()
    want = getattr(torch, kind)([torch.tensor(p._data) * 2 for p in parts], dim)
    np.testing.assert_array_equal(out._data, want.numpy())


def test_a_cat_that_promotes_keeps_its_python_step():
    x, n = jitorch.ones(2, 3), jitorch.arange(6).reshape(2, 3)
    g = CPUGraph()
    with graph(g):
        out = jitorch.cat([x * 2, n + 1], 0)
    x.fill_(3.0)
    g.replay()
    np.testing.assert_array_equal(out._data, torch.cat([torch.full((2, 3), 6.0), torch.arange(6).reshape(2, 3) + 1]))
