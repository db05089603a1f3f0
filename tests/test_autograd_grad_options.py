"""``torch.autograd.grad``/``backward`` argument handling against PyTorch 2.13: grad_outputs dtypes, batched
grad_outputs, materialize_grads, dict inputs and the errors for misuse torch refuses."""
import warnings

import numpy as np
import pytest
import torch

import jitorch
from helpers import same_error


def _np(t):
    return np.asarray(t.detach().numpy())


@pytest.mark.parametrize("dtype", ["float64", "int64"])
def test_grad_output_of_another_dtype_is_cast_to_the_outputs(dtype):
    for lib in (torch, jitorch):
        x = lib.tensor([1.0, 3.0], requires_grad=True)
        (x ** 2).backward(lib.ones(2, dtype=getattr(lib, dtype)))
        (g,) = lib.autograd.grad(x ** 2, x, lib.ones(2, dtype=getattr(lib, dtype)))
        assert x.grad.dtype == lib.float32 and g.dtype == lib.float32
        assert x.grad.tolist() == g.tolist() == [2.0, 6.0]


def test_complex_grad_output_for_real_output_is_refused():
    def fn(lib):
        x = lib.tensor([1.0], requires_grad=True)
        lib.autograd.grad(x * 2, x, lib.ones(1, dtype=lib.complex64))
    same_error(fn)


def test_shape_mismatch_message():
    def fn(lib):
        x = lib.tensor([1.0, 3.0], requires_grad=True)
        lib.autograd.grad(x * 2, x, lib.ones(3))
    same_error(fn)


def test_output_that_needs_no_grad_is_reported_by_index():
    def fn(lib):
        x = lib.tensor([1.0, 3.0], requires_grad=True)
        lib.autograd.backward([(x * x).sum(), lib.ones(())])
    same_error(fn)


def test_empty_inputs_and_materialize_with_allow_unused_false_are_refused():
    x = jitorch.tensor([1.0], requires_grad=True)
    with pytest.raises(RuntimeError, match="cannot be empty"):
        jitorch.autograd.grad((x * 2).sum(), [])
    same_error(lambda lib: lib.autograd.grad((lib.ones(1, requires_grad=True) * 2).sum(),
                                               lib.ones(1, requires_grad=True), materialize_grads=True,
                                               allow_unused=False))


def test_materialized_zeros_require_grad_under_create_graph():
    for lib in (torch, jitorch):
        x, z = lib.ones(2, requires_grad=True), lib.ones(2, requires_grad=True)
        gx, gz = lib.autograd.grad((x * 2).sum(), [x, z], materialize_grads=True, create_graph=True)
        assert gz.requires_grad and gz.tolist() == [0.0, 0.0]


def test_is_grads_batched_gives_one_vjp_per_row():
    results = []
    for lib in (torch, jitorch):
        x = lib.tensor([1.0, 3.0], requires_grad=True)
        z = lib.tensor([2.0], requires_grad=True)
        w = lib.tensor([2.0], requires_grad=True)
        gx, gz, gw = lib.autograd.grad(x ** 2 * z, [x, z, w], lib.eye(2), is_grads_batched=True, allow_unused=True)
        assert gw is None
        results.append((_np(gx), _np(gz)))
    for a, b in zip(*results):
        np.testing.assert_allclose(b, a)

    x = jitorch.tensor([1.0, 3.0], requires_grad=True)
    # torch's message prints the wrong grad shape (torch.Size([])): only its start is compared.
    with pytest.raises(RuntimeError, match="If `is_grads_batched=True`, we interpret the first dimension"):
        jitorch.autograd.grad(x ** 2, x, jitorch.eye(3), is_grads_batched=True)


def test_dict_inputs_give_a_dict():
    for lib in (torch, jitorch):
        x, z = lib.tensor([1.0, 3.0], requires_grad=True), lib.tensor([2.0], requires_grad=True)
        g = lib.autograd.grad((x * z).sum(), {"a": x, "b": z})
        assert list(g) == ["a", "b"] and g["a"].tolist() == [2.0, 2.0] and g["b"].tolist() == [4.0]


def test_deprecation_and_reference_cycle_warnings():
    for lib in (torch, jitorch):
        x = lib.tensor([1.0, 3.0], requires_grad=True)
        with pytest.warns(FutureWarning, match="only_inputs argument is deprecated"):
            lib.autograd.grad((x * x).sum(), x, only_inputs=False)
    x = jitorch.tensor([1.0, 3.0], requires_grad=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        (x ** 3).sum().backward(create_graph=True)
    assert any("create_graph=True will create a reference cycle" in str(w.message) for w in caught)
