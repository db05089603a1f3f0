"""CUDA graphs on a real device (marker ``cuda``; skipped without one): replay == eager over new inputs with the
outputs zeroed before each replay, private-pool isolation and sharing, forbidden operations ending the capture with
the stream usable afterwards, random ops (and dropout) advancing per replay, ``make_graphed_callables`` gradients ==
eager, and ``compile(mode="reduce-overhead")`` on CUDA. Eager CUDA results (same kernels) are the oracle, with the
CPU as a second check where kernels differ. Run with ``bash bench/gpu_check.sh``.
"""
import numpy as np
import pytest

import jitorch
import jitorch.nn as nn

pytestmark = pytest.mark.cuda


def cuda(a):
    return jitorch.from_numpy(np.ascontiguousarray(a)).cuda()


def host(t):
    return t.detach().cpu().numpy()


def capture_stream():
    return jitorch.cuda.graph.default_capture_stream


def allocator():
    from jitorch.runtime.cuda_memory import installed_hook

    return installed_hook()


def pool_spans(pool_id):
    alloc = allocator().synced().allocator()
    return [(s["address"], s["address"] + s["total_size"]) for s in alloc.memory_snapshot()
            if s["segment_pool_id"] == pool_id]


def address(t):
    return t._data.data.ptr


def step(x, w, b):
    h = (x @ w + b).tanh()
    return (h * 2 - x.sum(1, keepdim=True)).softmax(-1), h.mean()


def test_replay_equals_eager_over_new_inputs():
    rng = np.random.default_rng(0)
    w, b = cuda(rng.standard_normal((16, 16), np.float32)), cuda(rng.standard_normal(16).astype(np.float32))
    static_x = cuda(rng.standard_normal((8, 16), np.float32))
    step(static_x, w, b)  # warm-up: CuPy compiles and loads its kernels outside the capture
    jitorch.cuda.synchronize()
    g = jitorch.cuda.CUDAGraph()
    with jitorch.cuda.graph(g):
        out, mean = step(static_x, w, b)
    for _ in range(4):
        new = rng.standard_normal((8, 16), np.float32)
        static_x.copy_(cuda(new))
        out.zero_()
        mean.zero_()
        g.replay()
        want_out, want_mean = step(cuda(new), w, b)
        np.testing.assert_allclose(host(out), host(want_out), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(host(mean), host(want_mean), rtol=1e-5, atol=1e-6)
        cpu_out, _ = step(jitorch.from_numpy(new), jitorch.from_numpy(host(w)), jitorch.from_numpy(host(b)))
        np.testing.assert_allclose(host(out), cpu_out.numpy(), rtol=1e-4, atol=1e-5)


def test_outputs_are_overwritten_and_side_effects_run_once():
    x = cuda(np.arange(6, dtype=np.float32))
    (x * 3).sin()  # warm-up (kernels compile outside the capture)
    calls = []
    g = jitorch.cuda.CUDAGraph()
    with jitorch.cuda.graph(g):
        calls.append("ran")
        y = (x * 3).sin()
    g.replay()
    first = y.clone()
    x.copy_(cuda(np.full(6, 0.5, np.float32)))
    g.replay()
    g.replay()
    assert calls == ["ran"]
    np.testing.assert_allclose(host(y), np.sin(np.full(6, 1.5, np.float32)), rtol=1e-6)
    np.testing.assert_allclose(host(first), np.sin(np.arange(6, dtype=np.float32) * 3), rtol=1e-5, atol=1e-6)


def test_rnn_loop_replay_equals_eager():
    """The benchmark's loop: h = tanh(h @ W + x_t @ U + b) for 100 steps."""
    rng = np.random.default_rng(1)
    W, U = cuda(rng.standard_normal((64, 64), np.float32) * 0.1), cuda(rng.standard_normal((64, 64), np.float32) * 0.1)
    b = cuda(rng.standard_normal((1, 64), np.float32) * 0.1)
    xs, h0 = cuda(np.zeros((100, 1, 64), np.float32)), cuda(np.zeros((1, 64), np.float32))

    def run(xs, h):
        for t in range(xs.shape[0]):
            h = (h @ W + xs[t] @ U + b).tanh()
        return h

    run(xs, h0)
    g = jitorch.cuda.CUDAGraph()
    with jitorch.cuda.graph(g):
        h = run(xs, h0)
    for _ in range(3):
        new_x, new_h = rng.standard_normal((100, 1, 64), np.float32), rng.standard_normal((1, 64), np.float32)
        xs.copy_(cuda(new_x))
        h0.copy_(cuda(new_h))
        h.zero_()
        g.replay()
        np.testing.assert_allclose(host(h), host(run(cuda(new_x), cuda(new_h))), rtol=1e-5, atol=1e-6)


def test_private_pool_is_never_reused_by_eager_allocations():
    x = cuda(np.ones((256, 1024), np.float32))  # 1 MiB
    (x * 2 + 1).relu()
    g = jitorch.cuda.CUDAGraph()
    with jitorch.cuda.graph(g):
        tmp = x * 2
        out = (tmp + 1).relu()
        del tmp  # dies inside the capture: its block stays in the graph's pool
    spans = pool_spans(g.pool())
    assert spans and any(lo <= address(out) < hi for lo, hi in spans)
    eager = [jitorch.empty(n, device="cuda") for n in (256 * 1024, 256 * 1024, 1000, 4 << 20)]
    assert not any(lo <= address(t) < hi for t in eager for lo, hi in spans)
    del out
    eager += [jitorch.empty(256 * 1024, device="cuda") for _ in range(3)]  # the freed output is still the graph's
    assert not any(lo <= address(t) < hi for t in eager for lo, hi in spans)
    pid = g.pool()
    g.reset()
    jitorch.cuda.empty_cache()
    assert pool_spans(pid) == []  # nothing alive in it and no graph using it: its memory went back to the device


def test_reset_returns_the_pool_memory():
    x = cuda(np.ones(1 << 20, np.float32))  # 4 MiB
    x + 1
    jitorch.cuda.synchronize()
    alloc = allocator().synced().allocator()
    g = jitorch.cuda.CUDAGraph()
    with jitorch.cuda.graph(g):
        y = x + 1
    pid = g.pool()
    assert pool_spans(pid) and alloc.pool_use_count(pid) == 1
    g.replay()
    np.testing.assert_array_equal(host(y), np.full(1 << 20, 2, np.float32))
    del y
    g.reset()
    jitorch.cuda.empty_cache()
    assert pool_spans(pid) == [] and alloc.pool_use_count(pid) == 0


def test_graphs_share_a_pool():
    x = cuda(np.linspace(-1, 1, 4096, dtype=np.float32))
    ((x * 2).tanh() + x).tanh()
    handle = jitorch.cuda.graph_pool_handle()
    g1, g2 = jitorch.cuda.CUDAGraph(), jitorch.cuda.CUDAGraph()
    with jitorch.cuda.graph(g1, pool=handle):
        a = (x * 2).tanh()
    with jitorch.cuda.graph(g2, pool=g1.pool()):
        b = (a + x).tanh()  # reads g1's output: replay g1 then g2, as captured
    assert g1.pool() == g2.pool() == handle
    assert allocator().allocator().pool_use_count(handle) == 2
    spans = pool_spans(handle)
    assert any(lo <= address(a) < hi for lo, hi in spans) and any(lo <= address(b) < hi for lo, hi in spans)
    for scale in (0.5, -1.5):
        x.copy_(cuda(np.linspace(-1, 1, 4096, dtype=np.float32) * scale))
        a.zero_()
        b.zero_()
        g1.replay()
        g2.replay()
        want_a = np.tanh(np.linspace(-1, 1, 4096, dtype=np.float32) * scale * 2)
        np.testing.assert_allclose(host(a), want_a, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(host(b), np.tanh(want_a + host(x)), rtol=1e-5, atol=1e-6)
    g1.reset()
    assert allocator().allocator().pool_use_count(handle) == 1
    g2.reset()


FORBIDDEN = {
    "item": (lambda y: y.sum().item(), "item()"),
    "tolist": (lambda y: y.tolist(), "tolist()"),
    "numpy": (lambda y: y.numpy(), "numpy()"),
    "cpu": (lambda y: y.cpu(), "device-to-host copy"),
    "bool": (lambda y: bool(y.sum() > 0), "bool()"),
    "print": (lambda y: print(y), "print"),
    "host_tensor": (lambda y: y + jitorch.tensor([1.0], device="cuda"), "host-to-device copy"),
    "copy_from_cpu": (lambda y: y.copy_(jitorch.ones(4)), "host-to-device copy"),
    "synchronize": (lambda y: jitorch.cuda.synchronize(), "jitorch.cuda.synchronize()"),
    "stream_synchronize": (lambda y: jitorch.cuda.current_stream().synchronize(), "Stream.synchronize()"),
}


@pytest.mark.parametrize("name", sorted(FORBIDDEN))
def test_forbidden_operations_end_the_capture_and_the_stream_stays_usable(name):
    fn, shown = FORBIDDEN[name]
    x = cuda(np.arange(4, dtype=np.float32))
    fn(x * 2)  # legal outside a capture: warms up the kernels it launches
    x * 3 + x + 1
    jitorch.cuda.synchronize()
    g = jitorch.cuda.CUDAGraph()
    with pytest.raises(RuntimeError, match="not permitted while capturing") as info:
        with jitorch.cuda.graph(g):
            y = x * 2
            fn(y)
    assert shown in str(info.value)
    stream = capture_stream()
    assert not stream._cp.is_capturing() and not allocator().capturing()
    assert jitorch.cuda.current_stream() != stream  # the previous stream is current again
    with jitorch.cuda.stream(stream):  # eager work on the stream that was capturing
        z = x + 1
    stream.synchronize()
    np.testing.assert_array_equal(host(z), np.arange(4, dtype=np.float32) + 1)
    assert x.sum().item() == 6.0  # the guards are gone
    g2 = jitorch.cuda.CUDAGraph()
    with jitorch.cuda.graph(g2):
        w = x * 3
    g2.replay()
    np.testing.assert_array_equal(host(w), np.arange(4, dtype=np.float32) * 3)


def test_a_cuda_error_inside_the_capture_still_ends_it():
    import cupy

    x = cuda(np.ones(4, np.float32))
    x * 2 + x + 2
    g = jitorch.cuda.CUDAGraph()
    with pytest.raises(Exception):
        with jitorch.cuda.graph(g):
            _ = x * 2
            cupy.cuda.runtime.deviceSynchronize()  # not jitorch's: CUDA itself refuses it
    assert not capture_stream()._cp.is_capturing() and not allocator().capturing()
    with jitorch.cuda.graph(g):
        y = x + 2
    g.replay()
    np.testing.assert_array_equal(host(y), np.full(4, 3, np.float32))


def test_capture_on_the_default_stream_is_refused_and_replay_on_it_works():
    x = cuda(np.ones(3, np.float32))
    x * 5
    g = jitorch.cuda.CUDAGraph()
    with pytest.raises(RuntimeError, match="non-default stream"):
        g.capture_begin()
    s = jitorch.cuda.Stream()
    with jitorch.cuda.stream(s):
        g.capture_begin()
        y = x * 5
        g.capture_end()
    g.replay()  # on the default stream
    np.testing.assert_array_equal(host(y), np.full(3, 5, np.float32))
    with pytest.raises(RuntimeError, match="already holds a capture"):
        with jitorch.cuda.stream(s):
            g.capture_begin()


def test_random_ops_advance_the_generator_on_every_replay():
    x = cuda(np.zeros((4, 5), np.float32))
    x + jitorch.rand(4, 5, device="cuda")
    jitorch.empty(3, device="cuda").normal_(1.0, 2.0) * 2
    g = jitorch.cuda.CUDAGraph()
    with jitorch.cuda.graph(g):
        y = x + jitorch.rand(4, 5, device="cuda")
        z = jitorch.empty(3, device="cuda").normal_(1.0, 2.0) * 2
    jitorch.manual_seed(3)
    replays = []
    for _ in range(3):
        y.zero_()
        z.zero_()
        g.replay()
        replays.append((host(y), host(z)))
    jitorch.manual_seed(3)
    for ry, rz in replays:  # the same numbers the eager code draws after the same seed
        ey = x + jitorch.rand(4, 5, device="cuda")
        ez = jitorch.empty(3, device="cuda").normal_(1.0, 2.0) * 2
        np.testing.assert_array_equal(ry, host(ey))
        np.testing.assert_array_equal(rz, host(ez))
    assert not np.array_equal(replays[0][0], replays[1][0])
    assert "draw" in g.debug_dump()


def test_dropout_replays_new_masks_like_eager():
    x = cuda(np.ones(256, np.float32))
    jitorch.nn.functional.dropout(x, 0.5)
    g = jitorch.cuda.CUDAGraph()
    with jitorch.cuda.graph(g):
        y = jitorch.nn.functional.dropout(x, 0.5) + 1
    jitorch.manual_seed(5)
    replays = []
    for _ in range(2):
        y.zero_()
        g.replay()
        replays.append(host(y))
    jitorch.manual_seed(5)
    for r in replays:
        np.testing.assert_array_equal(r, host(jitorch.nn.functional.dropout(x, 0.5) + 1))
    assert set(np.unique(replays[0])) == {1.0, 3.0} and not np.array_equal(replays[0], replays[1])


def test_random_op_with_tensor_parameters_raises_and_ends_the_capture():
    probs = cuda(np.full(8, 0.3, np.float32))
    jitorch.bernoulli(probs)
    g = jitorch.cuda.CUDAGraph()
    with pytest.raises(NotImplementedError, match="cannot be replayed"):
        with jitorch.cuda.graph(g):
            jitorch.bernoulli(probs * 2)
    assert not capture_stream()._cp.is_capturing() and not allocator().capturing()


def _models():
    rng = np.random.default_rng(2)
    eager = nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 4)).cuda()
    graphed = nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 4)).cuda()
    for pe, pg in zip(eager.parameters(), graphed.parameters()):
        data = rng.standard_normal(tuple(pe.shape)).astype(np.float32) * 0.3
        with jitorch.no_grad():
            pe.copy_(cuda(data))
            pg.copy_(cuda(data))
    return eager, graphed


def test_make_graphed_callables_forward_and_backward_equal_eager():
    """A module and a function graphed together, chained as in the live workload (the function consumes the
    module's output), so the backward graphs replay in reverse capture order, as PyTorch requires."""
    rng = np.random.default_rng(3)
    eager, module = _models()

    def head(a, b):
        return (a * b).sin(), (a + b).exp()

    sample_x = jitorch.randn(8, 16, device="cuda", requires_grad=True)
    sample_a = jitorch.randn(8, 4, device="cuda", requires_grad=True)
    sample_b = jitorch.randn(4, device="cuda", requires_grad=True)
    module_g, head_g = jitorch.cuda.make_graphed_callables((module, head), ((sample_x,), (sample_a, sample_b)))
    assert module_g is module
    for _ in range(3):
        x, b = rng.standard_normal((8, 16)).astype(np.float32), rng.standard_normal(4).astype(np.float32)
        ups = [rng.standard_normal((8, 4)).astype(np.float32) for _ in range(2)]
        results = []
        for mod, fn in ((eager, head), (module_g, head_g)):
            tx, tb = cuda(x).requires_grad_(True), cuda(b).requires_grad_(True)
            hidden = mod(tx)
            s, e = fn(hidden, tb)
            jitorch.autograd.backward([s, e], [cuda(u) for u in ups])
            results.append([host(hidden), host(s), host(e), host(tx.grad), host(tb.grad)])
        for got, want in zip(results[1], results[0]):
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    for pe, pg in zip(eager.parameters(), module.parameters()):  # accumulated over the three steps
        np.testing.assert_allclose(host(pg.grad), host(pe.grad), rtol=1e-5, atol=1e-5)
    module.eval()  # not the captured mode: runs eagerly
    np.testing.assert_allclose(host(module(cuda(np.ones((8, 16), np.float32)))),
                               host(eager(cuda(np.ones((8, 16), np.float32)))), rtol=1e-5, atol=1e-6)


def test_reduce_overhead_compiles_to_a_cuda_graph():
    import warnings

    def f(x, y):
        return (x @ y).relu() + 1

    compiled = jitorch.compile(f, mode="reduce-overhead")
    rng = np.random.default_rng(4)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(4):
            x, y = (cuda(rng.standard_normal((32, 32), np.float32)) for _ in range(2))
            out = compiled(x, y)
            np.testing.assert_allclose(host(out), host(f(x, y)), rtol=1e-5, atol=1e-5)
    assert not [w for w in caught if "reduce-overhead" in str(w.message)]
    assert isinstance(compiled.graph, jitorch.cuda.CUDAGraph) and compiled.fallback_reason is None
