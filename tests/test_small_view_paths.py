"""The direct paths of small views, basic indexing, in-place fills/copies and creation functions (taken for CPU
tensors and plain int arguments with no mode active) keep torch's results: values, strides, shared memory and
version counters, grad_fn names, gradients, and errors for the arguments they hand back to the general path."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import jitorch
from helpers import check_error, check_op

RNG = np.random.default_rng(11)
X = RNG.standard_normal((4, 6)).astype(np.float32)
X3 = RNG.standard_normal((2, 3, 4)).astype(np.float32)
ROW = RNG.standard_normal((1, 6)).astype(np.float32)

VIEWS = {
    "view_flat": lambda x: x.view(-1),
    "view_size": lambda x: x.view(x.shape[1], x.shape[0]),
    "view_tuple": lambda x: x.view((2, -1)),
    "reshape_list": lambda x: x.reshape([-1, 2]),
    "permute_args": lambda x: x.permute(1, 0),
    "permute_list": lambda x: x.permute([1, 0]),
    "permute_neg": lambda x: x.permute(-1, 0),
    "transpose_neg": lambda x: x.transpose(-1, -2),
    "t": lambda x: x.t(),
    "T": lambda x: x.T,
    "unsqueeze_end": lambda x: x.unsqueeze(-1),
    "unsqueeze_mid": lambda x: x.unsqueeze(1),
    "squeeze_all": lambda x: x.unsqueeze(0).squeeze(),
    "squeeze_neg": lambda x: x.unsqueeze(-1).squeeze(-1),
    "squeeze_kept": lambda x: x.squeeze(0),
    "expand_lead": lambda x: x[:1].expand(3, 5, 6),
    "expand_minus_one": lambda x: x[:1].expand(2, -1),
    "expand_same": lambda x: x.expand(-1, 6),
    "slice": lambda x: x[1:3],
    "slice_step": lambda x: x[::2, 1::3],
    "slice_clamped": lambda x: x[-10:10, 5:2],
    "int": lambda x: x[-1],
    "int_pair": lambda x: x[1, -2],
    "int_slice": lambda x: x[:, 2],
    "narrow": lambda x: x.narrow(1, -4, 2),
    "select": lambda x: x.select(-1, 3),
    "chunk": lambda x: x.chunk(4, 1),
    "split_sizes": lambda x: x.split([1, 3], 0),
    "unbind": lambda x: x.unbind(1),
}


def _strides(out):
    return [o.stride() for o in out] if isinstance(out, (tuple, list)) else out.stride()


@pytest.mark.parametrize("layout", ["contiguous", "transposed", "sliced"])
@pytest.mark.parametrize("name", sorted(VIEWS))
def test_views_match_torch_values_strides_and_gradients(name, layout):
    fn = VIEWS[name]
    # (exact values; an expand's gradient is a sum, in torch's order only to rounding)
    ran = check_op(fn, fn, [X], atol=0, rtol=0, layout=layout, grad_atol=1e-5, grad_rtol=1e-6)
    if ran is not None:
        jt, th = ran
        assert _strides(jt) == _strides(th)


@pytest.mark.parametrize("name", sorted(VIEWS))
def test_views_record_torchs_grad_fn_names(name):
    fn = VIEWS[name]
    outs = [fn(lib.tensor(X, requires_grad=True)) for lib in (jitorch, torch)]
    names = [[type(o.grad_fn).__name__ for o in (out if isinstance(out, tuple) else (out,))] for out in outs]
    assert names[0] == names[1]


def test_views_share_memory_and_version_counter():
    x = jitorch.zeros(4, 6)
    views = [x.view(-1), x.reshape(6, 4), x.t(), x.permute(1, 0), x.unsqueeze(0), x[1:3], x[2], x.chunk(2)[1],
             x[:1].expand(3, 6)]
    x.add_(1)
    for v in views:
        assert v._version == x._version == 1 and v._base is x
        assert float(v.sum()) == v.numel()
    views[0][5] = 7.0  # a write through a view reaches the base and bumps the shared counter
    assert float(x[0, 5]) == 7.0 and x._version == 2 and views[5]._version == 2
    nested = x[1:][0]
    assert nested._base is x


def test_views_taken_without_grad_keep_torchs_refusal():
    for lib in (jitorch, torch):
        a = lib.ones(4, 6, requires_grad=True) * 1
        with lib.no_grad():
            v = a[1:3]
        with pytest.raises(RuntimeError, match="no_grad mode"):
            v.mul_(2)


@pytest.mark.parametrize("make", [
    lambda lib, x: x.view(5, -1), lambda lib, x: x.view(-1, -1), lambda lib, x: x.t().view(-1),
    lambda lib, x: x.reshape(7), lambda lib, x: x.permute(0, 0), lambda lib, x: x.permute(0, 1, 2),
    lambda lib, x: x.transpose(0, 2), lambda lib, x: x.unsqueeze(3), lambda lib, x: x.squeeze(2),
    lambda lib, x: x.expand(3, 6), lambda lib, x: x.expand(-1, 2, 6), lambda lib, x: x.expand(6),
    lambda lib, x: x[4], lambda lib, x: x[0, 0, 0], lambda lib, x: x[::-1], lambda lib, x: x[:, ::0],
    lambda lib, x: x[1.5:2], lambda lib, x: x[-5], lambda lib, x: x.__setitem__((1, 6), 1.0),
    lambda lib, x: x.__setitem__(slice(0, 2.5), 0.0), lambda lib, x: x.__setitem__(0, 1 + 1j),
    lambda lib, x: x.narrow(0, 3, 2), lambda lib, x: x.split([2, 3]), lambda lib, x: x.split([5, -1]),
])
def test_refused_arguments_keep_torchs_errors(make):
    check_error(lambda x: make(jitorch, x), lambda x: make(torch, x), [X])


def test_inplace_fills_and_copies_match_torch():
    src = RNG.standard_normal((4, 6)).astype(np.float32)

    def run(lib, x, s):
        a = x.detach().clone()
        b = a[1:3]
        b.zero_()
        a[:, 4] = 2.5
        a[0] = -1
        c = a.t()
        c[1:3].fill_(3)
        d = a.detach().clone()
        d.copy_(s)
        d[2:].copy_(d[:2])  # source and destination in one buffer
        d.t()[4:].copy_(d.t()[:2])
        e = lib.zeros(4, 6, dtype=lib.int32)
        e[1:3] = 7
        e.fill_(-3.9)
        h = lib.zeros(3, dtype=lib.float16)
        h.fill_(60000.5)
        h[0] = 1e-8
        return a, d, e, h

    check_op(lambda *a: run(jitorch, *a), lambda *a: run(torch, *a), [X, src], atol=0, rtol=0, grad=False)


def test_inplace_writes_bump_versions_and_keep_refusals():
    for lib in (jitorch, torch):
        x = lib.zeros(4, 6)
        v = x[1:3]
        v.fill_(1.0)
        x.zero_()
        x.copy_(lib.ones(4, 6))
        x[0] = 2.0
        assert x._version == 4 and v._version == 4
        leaf = lib.zeros(3, requires_grad=True)
        for write in (lambda: leaf.zero_(), lambda: leaf.fill_(1.0), lambda: leaf.copy_(lib.ones(3)),
                      lambda: leaf[1:].fill_(2.0)):
            with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
                write()
        with lib.no_grad():  # an optimizer's writes into a parameter
            leaf.zero_()
            leaf.fill_(0.5)
            leaf.copy_(lib.full((3,), 2.0))
            leaf[0] = 1.0
        assert leaf.tolist() == [1.0, 2.0, 2.0] and leaf._version == 4
        wide = lib.zeros(1, 2).expand(3, 2)
        with pytest.raises(RuntimeError, match="single memory location"):
            wide.add_(1)
        wide.zero_()  # a fill of overlapping elements is allowed
        with lib.inference_mode():
            inf = lib.zeros(3)
        with pytest.raises(RuntimeError, match="Inplace update to inference tensor"):
            inf.zero_()


def test_writes_from_a_tensor_that_requires_grad_still_record():
    grads = []
    for lib in (jitorch, torch):
        w = lib.ones(3, requires_grad=True)
        z = lib.zeros(3)
        z.copy_(w * 2)
        z[1:].fill_(w.sum())
        assert type(z.grad_fn).__name__ == "CopySlices"
        z.sum().backward()
        grads.append(w.grad.tolist())
    assert grads[0] == grads[1] == [4.0, 2.0, 2.0]


@pytest.mark.parametrize("make", [
    lambda lib: lib.zeros(2, 3), lambda lib: lib.zeros((2, 3), dtype=lib.int16), lambda lib: lib.ones([4]),
    lambda lib: lib.ones(2, dtype=lib.bool), lambda lib: lib.ones(3, dtype=lib.float16), lambda lib: lib.ones(()),
    lambda lib: lib.empty(0, 3).shape, lambda lib: lib.full((2,), 2 ** 60), lambda lib: lib.full((2,), 0.1),
    lambda lib: lib.zeros_like(lib.ones(2, 3).t()).stride(), lambda lib: lib.ones_like(lib.ones(2, 3)[:, ::2]),
    lambda lib: lib.ones_like(lib.ones(2, 3, dtype=lib.bfloat16)), lambda lib: lib.zeros_like(lib.ones(2, 3).t()),
    lambda lib: lib.empty_like(lib.ones(2, 3).t()).stride(), lambda lib: lib.zeros_like(lib.ones(3), dtype=lib.int8),
    lambda lib: lib.arange(5), lambda lib: lib.arange(2, 9), lambda lib: lib.arange(9, 2, -2),
    lambda lib: lib.arange(-5, 5, 3), lambda lib: lib.arange(3, 3), lambda lib: lib.arange(4, dtype=lib.int64),
    lambda lib: lib.arange(2 ** 62, 2 ** 62 + 3), lambda lib: lib.arange(0, 10, 2 ** 62),
])
def test_creation_matches_torch(make):
    jt, th = make(jitorch), make(torch)
    if isinstance(th, torch.Tensor):
        assert jt.dtype.name == str(th.dtype).removeprefix("torch.") and jt.stride() == th.stride()
        assert jt.tolist() == th.tolist()
    else:
        assert tuple(jt) == tuple(th)


def test_creation_requires_grad_and_errors():
    for lib in (jitorch, torch):
        assert lib.zeros_like(lib.ones(2), requires_grad=True).requires_grad
        assert lib.randn(2, 2, requires_grad=True).is_leaf
        for bad in (lambda: lib.zeros(2, -1), lambda: lib.arange(10, 0), lambda: lib.arange(0, 5, 0),
                    lambda: lib.randn(-2)):
            with pytest.raises(RuntimeError):
                bad()


@pytest.mark.parametrize("fn", ["rand", "randn"])
@pytest.mark.parametrize("shape", [(3,), (32, 32), (0, 4)])
def test_random_draws_are_the_general_paths(fn, shape):
    draw = getattr(jitorch, fn)
    jitorch.manual_seed(5)
    quick = draw(*shape)
    jitorch.manual_seed(5)
    general = draw(size=shape)  # (the keyword form takes the general path)
    assert quick.dtype is general.dtype is jitorch.float32
    assert quick.numpy().tobytes() == general.numpy().tobytes()
    jitorch.manual_seed(5)
    quick = draw(*shape, dtype=jitorch.float64)
    jitorch.manual_seed(5)
    general = draw(*shape, dtype=jitorch.float64, device="cpu")  # (a device given: the general path)
    assert quick.numpy().tobytes() == general.numpy().tobytes()
