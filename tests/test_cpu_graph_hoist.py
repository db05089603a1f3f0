"""How CPU graph replay groups its elementwise steps (`cpu._native`): tiny steps move ahead of a larger loop they do not
touch (a captured Adam update is one loop per parameter; a step that reads what the loop writes stays after it), and a
fused loop takes the rewrites compiled graphs make (`codegen.ir.simplify`)."""
import numpy as np

import jitorch
from jitorch.codegen.llvm_program import KernelCall
from jitorch.cpu._native import HOIST_MAX


def _kernels_over(graph, shape):
    return sum(1 for c in graph._build().program_calls if isinstance(c, KernelCall) and c.kernel.shape == shape)


def _adam_pair(shapes):
    jitorch.manual_seed(0)
    params = [jitorch.randn(*shape, requires_grad=True) for shape in shapes]
    grads = [jitorch.randn(*shape) for shape in shapes]
    copies = [p.detach().clone().requires_grad_(True) for p in params]
    return params, grads, copies


def test_a_captured_adam_update_is_one_loop_per_parameter_and_matches_eager():
    shapes = [(96, 130), (50, 70)]
    params, grads, copies = _adam_pair(shapes)
    opt = jitorch.optim.Adam(params, lr=0.01, capturable=True)
    ref = jitorch.optim.Adam(copies, lr=0.01, capturable=True)
    for p, q, g in zip(params, copies, grads):
        p.grad, q.grad = g.clone(), g.clone()
    opt.step()  # the state exists before the capture
    ref.step()
    g = jitorch.cpu.CPUGraph()
    with jitorch.cpu.graph(g):
        opt.step()
    ref.step()  # the capture ran its step too
    assert g.native
    # The bias corrections (0-d) sit between the moment updates and the parameter update of each tensor.
    assert [_kernels_over(g, shape) for shape in shapes] == [1, 1]
    for _ in range(3):
        g.replay()
        ref.step()
        for p, q in zip(params, copies):
            np.testing.assert_allclose(p.detach().numpy(), q.detach().numpy(), rtol=1e-6, atol=1e-7)
    np.testing.assert_array_equal(opt.state[params[0]]["step"].numpy(), ref.state[copies[0]]["step"].numpy())


def test_a_small_step_reading_the_loop_output_stays_after_it():
    x = jitorch.randn(64, 64)
    scale = jitorch.tensor(2.0)
    out = jitorch.empty(64, 64)
    g = jitorch.cpu.CPUGraph()
    with jitorch.cpu.graph(g):
        y = x * scale + 1
        corner = y[0, 0] * 3  # reads the loop's output: must not move ahead of it
        scale.add_(1)  # writes what the loop read: must not move ahead of it either
        out.copy_(y * corner)
    for _ in range(3):
        before = scale.item()
        want_y = x.numpy() * before + 1
        g.replay()
        np.testing.assert_allclose(y.numpy(), want_y, rtol=1e-6)
        np.testing.assert_allclose(corner.numpy(), want_y[0, 0] * 3, rtol=1e-6)
        np.testing.assert_allclose(out.numpy(), want_y * want_y[0, 0] * 3, rtol=1e-5)
        assert scale.item() == before + 1


def test_only_tiny_steps_move():
    assert 1 <= HOIST_MAX < 64 * 64
    x, b = jitorch.randn(64, 64), jitorch.randn(HOIST_MAX + 1)
    g = jitorch.cpu.CPUGraph()
    with jitorch.cpu.graph(g):
        y = (x * 2).exp()
        c = b * 3  # independent but not tiny: stays in order, in a loop of its own
        z = y + 1
    g.replay()
    np.testing.assert_allclose(z.numpy(), np.exp(x.numpy() * 2) + 1, rtol=1e-5)
    np.testing.assert_allclose(c.numpy(), b.numpy() * 3, rtol=1e-6)
    assert _kernels_over(g, (64, 64)) == 2


def test_arrays_over_the_same_bytes_with_different_roots_keep_their_order():
    buf = bytearray(4 * 64 * 64)  # two arrays over these bytes, neither a view of the other
    big = jitorch.from_numpy(np.frombuffer(buf, np.float32).reshape(64, 64))
    small = jitorch.from_numpy(np.frombuffer(buf, np.float32, count=1))
    g = jitorch.cpu.CPUGraph()
    with jitorch.cpu.graph(g):
        y = big * 2
        small.add_(1)  # writes big[0, 0], which the loop above read: it must not move ahead of it
        z = y + 1
    for _ in range(2):
        big.zero_()
        g.replay()
        assert y[0, 0].item() == 0.0 and z[0, 0].item() == 1.0 and small.item() == 1.0


def _ops(expr, seen=None):
    seen = set() if seen is None else seen
    seen.add(expr.op)
    for a in expr.args:
        _ops(a, seen)
    return seen


def test_a_fused_loop_takes_the_rewrites_of_compiled_graphs():
    import torch

    x_np = np.random.default_rng(6).standard_normal((64, 300)).astype(np.float32) * 4
    x = jitorch.tensor(x_np)
    g = jitorch.cpu.CPUGraph()
    with jitorch.cpu.graph(g):
        y = jitorch.nn.functional.gelu(x, approximate="tanh")
    g.replay()
    ops = set().union(*(_ops(s.value) for c in g._build().program_calls if isinstance(c, KernelCall)
                        for s in c.kernel.stores))
    assert "exp" in ops and "tanh" not in ops  # GELU's 1 + tanh(z) as 2 / (1 + exp(-2 z)) (`codegen.ir.simplify`)
    want = torch.nn.functional.gelu(torch.tensor(x_np, dtype=torch.float64), approximate="tanh").numpy()
    np.testing.assert_allclose(y.numpy(), want, rtol=2e-6, atol=1e-6)
