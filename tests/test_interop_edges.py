"""Interop edges found by running the same scripts under torch and jitorch: tensors inside Python lists given to
``tensor``/``as_tensor``, in-place operators with a NumPy array, ``complex`` with infinite parts, Python numbers from
complex tensors, and the repr of meta tensors."""
import math

import numpy as np
import pytest
import torch

import jitorch


def _same(got, want):
    assert tuple(got.shape) == tuple(want.shape) and str(got.dtype).split(".")[1] == str(want.dtype).split(".")[1]
    np.testing.assert_array_equal(np.asarray(got.tolist()), np.asarray(want.tolist()))


LISTS = {
    "one-element 1-d tensors": lambda lib: [lib.tensor([1.0]), lib.tensor([2.0])],
    "one-element 2-d tensors": lambda lib: [lib.tensor([[1.0]]), lib.tensor([[2.0]])],
    "mixed 0-d and 1-d": lambda lib: [lib.tensor(1.0), lib.tensor([2.0])],
    "int and float tensors": lambda lib: [lib.tensor(1), lib.tensor(2.5)],
    "int32 tensors": lambda lib: [lib.tensor(1, dtype=lib.int32), lib.tensor(2, dtype=lib.int32)],
    "nested with numbers": lambda lib: [[lib.tensor(1.0), 2.0], [3, lib.tensor(4)]],
}


@pytest.mark.parametrize("case", sorted(LISTS))
@pytest.mark.parametrize("make", ["tensor", "as_tensor"])
def test_a_tensor_inside_a_list_is_read_as_one_number_as_torch_reads_it(case, make):
    _same(getattr(jitorch, make)(LISTS[case](jitorch)), getattr(torch, make)(LISTS[case](torch)))


def test_a_list_of_multi_element_tensors_is_refused_as_torch_refuses_it():
    with pytest.raises(ValueError, match="only one element tensors"):
        torch.tensor([torch.tensor([1.0, 2.0]), torch.tensor([3.0, 4.0])])
    with pytest.raises(ValueError, match="only one element tensors"):
        jitorch.tensor([jitorch.tensor([1.0, 2.0]), jitorch.tensor([3.0, 4.0])])


@pytest.mark.parametrize("op", ["+=", "-=", "*=", "/="])
def test_an_in_place_operator_with_a_numpy_array_makes_a_new_tensor_as_torch(op):
    results = []
    for lib in (torch, jitorch):
        t = lib.arange(1.0, 4.0)
        before = t
        exec(f"t {op} np.full(3, 2.0)", {"np": np}, scope := {"t": t})
        results.append(scope["t"])
        assert scope["t"] is not before and before.tolist() == [1.0, 2.0, 3.0]
    _same(results[1], results[0])


def test_complex_keeps_infinite_and_zero_parts_and_its_gradient():
    re, im = np.float32([0.0, 1.0, -np.inf, 0.0]), np.float32([np.inf, 2.0, 0.0, -0.0])
    for dtype in (np.float32, np.float64):
        got, want = (lib.complex(lib.tensor(re.astype(dtype)), lib.tensor(im.astype(dtype)))
                     for lib in (jitorch, torch))
        assert str(got.dtype).split(".")[1] == str(want.dtype).split(".")[1]
        np.testing.assert_array_equal(got.numpy(), want.numpy())
    a, b = (jitorch.tensor([[1.0], [3.0]], requires_grad=True), jitorch.tensor([2.0, 4.0], requires_grad=True))
    ta, tb = (torch.tensor([[1.0], [3.0]], requires_grad=True), torch.tensor([2.0, 4.0], requires_grad=True))
    jitorch.complex(a, b).abs().sum().backward()
    torch.complex(ta, tb).abs().sum().backward()
    np.testing.assert_allclose(a.grad.numpy(), ta.grad.numpy(), rtol=1e-6)
    np.testing.assert_allclose(b.grad.numpy(), tb.grad.numpy(), rtol=1e-6)


def test_python_numbers_from_a_complex_tensor_take_a_zero_imaginary_part_as_torch():
    for lib in (torch, jitorch):
        t = lib.tensor(2.7 + 0j)
        assert int(t) == 2 and abs(float(t) - 2.7) < 1e-6 and "%.2f" % t == "2.70"
        assert math.isclose(math.sqrt(t), math.sqrt(2.7), rel_tol=1e-6)
        for convert in (int, float):
            with pytest.raises(RuntimeError, match="cannot be converted to type .* without overflow"):
                convert(lib.tensor(2 + 2j))


@pytest.mark.parametrize("dtype", ["int64", "int32", "float32", "float64", "bool"])
def test_the_repr_of_a_meta_tensor_names_its_dtype_as_torch(dtype):
    got = repr(jitorch.empty(2, 3, dtype=getattr(jitorch, dtype), device="meta"))
    want = repr(torch.empty(2, 3, dtype=getattr(torch, dtype), device="meta"))
    assert got.replace("jitorch.", "torch.") == want
