"""nn.Module API details against PyTorch: reprs of constructed layers, ``Module.compile``, device moves without a
backend, and the warnings of ``state_dict`` and ``to``.

Each case builds the same thing in both libraries and compares what a user sees (repr strings, warnings, errors).
"""
from __future__ import annotations

import warnings

import pytest
import torch

import jitorch

# Constructor expressions evaluated against each library's ``nn`` namespace; non-default arguments on purpose.
REPR_CASES = [
    "Hardswish(True)", "Hardsigmoid(True)", "Hardswish()", "ReLU(inplace=True)", "SiLU(True)", "Mish(True)",
    "Conv1d(2, 4, 3, stride=2, padding=1, dilation=2, groups=2, bias=False, padding_mode='reflect')",
    "ConvTranspose2d(2, 4, 3, stride=2, padding=1, output_padding=1, groups=2, bias=False, dilation=2)",
    "BatchNorm2d(3, eps=1e-3, momentum=None, affine=False, track_running_stats=False)",
    "LayerNorm((4, 5), eps=1e-6, elementwise_affine=False)", "GroupNorm(2, 4, affine=False, eps=1e-3)",
    "Embedding(10, 3, padding_idx=0, max_norm=1.0, norm_type=1.0, scale_grad_by_freq=True, sparse=True)",
    "LSTM(3, 4, proj_size=2, num_layers=2)", "GRUCell(3, 4, bias=False)",
    "MultiheadAttention(8, 2, kdim=3, vdim=5, batch_first=True, dropout=0.1, bias=False, add_bias_kv=True)",
    "TransformerDecoderLayer(8, 2, dim_feedforward=16, norm_first=True, activation='gelu')",
    "MaxPool2d(3, stride=1, padding=1, dilation=2, return_indices=True, ceil_mode=True)",
    "AvgPool2d(3, stride=2, padding=1, ceil_mode=True, count_include_pad=False, divisor_override=2)",
    "Upsample(size=(4, 5), mode='bilinear', align_corners=True)", "ConstantPad2d((1, 2, 3, 4), 0.)",
    "Unflatten(1, (2, 3))", "Fold((4, 5), 2, dilation=2, padding=1, stride=2)",
    "ModuleList([Linear(2, 2), Linear(2, 2), Linear(2, 2), ReLU()])",
    "Sequential(Linear(2, 3), ReLU(), Sequential(Linear(3, 3), Dropout(0.1)))",
]


@pytest.mark.parametrize("expr", REPR_CASES)
def test_constructed_module_repr_matches_torch(expr):
    assert repr(eval(expr, dict(vars(jitorch.nn)))) == repr(eval(expr, dict(vars(torch.nn))))


def _net(lib):
    return lib.nn.Sequential(lib.nn.Linear(4, 8), lib.nn.ReLU(), lib.nn.Linear(8, 2))


def test_module_compile_compiles_in_place():
    m = _net(jitorch)
    x = jitorch.randn(3, 4)
    expected = m(x)
    assert m.compile() is None
    assert m._compiled_call_impl is not None and jitorch.nn.Module._compiled_call_impl is None
    for _ in range(3):  # eager, traced, compiled
        assert jitorch.allclose(m(x), expected)
    m(x).sum().backward()
    assert m[0].weight.grad.shape == (8, 4)
    assert list(m.state_dict()) == list(_net(torch).state_dict())
    # As torch, copies and pickles drop the compiled call (it is rebuilt by calling compile again).
    import copy

    assert copy.deepcopy(m)._compiled_call_impl is None


def test_module_compile_passes_options():
    m = jitorch.nn.Linear(2, 2)
    m.compile(backend="eager", fullgraph=True)
    assert m(jitorch.ones(1, 2)).shape == (1, 2)
    with pytest.raises(RuntimeError, match="unrecognized mode"):
        jitorch.nn.Linear(2, 2).compile(mode="fastest")


@pytest.mark.parametrize("method", ["xpu", "ipu", "mtia"])
def test_moves_to_absent_backends_raise_as_a_cpu_torch(method):
    errors = []
    for lib in (torch, jitorch):
        with pytest.raises(Exception) as info:
            getattr(lib.nn.Linear(2, 2), method)()
        errors.append((type(info.value), str(info.value).split(".")[0]))
        empty = lib.nn.ReLU()
        assert getattr(empty, method)() is empty  # nothing to move: no error
    assert errors[0] == errors[1]
    assert hasattr(jitorch.nn.Module, "T_destination")


def _warnings(fn):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fn()
    return [(w.category, str(w.message)) for w in caught]


def test_positional_state_dict_warning_matches_torch():
    got = [_warnings(lambda lib=lib: lib.nn.Linear(2, 2).state_dict(None, "a.")) for lib in (torch, jitorch)]
    assert got[0] == got[1] and got[0][0][0] is FutureWarning


def test_complex_to_warns_as_torch():
    t, j = (_warnings(lambda lib=lib: lib.nn.Linear(2, 2).to(lib.complex64)) for lib in (torch, jitorch))
    assert len(t) == len(j) == 1 and t[0][0] is j[0][0] is UserWarning
    assert t[0][1].startswith(j[0][1])
    assert _warnings(lambda: jitorch.nn.Linear(2, 2).to(jitorch.float64)) == []


@pytest.mark.parametrize("make", ["LazyLinear(3)", "LazyConv2d(4, 3)", "LazyBatchNorm1d()"])
def test_checkpoint_loads_into_a_fresh_lazy_module(make):
    x = {"LazyLinear(3)": (1, 2), "LazyConv2d(4, 3)": (1, 2, 5, 5), "LazyBatchNorm1d()": (3, 2)}[make]
    seen = []
    for lib in (torch, jitorch):
        nn = lib.nn
        lazy = eval(make, dict(vars(nn)))
        shaped = eval(make.replace("Lazy", "").replace("Linear(3)", "Linear(2, 3)").replace("Conv2d(4", "Conv2d(2, 4")
                      .replace("BatchNorm1d()", "BatchNorm1d(2)"), dict(vars(nn)))
        result = lazy.load_state_dict(shaped.state_dict())
        row = [repr(result), repr(lazy), lazy.has_uninitialized_params(), tuple(lazy.weight.shape)]
        lazy(lib.ones(*x))  # the loaded weights are kept, not re-initialized by the first call
        row += [repr(lazy), bool(lib.equal(lazy.weight, shaped.weight))]
        seen.append(row)
    assert seen[0] == seen[1] and seen[1][-1]


def test_partial_load_leaves_lazy_module_pending():
    lazy = jitorch.nn.LazyLinear(3)
    result = lazy.load_state_dict({}, strict=False)
    assert result.missing_keys == ["weight", "bias"] and lazy.has_uninitialized_params()
    lazy(jitorch.ones(1, 5))
    assert type(lazy) is jitorch.nn.Linear and lazy.weight.shape == (3, 5)


def test_moduledict_update_from_moduledict():
    got = []
    for lib in (torch, jitorch):
        d = lib.nn.ModuleDict({"a": lib.nn.ReLU()})
        d.update(lib.nn.ModuleDict({"b": lib.nn.Tanh(), "a": lib.nn.ELU()}))
        got.append(repr(d))
    assert got[0] == got[1]


def test_module_methods_are_named_as_torchs():
    for lib in (torch, jitorch):
        m = lib.nn.Linear(1, 1)
        assert repr(m.to).startswith("<bound method Module.to of Linear(")
        assert m.float.__qualname__ == "Module.float" and m.type.__name__ == "type"
    msgs = []
    for lib in (torch, jitorch):
        with pytest.raises(TypeError) as info:
            lib.nn.Identity().register_forward_hook(lambda *a: None, True)
        msgs.append(str(info.value))
    assert msgs[0] == msgs[1]


def _legacy_hook_warnings(lib, kind):
    nn = lib.nn

    class Two(nn.Module):
        def forward(self, x):
            return x * 2, x + 1

    class Nested(nn.Module):
        def forward(self, x):
            return [x * 2]

    mod = {"linear": nn.Linear(2, 2), "two": Two(), "nested": Nested()}[kind]
    mod.register_backward_hook(lambda m, gi, go: None)
    return _warnings(lambda: mod(lib.ones(1, 2, requires_grad=True)))


@pytest.mark.parametrize("kind", ["linear", "two", "nested"])
def test_legacy_backward_hook_warns_as_torch(kind):
    t, j = _legacy_hook_warnings(torch, kind), _legacy_hook_warnings(jitorch, kind)
    assert t == j and t[0][0] is FutureWarning
