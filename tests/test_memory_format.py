"""Memory formats against PyTorch: channels_last/channels_last_3d layouts (strides, ``is_contiguous``,
``suggest_memory_format``), the conversions that make them, the ops PyTorch keeps in them, and modules and gradients
converted with ``to(memory_format=...)``."""
import io
import pickle

import numpy as np
import pytest
import torch
import torch._prims_common as prims
from helpers import assert_same

import jitorch
from jitorch._memory_format import suggest_memory_format

FORMATS = ["contiguous_format", "channels_last", "channels_last_3d", "preserve_format"]
# Not empty tensors: a NumPy array of size 0 has zero strides, so no empty tensor is channels-last in jitorch.
SHAPES = [(2, 3, 4, 5), (2, 3, 1, 1), (2, 1, 4, 4), (1, 3, 4, 1), (2, 3, 2, 3, 4), (2, 1, 1, 1, 1), (3, 4),
          (2, 3, 4)]


def _both(array, fn):
    return fn(jitorch, jitorch.from_numpy(array.copy())), fn(torch, torch.from_numpy(array.copy()))


def _describe(t, lib):
    """Everything layout-related PyTorch reports for ``t``."""
    out = {"stride": t.stride(), "contiguous": t.is_contiguous()}
    for name in FORMATS:
        out[name] = t.is_contiguous(memory_format=getattr(lib, name))
    suggested = suggest_memory_format(t) if lib is jitorch else prims.suggest_memory_format(t)
    out["suggest"] = str(suggested).split(".")[-1]
    return out


def _same_layout(jt, th, what=""):
    assert _describe(jt, jitorch) == _describe(th, torch), what


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("fmt", FORMATS[:3])
def test_to_and_contiguous_lay_out_as_torch(shape, fmt):
    a = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)
    for convert in (lambda lib, t: t.to(memory_format=getattr(lib, fmt)),
                    lambda lib, t: t.contiguous(memory_format=getattr(lib, fmt)),
                    lambda lib, t: t.clone(memory_format=getattr(lib, fmt)),
                    lambda lib, t: t.to(lib.float64, memory_format=getattr(lib, fmt))):
        try:
            th = convert(torch, torch.from_numpy(a.copy()))
        except RuntimeError as e:
            with pytest.raises(RuntimeError, match="required rank"):
                convert(jitorch, jitorch.from_numpy(a.copy()))
            assert "required rank" in str(e)
            continue
        jt = convert(jitorch, jitorch.from_numpy(a.copy()))
        _same_layout(jt, th, f"{shape} {fmt}")
        assert_same(jt, th)


def test_empty_tensors_report_row_major_strides():
    for shape in ((0, 3, 4, 4), (2, 0, 3), (0,)):
        assert jitorch.empty(shape).stride() == torch.empty(shape).stride()
        assert jitorch.zeros(shape).is_contiguous()


def test_conversions_return_self_as_torch():
    # to() aliases when the layout already suggests the format; contiguous() when it is contiguous in it.
    for lib in (jitorch, torch):
        x = lib.ones(2, 3, 4, 4).to(memory_format=lib.channels_last)
        assert x.to(memory_format=lib.channels_last) is x and x.contiguous(memory_format=lib.channels_last) is x
        assert x.to(memory_format=lib.contiguous_format) is not x and x.contiguous() is not x
        t = lib.ones(3, 4).t()
        assert t.to(memory_format=lib.contiguous_format) is t  # suggest_memory_format is contiguous_format
        small = lib.ones(2, 3, 1, 1)
        assert small.contiguous(memory_format=lib.channels_last) is small
        assert small.to(memory_format=lib.channels_last) is not small
        assert not x.is_contiguous(memory_format=lib.preserve_format)
        with pytest.raises(RuntimeError):
            x.contiguous(memory_format=lib.preserve_format)


@pytest.mark.parametrize("source", ["channels_last", "transposed", "sliced", "channels_last_3d"])
def test_like_functions_and_clone_preserve_the_layout(source):
    def make(lib):
        if source == "transposed":
            return lib.ones(3, 4, 5).permute(2, 0, 1)
        if source == "sliced":  # not dense: a dense layout in the same stride order
            return lib.ones(2, 3, 4, 6).to(memory_format=lib.channels_last)[:, :, :, ::2]
        if source == "channels_last_3d":
            return lib.ones(2, 3, 2, 2, 2).to(memory_format=lib.channels_last_3d)
        return lib.ones(2, 3, 4, 4).to(memory_format=lib.channels_last)

    for fn in (lambda lib, x: lib.empty_like(x), lambda lib, x: lib.zeros_like(x), lambda lib, x: lib.ones_like(x),
               lambda lib, x: lib.full_like(x, 2.0), lambda lib, x: lib.rand_like(x), lambda lib, x: lib.randn_like(x),
               lambda lib, x: lib.zeros_like(x, dtype=lib.float64), lambda lib, x: x.clone(),
               lambda lib, x: lib.empty_like(x, memory_format=lib.contiguous_format)):
        _same_layout(fn(jitorch, make(jitorch)), fn(torch, make(torch)), source)
    assert jitorch.full_like(make(jitorch), 2.0).eq(2).all()


def test_memory_format_objects():
    assert str(jitorch.channels_last) == "jitorch.channels_last" and isinstance(jitorch.channels_last,
                                                                                jitorch.memory_format)
    assert len({jitorch.channels_last, jitorch.channels_last_3d, jitorch.contiguous_format,
                jitorch.preserve_format}) == 4
    assert pickle.loads(pickle.dumps(jitorch.channels_last)) is jitorch.channels_last


X = np.random.default_rng(0).standard_normal((2, 3, 6, 6)).astype(np.float32)
W = np.random.default_rng(1).standard_normal((4, 3, 3, 3)).astype(np.float32)
OPS = {
    "add_scalar": lambda lib, x, w: x + 1, "mul_self": lambda lib, x, w: x * x, "relu": lambda lib, x, w: x.relu(),
    "sigmoid": lambda lib, x, w: x.sigmoid(), "bias_add": lambda lib, x, w: x + lib.ones(3, 1, 1),
    "where": lambda lib, x, w: lib.where(x > 0, x, 0.0), "double": lambda lib, x, w: x.double(),
    "conv2d": lambda lib, x, w: lib.nn.functional.conv2d(x, w, padding=1),
    "conv2d_cl_weight_only": lambda lib, x, w: lib.nn.functional.conv2d(x.contiguous(), w),
    "conv_transpose2d": lambda lib, x, w: lib.nn.functional.conv_transpose2d(x, w.transpose(0, 1), stride=2),
    "max_pool2d": lambda lib, x, w: lib.nn.functional.max_pool2d(x, 2),
    "max_pool2d_indices": lambda lib, x, w: lib.nn.functional.max_pool2d(x, 3, 2, 1, return_indices=True)[1],
    "avg_pool2d": lambda lib, x, w: lib.nn.functional.avg_pool2d(x, 3, 2, 1),
    "adaptive_avg_pool2d": lambda lib, x, w: lib.nn.functional.adaptive_avg_pool2d(x, 4),
    "adaptive_max_pool2d": lambda lib, x, w: lib.nn.functional.adaptive_max_pool2d(x, 4),
    "interpolate": lambda lib, x, w: lib.nn.functional.interpolate(x, scale_factor=2, mode="bilinear"),
    "batch_norm": lambda lib, x, w: lib.nn.functional.batch_norm(x, None, None, training=True),
    "cat": lambda lib, x, w: lib.cat([x, x * 2], 1), "sum_keepdim": lambda lib, x, w: x.sum((2, 3), keepdim=True),
    "slice": lambda lib, x, w: x[:, 1:, ::2], "flatten": lambda lib, x, w: x.flatten(1),
}


@pytest.mark.parametrize("name", sorted(OPS))
def test_ops_on_channels_last_tensors(name):
    # Values and gradients as torch's, and the output and the input gradient in torch's layout.
    results = {}
    for lib in (jitorch, torch):
        x = lib.from_numpy(X.copy()).to(memory_format=lib.channels_last).requires_grad_()
        w = lib.from_numpy(W.copy()).to(memory_format=lib.channels_last).requires_grad_()
        out = OPS[name](lib, x, w)
        if out.is_floating_point():
            (out.double() * lib.linspace(-1, 1, out.numel()).reshape(out.shape)).sum().backward()
        results[lib] = out, x.grad, w.grad
    (jt, jgx, jgw), (th, tgx, tgw) = results[jitorch], results[torch]
    _same_layout(jt, th, name)
    assert_same(jt, th, atol=1e-5, rtol=1e-5)
    for a, b in ((jgx, tgx), (jgw, tgw)):
        assert (a is None) == (b is None)
        if b is not None:
            assert_same(a, b, atol=1e-4, rtol=1e-4)
            _same_layout(a, b, f"{name} grad")


def test_module_to_channels_last_trains_as_torch():
    results = {}
    for lib in (jitorch, torch):
        nn = lib.nn
        lib.manual_seed(0)
        model = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(), nn.Conv2d(4, 2, 1))
        state = {k: lib.from_numpy(np.random.default_rng(i).standard_normal(tuple(v.shape)).astype(np.float32))
                 for i, (k, v) in enumerate(model.state_dict().items()) if v.is_floating_point()}
        model.load_state_dict(state, strict=False)
        weight = model[0].weight
        assert model.to(memory_format=lib.channels_last) is model and model[0].weight is weight
        opt = lib.optim.SGD(model.parameters(), lr=0.1)
        out = model(lib.from_numpy(X.copy()).to(memory_format=lib.channels_last))
        out.square().mean().backward()
        opt.step()
        results[lib] = out, weight, weight.grad, model[1].weight, model[0].bias
    for a, b in zip(results[jitorch], results[torch]):
        _same_layout(a, b)
        assert_same(a, b, atol=1e-4, rtol=1e-4)
    with pytest.raises(RuntimeError, match="required rank 5"):
        jitorch.nn.Conv2d(3, 4, 3).to(memory_format=jitorch.channels_last_3d)


def test_channels_last_tensor_saves_with_its_strides():
    buf = io.BytesIO()
    jitorch.save({"x": jitorch.from_numpy(X.copy()).to(memory_format=jitorch.channels_last)}, buf)
    buf.seek(0)
    th = torch.load(buf)["x"]
    assert th.stride() == (108, 1, 18, 3) and torch.equal(th, torch.from_numpy(X))
    buf = io.BytesIO()
    torch.save({"x": th}, buf)
    buf.seek(0)
    jt = jitorch.load(buf)["x"]
    _same_layout(jt, th)
    np.testing.assert_array_equal(jt.numpy(), X)
