"""The GPU suite (marker ``cuda``; skipped without a device): eager CUDA ops against the CPU, MLP training, the caching
allocator against ``cudaMemGetInfo``, streams and events, DLPack and ``__cuda_array_interface__`` with CuPy.

Run it with ``bash bench/gpu_check.sh`` on a machine with a GPU; every test compares against jitorch's own CPU results
(computed from the same NumPy data), so torch with CUDA is not needed there.
"""
import numpy as np
import pytest

import jitorch

pytestmark = pytest.mark.cuda

MiB = 1 << 20


def _cupy():
    import cupy

    return cupy


def _pair(rng, *shape, low=-2.0, high=2.0, dtype=np.float32):
    data = rng.uniform(low, high, shape).astype(dtype)
    return jitorch.from_numpy(data.copy()), jitorch.from_numpy(data.copy()).cuda()


# name -> (function of jitorch tensors, input shapes, input range); each runs on CPU and CUDA from the same data.
EAGER_TABLE = {
    "add": (lambda a, b: a + b, [(64, 33), (64, 33)], None),
    "sub_broadcast": (lambda a, b: a - b, [(8, 1, 5), (7, 1)], None),
    "mul_scalar": (lambda a: a * 2.5, [(1000,)], None),
    "div": (lambda a, b: a / b, [(31, 17), (31, 17)], (0.5, 2.0)),
    "pow": (lambda a: a.abs() ** 1.7, [(100,)], None),
    "exp_log": (lambda a: a.exp().log1p(), [(300,)], None),
    "tanh_sigmoid": (lambda a: a.tanh() + a.sigmoid(), [(300,)], None),
    "sqrt_rsqrt": (lambda a: a.sqrt() + a.rsqrt(), [(300,)], (0.1, 4.0)),
    "sin_cos": (lambda a: a.sin() * a.cos(), [(300,)], None),
    "erf": (lambda a: jitorch.erf(a), [(300,)], None),
    "relu_gelu": (lambda a: jitorch.nn.functional.relu(a) + jitorch.nn.functional.gelu(a), [(300,)], None),
    "clamp_where": (lambda a: jitorch.where(a > 0, a.clamp(max=1.0), -a), [(40, 40)], None),
    "compare": (lambda a, b: (a < b).float() + (a == a).float(), [(50,), (50,)], None),
    "sum_dim": (lambda a: a.sum(dim=1), [(37, 129)], None),
    "mean_keepdim": (lambda a: a.mean(dim=0, keepdim=True), [(37, 129)], None),
    "amax_argmax": (lambda a: a.amax(dim=-1) + a.argmax(dim=-1).float(), [(9, 50)], None),
    "var_std": (lambda a: a.var(dim=0) + a.std(), [(64, 10)], None),
    "cumsum": (lambda a: a.cumsum(dim=1), [(6, 100)], None),
    "logsumexp": (lambda a: a.logsumexp(dim=1), [(6, 100)], None),
    "softmax": (lambda a: jitorch.softmax(a, dim=-1), [(16, 77)], None),
    "log_softmax": (lambda a: jitorch.log_softmax(a, dim=0), [(16, 77)], None),
    "layer_norm": (lambda a: jitorch.nn.functional.layer_norm(a, (77,)), [(16, 77)], None),
    "matmul": (lambda a, b: a @ b, [(65, 130), (130, 33)], None),
    "bmm": (lambda a, b: jitorch.bmm(a, b), [(4, 16, 24), (4, 24, 8)], None),
    "linear": (lambda a, w: jitorch.nn.functional.linear(a, w), [(10, 20), (30, 20)], None),
    "transpose_contiguous": (lambda a: a.t().contiguous() + 1, [(13, 29)], None),
    "permute_reshape": (lambda a: a.permute(2, 0, 1).reshape(-1, 6), [(2, 3, 20)], None),
    "cat_stack": (lambda a, b: jitorch.cat([a, b], 0) + jitorch.stack([a, b]).sum(0).repeat(2, 1), [(4, 5), (4, 5)],
                  None),
    "index_select": (lambda a: a[jitorch.tensor([3, 0, 3], device=a.device)], [(5, 7)], None),
    "masked": (lambda a: a[a > 0.5].sum().reshape(1), [(100,)], None),
    "gather": (lambda a: a.gather(1, jitorch.tensor([[0, 2], [1, 1]], device=a.device)), [(2, 4)], None),
    "sort_topk": (lambda a: a.sort(dim=-1).values + a.topk(3).values.sum(), [(8, 20)], None),
    "conv2d": (lambda x, w: jitorch.nn.functional.conv2d(x, w, padding=1), [(2, 3, 12, 12), (4, 3, 3, 3)], None),
    "max_pool2d": (lambda x: jitorch.nn.functional.max_pool2d(x, 2), [(2, 3, 12, 12)], None),
    "cross_entropy": (lambda a: jitorch.nn.functional.cross_entropy(a, jitorch.tensor([1, 0, 3], device=a.device)),
                      [(3, 5)], None),
    # The native_batch_norm row (channel sums as products on CuPy).
    "batch_norm_train": (lambda a, w: jitorch.nn.functional.batch_norm(a, None, None, w, None, training=True),
                         [(8, 4, 5, 5), (4,)], None),
    "embedding": (lambda w: jitorch.nn.functional.embedding(jitorch.tensor([[1, 0, 3]], device=w.device), w),
                  [(5, 6)], None),
}


@pytest.mark.parametrize("name", sorted(EAGER_TABLE))
def test_eager_ops_on_cuda_match_cpu(name, rng):
    fn, shapes, bounds = EAGER_TABLE[name]
    low, high = bounds or (-2.0, 2.0)
    pairs = [_pair(rng, *shape, low=low, high=high) for shape in shapes]
    expected = fn(*[cpu for cpu, _ in pairs])
    got = fn(*[gpu for _, gpu in pairs])
    assert got.device.type == "cuda" and got.dtype == expected.dtype and got.shape == expected.shape
    np.testing.assert_allclose(got.cpu().numpy(), expected.numpy(), rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("name", ["mul", "tanh", "matmul", "softmax", "sum", "batch_norm"])
def test_backward_on_cuda_matches_cpu(name, rng):
    fns = {"mul": lambda a, b: a * b, "tanh": lambda a, b: a.tanh() * b, "matmul": lambda a, b: a @ b.t(),
           "softmax": lambda a, b: jitorch.softmax(a * b, dim=1), "sum": lambda a, b: (a + b).sum(1, keepdim=True),
           "batch_norm": lambda a, b: jitorch.nn.functional.batch_norm(a * b, None, None, training=True)}
    grads = []
    for device in ("cpu", "cuda"):
        data = np.random.default_rng(3)
        a = jitorch.from_numpy(data.standard_normal((6, 9), dtype=np.float32)).to(device).requires_grad_()
        b = jitorch.from_numpy(data.standard_normal((6, 9), dtype=np.float32)).to(device).requires_grad_()
        out = fns[name](a, b)
        upstream = jitorch.from_numpy(data.standard_normal(tuple(out.shape), dtype=np.float32)).to(device)
        out.backward(upstream)
        grads.append((a.grad.cpu().numpy(), b.grad.cpu().numpy()))
    for cpu, gpu in zip(*grads):
        np.testing.assert_allclose(gpu, cpu, rtol=1e-5, atol=1e-5)


def test_mlp_training_on_cuda_matches_cpu():
    data = np.random.default_rng(0)
    x = data.standard_normal((64, 20), dtype=np.float32)
    y = data.integers(0, 5, 64)
    jitorch.manual_seed(0)
    cpu_model = jitorch.nn.Sequential(jitorch.nn.Linear(20, 32), jitorch.nn.ReLU(), jitorch.nn.Linear(32, 5))
    gpu_model = jitorch.nn.Sequential(jitorch.nn.Linear(20, 32), jitorch.nn.ReLU(), jitorch.nn.Linear(32, 5))
    gpu_model.load_state_dict(cpu_model.state_dict())
    gpu_model.cuda()
    losses = {}
    for device, model in (("cpu", cpu_model), ("cuda", gpu_model)):
        opt = jitorch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        xs, ys = jitorch.from_numpy(x).to(device), jitorch.from_numpy(y).to(device)
        losses[device] = []
        for _ in range(10):
            opt.zero_grad()
            loss = jitorch.nn.functional.cross_entropy(model(xs), ys)
            loss.backward()
            opt.step()
            losses[device].append(loss.item())
    np.testing.assert_allclose(losses["cuda"], losses["cpu"], rtol=1e-4, atol=1e-5)
    for (name, p_cpu), (_, p_gpu) in zip(cpu_model.state_dict().items(), gpu_model.state_dict().items()):
        assert p_gpu.device.type == "cuda", name
        np.testing.assert_allclose(p_gpu.cpu().numpy(), p_cpu.numpy(), rtol=1e-4, atol=1e-5, err_msg=name)


# -- the caching allocator -------------------------------------------------------------------------------------------
def test_cupy_allocates_through_the_caching_allocator():
    cupy = _cupy()
    from jitorch.runtime.cuda_memory import installed_hook

    hook = installed_hook()
    assert hook is not None and cupy.cuda.get_allocator() == hook.malloc
    t = jitorch.empty(3 * MiB // 4, device="cuda")  # 3 MiB of float32
    block = hook.block_of(t._data)
    assert block is not None and block.allocated and block.size == 3 * MiB
    view = t[10:]
    assert hook.block_of(view._data) is block
    raw = cupy.ones(1000)  # CuPy's own allocations too
    assert hook.block_of(raw) is not None


def test_allocator_stats_agree_with_mem_get_info():
    jitorch.cuda.synchronize()
    jitorch.cuda.empty_cache()
    free0, total = jitorch.cuda.mem_get_info()
    reserved0, allocated0 = jitorch.cuda.memory_reserved(), jitorch.cuda.memory_allocated()
    t = jitorch.empty(64 * MiB // 4, device="cuda")
    free1, _ = jitorch.cuda.mem_get_info()
    assert jitorch.cuda.memory_allocated() - allocated0 == 64 * MiB
    reserved_delta = jitorch.cuda.memory_reserved() - reserved0
    assert reserved_delta == 64 * MiB  # a segment of its own, rounded to 2 MiB
    assert free0 - free1 == reserved_delta  # the driver saw exactly the new segment
    del t
    assert jitorch.cuda.memory_allocated() == allocated0 and jitorch.cuda.memory_reserved() - reserved0 == 64 * MiB
    jitorch.cuda.empty_cache()
    assert jitorch.cuda.memory_reserved() == reserved0 and jitorch.cuda.mem_get_info()[0] == free0
    stats = jitorch.cuda.memory_stats()
    assert stats["num_device_alloc"] >= 1 and stats["num_device_free"] >= 1
    assert "Allocated memory" in jitorch.cuda.memory_summary()


def test_peak_reset_snapshot_and_plot(tmp_path):
    jitorch.cuda.reset_peak_memory_stats()
    a = jitorch.empty(5 * MiB // 4, device="cuda")
    b = jitorch.empty(300_000, device="cuda")
    assert jitorch.cuda.max_memory_allocated() >= 5 * MiB + 1_200_000
    snapshot = jitorch.cuda.memory_snapshot()
    addresses = {blk["address"] for seg in snapshot for blk in seg["blocks"] if blk["state"] == "active_allocated"}
    assert a.data_ptr() in addresses and b.data_ptr() in addresses
    fig = jitorch.cuda.plot_snapshot(tmp_path / "gpu.png")
    assert (tmp_path / "gpu.png").stat().st_size > 1000 and len(fig.axes[0].patches) >= 2


def test_oom_is_torch_out_of_memory_error():
    total = jitorch.cuda.mem_get_info()[1]
    with pytest.raises(jitorch.cuda.OutOfMemoryError, match="CUDA out of memory"):
        jitorch.empty(2 * total // 4, device="cuda")
    assert jitorch.cuda.memory_stats()["num_ooms"] >= 1


# -- streams and events ----------------------------------------------------------------------------------------------
def test_streams_and_events():
    s = jitorch.cuda.Stream(priority=-1)
    assert s.priority == -1 and s != jitorch.cuda.default_stream()
    start, end = jitorch.cuda.Event(enable_timing=True), jitorch.cuda.Event(enable_timing=True)
    with jitorch.cuda.stream(s):
        assert jitorch.cuda.current_stream() == s
        start.record()
        x = jitorch.randn(512, 512, device="cuda")
        for _ in range(10):
            x = x @ x / 512
        end.record()
    assert jitorch.cuda.current_stream() != s
    end.synchronize()
    assert end.query()
    start.elapsed_time(end)  # answers (its value is a timing: benchmarks read it, tests do not)
    with pytest.raises(RuntimeError, match="enable_timing=True"):
        jitorch.cuda.Event().elapsed_time(end)  # torch's rule: both events must time
    other = jitorch.cuda.Stream()
    ev = s.record_event()
    other.wait_event(ev)
    other.synchronize()
    assert ev.query() and s.query()


def test_record_stream_delays_reuse():
    from jitorch.runtime.cuda_memory import installed_hook

    hook = installed_hook()
    side = jitorch.cuda.Stream()
    t = jitorch.empty(1 << 20, device="cuda")  # 4 MiB on the default stream
    block = hook.block_of(t._data)
    address = block.ptr
    side.wait_stream(jitorch.cuda.current_stream())
    with jitorch.cuda.stream(side):
        for _ in range(20):  # keep the side stream busy with a read of t
            _ = t * 2
    t.record_stream(side)
    del t, _
    assert jitorch.cuda.memory_stats()["active_bytes.all.current"] >= 4 * MiB  # pending on the side stream
    side.synchronize()
    u = jitorch.empty(1 << 20, device="cuda")
    assert u.data_ptr() == address


def test_no_hidden_synchronisation():
    """Queuing a long chain of ops returns before the device has run it: nothing in between waited."""
    x = jitorch.randn(4096, 4096, device="cuda")
    jitorch.cuda.synchronize()
    done = jitorch.cuda.Event()
    for _ in range(30):
        x = jitorch.tanh(x @ x) * 0.5 + x.sum(dim=0, keepdim=True) / 4096  # matmul, pointwise, reduction
    y = jitorch.softmax(x, dim=1)
    done.record()
    assert not done.query()  # still running: no op synchronised
    jitorch.cuda.synchronize()
    assert done.query() and np.isfinite(float(y.sum()))


# -- interop ---------------------------------------------------------------------------------------------------------
def test_dlpack_with_cupy_both_ways_shares_memory():
    cupy = _cupy()
    c = cupy.arange(10, dtype=cupy.float32)
    t = jitorch.from_dlpack(c)
    assert t.device.type == "cuda"
    t[0] = 42.0
    assert float(c[0]) == 42.0
    back = cupy.from_dlpack(t)
    back[1] = -1.0
    assert float(t[1]) == -1.0


def test_cuda_array_interface_shares_memory():
    cupy = _cupy()
    t = jitorch.zeros(6, device="cuda")
    iface = t.__cuda_array_interface__
    assert iface["shape"] == (6,) and iface["typestr"] == "<f4" and iface["data"][0] == t.data_ptr()
    view = cupy.asarray(t)
    view += 3
    assert t.sum().item() == 18.0
    with pytest.raises(RuntimeError, match="requires grad"):
        jitorch.zeros(2, device="cuda", requires_grad=True).__cuda_array_interface__


def test_manual_seed_reproduces_device_draws():
    jitorch.manual_seed(123)
    a = jitorch.randn(1000, device="cuda")
    jitorch.manual_seed(123)
    b = jitorch.randn(1000, device="cuda")
    assert a.device.type == "cuda" and bool((a == b).all())
    assert abs(float(a.mean())) < 0.2


def test_dropout_mask_row_draws_on_the_device_and_differs_per_call():
    x = jitorch.ones(64, 64, device="cuda")
    jitorch.cuda.manual_seed(0)
    a = jitorch.nn.functional.dropout(x, 0.5)
    b = jitorch.nn.functional.dropout(x, 0.5)
    jitorch.cuda.manual_seed(0)
    a2 = jitorch.nn.functional.dropout(x, 0.5)
    assert a.device.type == "cuda" and set(np.unique(a.cpu().numpy())) <= {0.0, 2.0}
    assert not np.array_equal(a.cpu().numpy(), b.cpu().numpy())
    np.testing.assert_array_equal(a.cpu().numpy(), a2.cpu().numpy())  # the device generator's seed reproduces it
