"""Small semantics that user code meets, against torch: integer tensors to negative Python powers raise (uint8 too,
before any wrapping of the scalar), ``nan_to_num`` on bfloat16, ``add``'s ``alpha`` never promoting integer and
bool sums, and a missing GPU raising the AssertionError CPU-only torch raises."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import jitorch

LIBS = (jitorch, torch)


@pytest.mark.parametrize("dtype", ["uint8", "int8", "int32", "int64"])
def test_integer_tensor_to_a_negative_power_raises(dtype):
    for lib in LIBS:
        with pytest.raises(RuntimeError, match="Integers to negative integer powers are not allowed"):
            lib.tensor([2, 3], dtype=getattr(lib, dtype)) ** -3
        assert (lib.tensor([2, 3], dtype=getattr(lib, dtype)) ** 2).tolist() == [4, 9]


@pytest.mark.parametrize("kwargs", [{}, {"nan": 2.0, "posinf": 5.0, "neginf": -7.0}])
def test_nan_to_num_bfloat16(kwargs):
    values = [1.0, float("inf"), float("-inf"), float("nan")]
    got, want = (lib.nan_to_num(lib.tensor(values, dtype=lib.bfloat16), **kwargs) for lib in LIBS)
    assert got.dtype is jitorch.bfloat16
    np.testing.assert_array_equal(got.float().numpy(), want.float().numpy())


CASES = [("int32", "bool", 2), ("bool", "bool", 2), ("int8", "int8", 3), ("float32", "int64", 0.5),
         ("int64", None, 2), ("float16", "float32", 2)]


@pytest.mark.parametrize("a, b, alpha", CASES)
def test_add_alpha_keeps_the_operands_result_dtype(a, b, alpha):
    results = []
    for lib in LIBS:
        x = lib.tensor([1, 0, 100], dtype=getattr(lib, a))
        y = 3 if b is None else lib.tensor([1, 1, 2], dtype=getattr(lib, b))
        out = lib.add(x, y, alpha=alpha)
        results.append((str(out.dtype).split(".")[1], out.tolist()))
    assert results[0] == results[1]


@pytest.mark.skipif(jitorch.cuda.is_available(), reason="checks the error of a machine without a GPU")
def test_missing_gpu_raises_torch_s_assertion_error():
    with pytest.raises(AssertionError, match="Torch not compiled with CUDA enabled"):
        jitorch.ones(2).cuda()
    with pytest.raises(RuntimeError):  # and stays a RuntimeError, as jitorch raised before
        jitorch.nn.Linear(2, 2).to("cuda")


@pytest.mark.parametrize("name", ["float32", "float16", "bfloat16", "float64", "int32", "uint8", "int64", "uint16"])
def test_finfo_and_iinfo_print_and_compare_as_torch_s(name):
    info = jitorch.finfo if name.startswith(("float", "bfloat")) else jitorch.iinfo
    mine, theirs = info(getattr(jitorch, name)), getattr(torch, info.__name__)(getattr(torch, name))
    assert repr(mine) == repr(theirs)
    if info is jitorch.finfo:
        assert (mine.resolution, mine.eps, mine.tiny, mine.max) == (theirs.resolution, theirs.eps, theirs.tiny,
                                                                     theirs.max)


@pytest.mark.parametrize("case", ["scatter_ value", "scatter value", "scatter src", "scatter_add_", "scatter 0-d src",
                                  "scatter_reduce sum", "scatter_reduce amax"])
def test_scatter_into_a_vector_takes_a_0d_index(case):
    def run(lib):
        z, i = lib.zeros(10), lib.tensor(3)
        return {"scatter_ value": lambda: z.scatter_(0, i, value=1), "scatter value": lambda: z.scatter(0, i, 1.0),
                "scatter src": lambda: z.scatter(0, i, lib.arange(10.0) + 1),
                "scatter_add_": lambda: z.scatter_add_(0, i, lib.ones(10)),
                "scatter 0-d src": lambda: z.scatter(0, i, lib.tensor(7.0)),
                "scatter_reduce sum": lambda: z.scatter_reduce(0, i, lib.ones(10) * 4, "sum"),
                "scatter_reduce amax": lambda: z.scatter_reduce(0, i, lib.ones(10) * 4, "amax")}[case]().tolist()
    assert run(jitorch) == run(torch)
    with pytest.raises(RuntimeError, match="same number of dimensions"):
        jitorch.zeros(3, 3).scatter(0, jitorch.tensor(1), 1.0)


def test_grad_fn_prints_as_a_node_object():
    y = (jitorch.ones(2, requires_grad=True) * 2).sum()
    assert repr(y.grad_fn).startswith("<SumBackward0 object at 0x") and repr(y).endswith("grad_fn=<SumBackward0>)")


@pytest.mark.parametrize("name", ["logaddexp", "logaddexp2"])
def test_logaddexp_values_gradients_and_second_derivatives_match_torch(name):
    results = []
    for lib in LIBS:
        x = lib.tensor([0.0, 1.0, 2.0, float("inf"), -float("inf"), 3.0, -2.5], dtype=lib.float64,
                       requires_grad=True)
        y = lib.tensor([0.0, 0.0, 5.0, 1.0, -float("inf"), float("inf"), -2.5], dtype=lib.float64)
        out = getattr(lib, name)(x, y)
        (g,) = lib.autograd.grad(out.sum(), x, create_graph=True)
        (h,) = lib.autograd.grad(g.sum(), x)
        results.append([out.detach().numpy(), g.detach().numpy(), h.numpy()])
    for got, want in zip(*results):
        np.testing.assert_allclose(got, want, rtol=1e-12, equal_nan=True)
    assert getattr(jitorch, name)(jitorch.ones(2), jitorch.tensor(0.5)).dtype is jitorch.float32


def test_xlogy_with_a_scalar_other_keeps_the_gradient_at_zero():
    grads = []
    for lib in LIBS:
        x = lib.tensor([0.0, 1.0, 3.0], requires_grad=True)
        out = lib.xlogy(x, 2.0)
        out.sum().backward()
        grads.append((out.tolist(), x.grad.tolist()))
    assert grads[0] == grads[1]


def test_complex_sigmoid_values_and_gradients():
    results = []
    for lib in LIBS:
        z = lib.tensor([0.5 + 1j, -1 + 0.3j, 2 - 2j], dtype=lib.complex128, requires_grad=True)
        out = lib.sigmoid(z)
        (g,) = lib.autograd.grad(out.abs().sum(), z)
        results.append((out.detach().numpy(), lib.special.expit(z.detach()).numpy(), g.numpy()))
    for got, want in zip(*results):
        np.testing.assert_allclose(got, want, rtol=1e-12)


def test_scalar_operands_torch_accepts():
    results = []
    for lib in LIBS:
        x = lib.tensor([1.0, 2.0])
        results.append([lib.sub(x, 2.0, alpha=2).tolist(), x.sub(2.0, alpha=2).tolist(), lib.xlogy(2.0, x).tolist(),
                        lib.special.xlogy(2.0, x).tolist(), lib.special.xlog1py(2.0, x).tolist(),
                        lib.xlogy(0.0, x).tolist()])
    assert results[0] == results[1]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_erfcx_and_ndtri_in_their_tails(dtype):
    tiny = 1e-22 if dtype == "float32" else 1e-300
    results = []
    for lib in LIBS:
        x = lib.tensor([-3.0, 0.0, 1.0, 20.0, 27.0, 50.0, 1e3, float("inf")], dtype=getattr(lib, dtype),
                       requires_grad=True)
        p = lib.tensor([tiny, 1e-10, 1e-6, 0.3, 0.5, 0.999], dtype=getattr(lib, dtype), requires_grad=True)
        y, q = lib.special.erfcx(x), lib.special.ndtri(p)
        (gx,) = lib.autograd.grad(y[:-1].sum(), x)
        (gp,) = lib.autograd.grad(q.sum(), p)
        results.append([y.detach().numpy(), gx.numpy()[:-2], q.detach().numpy(), gp.numpy()])
    for got, want in zip(*results):
        np.testing.assert_allclose(got, want, rtol=2e-6 if dtype == "float32" else 1e-12)


@pytest.mark.parametrize("name", ["fmax", "fmin"])
def test_fmax_fmin_values_and_tie_gradients(name):
    results = []
    for lib in LIBS:
        x = lib.tensor([0.0, 1.0, -1.0, float("nan"), 2.0, float("nan")], requires_grad=True)
        y = lib.tensor([0.0, 0.0, 0.0, 1.0, float("nan"), float("nan")], requires_grad=True)
        out = getattr(lib, name)(x, y)
        out.sum().backward()
        results.append((out.detach().numpy(), x.grad.numpy(), y.grad.numpy()))
    for got, want in zip(*results):
        np.testing.assert_array_equal(got, want)


def test_format_spec_on_a_tensor_and_copy_construct_warning():
    for lib in LIBS:
        with pytest.raises(TypeError, match="unsupported format string passed to Tensor.__format__"):
            f"{lib.tensor([1.0, 2.0]):.2f}"
        assert f"{lib.tensor(1.5):.2f}" == "1.50"
        with pytest.warns(UserWarning, match="To copy construct from a tensor"):
            lib.tensor(lib.ones(2))


def test_as_subclass_shares_memory_and_the_graph():
    class Mine(jitorch.Tensor):
        pass

    x = jitorch.ones(2, requires_grad=True)
    y = (x * 2).as_subclass(Mine)
    assert type(y) is Mine and y.requires_grad
    y.sum().backward()
    assert x.grad.tolist() == [2.0, 2.0]
    z = jitorch.ones(2)
    z.as_subclass(Mine).add_(1)
    assert z.tolist() == [2.0, 2.0]
    with pytest.raises(TypeError, match="subclass of Tensor"):
        z.as_subclass(int)


def test_make_subclass_builds_parameter_subclasses():
    for lib in LIBS:
        class Quantized(lib.nn.Parameter):
            def __new__(cls, data, requires_grad=True):
                return lib.Tensor._make_subclass(cls, data, requires_grad)

        q = Quantized(lib.ones(2))
        layer = lib.nn.Linear(2, 2)
        layer.q = q
        assert type(q) is Quantized and q.requires_grad and q.is_leaf
        assert [n for n, _ in layer.named_parameters()] == ["weight", "bias", "q"]
        base = lib.ones(3)
        lib.Tensor._make_subclass(lib.Tensor, base, False).add_(1)
        assert base.tolist() == [2.0, 2.0, 2.0]


def test_randperm_takes_a_0d_tensor_and_out():
    assert jitorch.randperm(jitorch.tensor(5)).shape == (5,)
    assert [len(s) for s in jitorch.utils.data.random_split(range(10), jitorch.tensor([3, 7]))] == [3, 7]
    out = jitorch.empty(4, dtype=jitorch.long)
    assert jitorch.randperm(4, out=out) is out and sorted(out.tolist()) == [0, 1, 2, 3]


@pytest.mark.parametrize("opt", ["Adam", "AdamW", "SGD"])
def test_an_optimizer_state_of_another_shape_raises_instead_of_writing_out_of_bounds(opt):
    kwargs = {"lr": 0.1, "fused": True} | ({"momentum": 0.9} if opt == "SGD" else {})
    small, big = jitorch.nn.Parameter(jitorch.ones(2)), jitorch.nn.Parameter(jitorch.ones(4))
    for loaded, target in ((big, small), (small, big)):
        source = getattr(jitorch.optim, opt)([loaded], **kwargs)
        (loaded ** 2).sum().backward()
        source.step()
        dest = getattr(jitorch.optim, opt)([target], **kwargs)
        dest.load_state_dict(source.state_dict())
        (target ** 2).sum().backward()
        with pytest.raises(RuntimeError, match="shape"):
            dest.step()


def test_moving_to_the_meta_device_keeps_shapes_and_drops_data():
    # The meta device is supported (tests/test_meta_device.py): moving there keeps shapes, dtypes and parameters.
    assert jitorch.ones(2).to("meta").is_meta
    model = jitorch.nn.Linear(2, 2).to("meta")
    assert model.weight.is_meta and type(model.weight) is jitorch.nn.Parameter and model.weight.shape == (2, 2)
