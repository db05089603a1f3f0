"""jitorch.masked's functional ops against torch.masked: values, dtypes and gradients (random upstream
gradients), masks of the input's shape and broadcast ones, fully masked-out rows, 0-d and empty inputs."""
import math

import numpy as np
import pytest
import torch

import jitorch
import jitorch.masked  # noqa: F401  (the package registers itself here until jitorch/__init__ imports it)

DTYPES = {"float32": (np.float32, jitorch.float32, torch.float32),
          "float64": (np.float64, jitorch.float64, torch.float64)}

# (name, positional args after the input, whether the result is differentiable)
REDUCTIONS = [("sum", (1,)), ("sum", ((0, 1),)), ("sum", (None,)), ("prod", (1,)), ("prod", ((0, 1),)),
              ("amax", (1,)), ("amin", (0,)), ("amax", (None,)), ("argmax", (1,)), ("argmin", (0,)),
              ("mean", (1,)), ("mean", (None,)), ("median", (1,)), ("logsumexp", (1,)), ("logsumexp", (None,)),
              ("norm", (2.0, 1)), ("norm", (1.0, None)), ("norm", (math.inf, 1)), ("norm", (-math.inf, 0)),
              ("var", (1,)), ("std", (0,)), ("var", (None,)), ("std", ((0, 1),))]
SCANS = [("cumsum", (1,)), ("cumprod", (0,)), ("softmax", (1,)), ("log_softmax", (0,)), ("softmin", (-1,)),
         ("normalize", (2.0, 1)), ("normalize", (1.0, 0))]
NOT_DIFFERENTIABLE = {"argmax", "argmin"}


def _pair(array, requires_grad=False):
    """The same values as a jitorch and a torch tensor."""
    return (jitorch.tensor(array, requires_grad=requires_grad), torch.tensor(array, requires_grad=requires_grad))


def _assert_same(ours, theirs, atol=1e-6, rtol=1e-5):
    assert str(ours.dtype).rsplit(".", 1)[-1] == str(theirs.dtype).rsplit(".", 1)[-1], (ours.dtype, theirs.dtype)
    assert tuple(ours.shape) == tuple(theirs.shape), (ours.shape, theirs.shape)
    np.testing.assert_allclose(ours.detach().numpy(), theirs.detach().numpy(), atol=atol, rtol=rtol,
                               equal_nan=True)


def _check(name, args, x_np, mask_np, rng, kwargs=None, grad=True):
    """Run ``name`` in both libraries, compare values, dtypes and (``grad``) input gradients."""
    kwargs = dict(kwargs or {})
    differentiable = grad and name not in NOT_DIFFERENTIABLE and x_np.dtype.kind == "f"
    jx, tx = _pair(x_np, requires_grad=differentiable)
    if mask_np is not None:
        kwargs_j = dict(kwargs, mask=jitorch.tensor(mask_np))
        kwargs_t = dict(kwargs, mask=torch.tensor(mask_np))
    else:
        kwargs_j = kwargs_t = kwargs
    ours = getattr(jitorch.masked, name)(jx, *args, **kwargs_j)
    theirs = getattr(torch.masked, name)(tx, *args, **kwargs_t)
    _assert_same(ours, theirs)
    if differentiable and theirs.requires_grad:
        upstream = rng.standard_normal(tuple(theirs.shape)).astype(x_np.dtype)
        ours.backward(jitorch.tensor(upstream))
        theirs.backward(torch.tensor(upstream))
        _assert_same(jx.grad, tx.grad, atol=1e-5, rtol=1e-4)


def _mask(rng, shape, fully_masked_row=True):
    mask = rng.random(shape) < 0.6
    if fully_masked_row and len(shape) == 2 and shape[0] > 1:
        mask[1] = False
    return mask


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name,args", REDUCTIONS + SCANS, ids=lambda v: str(v))
def test_full_shape_mask_with_a_fully_masked_row(name, args, dtype, rng):
    x = rng.standard_normal((4, 5)).astype(DTYPES[dtype][0])
    _check(name, args, x, _mask(rng, (4, 5)), rng)


@pytest.mark.parametrize("mask_shape", [(5,), (4, 1), (1, 5), ()])
@pytest.mark.parametrize("name,args", REDUCTIONS + SCANS, ids=lambda v: str(v))
def test_broadcast_masks(name, args, mask_shape, rng):
    x = rng.standard_normal((4, 5))
    mask = np.array(True) if mask_shape == () else _mask(rng, mask_shape)
    if mask_shape == (5,):
        mask[:2] = [True, False]  # at least one kept, one masked out
    _check(name, args, x, mask, rng)


@pytest.mark.parametrize("name,args", REDUCTIONS + SCANS, ids=lambda v: str(v))
def test_without_mask_is_the_plain_op(name, args, rng):
    _check(name, args, rng.standard_normal((3, 4)), None, rng)


@pytest.mark.parametrize("name,args", [(n, a) for n, a in REDUCTIONS + SCANS
                                       if a[-1] is None or a[-1] in (0, -1)],
                         ids=lambda v: str(v))
@pytest.mark.parametrize("kept", [True, False])
def test_zero_dim_input(name, args, kept, rng):
    _check(name, args, np.array(rng.standard_normal()), np.array(kept), rng)


@pytest.mark.parametrize("name,args", [("sum", (1,)), ("prod", (1,)), ("amax", (1,)), ("mean", (1,)),
                                       ("logsumexp", (1,)), ("norm", (2.0, 1)), ("var", (1,)), ("cumsum", (0,)),
                                       ("softmax", (1,)), ("normalize", (2.0, 1))], ids=lambda v: str(v))
def test_empty_input(name, args, rng):
    _check(name, args, np.zeros((0, 3)), np.zeros((0, 3), bool), rng)


@pytest.mark.parametrize("name,args", [("sum", (1,)), ("prod", (0,)), ("amax", (1,)), ("amin", (None,)),
                                       ("argmax", (1,)), ("cumsum", (1,)), ("cumprod", (1,)), ("median", (1,)),
                                       ("var", (1,)), ("std", (None,))], ids=lambda v: str(v))
@pytest.mark.parametrize("dtype", [np.int64, np.int32, np.uint8, np.bool_])
def test_integer_and_bool_inputs(name, args, dtype, rng):
    if dtype is np.bool_ and name in ("cumsum", "cumprod"):
        return  # test_bool_scans_are_refused
    x = rng.integers(0, 5, (4, 5)).astype(dtype)
    mask = _mask(rng, (4, 5), fully_masked_row=name != "median")
    if dtype is np.bool_ and name in ("amax", "amin", "argmax", "var", "std"):
        # torch has no max/min identity for bool (where(mask, x, None) fails); var subtracts from a bool tensor
        with pytest.raises((TypeError, RuntimeError)):
            torch_fn = getattr(torch.masked, name)
            torch_fn(torch.tensor(x), *args, mask=torch.tensor(mask))
        with pytest.raises((TypeError, RuntimeError)):
            getattr(jitorch.masked, name)(jitorch.tensor(x), *args, mask=jitorch.tensor(mask))
        return
    _check(name, args, x, mask, rng)


@pytest.mark.parametrize("name", ["cumsum", "cumprod"])
def test_bool_scans_are_refused(name, rng):
    x = rng.random((2, 3)) < 0.5
    with pytest.raises(NotImplementedError):
        getattr(torch.masked, name)(torch.tensor(x), 1, mask=torch.tensor(x))
    with pytest.raises(NotImplementedError):
        getattr(jitorch.masked, name)(jitorch.tensor(x), 1, mask=jitorch.tensor(x))
    with pytest.raises(NotImplementedError, match=f"{name}_out_cpu\" not implemented for 'Bool'"):
        getattr(jitorch, name)(jitorch.tensor([1, 2]), 0, dtype=jitorch.bool)


@pytest.mark.parametrize("name,args,kwargs", [
    ("sum", (1,), {"keepdim": True}), ("sum", (1,), {"dtype": "float64"}), ("prod", (0, ), {"keepdim": True}),
    ("amax", (1,), {"keepdim": True}), ("argmin", (1,), {"keepdim": True}), ("mean", (1,), {"keepdim": True}),
    ("mean", (None,), {"keepdim": True}), ("mean", (1,), {"dtype": "float64"}), ("var", (1,), {"correction": 0}),
    ("var", (1,), {"unbiased": False}), ("std", (1,), {"correction": 3, "keepdim": True}),
    ("var", (None,), {"keepdim": True}), ("logsumexp", (1,), {"keepdim": True}), ("norm", (2.0, 1), {"keepdim": True}),
    ("cumsum", (1,), {"dtype": "float64"}), ("softmax", (1,), {"dtype": "float64"}),
    ("normalize", (2.0, 1), {"eps": 0.5}), ("median", (0,), {"keepdim": True})], ids=lambda v: str(v))
def test_keyword_arguments(name, args, kwargs, rng):
    x = rng.standard_normal((4, 5)).astype(np.float32)
    _check_kwargs(name, args, kwargs, x, _mask(rng, (4, 5)), rng)


def _check_kwargs(name, args, kwargs, x, mask, rng):
    jx, tx = _pair(x, requires_grad=True)
    kj = {k: getattr(jitorch, v) if k == "dtype" else v for k, v in kwargs.items()}
    kt = {k: getattr(torch, v) if k == "dtype" else v for k, v in kwargs.items()}
    ours = getattr(jitorch.masked, name)(jx, *args, mask=jitorch.tensor(mask), **kj)
    theirs = getattr(torch.masked, name)(tx, *args, mask=torch.tensor(mask), **kt)
    _assert_same(ours, theirs)
    if theirs.requires_grad:
        upstream = rng.standard_normal(tuple(theirs.shape))
        ours.backward(jitorch.tensor(upstream).to(ours.dtype))
        theirs.backward(torch.tensor(upstream).to(theirs.dtype))
        _assert_same(jx.grad, tx.grad, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("dtype", DTYPES)
def test_logaddexp_with_two_masks(dtype, rng):
    np_dtype = DTYPES[dtype][0]
    a, b = (rng.standard_normal((3, 4)).astype(np_dtype) for _ in range(2))
    ma, mb = rng.random((3, 4)) < 0.5, rng.random((4,)) < 0.5
    ma[0, :] = False
    ja, ta = _pair(a, True)
    jb, tb = _pair(b, True)
    ours = jitorch.masked.logaddexp(ja, jb, input_mask=jitorch.tensor(ma), other_mask=jitorch.tensor(mb))
    theirs = torch.masked.logaddexp(ta, tb, input_mask=torch.tensor(ma), other_mask=torch.tensor(mb))
    _assert_same(ours, theirs)
    upstream = rng.standard_normal((3, 4)).astype(np_dtype)
    ours.backward(jitorch.tensor(upstream))
    theirs.backward(torch.tensor(upstream))
    _assert_same(ja.grad, ta.grad)
    _assert_same(jb.grad, tb.grad)


def test_non_bool_mask_is_converted(rng):
    x = rng.standard_normal((3, 4))
    mask = rng.integers(0, 2, (3, 4))
    _check("sum", (1,), x, mask, rng)
    _check("softmax", (1,), x, mask.astype(np.float32), rng)


@pytest.mark.parametrize("name,args", [("sum", (1,)), ("mean", (1,)), ("var", (1,)), ("softmax", (1,)),
                                       ("logsumexp", (0,)), ("normalize", (2.0, 1)), ("cumprod", (1,)),
                                       ("norm", (3.0, 1)), ("median", (1,)), ("amax", (1,))], ids=lambda v: str(v))
def test_gradcheck_float64(name, args, rng):
    x = jitorch.tensor(rng.standard_normal((3, 4)), requires_grad=True)
    mask = jitorch.tensor(np.array([[True, False, True, True], [True, True, True, False], [False, True, True, True]]))
    fn = getattr(jitorch.masked, name)
    assert jitorch.autograd.gradcheck(lambda t: fn(t, *args, mask=mask), (x,))


@pytest.mark.parametrize("call,error", [
    (lambda lib, x, mask: lib.masked.sum(x, 2, mask=mask), IndexError),
    (lambda lib, x, mask: lib.masked.sum(x, (1, 1), mask=mask), RuntimeError),
    (lambda lib, x, mask: lib.masked.sum(x, 1, mask=mask.reshape(1, 3, 4)), IndexError),
    (lambda lib, x, mask: lib.masked.mean(x.to(lib.int64), 1, mask=mask), ValueError),
    (lambda lib, x, mask: lib.masked.mean(x, 1, dtype=lib.int32, mask=mask), ValueError),
    (lambda lib, x, mask: lib.masked.var(x, 1, unbiased=True, correction=1, mask=mask), AssertionError),
], ids=["dim_out_of_range", "repeated_dim", "mask_of_more_dims", "mean_of_integers", "mean_to_integers",
        "unbiased_and_correction"])
def test_errors_match_torch(call, error, rng):
    x = rng.standard_normal((3, 4))
    mask = rng.random((3, 4)) < 0.5
    messages = []
    for lib in (jitorch, torch):
        with pytest.raises(error) as caught:
            call(lib, lib.tensor(x), lib.tensor(mask))
        messages.append(str(caught.value).replace("jitorch.", "torch."))
    assert messages[0].startswith(messages[1]), messages


def test_median_of_integers_refuses_fully_masked_rows():
    x = np.arange(6).reshape(2, 3)
    mask = np.array([[True, False, True], [False, False, False]])
    for module, lib in ((jitorch.masked, jitorch), (torch.masked, torch)):
        with pytest.raises(ValueError, match="expects no fully masked out rows"):
            module.median(lib.tensor(x), 1, mask=lib.tensor(mask))


def test_fully_masked_out_identities_match_torch():
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    mask = np.zeros((2, 3), bool)
    for name in ("sum", "prod", "amax", "amin", "argmax", "argmin", "mean", "logsumexp", "var", "std", "median"):
        ours = getattr(jitorch.masked, name)(jitorch.tensor(x), 1, mask=jitorch.tensor(mask))
        theirs = getattr(torch.masked, name)(torch.tensor(x), 1, mask=torch.tensor(mask))
        _assert_same(ours, theirs)


@pytest.mark.parametrize("name,args", [("sum", ((0, 2),)), ("amax", ((2, 0),)), ("mean", ((-1, 0),)),
                                       ("var", ((0, 2),)), ("prod", ((1, 2),)), ("logsumexp", ((0, 1, 2),)),
                                       ("norm", (2.0, (0, 2))), ("softmax", (2,)), ("cumsum", (0,))], ids=str)
def test_three_dims_non_contiguous_input_and_mask(name, args, rng):
    x_np = rng.standard_normal((5, 3, 4))
    mask_np = rng.random((4, 1, 5)) < 0.6
    jx = jitorch.tensor(x_np).permute(2, 1, 0).requires_grad_()
    tx = torch.tensor(x_np).permute(2, 1, 0).requires_grad_()
    jm, tm = jitorch.tensor(mask_np), torch.tensor(mask_np)
    ours = getattr(jitorch.masked, name)(jx, *args, mask=jm)
    theirs = getattr(torch.masked, name)(tx, *args, mask=tm)
    _assert_same(ours, theirs)
    upstream = rng.standard_normal(tuple(theirs.shape))
    ours.backward(jitorch.tensor(upstream))
    theirs.backward(torch.tensor(upstream))
    _assert_same(jx.grad, tx.grad, atol=1e-5, rtol=1e-4)
