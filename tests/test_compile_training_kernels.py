"""What the compiled backward's kernels read and write: recomputed chains per reader, layer norm's backward fused."""
import numpy as np
import pytest
import torch

import jitorch
import jitorch.nn.functional as F
from jitorch._compile.fusion import FusedGroup
from jitorch._compile.training import compile_training
from training_helpers import classification_batches, train_like_eager


def _groups(graph):
    return [u for k, u in graph.steps if isinstance(u, FusedGroup)]


def _gelu(h):
    return 0.5 * h * (1 + jitorch.tanh(0.7978845608028654 * (h + 0.044715 * h * h * h)))


def test_recomputed_chain_is_copied_per_reader_so_no_kernel_writes_intermediates():
    # The backward needs gelu(h) for w2's gradient (a matmul) and gelu'(h) for w1's (a fused pointwise product):
    # one kernel recomputes gelu(h) and writes only it, the other recomputes what gelu' needs from h itself.
    rng = np.random.default_rng(0)
    xd, w1d, w2d, gd = (rng.standard_normal(s).astype(np.float32) for s in ((4, 5), (5, 6), (6, 3), (4, 3)))
    x = jitorch.tensor(xd)
    w1, w2 = jitorch.tensor(w1d, requires_grad=True), jitorch.tensor(w2d, requires_grad=True)
    plan = compile_training(lambda x, w1, w2: _gelu(x @ w1) @ w2, (x, w1, w2), {}, None, None)
    tanh_groups = [u for u in _groups(plan.bwd) if "tanh" in u.ops]
    assert len(tanh_groups) == 2
    assert sorted(len(u.outputs) for u in tanh_groups) == [1, 1]
    assert sorted(len(u.inputs) for u in tanh_groups) == [1, 2]  # h alone; h and the upstream gradient
    out = plan((x, w1, w2))
    out.backward(jitorch.tensor(gd))
    tw1, tw2 = torch.tensor(w1d, requires_grad=True), torch.tensor(w2d, requires_grad=True)
    (torch.nn.functional.gelu(torch.tensor(xd) @ tw1, approximate="tanh") @ tw2).backward(torch.tensor(gd))
    np.testing.assert_allclose(out.detach().numpy(), (torch.nn.functional.gelu(
        torch.tensor(xd) @ tw1, approximate="tanh") @ tw2).detach().numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(w1.grad.numpy(), tw1.grad.numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(w2.grad.numpy(), tw2.grad.numpy(), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("shape, k, affine, dtype", [
    ((6, 8), 1, True, np.float32),
    ((3, 4, 10), 1, True, np.float64),
    ((3, 4, 5), 2, True, np.float32),
    ((5, 7), 1, False, np.float32),
    ((2, 0, 6), 1, True, np.float32),
])
def test_layer_norm_backward_is_decomposed_into_a_fused_row_kernel(shape, k, affine, dtype):
    rng = np.random.default_rng(1)
    norm = shape[len(shape) - k:]
    xd = (rng.standard_normal(shape) * 3 + 1).astype(dtype)
    wd, bd = (rng.standard_normal(norm).astype(dtype) for _ in range(2))
    gd = rng.standard_normal(shape).astype(dtype)
    x = jitorch.tensor(xd, requires_grad=True)
    params = (jitorch.tensor(wd, requires_grad=True), jitorch.tensor(bd, requires_grad=True)) if affine else ()

    def fn(x, *wb):
        return F.layer_norm(x * 2, norm, *wb, eps=1e-5) + x

    plan = compile_training(fn, (x, *params), {}, None, None)
    names = [n.target.op.name for n in plan.bwd.gm.graph.nodes if hasattr(n.target, "op")]
    assert "native_layer_norm_backward" not in names
    if shape[1] and affine:  # (without a weight, autograd differentiates the composite formula instead)
        # One kernel makes both row reductions and the input gradient, with the residual's gradient added in.
        rows = [u for u in _groups(plan.bwd) if u.ops.count("sum") == 2]
        assert len(rows) == 1 and rows[0].reduce_axes == k and "add" in rows[0].ops
    plan((x, *params)).backward(jitorch.tensor(gd))
    tx = torch.tensor(xd, requires_grad=True)
    tp = [torch.tensor(a, requires_grad=True) for a in (wd, bd)] if affine else []
    (torch.nn.functional.layer_norm(tx * 2, norm, *tp, eps=1e-5) + tx).backward(torch.tensor(gd))
    tol = dict(rtol=1e-4, atol=1e-5) if dtype == np.float32 else dict(rtol=1e-10, atol=1e-12)
    for got, want in zip((x, *params), (tx, *tp)):
        assert got.grad.dtype == jitorch.float32 if dtype == np.float32 else jitorch.float64
        np.testing.assert_allclose(got.grad.numpy(), want.grad.numpy(), **tol)


def test_decomposed_layer_norm_backward_keeps_double_backward_eager():
    x = jitorch.randn(3, 4, dtype=jitorch.float64, requires_grad=True)
    w = jitorch.randn(4, dtype=jitorch.float64, requires_grad=True)
    compiled = jitorch.compile(lambda x, w: F.layer_norm(x, (4,), w).pow(2).sum())
    (gx,) = jitorch.autograd.grad(compiled(x, w), (x,), create_graph=True)
    (ggw,) = jitorch.autograd.grad(gx.sum(), (w,))
    tx, tw = (torch.tensor(t.detach().numpy(), requires_grad=True) for t in (x, w))
    (tgx,) = torch.autograd.grad(torch.nn.functional.layer_norm(tx, (4,), tw).pow(2).sum(), (tx,), create_graph=True)
    (tggw,) = torch.autograd.grad(tgx.sum(), (tw,))
    np.testing.assert_allclose(gx.detach().numpy(), tgx.detach().numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(ggw.numpy(), tggw.numpy(), rtol=1e-8, atol=1e-10)


@pytest.mark.parametrize("reduction, ignore_index, dtype", [
    ("mean", -100, np.float32), ("sum", -100, np.float32), ("none", -100, np.float32),
    ("mean", 1, np.float64), ("mean", 7, np.float32),
])
def test_nll_loss_backward_is_decomposed_and_fuses_into_log_softmax_backward(reduction, ignore_index, dtype):
    rng = np.random.default_rng(2)
    xd = rng.standard_normal((9, 5)).astype(dtype)
    yd = rng.integers(0, 5, 9)
    yd[[2, 6]] = ignore_index if ignore_index == -100 else 1
    gd = rng.standard_normal(() if reduction != "none" else (9,)).astype(dtype)
    x, y = jitorch.tensor(xd, requires_grad=True), jitorch.tensor(yd)

    def fn(x, y):
        return F.cross_entropy(x * 1.5, y, ignore_index=ignore_index, reduction=reduction)

    plan = compile_training(fn, (x, y), {}, None, None)
    names = [n.target.op.name for n in plan.bwd.gm.graph.nodes if hasattr(n.target, "op")]
    assert "nll_loss_backward" not in names
    fwd_names = [n.target.op.name for n in plan.fwd.gm.graph.nodes if hasattr(n.target, "op")]
    assert "nll_loss" not in fwd_names and fwd_names[0] == "nll_check_targets"  # the host check comes first
    # The masked gradient, log_softmax's backward and the outer * 1.5 are one kernel.
    assert [ops for ops in plan.backward_kernels if "log_softmax_backward_data" in ops][0][-1] == "mul"
    out = plan((x, y))
    out.backward(jitorch.tensor(gd))
    tx = torch.tensor(xd, requires_grad=True)
    ref = torch.nn.functional.cross_entropy(tx * 1.5, torch.tensor(yd), ignore_index=ignore_index,
                                            reduction=reduction)
    ref.backward(torch.tensor(gd))
    tol = dict(rtol=1e-5, atol=1e-6) if dtype == np.float32 else dict(rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(out.detach().numpy(), ref.detach().numpy(), **tol)
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), **tol)


def test_all_ignored_batch_gives_nan_loss_and_zero_gradients_when_compiled():
    x = jitorch.randn(4, 3, requires_grad=True)
    y = jitorch.full((4,), -100, dtype=jitorch.int64)
    plan = compile_training(lambda x, y: F.cross_entropy(x, y), (x, y), {}, None, None)
    loss = plan((x, y))
    loss.backward()
    assert np.isnan(loss.item()) and np.array_equal(x.grad.numpy(), np.zeros((4, 3), np.float32))


def test_compiled_cross_entropy_still_rejects_out_of_range_targets():
    x = jitorch.randn(4, 3, requires_grad=True)
    compiled = jitorch.compile(lambda x, y: F.cross_entropy(x, y))
    compiled(x, jitorch.tensor([0, 1, 2, 1])).backward()
    for _ in range(3):  # past the planning calls, into the native runner
        with pytest.raises(IndexError, match="Target 5 is out of bounds"):
            compiled(x, jitorch.tensor([0, 5, 2, 1]))


def test_target_range_check_runs_natively_and_keeps_raising_like_eager():
    """The check is a count the native program leaves for the runner, not a Python step between programs."""
    rng = np.random.default_rng(8)
    xd = rng.standard_normal((6, 4)).astype(np.float32)
    compiled = jitorch.compile(lambda x, y: F.cross_entropy(x, y))
    x = jitorch.tensor(xd, requires_grad=True)
    good = jitorch.tensor([0, 3, 2, 1, -100, 3])
    for _ in range(3):
        x.grad = None
        compiled(x, good).backward()
    runner = compiled.train_entries[0].plan.fwd.native
    assert runner is not None and runner.report()["python_steps"] == [] and len(runner.checks) == 1
    for bad, value in (([0, 3, 4, 1, -100, 3], 4), ([0, -2, 2, 1, 1, 3], -2)):
        with pytest.raises(IndexError, match=f"Target {value} is out of bounds"):
            compiled(x, jitorch.tensor(bad))
    x.grad = None
    loss = compiled(x, good)
    loss.backward()
    tx = torch.tensor(xd, requires_grad=True)
    ref = torch.nn.functional.cross_entropy(tx, torch.tensor([0, 3, 2, 1, -100, 3]))
    ref.backward()
    assert runner.broken is None
    np.testing.assert_allclose(loss.item(), ref.item(), rtol=1e-6)
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("pieces, covered", [
    (lambda h: h.split(3, dim=-1), True),
    (lambda h: h.chunk(2, dim=1), True),
    (lambda h: (h[:, :2], h[:, 3:]), False),  # a gap: the adds stay, and the gradient must still be right
])
def test_split_gradient_is_one_cat_not_scatters_and_adds(pieces, covered):
    rng = np.random.default_rng(3)
    xd, gd = rng.standard_normal((4, 6)).astype(np.float32), rng.standard_normal((4, 6)).astype(np.float32)
    x = jitorch.tensor(xd, requires_grad=True)

    def fn(x, lib):
        parts = pieces(x * 2)
        return lib.cat([p.tanh() * (i + 1) for i, p in enumerate(parts)], dim=1)

    plan = compile_training(lambda x: fn(x, jitorch), (x,), {}, None, None)
    names = [n.target.op.name for n in plan.bwd.gm.graph.nodes if hasattr(n.target, "op")]
    assert ("cat" in names and "copy_slices" not in names) if covered else "copy_slices" in names
    out = plan((x,))
    out.backward(jitorch.tensor(gd[:, :out.shape[1]]))
    tx = torch.tensor(xd, requires_grad=True)
    ref = fn(tx, torch)
    ref.backward(torch.tensor(gd[:, :ref.shape[1]]))
    np.testing.assert_allclose(out.detach().numpy(), ref.detach().numpy(), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-5, atol=1e-6)
    for _ in range(2):  # the native runner's copy loops give the same gradient
        x.grad = None
        plan((x,)).backward(jitorch.tensor(gd[:, :out.shape[1]]))
        np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-5, atol=1e-6)


def test_joint_graph_with_no_grad_region_and_flipped_view_schedules_and_matches_eager():
    # Once failed with "fusion left 5 units unscheduled" (a recomputed chain shared by a fused reader and a library
    # call closed a cycle between groups).
    def f(x, y):
        v2 = (y * 0.5).exp() * x
        v3 = v2.view(-1).flip(0).view(v2.shape) + v2
        with jitorch.no_grad():
            v4 = x.t().t() * y.detach()
        return (v2 * 0.5).exp() * v4, v3 * (v4 + v3)

    rng = np.random.default_rng(4)
    xd, yd, g1, g2 = (rng.standard_normal((3, 3)).astype(np.float32) for _ in range(4))
    grads = []
    for fn in (jitorch.compile(f), f):
        x, y = jitorch.tensor(xd, requires_grad=True), jitorch.tensor(yd, requires_grad=True)
        a, b = fn(x, y)
        jitorch.autograd.backward([a, b], [jitorch.tensor(g1), jitorch.tensor(g2)])
        grads.append((a.detach().numpy(), b.detach().numpy(), x.grad.numpy(), y.grad.numpy()))
    for got, want in zip(*grads):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_weighted_cross_entropy_compiles_as_one_graph_with_its_range_check():
    rng = np.random.default_rng(6)
    wd, xd, gd = rng.random(5).astype(np.float32), rng.standard_normal((4, 5)).astype(np.float32), np.float32(0.7)
    yd = np.array([0, 1, 4, 2])
    w = jitorch.tensor(wd)
    compiled = jitorch.compile(lambda x, y: F.cross_entropy(x, y, weight=w, ignore_index=1))
    x = jitorch.tensor(xd, requires_grad=True)
    out = compiled(x, jitorch.tensor(yd))
    out.backward(jitorch.tensor(gd))
    assert compiled.train_entries[0].plan is not None and compiled.train_entries[0].break_reason is None
    tx = torch.tensor(xd, requires_grad=True)
    ref = torch.nn.functional.cross_entropy(tx, torch.tensor(yd), weight=torch.tensor(wd), ignore_index=1)
    ref.backward(torch.tensor(gd))
    np.testing.assert_allclose(out.item(), ref.item(), rtol=1e-5)
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-5, atol=1e-6)
    for _ in range(3):  # the recording call, then the native runner: its check runs before the weights' gather
        with pytest.raises(IndexError, match="Target 7 is out of bounds"):
            compiled(x, jitorch.tensor([0, 1, 7, 2]))
        compiled(x, jitorch.tensor(yd)).backward(jitorch.tensor(gd))


# Output rows of 10, 5 and 4 columns fill too little of an 8- or 16-lane register chunk for the direct kernels, so
# these convolutions make window matrices on any host.
@pytest.mark.parametrize("shape, out_channels, stride, padding, groups, bias", [
    ((4, 3, 10, 10), 8, 1, 1, 1, True),    # K-major windows (long rows)
    ((4, 16, 5, 5), 8, 1, 1, 1, True),     # channels-last windows (short rows, many channels)
    ((2, 4, 9, 9), 6, 2, 0, 2, False),     # strided, grouped, no bias
])
def test_conv_backward_reuses_the_forwards_window_matrix(shape, out_channels, stride, padding, groups, bias):
    rng = np.random.default_rng(7)
    xd = rng.standard_normal(shape).astype(np.float32)
    wd = (rng.standard_normal((out_channels, shape[1] // groups, 3, 3)) * 0.3).astype(np.float32)
    bd = rng.standard_normal(out_channels).astype(np.float32)
    x, w = jitorch.tensor(xd, requires_grad=True), jitorch.tensor(wd, requires_grad=True)
    params = (w, jitorch.tensor(bd, requires_grad=True)) if bias else (w,)

    def fn(x, w, b=None, lib=jitorch):
        return lib.nn.functional.conv2d(x * 1.0, w, b, stride=stride, padding=padding, groups=groups).relu()

    plan = compile_training(fn, (x, *params), {}, None, None)
    fwd = [n.target.op.name for n in plan.fwd.gm.graph.nodes if hasattr(n.target, "op")]
    bwd = [n.target.op.name for n in plan.bwd.gm.graph.nodes if hasattr(n.target, "op")]
    assert "convolution_cols" in fwd and "convolution" not in fwd
    assert "convolution_weight_cols" in bwd and "convolution_weight" not in bwd
    assert ("sum" not in bwd) if bias else True  # the bias gradient comes with the weight's
    out = plan((x, *params))
    gd = rng.standard_normal(tuple(out.shape)).astype(np.float32)
    out.backward(jitorch.tensor(gd))
    tx, tw = torch.tensor(xd, requires_grad=True), torch.tensor(wd, requires_grad=True)
    tp = (tw, torch.tensor(bd, requires_grad=True)) if bias else (tw,)
    ref = fn(tx, *tp, lib=torch)
    ref.backward(torch.tensor(gd))
    np.testing.assert_allclose(out.detach().numpy(), ref.detach().numpy(), rtol=1e-4, atol=1e-5)
    for got, want in zip((x, *params), (tx, *tp)):
        np.testing.assert_allclose(got.grad.numpy(), want.grad.numpy(), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("stride", [1, 2])
def test_direct_convolution_trains_compiled_without_a_window_matrix(stride):
    """Rows of 16 or 32 columns take the direct kernels (`ops.conv_direct`), which keep no window matrix: the
    backward has the plain weight-gradient row, and gradients match torch."""
    rng = np.random.default_rng(8)
    xd = rng.standard_normal((3, 4, 6, 32)).astype(np.float32)
    wd = (rng.standard_normal((8, 4, 3, 3)) * 0.3).astype(np.float32)
    x, w = jitorch.tensor(xd, requires_grad=True), jitorch.tensor(wd, requires_grad=True)

    def fn(x, w, lib=jitorch):
        return lib.nn.functional.conv2d(x * 1.0, w, None, stride=stride, padding=1).relu()

    plan = compile_training(fn, (x, w), {}, None, None)
    bwd = [n.target.op.name for n in plan.bwd.gm.graph.nodes if hasattr(n.target, "op")]
    assert "convolution_weight" in bwd and "convolution_weight_cols" not in bwd
    out = plan((x, w))
    gd = rng.standard_normal(tuple(out.shape)).astype(np.float32)
    out.backward(jitorch.tensor(gd))
    tx, tw = torch.tensor(xd, requires_grad=True), torch.tensor(wd, requires_grad=True)
    ref = fn(tx, tw, lib=torch)
    ref.backward(torch.tensor(gd))
    np.testing.assert_allclose(out.detach().numpy(), ref.detach().numpy(), rtol=1e-4, atol=1e-5)
    for got, want in ((x, tx), (w, tw)):
        np.testing.assert_allclose(got.grad.numpy(), want.grad.numpy(), rtol=1e-4, atol=1e-4)


def test_conv_with_a_large_window_matrix_recomputes_it_in_the_backward():
    x = jitorch.randn(8, 16, 64, 64)  # windows: 8 * 16 * 64 * 64 * 9 * 4 bytes = 18 MiB > 16 MiB
    w = jitorch.randn(4, 16, 3, 3, requires_grad=True)
    plan = compile_training(lambda x, w: jitorch.nn.functional.conv2d(x, w, padding=1), (x, w), {}, None, None)
    bwd = [n.target.op.name for n in plan.bwd.gm.graph.nodes if hasattr(n.target, "op")]
    assert "convolution_weight" in bwd and "convolution_weight_cols" not in bwd


class _InplaceNet(jitorch.nn.Module):
    """In-place ops on the graph's own values: ``+=``, ``mul_`` and ``ReLU(inplace=True)``."""

    def __init__(self):
        super().__init__()
        self.a, self.b = jitorch.nn.Linear(8, 16), jitorch.nn.Linear(16, 3)
        self.act = jitorch.nn.ReLU(inplace=True)

    def forward(self, x, y):
        h = self.a(x)
        h += 1.0
        h.mul_(2)
        return F.cross_entropy(self.b(self.act(h)), y)


def test_inplace_ops_on_intermediates_compile_as_out_of_place_nodes():
    entry = train_like_eager(_InplaceNet, classification_batches((5, 8), 3, seed=8), seed=8)
    assert entry.plan is not None and entry.break_reason is None
    assert ["add", "copy", "mul", "copy", "relu", "copy"] in entry.kernel_ops  # one fused kernel


@pytest.mark.parametrize("alias", ["detach", "view"])
def test_inplace_write_seen_through_an_alias_is_not_functionalized(alias):
    # The write must reach the other name: keep eager semantics (the specialization runs eagerly).
    def f(x, w):
        h = x * w
        if alias == "detach":
            h.detach().mul_(2)
            return (h * 3).sum()
        v = h[0]
        h.relu_()
        return v.sum() * 2 + h.sum()

    rng = np.random.default_rng(9)
    xd, wd = rng.standard_normal((3, 4)).astype(np.float32), rng.standard_normal(4).astype(np.float32)
    results = []
    for fn in (jitorch.compile(f), f):
        x, w = jitorch.tensor(xd), jitorch.tensor(wd, requires_grad=True)
        out = fn(x, w)
        out.backward()
        results.append((out.item(), w.grad.numpy()))
    np.testing.assert_allclose(results[0][0], results[1][0], rtol=1e-6)
    np.testing.assert_allclose(results[0][1], results[1][1], rtol=1e-6)


def test_batch_norm_then_inplace_relu_trains_compiled():
    # torchvision's ``bn -> ReLU(inplace=True)``: the ReLU writes into one output of the batch-norm row.
    class Net(jitorch.nn.Module):
        def __init__(self):
            super().__init__()
            nn = jitorch.nn
            self.net = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1, bias=False), nn.BatchNorm2d(4),
                                     nn.ReLU(inplace=True), nn.Flatten(), nn.Linear(4 * 36, 3))

        def forward(self, x, y):
            return F.cross_entropy(self.net(x), y)

    entry = train_like_eager(Net, classification_batches((5, 1, 6, 6), 3, seed=10), seed=10)
    assert entry.plan is not None and entry.break_reason is None
