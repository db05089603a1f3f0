"""jitorch.masked.MaskedTensor against torch's: construction checks, repr, elementwise ops under the shared mask,
reductions, softmax, to_tensor and backward through the data (gradients compared at kept elements)."""
import warnings

import numpy as np
import pytest
import torch

import jitorch
import jitorch.masked  # noqa: F401

pytestmark = pytest.mark.filterwarnings("ignore:The PyTorch API of MaskedTensors:UserWarning")


def _pair(data, mask, requires_grad=False):
    """The same MaskedTensor in both libraries."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return (jitorch.masked.masked_tensor(jitorch.tensor(data), jitorch.tensor(mask), requires_grad),
                torch.masked.masked_tensor(torch.tensor(data), torch.tensor(mask), requires_grad))


def _assert_same(ours, theirs, atol=1e-6):
    """Same mask, dtype and shape, same data at kept elements (torch's masked-out data are unspecified)."""
    assert jitorch.masked.is_masked_tensor(ours) and torch.masked.is_masked_tensor(theirs)
    assert str(ours.dtype).rsplit(".", 1)[-1] == str(theirs.dtype).rsplit(".", 1)[-1]
    assert tuple(ours.shape) == tuple(theirs.shape)
    mask = theirs.get_mask().numpy()
    np.testing.assert_array_equal(ours.get_mask().numpy(), mask)
    np.testing.assert_allclose(ours.get_data().detach().numpy()[mask],
                               theirs.get_data().detach().numpy()[mask], atol=atol, rtol=1e-5)


@pytest.fixture
def data_and_mask(rng):
    data = rng.standard_normal((3, 4)).astype(np.float32)
    mask = rng.random((3, 4)) < 0.6
    mask[1] = False
    mask[0, 0] = True
    return data, mask


@pytest.mark.parametrize("data,mask", [
    (np.array([[0., 1.5, -2.25], [3., 4., 5.]]), np.array([[True, False, True], [False, False, False]])),
    (np.array([1, 22, 333]), np.array([True, False, True])),
    (np.array(3.5), np.array(True)), (np.array(3.5), np.array(False)), (np.array(7), np.array(True)),
], ids=["float_2d", "int_1d", "scalar_kept", "scalar_masked", "int_scalar"])
def test_repr_matches_torch(data, mask):
    ours, theirs = _pair(data, mask)
    assert repr(ours) == repr(theirs)


@pytest.mark.parametrize("name", ["sin", "exp", "abs", "neg", "sigmoid", "square", "tanh"])
def test_unary_ops(name, data_and_mask, rng):
    data, mask = data_and_mask
    ours, theirs = _pair(data, mask, requires_grad=True)
    result = getattr(ours, name)()
    _assert_same(result, getattr(theirs, name)())
    _assert_same(getattr(jitorch, name)(ours), getattr(torch, name)(theirs))
    # torch's MaskedTensor has no sigmoid/tanh backward: the reference gradient is the plain op's at kept elements
    upstream = rng.standard_normal((3, 4)).astype(np.float32)
    result.backward(jitorch.tensor(upstream))
    plain = torch.tensor(data, requires_grad=True)
    getattr(torch, name)(plain).backward(torch.tensor(upstream))
    np.testing.assert_allclose(ours.grad.get_data().numpy()[mask], plain.grad.numpy()[mask], atol=1e-5, rtol=1e-5)
    np.testing.assert_array_equal(ours.grad.get_mask().numpy(), mask)


def test_unary_ops_with_arguments(data_and_mask):
    ours, theirs = _pair(*data_and_mask)
    _assert_same(ours.clamp(-0.5, 0.5), theirs.clamp(-0.5, 0.5))
    _assert_same(ours.clamp(min=0.0), theirs.clamp(min=0.0))
    _assert_same(ours.pow(2), theirs.pow(2))
    _assert_same(ours ** 3, theirs ** 3)


BINARY = {"add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
          "div": lambda a, b: a / b, "gt": lambda a, b: a > b, "le": lambda a, b: a <= b,
          "maximum": lambda a, b: a.maximum(b)}


@pytest.mark.parametrize("name", BINARY)
def test_binary_ops_with_the_same_mask(name, data_and_mask, rng):
    op = BINARY[name]
    data, mask = data_and_mask
    aj, at = _pair(data, mask, requires_grad=True)
    bj, bt = _pair(rng.standard_normal((3, 4)).astype(np.float32), mask)
    _assert_same(op(aj, bj), op(at, bt))
    plain = rng.standard_normal((3, 4)).astype(np.float32)
    _assert_same(op(aj, jitorch.tensor(plain)), op(at, torch.tensor(plain)))
    if name != "maximum":  # torch's maximum takes no number
        _assert_same(op(aj, 2.0), op(at, 2.0))


def test_reflected_operators_and_plain_tensor_on_the_left(data_and_mask):
    ours, theirs = _pair(*data_and_mask)
    plain = np.arange(12, dtype=np.float32).reshape(3, 4)
    # torch's MaskedTensor has no rsub (1 - mt raises TypeError there): compared with the forward spelling
    _assert_same(1 - ours, -theirs + 1)
    _assert_same(2 / ours, theirs.reciprocal() * 2)
    _assert_same(jitorch.tensor(plain) + ours, torch.tensor(plain) + theirs)


def test_binary_ops_refuse_different_masks(data_and_mask):
    data, mask = data_and_mask
    for lib, (a, _) in ((jitorch, _pair(data, mask)), (torch, _pair(data, mask)[::-1])):
        other = lib.masked.masked_tensor(lib.tensor(data), lib.tensor(~mask))
        with pytest.raises(ValueError, match="Input masks must match"):
            a + other


@pytest.mark.parametrize("name", ["sum", "mean", "amax", "amin", "argmax", "argmin", "prod", "norm", "var", "std",
                                  "all"])
@pytest.mark.parametrize("dim", [None, 1, 0])
def test_reductions(name, dim, data_and_mask, rng):
    data, mask = data_and_mask
    if name == "all":
        data = data > 0
    # (norm's gradient: torch's MaskedTensor has no norm method, and the functional one is tested in test_masked)
    differentiable = name not in ("argmax", "argmin", "all", "norm")
    ours, theirs = _pair(data, mask, requires_grad=differentiable)
    if dim is None:
        rj, rt = getattr(ours, name)(), _torch_reduction(name, theirs)
    else:
        rj, rt = getattr(ours, name)(dim), _torch_reduction(name, theirs, dim)
    _assert_same(rj, rt, atol=1e-5)
    if name not in ("norm", "all"):
        _assert_same(getattr(jitorch, name)(ours) if dim is None else getattr(jitorch, name)(ours, dim),
                     getattr(torch, name)(theirs) if dim is None else getattr(torch, name)(theirs, dim), atol=1e-5)
    if differentiable and dim is None:
        rj.backward()
        rt.backward()
        _assert_same(ours.grad, theirs.grad, atol=1e-5)
    elif differentiable and bool(rt.get_mask().all()):  # torch's backward needs the result fully kept here
        upstream = rng.standard_normal(tuple(rt.shape)).astype(np.float32)
        rj.backward(jitorch.tensor(upstream))
        rt.backward(torch.masked.masked_tensor(torch.tensor(upstream), rt.get_mask()))
        _assert_same(ours.grad, theirs.grad, atol=1e-5)


def _torch_reduction(name, mt, dim=None):
    """torch's MaskedTensor reduction; its ``norm`` method fails (passes ``p`` on), so the functional form there."""
    if name != "norm":
        return getattr(mt, name)() if dim is None else getattr(mt, name)(dim)
    data, mask = mt.get_data(), mt.get_mask()
    values = torch.masked.norm(data, 2.0, dim, mask=mask)
    kept = mask.any() if dim is None else mask.any(dim)
    return torch.masked.as_masked_tensor(values, kept)


def test_reduction_keepdim(data_and_mask):
    ours, theirs = _pair(*data_and_mask)
    _assert_same(ours.sum(1, keepdim=True), theirs.sum(1, keepdim=True))
    _assert_same(ours.amax((0, 1), keepdim=True), theirs.amax((0, 1), keepdim=True))


@pytest.mark.parametrize("dim", [1, 0, -1])
def test_softmax(dim, data_and_mask, rng):
    ours, theirs = _pair(*data_and_mask, requires_grad=True)
    rj, rt = jitorch.softmax(ours, dim), torch.softmax(theirs, dim)
    _assert_same(rj, rt)
    _assert_same(ours.softmax(dim), theirs.softmax(dim))
    assert not np.isnan(rj.get_data().detach().numpy()).any()


def test_softmax_backward(data_and_mask, rng):
    ours, theirs = _pair(*data_and_mask, requires_grad=True)
    rj, rt = ours.softmax(1), theirs.softmax(1)
    upstream = rng.standard_normal((3, 4)).astype(np.float32)
    rj.backward(jitorch.tensor(upstream))
    rt.backward(torch.masked.masked_tensor(torch.tensor(upstream), theirs.get_mask()))
    _assert_same(ours.grad, theirs.grad, atol=1e-5)


def test_to_tensor_get_data_and_members(data_and_mask):
    ours, theirs = _pair(*data_and_mask, requires_grad=True)
    np.testing.assert_array_equal(ours.to_tensor(-7.0).detach().numpy(), theirs.to_tensor(-7.0).detach().numpy())
    assert tuple(ours.shape) == tuple(theirs.shape) and ours.dim() == theirs.dim() == 2
    assert ours.requires_grad and theirs.requires_grad
    assert not jitorch.masked.is_masked_tensor(jitorch.ones(2))
    ours.get_data().sum().backward()
    theirs.get_data().sum().backward()
    _assert_same(ours.grad, theirs.grad)


def test_as_masked_tensor_keeps_the_graph(data_and_mask):
    data, mask = data_and_mask
    xj = jitorch.tensor(data, requires_grad=True)
    xt = torch.tensor(data, requires_grad=True)
    jitorch.masked.as_masked_tensor(xj * 2, jitorch.tensor(mask)).sum().backward()
    torch.masked.as_masked_tensor(xt * 2, torch.tensor(mask)).sum().backward()
    theirs = xt.grad.get_data() if torch.masked.is_masked_tensor(xt.grad) else xt.grad  # torch: a MaskedTensor
    np.testing.assert_allclose(xj.grad.numpy()[mask], theirs.numpy()[mask])


@pytest.mark.parametrize("make,error,message", [
    (lambda lib: (lib.ones(2, 3), lib.ones(2, 3)), TypeError, "mask must have dtype bool"),
    (lambda lib: ([1.0], lib.ones(1, dtype=lib.bool)), TypeError, "data must be a Tensor"),
    (lambda lib: (lib.ones(2), [True, False]), TypeError, "mask must be a Tensor"),
    (lambda lib: (lib.ones(2, 3), lib.ones(3, dtype=lib.bool)), ValueError, "data.dim\\(\\) must equal mask.dim"),
    (lambda lib: (lib.ones(2, 3), lib.ones(3, 2, dtype=lib.bool)), ValueError, "data.size\\(\\) must equal"),
    (lambda lib: (lib.ones(2, dtype=lib.uint8), lib.ones(2, dtype=lib.bool)), TypeError, "is not supported"),
], ids=["float_mask", "list_data", "list_mask", "dims", "sizes", "uint8"])
def test_construction_errors_match_torch(make, error, message):
    for lib in (jitorch, torch):
        with pytest.raises(error, match=message):
            lib.masked.masked_tensor(*make(lib))


def test_construction_warns_as_torch():
    for lib in (jitorch, torch):
        with pytest.warns(UserWarning, match="prototype stage"):
            lib.masked.masked_tensor(lib.ones(2), lib.ones(2, dtype=lib.bool))
        with pytest.warns(UserWarning, match="not recommended to create a MaskedTensor with a tensor that requires"):
            lib.masked.masked_tensor(lib.ones(2, requires_grad=True), lib.ones(2, dtype=lib.bool))


@pytest.mark.parametrize("name,args", [("sum", (1,)), ("amax", (1,)), ("prod", (0,)), ("logsumexp", (1,)),
                                       ("softmax", (1,)), ("cumsum", (1,)), ("mean", (1,)), ("norm", (2.0, 1)),
                                       ("amin", (None,)), ("normalize", (2.0, 1))], ids=str)
def test_functional_ops_take_a_masked_tensor(name, args, data_and_mask):
    ours, theirs = _pair(*data_and_mask)
    rj = getattr(jitorch.masked, name)(ours, *args)
    rt = getattr(torch.masked, name)(theirs, *args)
    assert isinstance(rj, jitorch.Tensor) and not jitorch.masked.is_masked_tensor(rj)
    np.testing.assert_allclose(rj.numpy(), rt.numpy(), atol=1e-6, rtol=1e-5, equal_nan=True)
