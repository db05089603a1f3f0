"""nn.Module hooks against torch 2.13: forward (pre-)hooks with kwargs, ``always_call`` and ``prepend``; full
backward (pre-)hooks on modules with several inputs and outputs, their return-value checks and the in-place errors;
global hooks (forward, backward, legacy backward, registration); ``RemovableHandle``.

Each case is user code written once against ``lib``; ``same_behaviour`` compares what it returns, raises and warns.
"""
from __future__ import annotations

import copy
import pickle

import pytest
import torch
from module_api_compare import fixed_linear as _linear, same_behaviour

import jitorch


def _lists(grads):
    return [None if g is None else g.tolist() for g in grads]


def forward_pre_hooks_with_kwargs(lib):
    class Scaled(lib.nn.Module):
        def forward(self, x, scale=1.0):
            return x * scale

    m = Scaled()
    m.register_forward_pre_hook(lambda mod, args, kwargs: (args, {**kwargs, "scale": 3.0}), with_kwargs=True)
    bad = Scaled()
    bad.register_forward_pre_hook(lambda mod, args, kwargs: 5, with_kwargs=True)
    wraps = lib.nn.Identity()
    wraps.register_forward_pre_hook(lambda mod, args: [lib.ones(2)])  # a non-tuple is wrapped: forward gets a list
    out = [m(lib.ones(1), scale=2.0).item(), repr(wraps(lib.ones(1)))]
    try:
        bad(lib.ones(1))
    except RuntimeError as e:
        out.append(str(e))
    return out


def forward_hooks_order_kwargs_and_always_call(lib):
    log = []

    class Scaled(lib.nn.Module):
        def forward(self, x, scale=1.0):
            if scale < 0:
                raise RuntimeError("negative scale")
            return x * scale

    m = Scaled()
    m.register_forward_hook(lambda mod, a, k, o: log.append(("kwargs", dict(k))), with_kwargs=True, always_call=True)
    m.register_forward_hook(lambda mod, a, o: log.append(("always", len(a))), always_call=True)
    m.register_forward_hook(lambda mod, a, o: log.append("prepended"), prepend=True)
    m.register_forward_hook(lambda mod, a, o: o * 10)
    m.register_forward_hook(lambda mod, a, o: o + 1)
    m.register_forward_pre_hook(lambda mod, a: log.append("pre1"))
    m.register_forward_pre_hook(lambda mod, a: log.append("pre0"), prepend=True)
    log.append(m(lib.ones(1), scale=2.0).tolist())
    try:
        m(lib.ones(1), scale=-1.0)
    except RuntimeError as e:
        log.append(str(e))
    return log


def always_call_hook_that_raises_is_silenced(lib):
    class Boom(lib.nn.Module):
        def forward(self, x):
            raise RuntimeError("forward failed")

    def bad(mod, a, o):
        raise ValueError("hook failed")

    m = Boom()
    m.register_forward_hook(bad, always_call=True)
    m(lib.ones(1))


def global_and_module_forward_hooks(lib):
    mm, log = lib.nn.modules.module, []

    class Boom(lib.nn.Module):
        def forward(self, x):
            raise RuntimeError("x")

    m = lib.nn.Identity()
    m.register_forward_pre_hook(lambda *a: log.append("local pre"))
    m.register_forward_hook(lambda *a: log.append("local"))
    handles = [mm.register_module_forward_pre_hook(lambda mod, i: log.append("global pre") or (i[0] * 2,)),
               mm.register_module_forward_hook(lambda mod, i, o: o + 1),
               mm.register_module_forward_hook(lambda mod, i, k, o: log.append(("kwargs", dict(k))), with_kwargs=True),
               mm.register_module_forward_hook(lambda mod, i, o: log.append("global always"), always_call=True)]
    try:
        log.append(m(lib.ones(1)).tolist())
        try:
            Boom()(lib.ones(1))
        except RuntimeError:
            log.append("raised")
    finally:
        for h in handles:
            h.remove()
    log.append(m(lib.ones(1)).tolist())
    return log


def handles(lib):
    log = []
    m = lib.nn.ReLU()
    with m.register_forward_hook(lambda *a: log.append("in context")) as h:
        m(lib.ones(1))
    m(lib.ones(1))
    h.remove()  # removing twice is harmless
    k = m.register_forward_hook(lambda *a: None, with_kwargs=True, always_call=True)
    p = m.register_forward_pre_hook(lambda *a: None, with_kwargs=True)
    k.remove()
    p.remove()
    first = []
    first.append(m.register_forward_hook(lambda mod, i, o: log.append("removes itself") or first[0].remove()))
    m.register_forward_hook(lambda *a: log.append("stays"))
    m(lib.ones(1))
    m(lib.ones(1))
    return (log, type(h).__name__, type(h).__module__, p.id - k.id, len(m._forward_hooks_with_kwargs),
            len(m._forward_hooks_always_called), len(m._forward_pre_hooks_with_kwargs), len(m._forward_hooks))


def hooks_survive_copies(lib):
    log = []
    m = lib.nn.Linear(1, 1)
    h = m.register_forward_hook(print)
    m.register_forward_pre_hook(lambda *a: log.append("copied"))
    m2, h2 = pickle.loads(pickle.dumps((lib.nn.Linear(1, 1), h)))
    clone = copy.deepcopy(lib.nn.Sequential())
    clone.register_forward_pre_hook(lambda *a: log.append("clone"))
    copy.deepcopy(clone)(lib.ones(1))
    return log, len(copy.deepcopy(m)._forward_hooks), type(h2).__name__


def backward_hooks_several_inputs_and_outputs(lib):
    log = []

    class Two(lib.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = _linear(lib, 2, 2)

        def forward(self, a, b, c):
            return self.fc(a) * b, (a + b).relu_(), c

    m = Two()
    m.register_full_backward_hook(lambda mod, gi, go: log.append(("hook", _lists(gi), _lists(go))))
    m.register_full_backward_hook(lambda mod, gi, go: log.append("prepended"), prepend=True)
    m.register_full_backward_pre_hook(lambda mod, go: log.append(("pre", _lists(go))))
    m.register_full_backward_pre_hook(lambda mod, go: log.append("pre prepended"), prepend=True)
    a = lib.tensor([[1., -2.]], requires_grad=True)
    b = lib.tensor([[3., 4.]], requires_grad=True)
    x, y, z = m(a, b, lib.tensor([5.]))
    (x * lib.tensor([[1., 10.]]) + y * 2).sum().backward()
    only_first = Two()
    only_first.register_full_backward_hook(lambda mod, gi, go: log.append(("one output used", _lists(gi), _lists(go))))
    only_first(a, lib.tensor([[3., 4.]]), lib.tensor([5.]))[0].sum().backward()
    return log, a.grad.tolist(), b.grad.tolist(), m.fc.weight.grad.tolist()


def backward_hook_return_values(lib):
    out = []
    for hook in (lambda mod, gi, go: [g * 2 for g in gi], lambda mod, gi, go: (gi[0], gi[0]),
                 lambda mod, gi, go: (gi[0][:, :1],)):
        m = _linear(lib, 2, 2)
        m.register_full_backward_hook(hook)
        x = lib.ones(1, 2, requires_grad=True)
        try:
            m(x).sum().backward()
            out.append(x.grad.tolist())
        except RuntimeError as e:
            out.append(str(e))
    for pre_hook in (lambda mod, go: (go[0] * 0,), lambda mod, go: (go[0], go[0])):
        m = _linear(lib, 2, 2)
        m.register_full_backward_pre_hook(pre_hook)
        x = lib.ones(1, 2, requires_grad=True)
        try:
            m(x).sum().backward()
            out.append(x.grad.tolist())
        except RuntimeError as e:
            out.append(str(e))
    return out


def backward_hooks_and_in_place_ops(lib):
    def attempt(forward, after=None):
        class M(lib.nn.Module):
            pass

        M.forward = forward
        m = M()
        m.register_full_backward_hook(lambda *a: None)
        x = lib.ones(2, requires_grad=True) * 1
        try:
            y = m(x)
            if after is not None:
                after(y)
            return "ok"
        except RuntimeError as e:
            return str(e)

    seq = lib.nn.Sequential(_linear(lib, 2, 2), lib.nn.ReLU(inplace=True))
    seq.register_full_backward_hook(lambda *a: None)  # the in-place op inside the hooked module is fine
    x = lib.ones(1, 2, requires_grad=True)
    seq(x).sum().backward()
    return [attempt(lambda self, x: x.relu_()), attempt(lambda self, x: x.mul_(2)),
            attempt(lambda self, x: x[0:1], lambda y: y.mul_(2)), attempt(lambda self, x: x * 2, lambda y: y.add_(1)),
            x.grad.tolist()]


def backward_hook_edge_outputs(lib):
    log = []

    class Passthrough(lib.nn.Module):
        def forward(self, x):
            return x

    class WithInt(lib.nn.Module):
        def forward(self, x):
            return x * 2, 3

    class AsDict(lib.nn.Module):
        def forward(self, x):
            return {"a": x * 2}

    x = lib.ones(2, requires_grad=True)
    p = Passthrough()
    p.register_full_backward_hook(lambda mod, gi, go: log.append(("passthrough", _lists(gi), _lists(go))))
    (p(x) * 3).sum().backward()
    w = WithInt()
    w.register_full_backward_hook(lambda mod, gi, go: log.append(("with int", _lists(gi), _lists(go))))
    w(x)[0].sum().backward()
    d = AsDict()
    d.register_full_backward_hook(lambda mod, gi, go: log.append("dict"))
    d(x)["a"].sum().backward()  # warns: the hook cannot see a dict's tensors
    frozen = _linear(lib, 2, 2)
    frozen.register_full_backward_hook(lambda mod, gi, go: log.append(("no input grad", _lists(gi))))
    (frozen(lib.ones(1, 2)) * 3).sum().backward()  # warns: fires on the outputs' gradients
    return log, x.grad.tolist()


def global_backward_hooks(lib):
    mm, log = lib.nn.modules.module, []
    m = _linear(lib, 1, 1)
    m.register_full_backward_pre_hook(lambda *a: log.append("local pre"))
    m.register_full_backward_hook(lambda *a: log.append("local"))
    handles = [mm.register_module_full_backward_pre_hook(lambda *a: log.append("global pre")),
               mm.register_module_full_backward_hook(lambda mod, gi, go: log.append(("global", _lists(gi))))]
    try:
        m(lib.ones(1, 1, requires_grad=True)).sum().backward()
        mm.register_module_backward_hook(lambda *a: None)
    except RuntimeError as e:
        log.append(str(e))
    finally:
        for h in handles:
            h.remove()
    return log


def global_legacy_backward_hook(lib):
    mm, log = lib.nn.modules.module, []
    m = _linear(lib, 1, 1)
    h = mm.register_module_backward_hook(lambda mod, gi, go: log.append(("legacy", _lists(go))))
    try:
        m(lib.ones(1, 1, requires_grad=True)).sum().backward()
        lib.nn.Linear(1, 1)(lib.ones(1, 1, requires_grad=True)).sum().backward()  # the module is gone by then
    except RuntimeError as e:
        log.append(str(e))
    try:
        mm.register_module_full_backward_hook(lambda *a: None)
    except RuntimeError as e:
        log.append(str(e))
    finally:
        h.remove()
    return log


def registration_hooks(lib):
    mm, log = lib.nn.modules.module, []
    handles = [
        mm.register_module_buffer_registration_hook(lambda mod, name, t: log.append(("buffer", type(mod).__name__,
                                                                                     name, t is None))),
        mm.register_module_parameter_registration_hook(lambda mod, name, p: log.append(("param", type(mod).__name__,
                                                                                        name))),
        mm.register_module_module_registration_hook(lambda mod, name, s: log.append(("module", type(mod).__name__,
                                                                                     name)))]
    try:
        m = lib.nn.Sequential(lib.nn.Linear(2, 2), lib.nn.BatchNorm1d(2))
        m.extra = lib.nn.ReLU()
        m.p = lib.nn.Parameter(lib.zeros(1))
        m.register_buffer("q", None)
    finally:
        for h in handles:
            h.remove()
    m.z = lib.nn.ReLU()
    replacing = [mm.register_module_buffer_registration_hook(lambda mod, name, t: lib.ones(1)),
                 mm.register_module_parameter_registration_hook(lambda mod, name, p: lib.nn.Parameter(lib.ones(1))),
                 mm.register_module_module_registration_hook(lambda mod, name, s: lib.nn.Tanh())]
    try:
        r = lib.nn.Module()
        r.register_buffer("b", lib.zeros(3))
        r.p = lib.nn.Parameter(lib.zeros(2))
        r.c = lib.nn.ReLU()
    finally:
        for h in replacing:
            h.remove()
    return log, r.b.tolist(), r.p.tolist(), repr(r)


def legacy_and_full_hooks_do_not_mix(lib):
    out = []
    for first, second in (("register_full_backward_hook", "register_backward_hook"),
                          ("register_backward_hook", "register_full_backward_hook")):
        m = lib.nn.Linear(1, 1)
        getattr(m, first)(lambda *a: None)
        try:
            getattr(m, second)(lambda *a: None)
        except RuntimeError as e:
            out.append(str(e))
    return out


CASES = [forward_pre_hooks_with_kwargs, forward_hooks_order_kwargs_and_always_call,
         always_call_hook_that_raises_is_silenced, global_and_module_forward_hooks, handles, hooks_survive_copies,
         backward_hooks_several_inputs_and_outputs, backward_hook_return_values, backward_hooks_and_in_place_ops,
         backward_hook_edge_outputs, global_backward_hooks, global_legacy_backward_hook, registration_hooks,
         legacy_and_full_hooks_do_not_mix]


@pytest.fixture(autouse=True)
def fresh_global_backward_kind():
    """Whether global backward hooks are full is fixed, process-wide, by the first one: start each case unset."""
    from jitorch.nn.modules import _hooks

    saved = torch.nn.modules.module._global_is_full_backward_hook, _hooks._global_is_full_backward_hook
    torch.nn.modules.module._global_is_full_backward_hook = _hooks._global_is_full_backward_hook = None
    yield
    torch.nn.modules.module._global_is_full_backward_hook, _hooks._global_is_full_backward_hook = saved


@pytest.mark.parametrize("case", CASES, ids=lambda f: f.__name__)
def test_module_hooks_match_torch(case):
    same_behaviour(case)


def test_hook_cases_see_torchs_errors():
    """The comparison is not vacuous: torch raises or warns in these cases, so jitorch must too."""
    assert "hook 'hook' has changed the size of value" in same_behaviour(backward_hook_return_values)
    assert "as a global Module hook" in same_behaviour(global_legacy_backward_hook)
    assert "Output 0 of BackwardHookFunction is a view" in same_behaviour(backward_hooks_and_in_place_ops)
    assert jitorch.utils.hooks.RemovableHandle.__module__ == "jitorch.utils.hooks"
