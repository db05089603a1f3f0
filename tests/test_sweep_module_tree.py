"""nn.Module's tree against torch 2.13: submodule/parameter/buffer lookup and replacement, iteration arguments,
registration and attribute rules (names, kinds taking over names, deletion), dtype casts of mixed modules,
``requires_grad_``/``zero_grad``, and the reprs of nested containers with repeated blocks.

Each case is user code written once against ``lib``; ``same_behaviour`` compares what it returns, raises and warns.
"""
from __future__ import annotations

from collections import OrderedDict

import pytest
from module_api_compare import same_behaviour


def _attempts(calls):
    """Each call's result (repr) or (exception type, message), in order."""
    out = []
    for call in calls:
        try:
            out.append(("ok", repr(call())))
        except Exception as e:  # noqa: BLE001 - the exception is what is compared
            out.append((type(e).__name__, str(e)))
    return out


def get_submodule_parameter_buffer(lib):
    m = lib.nn.Sequential(lib.nn.Linear(2, 2))
    m.x = 3
    m[0].register_buffer("b", lib.zeros(1))
    m[0].y = 3
    return [m.get_submodule("") is m, m.get_parameter("0.weight") is m[0].weight, m.get_buffer("0.b") is m[0].b] + \
        _attempts([lambda t=t: m.get_submodule(t) for t in ("1", "0.weight", "x", "0.zz")] +
                  [lambda t=t: m.get_parameter(t) for t in ("0.zz", "0.b", "0.y", "1.weight", "weight", "0")] +
                  [lambda t=t: m.get_buffer(t) for t in ("0.zz", "0.weight", "0.y", "1.b")])


def set_submodule_paths(lib):
    m = lib.nn.Sequential(lib.nn.Sequential(lib.nn.Linear(2, 2)))
    m.set_submodule("0.0", lib.nn.ReLU())
    calls = [lambda t=t, v=v: m.set_submodule(t, v) or repr(m)
             for t, v in (("0.1", lib.nn.ReLU()), ("0.0", 3), ("", lib.nn.ReLU()), ("1.0", lib.nn.ReLU()),
                          ("0.0.x", lib.nn.ReLU()))]
    strict = lib.nn.Sequential(lib.nn.Sequential(lib.nn.Linear(2, 2)))
    calls += [lambda t=t: strict.set_submodule(t, lib.nn.Tanh(), strict=True) or repr(strict) for t in ("0.1", "0.0")]
    return repr(m), _attempts(calls)


def iteration_arguments(lib):
    a = lib.nn.Linear(1, 1)
    m = lib.nn.Sequential(a, a, lib.nn.Sequential(a))
    memo = {a}
    return ([n for n, _ in m.named_modules(prefix="root")], [n for n, _ in m.named_modules(remove_duplicate=False)],
            [n for n, _ in m.named_modules(memo=memo, prefix="p")], len(memo),
            [n for n, _ in m.named_parameters(remove_duplicate=False)], [n for n, _ in m.named_parameters(prefix="q")],
            [n for n, _ in m.named_children()], len(list(m.parameters(recurse=False))),
            type(m.parameters()).__name__, type(m.named_parameters()).__name__)


def shared_tensors_across_modules(lib):
    shared = lib.nn.Parameter(lib.zeros(1))
    a, b = lib.nn.Module(), lib.nn.Module()
    a.p, b.q = shared, shared
    buf = lib.zeros(1)
    a.register_buffer("x", buf)
    a.register_buffer("y", buf)
    a.register_buffer("none", None)
    m = lib.nn.Sequential(a, b)
    return ([n for n, _ in m.named_parameters()], [n for n, _ in m.named_parameters(remove_duplicate=False)],
            [n for n, _ in m.named_buffers()], [n for n, _ in m.named_buffers(remove_duplicate=False)],
            list(m.state_dict()))


def register_module_and_none_children(lib):
    m = lib.nn.Module()
    m.register_module("a", lib.nn.ReLU())
    m.register_module("b", None)
    m.add_module("c", None)
    return repr(m), list(m._modules), [n for n, _ in m.named_children()], [n for n, _ in m.named_modules()]


def registration_name_errors(lib):
    m = lib.nn.Module()
    m.p = lib.nn.Parameter(lib.zeros(1))
    m.register_buffer("b", lib.zeros(1))
    m.c = lib.nn.ReLU()
    m.foo = 3
    calls = [lambda n=n: m.add_module(n, lib.nn.ReLU()) for n in ("a.b", "", "foo", 3, "training", "forward", "p")]
    calls += [lambda n=n, v=v: m.register_buffer(n, v) for n, v in (("p", lib.zeros(1)), (3, lib.zeros(1)),
              ("foo", lib.zeros(1)), ("", lib.zeros(1)), ("x.y", lib.zeros(1)), ("ok", 3), ("c", lib.zeros(1)))]
    calls += [lambda n=n, v=v: m.register_parameter(n, v) for n, v in (("b", lib.nn.Parameter(lib.zeros(1))),
              (3, None), ("foo", None), ("", None), ("x.y", None), ("ok", 3), ("c", None))]
    return _attempts(calls)


def registration_before_init(lib):
    calls = []
    for body in (lambda self: self.register_parameter("w", None), lambda self: self.register_buffer("w", None),
                 lambda self: setattr(self, "c", lib.nn.ReLU())):
        class Early(lib.nn.Module):
            def __init__(self, body=body):
                body(self)
        calls.append(Early)
    return _attempts(calls)


def kinds_taking_over_names(lib):
    m = lib.nn.Module()
    m.register_buffer("b", lib.zeros(1))
    m.b = lib.nn.Parameter(lib.ones(1))  # a parameter takes a buffer's name over
    m.c = lib.nn.ReLU()
    m.c = lib.nn.Parameter(lib.ones(1))
    m.register_buffer("e", lib.zeros(1))
    m.e = None  # a buffer may be set to None and stays registered
    m.register_buffer("pb", lib.nn.Parameter(lib.zeros(1)))
    m.add_module("c2", lib.nn.ReLU())
    m.add_module("c2", lib.nn.Tanh())  # re-adding replaces
    return (list(m._parameters), [(k, v is None) for k, v in m._buffers.items()], list(m._modules), type(m.pb).__name__,
            list(m.state_dict()), repr(m))


def refused_assignments(lib):
    def fresh():
        m = lib.nn.Module()
        m.p = lib.nn.Parameter(lib.ones(1))
        m.register_buffer("b", lib.zeros(1))
        m.c = lib.nn.ReLU()
        return m

    return _attempts([lambda: setattr(fresh(), "p", lib.nn.Buffer(lib.zeros(1))),
                      lambda: setattr(fresh(), "p", 3), lambda: setattr(fresh(), "b", 3),
                      lambda: setattr(fresh(), "c", 3), lambda: fresh().register_parameter("b", None),
                      lambda: setattr(fresh(), "c", lib.nn.Buffer(lib.ones(1))),
                      lambda: setattr(lib.nn.Linear(1, 1, bias=False), "bias", lib.ones(1))])


def deletion_and_dir(lib):
    m = lib.nn.Linear(2, 2)
    m.register_buffer("bb", lib.zeros(1))
    m.c = lib.nn.ReLU()
    d = dir(m)
    shown = [x for x in ("weight", "bias", "bb", "c", "forward", "in_features", "_parameters", "training") if x in d]
    del m.weight, m.bb, m.c
    deleted = [list(m._parameters), list(m._buffers), list(m._modules)]
    m.weight = lib.ones(1, 1)  # a plain tensor under a deleted parameter's name is a plain attribute
    return shown, d == sorted(d), deleted, "weight" in m._parameters, _attempts([lambda: delattr(m, "zz"),
                                                                                 lambda: m.nothing])


def dtype_casts_of_a_mixed_module(lib):
    m = lib.nn.Sequential(lib.nn.Linear(2, 2), lib.nn.Embedding(3, 2), lib.nn.BatchNorm1d(2))
    m.register_buffer("idx", lib.arange(3))
    m.register_buffer("flag", lib.zeros(2, dtype=lib.bool))
    m.c = lib.nn.Parameter(lib.zeros(2, dtype=lib.complex64))
    m[0](lib.ones(1, 2)).sum().backward()
    out = []
    for method in ("half", "bfloat16", "double", "float"):
        assert getattr(m, method)() is m
        out.append([(n, str(t.dtype)) for n, t in m.state_dict().items()] + [str(m[0].weight.grad.dtype)])
    return out


def requires_grad_and_zero_grad(lib):
    m = lib.nn.Sequential(lib.nn.Linear(2, 2), lib.nn.BatchNorm1d(2))
    res = [m.requires_grad_(False) is m, [p.requires_grad for p in m.parameters()], m[1].running_mean.requires_grad]
    m.requires_grad_()
    res.append([p.requires_grad for p in m.parameters()])
    x = lib.ones(2, 2, requires_grad=True)
    m[0].weight.grad = x * 3  # a gradient that has a graph: zeroing detaches it in place
    grad = m[0].weight.grad
    m.zero_grad(set_to_none=False)
    res.append((grad is m[0].weight.grad, grad.grad_fn is None, grad.requires_grad, grad.tolist()))
    m.zero_grad()
    res.append(m[0].weight.grad is None)
    return res


def reprs_with_repeated_blocks(lib):
    nn = lib.nn

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(2, 2)
            self.act = nn.GELU()

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = nn.ModuleList([nn.Sequential(nn.Linear(4, 4), nn.LayerNorm(4), nn.Dropout(0.1))
                                         for _ in range(6)])
            self.head = nn.Linear(4, 2)

    def block():
        return nn.Sequential(nn.Linear(2, 2), nn.ReLU())

    unnamed = nn.Module()
    unnamed.a, unnamed.b = nn.ReLU(), nn.ReLU()
    return [repr(nn.Sequential(*[block() for _ in range(3)], nn.Linear(2, 1))),
            repr(nn.ModuleList([nn.ReLU(), nn.ReLU(), nn.Tanh(), nn.Tanh(), nn.ReLU()])),
            repr(nn.ModuleList([nn.Linear(2, 2), nn.Linear(2, 2), nn.Linear(3, 2), nn.Linear(3, 2)])),
            repr(nn.ModuleDict({str(i): nn.ReLU() for i in range(3)})),
            repr(nn.Sequential(OrderedDict(a=nn.ReLU(), b=nn.ReLU()))), repr(unnamed),
            repr(nn.ModuleList([nn.ModuleList([nn.ReLU()] * 2)] * 2)), repr(nn.ModuleList([Block() for _ in range(3)])),
            repr(Net())]


def reprs_with_extra_repr_and_empty_children(lib):
    class WithChild(lib.nn.Module):
        def __init__(self):
            super().__init__()
            self.c = lib.nn.ReLU()
            self.seq, self.lst, self.dct = lib.nn.Sequential(), lib.nn.ModuleList(), lib.nn.ModuleDict()
            self.pl = lib.nn.ParameterList([lib.nn.Parameter(lib.zeros(2)), lib.zeros(3, dtype=lib.float64)])

        def extra_repr(self):
            return "a=1\nb=2"

    class Leaf(lib.nn.Module):
        def extra_repr(self):
            return "a=1\nb=2"

    hooked = lib.nn.Linear(1, 1)
    hooked.register_forward_hook(lambda *a: None)
    return repr(WithChild()), repr(Leaf()), repr(lib.nn.Module()), repr(hooked)


def containers_after_edits(lib):
    nn = lib.nn
    s = nn.Sequential(nn.ReLU(), nn.Tanh(), nn.Sigmoid())
    out = [repr(s[1:]), type(s[1:]).__name__]
    del s[0]
    s.append(nn.ReLU())
    s.insert(0, nn.GELU())
    s.extend([nn.ELU()])
    out += [repr(s), list(s._modules), repr(s.pop(1)), repr(s * 2)]
    lst = nn.ModuleList([nn.ReLU(), nn.Tanh(), nn.Sigmoid()])
    del lst[0:2]
    lst.insert(0, nn.GELU())
    lst += [nn.Tanh()]
    out += [repr(lst), list(lst._modules)]
    return out + _attempts([lambda: s[10], lambda: s.insert(20, nn.ReLU()), lambda: s * -1, lambda: s.append(3),
                            lambda: lst[10], lambda: lst.extend(3), lambda: lst.insert(-100, nn.ReLU()),
                            lambda: nn.ModuleDict({"a.b": nn.ReLU()}), lambda: nn.ModuleDict().update([("a",)])])


def call_without_forward_and_train_flag(lib):
    class NoForward(lib.nn.Module):
        pass

    m = lib.nn.Dropout()
    return _attempts([lambda: NoForward()(lib.ones(1)), lambda: lib.nn.Module().forward(1),
                      lambda: m.train(0), lambda: (m.train(False).training, m.train().training, m.eval() is m),
                      lambda: lib.nn.Parameter(lib.zeros(2, dtype=lib.int64)),
                      lambda: lib.nn.Parameter(lib.zeros(2, dtype=lib.int64), requires_grad=False)])


CASES = [get_submodule_parameter_buffer, set_submodule_paths, iteration_arguments, shared_tensors_across_modules,
         register_module_and_none_children, registration_name_errors, registration_before_init,
         kinds_taking_over_names, refused_assignments, deletion_and_dir, dtype_casts_of_a_mixed_module,
         requires_grad_and_zero_grad, reprs_with_repeated_blocks, reprs_with_extra_repr_and_empty_children,
         containers_after_edits, call_without_forward_and_train_flag]


@pytest.mark.parametrize("case", CASES, ids=lambda f: f.__name__)
def test_module_tree_api_matches_torch(case):
    same_behaviour(case)


def test_repeated_blocks_collapse_and_errors_name_the_problem():
    shown = same_behaviour(reprs_with_repeated_blocks)
    assert "(0-5): 6 x Sequential(" in shown and "(0-1): 2 x ReLU()" in shown
    shown = same_behaviour(registration_name_errors)
    assert "already exists" in shown and "got: a.b" in shown
    assert "Only Tensors of floating point" in same_behaviour(call_without_forward_and_train_flag)
