"""``library.custom_op`` errors (definition, call, backward, autograd registration) and schema inference, and
``jitorch.ops`` name resolution, checked against PyTorch 2.13.
"""
import typing

import numpy as np
import pytest
import torch

import jitorch

from library_custom_op_helpers import LIBS, _close, _error, _mutating, _numpy_sin, _rand


# -- errors -----------------------------------------------------------------------------------------------------------
def test_backward_without_register_autograd_raises_at_backward():
    errors = []
    for lib in LIBS:
        @lib.library.custom_op("jt_test_noag::twice", mutates_args=())
        def twice(x: lib.Tensor) -> lib.Tensor:
            return x * 2

        y = twice(lib.ones(2, requires_grad=True))  # the forward is fine
        assert y.requires_grad
        errors.append(_error(lambda: y.sum().backward()))
    assert errors[0] == errors[1]
    assert errors[0][0] is RuntimeError and "jt_test_noag.twice.default but no autograd formula" in errors[0][1]


def _error_cases(lib):
    T = lib.Tensor

    def x_only(x: T) -> T:
        return x.clone()

    def with_dict(x: T, d: dict) -> T:
        return x

    def with_tuple(x: T, t: tuple[int, int]) -> T:
        return x

    def no_hint(x) -> T:
        return x

    def no_return(x: T):
        return x

    def var_args(*x: T) -> T:
        return x[0]

    def mutates_int(x: T, n: int) -> T:
        return x

    lib_ = lib.library
    return {
        "missing mutates_args": lambda: lib_.custom_op("jt_test_err::a", x_only),
        "missing mutates_args, decorator": lambda: lib_.custom_op("jt_test_err::a")(x_only),
        "dict annotation": lambda: lib_.custom_op("jt_test_err::b", with_dict, mutates_args=()),
        "tuple annotation": lambda: lib_.custom_op("jt_test_err::c", with_tuple, mutates_args=()),
        "no annotation": lambda: lib_.custom_op("jt_test_err::d", no_hint, mutates_args=()),
        "no return annotation": lambda: lib_.custom_op("jt_test_err::e", no_return, mutates_args=()),
        "varargs": lambda: lib_.custom_op("jt_test_err::f", var_args, mutates_args=()),
        "unknown mutated name": lambda: lib_.custom_op("jt_test_err::g", x_only, mutates_args=("y",)),
        "mutates_args a string": lambda: lib_.custom_op("jt_test_err::h", x_only, mutates_args="x"),
        "mutated int": lambda: lib_.custom_op("jt_test_err::i", mutates_int, mutates_args=("n",)),
        "no namespace": lambda: lib_.custom_op("nonamespace", x_only, mutates_args=()),
    }


def _first_line(message):
    # The lists of valid annotations name each library's own Tensor class; the sentence before them must agree.
    message = message.split("The valid types are")[0].replace("torch.", "jitorch.")
    return message.replace("jitorch._tensor.Tensor", "Tensor").replace("jitorch.Tensor", "Tensor")


def test_definition_errors_match_torch():
    jt, th = _error_cases(jitorch), _error_cases(torch)
    for name in jt:
        (jt_type, jt_msg), (th_type, th_msg) = _error(jt[name]), _error(th[name])
        assert jt_type is th_type, name
        assert _first_line(jt_msg) == _first_line(th_msg.replace("torch.", "jitorch.")), name


def _call_cases(lib):
    @lib.library.custom_op("jt_test_call::f", mutates_args=())
    def f(x: lib.Tensor, n: int = 2) -> lib.Tensor:
        return x * n

    @lib.library.custom_op("jt_test_call::alias", mutates_args=())
    def alias(x: lib.Tensor) -> lib.Tensor:
        return x.view(-1)

    @lib.library.custom_op("jt_test_call::same", mutates_args=())
    def same(x: lib.Tensor) -> lib.Tensor:
        return x

    @lib.library.custom_op("jt_test_call::pair", mutates_args=())
    def pair(x: lib.Tensor) -> tuple[lib.Tensor, lib.Tensor]:
        return x * 2

    @lib.library.custom_op("jt_test_call::scalar", mutates_args=())
    def scalar(x: lib.Tensor) -> lib.Tensor:
        return 3

    one = lib.ones(2)
    return {
        "too many": lambda: f(one, 2, 3),
        "missing": lambda: f(),
        "unknown keyword": lambda: f(one, z=3),
        "wrong type": lambda: f(3),
        "float for int": lambda: f(one, 2.5),
        "alias of input": lambda: alias(one),
        "input returned": lambda: same(one),
        "not a sequence": lambda: pair(one),
        "not a tensor": lambda: scalar(one),
        "unknown op": lambda: lib.ops.jt_test_call.nope,
        "unknown overload": lambda: lib.ops.jt_test_call.f.nope,
    }  # an unknown namespace: tests/test_library_ops_lookup.py


def test_call_errors_match_torch():
    jt, th = _call_cases(jitorch), _call_cases(torch)
    for name in jt:
        (jt_type, jt_msg), (th_type, th_msg) = _error(jt[name]), _error(th[name])
        assert jt_type is th_type, (name, jt_msg, th_msg)
        first = th_msg.split("\n")[0].split(" (with implementation")[0].split(" Cast error")[0]
        assert jt_msg.startswith(first), (name, jt_msg, th_msg)


def test_register_autograd_refuses_a_mutating_op():
    scale_, _ = _mutating(jitorch, "jt_test_mutate_ag")
    kind, message = _error(lambda: scale_.register_autograd(lambda ctx, g: g))
    assert kind is RuntimeError and "Cannot register autograd formula for non-functional operator" in message


# -- schemas and jitorch.ops ------------------------------------------------------------------------------------------
def _schema_functions(lib):
    T, Opt = lib.Tensor, typing.Optional

    def a(x: T, y: Opt[T], xs: list[T], f: float, b: bool, s: str, n: int = 3, *, k: float = 1.5) -> tuple[T, T]:
        ...

    def b(x: T) -> None:
        ...

    def c(x: T, ints: list[int], o: Opt[int] = None, fl: Opt[list[float]] = None) -> list[T]:
        ...

    def d(x: T, dtype: lib.dtype = lib.float32, dev: lib.device = None, s: str = "hi") -> tuple[T]:
        ...

    return [(a, ("x", "xs")), (a, "unknown"), (b, {"x"}), (c, ()), (d, ())]


def test_infer_schema_matches_torch():
    for (jf, mutates), (tf, _) in zip(_schema_functions(jitorch), _schema_functions(torch)):
        assert jitorch.library.infer_schema(jf, mutates_args=mutates) == \
            torch.library.infer_schema(tf, mutates_args=mutates)


def test_ops_namespace_resolves_registered_ops():
    for lib in LIBS:
        _numpy_sin(lib, "jt_test_ops")
    packet, overload = jitorch.ops.jt_test_ops.numpy_sin, jitorch.ops.jt_test_ops.numpy_sin.default
    for jt, th in ((packet, torch.ops.jt_test_ops.numpy_sin), (overload, torch.ops.jt_test_ops.numpy_sin.default)):
        assert (repr(jt), str(jt)) == (repr(th), str(th))
    assert packet.overloads() == torch.ops.jt_test_ops.numpy_sin.overloads() == ["default"]
    assert str(overload._schema) == str(torch.ops.jt_test_ops.numpy_sin.default._schema)
    assert overload.name() == "jt_test_ops::numpy_sin" and overload is jitorch.ops.jt_test_ops.numpy_sin.default
    x0 = _rand(3)
    _close(packet(jitorch.tensor(x0)), np.sin(x0))
    _close(overload(jitorch.tensor(x0)), np.sin(x0))
    # The op-table package keeps its own names and modules.
    from jitorch.ops import linalg_lapack, table

    assert table.OPS is jitorch.ops.OPS and "add" in jitorch.ops.OPS

    assert linalg_lapack.__name__ == "jitorch.ops.linalg_lapack"
    with pytest.raises(AttributeError):
        jitorch.ops.__wrapped__  # noqa: B018 - probes of dunder names are plain misses


def test_redefinition_replaces_the_op():
    for value in (2.0, 5.0):
        @jitorch.library.custom_op("jt_test_redefine::f", mutates_args=())
        def f(x: jitorch.Tensor) -> jitorch.Tensor:
            return x * value  # noqa: B023 - each definition reads its own value

        assert jitorch.ops.jt_test_redefine.f(jitorch.ones(1)).item() == value
