"""Debugging and analysis tooling as research repos write it, run with ``lib=torch`` and ``lib=jitorch`` from the same
weights and NumPy data.

Forward hooks collecting activations (``with_kwargs=True``, ``always_call``), forward pre-hooks rewriting inputs and
keyword arguments, full backward (pre-)hooks collecting and scaling gradients, tensor hooks, global module hooks,
``detect_anomaly`` catching a NaN, ``saved_tensors_hooks`` offloading activations to NumPy,
``register_multi_grad_hook``, activation statistics over ``named_modules``, parameter counts, ``FlopCounterMode`` on a
small CNN and a transformer (totals against torch's counter) and ``torch.profiler`` with ``record_function`` labels.
"""
from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
import torch.utils.flop_counter

import jitorch
import jitorch.utils.flop_counter
from sweep_helpers import assert_runs_match, copy_weights, load_numpy_state, numpy_state, to_numpy

_rng = np.random.default_rng(0)
X = _rng.standard_normal((4, 6)).astype(np.float32)
G = _rng.standard_normal((4, 3)).astype(np.float32)


def _net(lib):
    lib.manual_seed(0)
    nn = lib.nn

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc, self.norm, self.act = nn.Linear(6, 8), nn.LayerNorm(8), nn.GELU()

        def forward(self, x, scale=1.0):
            return self.act(self.norm(self.fc(x))) * scale

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.block, self.head = Block(), nn.Linear(8, 3)

        def forward(self, x):
            return self.head(self.block(x, scale=2.0))

    return Net()


def _hooked_run(lib, state):
    model = load_numpy_state(lib, _net(lib), state)
    acts, kwargs_seen, grads, order, handles = {}, [], {}, [], []

    def keep(name):
        def hook(mod, args, kwargs, out):
            acts[name] = out.detach().clone()
            kwargs_seen.append((name, sorted(kwargs), [tuple(a.shape) for a in args]))
            order.append("fwd " + name)
        return hook

    def rescale(mod, args, kwargs):  # halves the input and raises the keyword scale
        return (args[0] * 0.5,), {**kwargs, "scale": kwargs["scale"] + 1.0}

    def grad_norms(name):
        def hook(mod, grad_in, grad_out):
            grads[name] = [[lib.tensor(-1.0) if g is None else g.norm() for g in grad_in], [g.norm() for g in grad_out]]
            order.append("bwd " + name)
        return hook

    for name, m in model.named_modules():
        if name:
            handles.append(m.register_forward_hook(keep(name), with_kwargs=True, always_call=True))
    handles.append(model.block.register_forward_pre_hook(rescale, with_kwargs=True))
    handles.append(model.head.register_forward_pre_hook(lambda mod, args: args[0] + 1.0))
    for name in ("block", "block.fc", "block.norm", "block.act", "head"):
        handles.append(model.get_submodule(name).register_full_backward_hook(grad_norms(name)))
    handles.append(model.head.register_full_backward_pre_hook(lambda mod, grad_out: (grad_out[0] * 3.0,)))
    x = lib.tensor(X, requires_grad=True)
    x_grads = []
    x.register_hook(lambda g: x_grads.append(g.clone()) or g * 2.0)
    model.head.weight.register_hook(lambda g: g.clamp(-0.1, 0.1))
    out = model(x)
    out.backward(lib.tensor(G))
    params = {n: p.grad for n, p in model.named_parameters()}
    for h in handles:
        h.remove()
    plain = model(lib.tensor(X))  # the hooks are gone
    return [to_numpy([out, plain, x.grad, params, acts, x_grads, grads]), kwargs_seen, order]


def test_module_and_tensor_hooks_collect_and_rewrite_as_torch():
    state = numpy_state(_net(torch))
    th, jt = _hooked_run(torch, state), _hooked_run(jitorch, state)
    assert_runs_match(th[0], jt[0], rtol=1e-5, atol=1e-6)
    assert th[1:] == jt[1:]


def test_always_call_forward_hook_runs_when_forward_raises():
    for lib in (torch, jitorch):
        seen = []

        class Boom(lib.nn.Module):
            def forward(self, x):
                raise ValueError("boom")

        m = Boom()
        m.register_forward_hook(lambda *a: seen.append("always"), always_call=True)
        m.register_forward_hook(lambda *a: seen.append("normal"))
        with pytest.raises(ValueError, match="boom"):
            m(lib.ones(1))
        assert seen == ["always"]


def test_global_module_hooks_see_every_module_in_torchs_order():
    def run(lib):
        nn, mm = lib.nn, lib.nn.modules.module
        lib.manual_seed(0)
        model = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))
        seen = []
        handles = [mm.register_module_forward_pre_hook(lambda m, i: seen.append(("pre", type(m).__name__))),
                   mm.register_module_forward_hook(lambda m, i, o: seen.append(("fwd", type(m).__name__))),
                   mm.register_module_full_backward_pre_hook(lambda m, go: seen.append(("bpre", type(m).__name__))),
                   mm.register_module_full_backward_hook(lambda m, gi, go: seen.append(("bwd", type(m).__name__)))]
        model(lib.ones(2, 3, requires_grad=True)).sum().backward()
        for h in handles:
            h.remove()
        model(lib.ones(2, 3))
        return seen

    assert run(torch) == run(jitorch)


def test_detect_anomaly_names_the_backward_that_made_a_nan():
    errors = []
    for lib in (torch, jitorch):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            x = lib.tensor([1.0, 0.0], requires_grad=True)
            with pytest.raises(RuntimeError) as caught, lib.autograd.detect_anomaly():
                (x.sqrt() * 0.0).sum().backward()
            errors.append(str(caught.value))
            assert not lib.is_anomaly_enabled()
            y = lib.tensor([0.0, 1.0], requires_grad=True)
            with lib.autograd.detect_anomaly(check_nan=False):
                (y / y).sum().backward()  # not checked: the NaN reaches .grad
            assert bool(lib.isnan(y.grad).any())
    assert errors[0] == errors[1] == "Function 'SqrtBackward0' returned nan values in its 0th output."


def _offloaded(lib):
    packed = []

    def pack(t):  # activation offloading: keep a host copy, drop the tensor
        packed.append(tuple(t.shape))
        return t.detach().numpy().copy()

    w = lib.tensor(np.arange(12, dtype=np.float32).reshape(3, 4) / 10, requires_grad=True)
    x = lib.tensor(np.arange(6, dtype=np.float32).reshape(2, 3) / 7, requires_grad=True)
    with lib.autograd.graph.saved_tensors_hooks(pack, lambda a: lib.from_numpy(a)):
        y = (lib.tanh(x @ w) * x.sum()).sigmoid().sum()
    y.backward()
    grads = [w.grad.clone(), x.grad.clone()]
    w.grad = x.grad = None
    with lib.autograd.graph.save_on_cpu():
        (lib.tanh(x @ w) * x.sum()).sigmoid().sum().backward()
    return sorted(packed), to_numpy(grads + [w.grad, x.grad])


def test_saved_tensor_hooks_offload_activations_as_torch():
    th, jt = _offloaded(torch), _offloaded(jitorch)
    assert th[0] == jt[0]
    assert_runs_match(th[1], jt[1], rtol=1e-6, atol=1e-7)


def test_multi_grad_hook_sees_a_parameter_groups_gradients_once_per_backward():
    def run(lib):
        model = load_numpy_state(lib, _net(lib), numpy_state(_net(torch)))
        calls = []
        groups = {"block": list(model.block.parameters()), "head": list(model.head.parameters())}
        for name, params in groups.items():
            lib.autograd.graph.register_multi_grad_hook(
                params, lambda grads, name=name: calls.append((name, [g.norm() for g in grads])))
        model(lib.tensor(X)).backward(lib.tensor(G))
        model.head(lib.tensor(X[:, :3]).repeat(1, 3)[:, :8]).sum().backward()  # reaches the head only
        return [c[0] for c in calls], to_numpy([c[1] for c in calls])

    th, jt = run(torch), run(jitorch)
    assert sorted(th[0]) == sorted(jt[0]) == ["block", "head", "head"]
    by_name = [dict(zip(names, norms)) for names, norms in (th, jt)]
    assert_runs_match(by_name[0], by_name[1], rtol=1e-5, atol=1e-6)


def test_activation_statistics_and_parameter_counts():
    def run(lib):
        model = load_numpy_state(lib, _net(lib), numpy_state(_net(torch)))
        stats = {}

        def record(name):
            def hook(mod, args, out):
                stats[name] = [out.mean(), out.std(), (out <= 0).float().mean(), out.abs().max()]
            return hook

        for name, m in model.named_modules():
            if len(list(m.children())) == 0:  # leaves only
                m.register_forward_hook(record(name))
        with lib.no_grad():
            model(lib.tensor(X))
        counts = {"total": sum(p.numel() for p in model.parameters()),
                  "trainable": sum(p.numel() for p in model.parameters() if p.requires_grad),
                  "per_module": {n: sum(p.numel() for p in m.parameters(recurse=False))
                                 for n, m in model.named_modules()},
                  "buffers": sum(b.numel() for b in model.buffers())}
        model.block.fc.requires_grad_(False)
        counts["after_freeze"] = sum(p.numel() for p in model.parameters() if p.requires_grad)
        return to_numpy(stats), counts

    th, jt = run(torch), run(jitorch)
    assert_runs_match(th[0], jt[0], rtol=1e-5, atol=1e-6)
    assert th[1] == jt[1]


def _cnn(lib):
    nn = lib.nn
    # Down-sampled by max pooling and strided, grouped and transposed convolutions. (No average pooling: jitorch's
    # average pools run convolutions or matmuls inside, which its counter counts and torch's does not.)
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(8, 16, 3, stride=2, groups=2), nn.ReLU(), nn.ConvTranspose2d(16, 8, 3, stride=2),
                         nn.Flatten(2), nn.Linear(49, 10))


def _transformer(lib):
    nn = lib.nn
    return nn.TransformerEncoder(nn.TransformerEncoderLayer(16, 4, 32, dropout=0.0, batch_first=True), 2,
                                 enable_nested_tensor=False)


def _flops(lib, model, x):
    FlopCounterMode = lib.utils.flop_counter.FlopCounterMode
    with FlopCounterMode(display=False) as forward:
        model(x)
    with FlopCounterMode(display=False, depth=3) as training:
        model(x).sum().backward()
    by_module = {k: sum(v.values()) for k, v in training.get_flop_counts().items()}
    ops = {str(k): v for k, v in training.get_flop_counts()["Global"].items()}
    return forward.get_total_flops(), training.get_total_flops(), by_module, ops


@pytest.mark.parametrize("build,shape", [(_cnn, (2, 3, 16, 16)), (_transformer, (2, 5, 16))],
                         ids=["cnn", "transformer"])
def test_flop_counter_totals_match_torchs(build, shape):
    torch.manual_seed(0)
    ref = build(torch)
    mine = build(jitorch)
    copy_weights(ref, mine)
    x = _rng.standard_normal(shape).astype(np.float32)
    th = _flops(torch, ref, torch.tensor(x, requires_grad=True))
    jt = _flops(jitorch, mine, jitorch.tensor(x, requires_grad=True))
    assert th[:3] == jt[:3] and th[1] > th[0] > 0
    if build is _cnn:  # the transformer's projections are addmm or mm by their inputs' layouts, which differ
        assert th[3] == jt[3]


def test_profiler_reports_record_function_labels():
    P = jitorch.profiler
    model = jitorch.nn.Sequential(jitorch.nn.Linear(8, 16), jitorch.nn.ReLU(), jitorch.nn.Linear(16, 2))
    x = jitorch.ones(4, 8)

    @P.record_function("decorated")
    def double(t):
        return t * 2

    with P.profile(activities=[P.ProfilerActivity.CPU], record_shapes=True) as prof:
        with P.record_function("forward_pass"):
            y = model(x)
        with P.record_function("backward_pass"):
            y.sum().backward()
        double(x)
    averages = {e.key: e for e in prof.key_averages()}
    assert {"forward_pass", "backward_pass", "decorated"} <= set(averages)
    assert all(averages[k].count == 1 for k in ("forward_pass", "backward_pass", "decorated"))
    assert any(k.startswith("aten::linear") for k in averages)
    forward = next(e for e in prof.events() if e.name == "forward_pass")
    assert forward.cpu_time_total >= 0
    table = prof.key_averages().table(sort_by="cpu_time_total", row_limit=5)
    assert "Name" in table.splitlines()[1] and "# of Calls" in table
    ready = []
    schedule = P.schedule(wait=1, warmup=1, active=2, repeat=1)
    with P.profile(schedule=schedule, on_trace_ready=lambda p: ready.append(p.key_averages())) as stepped:
        for i in range(5):
            with P.record_function(f"step{i}"):
                model(x).sum()
            stepped.step()
    assert len(ready) == 1 and {"step2", "step3"} <= {e.key for e in ready[0]}
    assert not {"step0", "step1", "step4"} & {e.key for e in ready[0]}
