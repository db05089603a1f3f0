"""jitorch.overrides against torch.overrides: the same questions about the same kinds of values get torch's answers;
jitorch's own override protocol (fx Proxies) is reported and dispatched truthfully."""
import pytest
import torch
import torch.overrides as to

import jitorch
import jitorch.overrides as jo
from jitorch import fx, nn


def make_types(lib):
    class Wrapper:
        def __init__(self, value):
            self.value = value

        @classmethod
        def __torch_function__(cls, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            if func.__name__ == "declined":
                return NotImplemented
            return (func.__name__, tuple(t.__name__ for t in types), len(args), sorted(kwargs))

    class SubWrapper(Wrapper):
        @classmethod
        def __torch_function__(cls, func, types, args=(), kwargs=None):
            return ("sub", func.__name__)

    return Wrapper, SubWrapper


@pytest.mark.parametrize("lib,ov", [(jitorch, jo), (torch, to)], ids=["jitorch", "torch"])
def test_answers_match_torchs(lib, ov):
    Wrapper, SubWrapper = make_types(lib)
    t, p = lib.ones(2), lib.nn.Parameter(lib.ones(2))
    assert not ov.has_torch_function((t, p, 3, [Wrapper(1)]))  # plain tensors; lists are not searched
    assert not ov.has_torch_function_unary(t) and not ov.has_torch_function_variadic(t, p, None)
    assert ov.has_torch_function((t, Wrapper(1))) and ov.has_torch_function_unary(SubWrapper(1))
    assert ov.has_torch_function_variadic(1, Wrapper(2))
    assert [ov.is_tensor_like(v) for v in (t, p, Wrapper(1), 3, [t], None)] == [True, True, True, False, False, False]

    def op(x, y=None, scale=1):
        if ov.has_torch_function_variadic(x, y):
            return ov.handle_torch_function(op, (x, y), x, y, scale=scale)
        return "plain"

    def declined(x):
        return ov.handle_torch_function(declined, (x,), x)

    assert op(1, 2) == "plain"
    assert op(t, Wrapper(1), scale=3) == ("op", ("Tensor", "Wrapper"), 2, ["scale"])  # Tensor declines first
    assert op(Wrapper(1), SubWrapper(2)) == ("sub", "op")  # the subclass is asked first
    with pytest.raises(TypeError, match=r"no implementation found for '.*declined' on types that implement "
                                        r"__torch_function__: \[<class '.*Wrapper'>\]"):
        declined(Wrapper(1))
    # a Parameter takes no part (torch's Parameter disables __torch_function__): alone, nothing implements the call
    assert op(p, Wrapper(1)) == ("op", ("Wrapper",), 2, ["scale"])
    assert ov.handle_torch_function(lambda x, y: "ran", (t, p), t, p) == "ran"
    with pytest.raises(TypeError, match=r"no implementation found for '.*<lambda>' on types that implement "
                                        r"__torch_function__: \[\]"):
        ov.handle_torch_function(lambda x: "ran", (p,), p)
    uninitialized = lib.nn.parameter.UninitializedParameter()
    assert len(ov._get_overloaded_args([p, uninitialized])) == 1  # its own protocol takes part, as torch's


def test_function_lists_name_jitorchs_own_functions():
    ignored, overridable = jo.get_ignored_functions(), jo.get_overridable_functions()
    t_ignored, t_overridable = to.get_ignored_functions(), to.get_overridable_functions()
    for name in ("is_tensor", "typename", "is_storage"):  # ignored by both
        assert getattr(jitorch, name) in ignored and getattr(torch, name) in t_ignored
    for module, t_module, name in ((jitorch, torch, "add"), (jitorch, torch, "cat"),
                                   (jitorch.nn.functional, torch.nn.functional, "relu"),
                                   (jitorch.linalg, torch.linalg, "norm")):
        assert getattr(module, name) in overridable[module] and getattr(t_module, name) in t_overridable[t_module]
        assert getattr(module, name) not in ignored
    assert jitorch.Tensor.add in overridable[jitorch.Tensor] and torch.Tensor.add in t_overridable[torch.Tensor]
    assert jo.is_tensor_method_or_property(jitorch.Tensor.add) and not jo.is_tensor_method_or_property(jitorch.add)
    assert jo.get_testing_overrides()[jitorch.add](jitorch.ones(1), 1) == -1


def test_fx_proxies_are_reported_and_dispatched():
    def op(x):
        if jo.has_torch_function_unary(x):
            return jo.handle_torch_function(op, (x,), x)
        return x * 2

    class M(nn.Module):
        def forward(self, x):
            assert jo.has_torch_function((x,)) and jo.is_tensor_like(x)
            return op(x) + 1

    gm = fx.symbolic_trace(M())
    assert [n.target for n in gm.graph.nodes if n.op == "call_function"][0] is op  # recorded as one call
    assert not jo.has_torch_function((jitorch.ones(1),))
    assert op(jitorch.ones(2)).tolist() == [2.0, 2.0]


def test_wrap_torch_function_hands_over():
    Wrapper, _ = make_types(jitorch)
    Wrapper_t, _ = make_types(torch)

    @jo.wrap_torch_function(lambda x, y=None: (x,))
    def f(x, y=None):
        return "plain"

    @to.wrap_torch_function(lambda x, y=None: (x,))
    def g(x, y=None):
        return "plain"

    assert f(1) == g(1) == "plain"
    assert f(Wrapper(1), y=2) == ("f", ("Wrapper",), 1, ["y"]) and g(Wrapper_t(1), y=2) == ("g", ("Wrapper",), 1,
                                                                                               ["y"])
