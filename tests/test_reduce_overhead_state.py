"""mode="reduce-overhead" follows eager jitorch when what the step reaches changes between calls: a global model's
train/eval mode and attributes, a layer unfrozen, an optimizer's state replaced, gradients zeroed (set to None)
outside the captured step (gradient accumulation), and arguments that share memory. Each case trains a compiled step
next to an eager copy and compares parameters, buffers and optimizer state after every call."""
import copy
import warnings

import numpy as np
import pytest
import torch

import jitorch

nn, F = jitorch.nn, jitorch.nn.functional


def _batches(count, seed=0):
    rng = np.random.default_rng(seed)
    return [(rng.standard_normal((16, 8)).astype(np.float32), rng.standard_normal((16, 4)).astype(np.float32))
            for _ in range(count)]


def _model():
    jitorch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16), nn.Tanh(), nn.Dropout(0.2), nn.Linear(16, 4))


def _state(model, opt):
    out = [t.detach().numpy().copy() for t in list(model.parameters()) + list(model.buffers())]
    for s in opt.state.values():
        out += [v.detach().numpy().copy() for v in s.values() if hasattr(v, "_data")]
    return out


def _between(case, step, model, opt):
    """What the user's loop does between calls ``step`` and ``step + 1``."""
    if case == "eval then train" and step in (1, 3):
        model.train(step == 3)
    elif case == "attribute" and step == 1:
        model[1].momentum = 0.5
        model[3].p = 0.5
    elif case == "unfreeze" and step in (0, 2):
        model[0].weight.requires_grad_(step == 2)
    elif case == "optimizer state replaced" and step == 2:
        for s in opt.state.values():
            s["momentum_buffer"] = jitorch.zeros_like(s["momentum_buffer"])
    elif case == "buffer replaced" and step == 2:
        model[1].running_mean = jitorch.zeros(16)


@pytest.mark.parametrize("case", ["eval then train", "attribute", "unfreeze", "optimizer state replaced",
                                  "buffer replaced"])
def test_a_captured_step_follows_changes_to_the_model_and_optimizer_it_reaches_by_name(case):
    runs = {}
    for mode in ("eager", "reduce-overhead"):
        model = _model()
        opt = jitorch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)

        def step(x, y):
            opt.zero_grad()
            loss = F.mse_loss(model(x), y)
            loss.backward()
            opt.step()
            return loss.detach()

        run = step if mode == "eager" else jitorch.compile(step, mode="reduce-overhead")
        states = []
        for i, (x, y) in enumerate(_batches(6)):
            jitorch.manual_seed(100 + i)  # the same dropout masks in both runs
            run(jitorch.tensor(x), jitorch.tensor(y))
            states.append(_state(model, opt))
            _between(case, i, model, opt)
        runs[mode] = states
        if mode != "eager":
            assert run.recaptures >= 1 and run.graph is not None
    for i, (want, got) in enumerate(zip(runs["eager"], runs["reduce-overhead"])):
        for a, b in zip(want, got):
            np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-6, err_msg=f"after call {i}")


@pytest.mark.parametrize("accumulate", [1, 2])
def test_gradients_zeroed_outside_the_captured_forward_and_backward_train_like_eager(accumulate):
    # The usual accumulation loop: forward and backward compiled, opt.step() and zero_grad() (set to None) outside.
    runs, initial = {}, nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 4))
    for mode in ("eager", "reduce-overhead"):
        model = copy.deepcopy(initial)
        opt = jitorch.optim.SGD(model.parameters(), lr=0.1)

        def forward_backward(x, y):
            loss = F.mse_loss(model(x), y) / accumulate
            loss.backward()
            return loss.detach()

        run = forward_backward if mode == "eager" else jitorch.compile(forward_backward, mode="reduce-overhead")
        states = []
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # alternating micro-batches capture again (and say so)
            for i, (x, y) in enumerate(_batches(8, seed=1)):
                run(jitorch.tensor(x), jitorch.tensor(y))
                states.append([p.grad.numpy().copy() for p in model.parameters()])
                if i % accumulate == accumulate - 1:
                    opt.step()
                    opt.zero_grad()
                states[-1] += [p.detach().numpy().copy() for p in model.parameters()]
        runs[mode] = states
        if mode != "eager":  # alternating micro-batches go to the default path after a few captures, not one a call
            assert run.recaptures <= 3 and (accumulate == 1) == (run.fallback_reason is None)
    for i, (want, got) in enumerate(zip(runs["eager"], runs["reduce-overhead"])):
        for a, b in zip(want, got):
            np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-6, err_msg=f"after call {i}")


def test_arguments_sharing_memory_run_eagerly_with_eager_results():
    def f(a, b):
        a.mul_(2)
        return a + b

    g = jitorch.compile(f, mode="reduce-overhead")
    with pytest.warns(UserWarning, match="share memory"):
        for _ in range(3):
            x, xe = jitorch.ones(4), jitorch.ones(4)
            got, want = g(x, x), f(xe, xe)
            assert got.tolist() == want.tolist() and x.tolist() == xe.tolist()
            buf, bufe = jitorch.zeros(6), jitorch.zeros(6)
            assert g(buf[:4], buf[2:]).tolist() == f(bufe[:4], bufe[2:]).tolist()


def test_an_optimizer_step_compiled_alone_reads_each_new_gradient_without_capturing_again():
    # torch's "compile the optimizer" pattern: backward eager (a new .grad each time), only opt.step() compiled.
    runs = {}
    for mode in ("eager", "reduce-overhead"):
        w = nn.Parameter(jitorch.tensor(np.random.default_rng(3).standard_normal((16, 8)).astype(np.float32)))
        opt = jitorch.optim.Adam([w], lr=0.01)
        step = (lambda: opt.step()) if mode == "eager" else jitorch.compile(lambda: opt.step(), mode="reduce-overhead")
        for x, _ in _batches(6, seed=4):
            opt.zero_grad()
            (jitorch.tensor(x) @ w.T).pow(2).sum().backward()
            step()
        runs[mode] = w.detach().numpy().copy()
        if mode != "eager":
            assert step.recaptures == 0 and step.graph is not None
    np.testing.assert_allclose(runs["reduce-overhead"], runs["eager"], rtol=1e-5, atol=1e-6)


def test_the_default_dtype_is_part_of_a_capture():
    f = jitorch.compile(lambda x: x + jitorch.arange(3.0) * 0.1, mode="reduce-overhead")
    try:
        for default in ("float32", "float32", "float64", "float64", "float32"):
            jitorch.set_default_dtype(getattr(jitorch, default))
            assert f(jitorch.ones(3)).dtype == (jitorch.ones(3) + jitorch.arange(3.0)).dtype
    finally:
        jitorch.set_default_dtype(jitorch.float32)


def test_output_of_other_threads_neither_demotes_a_capture_nor_blocks_a_nested_compiled_call():
    import io
    import threading

    sink, stop = io.StringIO(), threading.Event()

    def chatter():
        while not stop.is_set():
            print("tick", file=sink)

    inner = jitorch.compile(lambda a: a * 2 + 1)

    def outer(x):
        box = {}
        worker = threading.Thread(target=lambda: box.setdefault("v", inner(x)))
        worker.start()
        worker.join(timeout=20)
        return box["v"] + x  # (a KeyError if the worker's trace blocked behind this call's warm-up)

    background = threading.Thread(target=chatter)
    background.start()
    try:
        f = jitorch.compile(lambda x: x.exp() * 3, mode="reduce-overhead")
        for _ in range(4):
            f(jitorch.ones(3))
        assert f.fallback_reason is None and f.graph is not None
        g = jitorch.compile(outer, mode="reduce-overhead")
        assert g(jitorch.ones(3)).tolist() == [4.0, 4.0, 4.0]
    finally:
        stop.set()
        background.join()


@pytest.mark.parametrize("change", ["moduledict_del", "moduledict_clear_add", "sequential_insert", "modulelist_insert"])
def test_a_container_changed_in_place_is_captured_again(change):
    """Containers write their ``_modules`` directly (past add_module): the captured step's state check must see it."""
    def build(lib):
        lib.manual_seed(0)
        return {"md": lib.nn.ModuleDict({"a": lib.nn.Linear(4, 4), "b": lib.nn.Linear(4, 4)}),
                "seq": lib.nn.Sequential(lib.nn.Linear(4, 4)), "ml": lib.nn.ModuleList([lib.nn.Linear(4, 4)])}

    def step_of(parts, x):
        def step():
            y = x
            for k in parts["md"]:
                y = parts["md"][k](y)
            y = parts["seq"](y)
            for m in parts["ml"]:
                y = m(y)
            return y.sum()
        return step

    def mutate(lib, parts):
        if change == "moduledict_del":
            del parts["md"]["b"]
        elif change == "moduledict_clear_add":
            parts["md"].clear()
            parts["md"]["c"] = lib.nn.Tanh()
        elif change == "sequential_insert":
            parts["seq"].insert(0, lib.nn.ReLU())
        else:
            parts["ml"].insert(0, lib.nn.Sigmoid())

    x = np.random.default_rng(0).standard_normal((2, 4)).astype(np.float32)
    parts_j, parts_t = build(jitorch), build(torch)
    for pj, pt in zip(jitorch.nn.ModuleList(list(parts_j.values())).parameters(),
                      torch.nn.ModuleList(list(parts_t.values())).parameters()):
        pj.data.copy_(jitorch.tensor(pt.detach().numpy()))
    compiled = jitorch.compile(step_of(parts_j, jitorch.tensor(x)), mode="reduce-overhead")
    eager = step_of(parts_t, torch.tensor(x))
    with jitorch.no_grad(), torch.no_grad():
        for _ in range(3):
            compiled()
        mutate(jitorch, parts_j)
        mutate(torch, parts_t)
        for _ in range(2):
            np.testing.assert_allclose(compiled().item(), eager().item(), rtol=1e-5, atol=1e-6)


def test_requires_grad_calls_that_keep_the_flag_leave_the_module_walk_cached():
    """zero_grad(set_to_none=False) calls requires_grad_(False) on every gradient: only a change of a flag (a layer
    frozen) makes the next call walk the modules again."""
    from jitorch._tensor_autograd import REQUIRES_GRAD_VERSION

    model = _model()
    w = model[0].weight
    before = REQUIRES_GRAD_VERSION[0]
    w.requires_grad_(True)
    model[0].weight.grad = jitorch.zeros_like(w)
    w.grad.requires_grad_(False)
    assert REQUIRES_GRAD_VERSION[0] == before
    w.requires_grad_(False)
    assert REQUIRES_GRAD_VERSION[0] == before + 1 and not w.requires_grad
    w.requires_grad = True
    assert REQUIRES_GRAD_VERSION[0] == before + 2 and w.requires_grad


def test_a_module_swapped_into_a_named_list_is_the_one_whose_state_is_checked():
    """The reached-modules walk is cached while the named objects and their list entries are the same objects: a
    module put into the list, then given another plain attribute, is seen (the compiled step follows eager)."""
    jitorch.manual_seed(0)
    first, second = _model().eval(), _model().eval()
    with jitorch.no_grad():
        second[0].weight.mul_(2.0)
    models = [first]
    x = jitorch.tensor(_batches(1)[0][0])

    def forward():
        return models[0](x)

    step = jitorch.compile(forward, mode="reduce-overhead")
    with jitorch.no_grad():  # (inference: replayed; a training call would take the default compiled path)
        for _ in range(3):
            np.testing.assert_allclose(step().numpy(), forward().numpy(), rtol=1e-5, atol=1e-6)
        assert step.graph is not None
        models[0] = second
        for _ in range(2):
            np.testing.assert_allclose(step().numpy(), forward().numpy(), rtol=1e-5, atol=1e-6)
        second[1].eps = 0.5
        for _ in range(2):
            np.testing.assert_allclose(step().numpy(), forward().numpy(), rtol=1e-5, atol=1e-6)
        assert step.graph is not None
