"""``autocast`` against PyTorch's CPU autocast: output dtypes, values within bfloat16 tolerance, float32 gradients of
float32 leaves, nesting, ``enabled=False``, the decorator form and the deprecated ``cpu.amp`` spelling."""
from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

import jitorch
from jitorch._dispatch import MODES

BF16_TOL = dict(rtol=2e-2, atol=2e-2)  # a few bfloat16 ulps (8 mantissa bits) on values of order 1


def arr(*shape, seed=0):
    return np.random.default_rng(seed).uniform(-1, 1, shape).astype(np.float32)


def numpy_of(t):
    return t.detach().float().numpy() if isinstance(t, torch.Tensor) else t.detach().float().numpy()


def _both(fn, arrays, dtype="bfloat16", **kw):
    """(jitorch result, torch result) of ``fn(lib, *tensors)`` run under each library's CPU autocast."""
    results = []
    for lib in (jitorch, torch):
        tensors = [lib.from_numpy(a.copy()) for a in arrays]
        with lib.autocast(device_type="cpu", dtype=getattr(lib, dtype), **kw):
            results.append(fn(lib, *tensors))
    return results


def _assert_same(jt, th, **tol):
    assert str(jt.dtype).split(".")[-1] == str(th.dtype).split(".")[-1], f"dtype {jt.dtype} != {th.dtype}"
    np.testing.assert_allclose(numpy_of(jt), numpy_of(th), **(tol or BF16_TOL))


def _targets(lib, n, classes, seed=1):
    return lib.from_numpy(np.random.default_rng(seed).integers(0, classes, n).astype(np.int64))


def _mha(lib):
    torch.manual_seed(0)
    th = torch.nn.MultiheadAttention(8, 2)
    if lib is torch:
        return th
    jt = jitorch.nn.MultiheadAttention(8, 2)
    jt.load_state_dict({k: jitorch.from_numpy(v.detach().numpy().copy()) for k, v in th.state_dict().items()})
    return jt


# (name, fn(lib, *tensors), input shapes): matmul-family ops run in bfloat16, losses in float32, the rest promote.
CASES = [
    ("mm", lambda lib, a, b: lib.mm(a, b), [(4, 5), (5, 3)]),
    ("matmul_operator", lambda lib, a, b: a @ b, [(2, 4, 5), (5, 3)]),
    ("bmm", lambda lib, a, b: lib.bmm(a, b), [(2, 4, 5), (2, 5, 3)]),
    ("linear", lambda lib, x, w, b: lib.nn.functional.linear(x, w, b), [(4, 5), (3, 5), (3,)]),
    ("conv2d", lambda lib, x, w, b: lib.nn.functional.conv2d(x, w, b, padding=1), [(2, 3, 6, 6), (4, 3, 3, 3), (4,)]),
    ("conv1d", lambda lib, x, w: lib.nn.functional.conv1d(x, w, stride=2), [(2, 3, 9), (4, 3, 3)]),
    ("conv_transpose2d", lambda lib, x, w: lib.nn.functional.conv_transpose2d(x, w, stride=2),
     [(2, 4, 3, 3), (4, 2, 3, 3)]),
    ("einsum", lambda lib, a, b: lib.einsum("ij,kj->ik", a, b), [(4, 5), (3, 5)]),
    ("bf16_plus_fp32", lambda lib, a, b, c: (a @ b) + c, [(4, 5), (5, 3), (4, 3)]),
    ("softmax_of_product", lambda lib, a, b: lib.softmax(a @ b, -1), [(4, 5), (5, 3)]),
    ("relu_of_fp32", lambda lib, a: lib.relu(a), [(4, 5)]),
    ("cross_entropy", lambda lib, a, b: lib.nn.functional.cross_entropy(a @ b, _targets(lib, 4, 3)),
     [(4, 5), (5, 3)]),
    ("nll_loss", lambda lib, a: lib.nn.functional.nll_loss(a.to(lib.bfloat16), _targets(lib, 4, 5)), [(4, 5)]),
    ("binary_cross_entropy", lambda lib, a, b: lib.nn.functional.binary_cross_entropy(
        (a @ b).sigmoid(), lib.full((4, 3), 0.25)), [(4, 5), (5, 3)]),
    ("prod", lambda lib, a: a.to(lib.bfloat16).prod(0), [(3, 4)]),
    ("mse_loss_of_bf16", lambda lib, a, b: lib.nn.functional.mse_loss(a @ b, (a @ b).detach() * 0.5),
     [(4, 5), (5, 3)]),
    ("l1_and_smooth_l1", lambda lib, a, b: lib.nn.functional.l1_loss(a @ b, a @ b * 2)
     + lib.nn.functional.smooth_l1_loss(a @ b, a @ b * 3), [(4, 5), (5, 3)]),
    ("kl_div", lambda lib, a, b: lib.nn.functional.kl_div((a @ b).log_softmax(-1), (a @ b).softmax(-1),
                                                          reduction="batchmean"), [(4, 5), (5, 3)]),
    ("bce_with_logits", lambda lib, a, b: lib.nn.functional.binary_cross_entropy_with_logits(
        a @ b, lib.full((4, 3), 0.5, dtype=lib.bfloat16)), [(4, 5), (5, 3)]),
    ("addmm", lambda lib, c, a, b: lib.addmm(c, a, b), [(4, 3), (4, 5), (5, 3)]),
    ("baddbmm", lambda lib, c, a, b: lib.baddbmm(c, a, b, beta=0.5), [(2, 4, 3), (2, 4, 5), (2, 5, 3)]),
    ("addbmm", lambda lib, c, a, b: lib.addbmm(c, a, b), [(4, 3), (2, 4, 5), (2, 5, 3)]),
    ("sdpa_with_float_mask", lambda lib, q, k, v, m: lib.nn.functional.scaled_dot_product_attention(
        q, k, v, attn_mask=m), [(2, 4, 8), (2, 4, 8), (2, 4, 8), (4, 4)]),
    ("prelu", lambda lib, a, w: lib.nn.functional.prelu(a, w), [(4, 5), (1,)]),
    ("multi_head_attention", lambda lib, q: _mha(lib)(q, q, q)[0], [(3, 2, 8)]),
    ("linalg_inv", lambda lib, a: lib.linalg.inv((a + 3 * lib.eye(3)).to(lib.bfloat16)), [(3, 3)]),
]


@pytest.mark.parametrize("name,fn,shapes", CASES, ids=[c[0] for c in CASES])
def test_ops_under_autocast_match_torch(name, fn, shapes):
    arrays = [arr(*s, seed=i) for i, s in enumerate(shapes)]
    jt, th = _both(fn, arrays)
    _assert_same(jt, th)


def test_float16_autocast_dtype():
    jt, th = _both(lambda lib, a, b: a @ b, [arr(4, 5), arr(5, 3, seed=1)], dtype="float16")
    _assert_same(jt, th, rtol=2e-3, atol=2e-3)


def test_float64_is_not_cast():
    jt, th = _both(lambda lib, a, b: a.double() @ b.double(), [arr(4, 5), arr(5, 3, seed=1)])
    _assert_same(jt, th, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("backward_inside", [False, True])
def test_gradients_reach_float32_leaves_in_float32(backward_inside):
    """A linear + conv model under autocast, the backward outside (or inside) the region: float32 grads close to
    torch's."""
    arrays = {"x": arr(2, 3, 6, 6), "cw": arr(4, 3, 3, 3, seed=1), "cb": arr(4, seed=2), "lw": arr(5, 36, seed=3),
              "lb": arr(5, seed=4)}
    upstream = arr(2, 5, seed=5)
    grads = {}
    for lib in (jitorch, torch):
        leaves = {k: lib.tensor(v, requires_grad=True) for k, v in arrays.items()}
        F = lib.nn.functional
        with lib.autocast("cpu", dtype=lib.bfloat16):
            h = F.relu(F.conv2d(leaves["x"], leaves["cw"], leaves["cb"], padding=1))
            h = F.max_pool2d(h, 2).flatten(1)
            out = F.linear(h, leaves["lw"], leaves["lb"])
            if backward_inside:
                out.float().backward(lib.from_numpy(upstream))
        assert str(out.dtype).endswith("bfloat16")
        if not backward_inside:
            out.float().backward(lib.from_numpy(upstream))
        grads[lib.__name__] = {k: v.grad for k, v in leaves.items()}
    for k in arrays:
        jt, th = grads["jitorch"][k], grads["torch"][k]
        assert jt.dtype == jitorch.float32 and th.dtype == torch.float32
        scale = float(np.abs(th.numpy()).max())
        np.testing.assert_allclose(jt.numpy(), th.numpy(), rtol=5e-2, atol=5e-2 * scale)


def test_nesting_and_enabled_false():
    a, b = arr(4, 5), arr(5, 3, seed=1)
    dtypes = {}
    for lib in (jitorch, torch):
        x, y = lib.from_numpy(a), lib.from_numpy(b)
        seen = []
        with lib.autocast("cpu", dtype=lib.bfloat16):
            seen.append((x @ y).dtype)
            with lib.autocast("cpu", enabled=False):
                seen.append((x @ y).dtype)
                with lib.autocast("cpu", dtype=lib.float16):
                    seen.append((x @ y).dtype)
                seen.append((x @ y).dtype)
            seen.append((x @ y).dtype)
        seen.append((x @ y).dtype)
        dtypes[lib.__name__] = [str(d).split(".")[-1] for d in seen]
    assert dtypes["jitorch"] == dtypes["torch"]
    assert not MODES


def test_set_autocast_enabled_outside_a_region_casts_like_torch():
    # scripts switch bfloat16 inference on this way instead of entering autocast
    a, b = arr(4, 5), arr(5, 3, seed=1)
    dtypes = {}
    for lib in (jitorch, torch):
        x, y = lib.from_numpy(a), lib.from_numpy(b)
        seen = []
        lib.set_autocast_enabled("cpu", True)
        try:
            seen.append((x @ y).dtype)
            with lib.autocast("cpu", enabled=False):
                seen.append((x @ y).dtype)
            lib.set_autocast_dtype("cpu", lib.float16)
            seen.append((x @ y).dtype)
        finally:
            lib.set_autocast_dtype("cpu", lib.bfloat16)
            lib.set_autocast_enabled("cpu", False)
        seen.append((x @ y).dtype)
        with lib.autocast("cpu"):
            lib.set_autocast_enabled("cpu", False)
            seen.append((x @ y).dtype)
            lib.set_autocast_enabled("cpu", True)
            seen.append((x @ y).dtype)
        seen.append((x @ y).dtype)
        dtypes[lib.__name__] = [str(d).split(".")[-1] for d in seen]
    assert dtypes["jitorch"] == dtypes["torch"]
    assert dtypes["torch"][0] == "bfloat16"
    assert not MODES


def test_decorator_form_and_amp_spelling():
    @jitorch.amp.autocast(device_type="cpu", dtype=jitorch.bfloat16)
    def jt_fn(x, y):
        return x @ y

    @torch.amp.autocast(device_type="cpu", dtype=torch.bfloat16)
    def th_fn(x, y):
        return x @ y

    a, b = arr(4, 5), arr(5, 3, seed=1)
    _assert_same(jt_fn(jitorch.from_numpy(a), jitorch.from_numpy(b)), th_fn(torch.from_numpy(a), torch.from_numpy(b)))
    assert (jitorch.from_numpy(a) @ jitorch.from_numpy(b)).dtype == jitorch.float32  # off after the call
    assert not MODES


def test_cpu_amp_autocast_is_deprecated_but_casts():
    for lib in (jitorch, torch):
        with pytest.warns(FutureWarning, match=r"torch.cpu.amp.autocast\(args...\)` is deprecated"):
            ctx = lib.cpu.amp.autocast()
        with ctx:
            assert (lib.ones(2, 2) @ lib.ones(2, 2)).dtype == lib.bfloat16


def test_mode_is_removed_after_an_exception():
    with pytest.raises(ValueError):
        with jitorch.autocast("cpu"):
            raise ValueError("boom")
    assert not MODES
    assert (jitorch.ones(2, 2) @ jitorch.ones(2, 2)).dtype == jitorch.float32


def test_cached_weight_cast_sees_in_place_updates():
    """The cast of a weight is reused within a region, but never after the weight changed in place (PyTorch's cache
    keeps the stale cast there: a silently wrong answer jitorch does not copy)."""
    x = jitorch.from_numpy(arr(4, 5))
    weight = jitorch.tensor(arr(3, 5, seed=1), requires_grad=True)
    with jitorch.autocast("cpu", dtype=jitorch.bfloat16):
        first = jitorch.nn.functional.linear(x, weight)
        again = jitorch.nn.functional.linear(x, weight)
        with jitorch.no_grad():
            weight.mul_(2.0)
        second = jitorch.nn.functional.linear(x, weight)
    np.testing.assert_array_equal(numpy_of(again), numpy_of(first))
    np.testing.assert_allclose(numpy_of(second), 2 * numpy_of(first), **BF16_TOL)
    reference = arr(4, 5) @ (2 * arr(3, 5, seed=1)).T
    np.testing.assert_allclose(numpy_of(second), reference, **BF16_TOL)


def test_no_warning_for_cpu_autocast():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with jitorch.autocast("cpu", dtype=jitorch.bfloat16):
            jitorch.ones(2, 2) @ jitorch.ones(2, 2)


# -- custom_fwd / custom_bwd ---------------------------------------------------------------------------------------
def _square_fn(lib, cast_inputs):
    """A Function recording, inside forward and backward, the input dtype and the autocast state it ran under."""
    seen = {}

    class Square(lib.autograd.Function):
        @staticmethod
        @lib.amp.custom_fwd(device_type="cpu", cast_inputs=cast_inputs)
        def forward(ctx, a, extras):
            seen["fwd"] = (str(a.dtype), str(extras["b"][0].dtype), lib.is_autocast_enabled("cpu"))
            ctx.save_for_backward(a)
            return a @ a.T

        @staticmethod
        @lib.amp.custom_bwd(device_type="cpu")
        def backward(ctx, g):
            (a,) = ctx.saved_tensors
            seen["bwd"] = (lib.is_autocast_enabled("cpu"), str(lib.get_autocast_dtype("cpu")))
            return (g + g.T) @ a.to(g.dtype), None

    return Square, seen


@pytest.mark.parametrize("cast", [True, False], ids=["cast_inputs_float32", "no_cast_inputs"])
@pytest.mark.parametrize("inside", [True, False], ids=["in_autocast", "outside_autocast"])
def test_custom_fwd_and_custom_bwd_follow_torch(cast, inside):
    results = []
    for lib in (jitorch, torch):
        fn, seen = _square_fn(lib, lib.float32 if cast else None)
        x = lib.from_numpy(arr(3, 2)).requires_grad_()
        extras = {"b": [lib.ones(2, dtype=lib.bfloat16)]}
        with lib.autocast("cpu", dtype=lib.bfloat16, enabled=inside):
            y = fn.apply(x.to(lib.bfloat16), extras)
        y.float().sum().backward()  # outside the region: custom_bwd restores the forward's state
        results.append((str(y.dtype).split(".")[1], [s.split(".")[-1] for s in seen["fwd"][:2]], seen["fwd"][2],
                        seen["bwd"][0], seen["bwd"][1].split(".")[-1], x.grad.numpy().copy()))
    jt, th = results
    assert jt[:5] == th[:5]
    np.testing.assert_allclose(jt[5], th[5], **BF16_TOL)
    # the premise: cast inputs (float32, autocast off) and the caller's state differ somewhere
    assert (jt[1][0] == "float32") == (cast and inside)


def test_custom_fwd_requires_a_device_type_string():
    for lib in (jitorch, torch):
        with pytest.raises(ValueError, match="device_type"):
            lib.amp.custom_fwd(lambda ctx, x: x, device_type=None)
        with pytest.raises(ValueError, match="device_type"):
            lib.amp.custom_bwd(lambda ctx, g: g, device_type=1)


@pytest.mark.parametrize("mode", ["nearest", "bilinear", "bicubic", "nearest-exact", "area"])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_interpolate_is_on_no_autocast_list(mode, dtype):
    # PyTorch's upsampling keeps its input's dtype under autocast; its resampling matmuls must not be cast.
    jt, th = _both(lambda lib, x: lib.nn.functional.interpolate(x.to(getattr(lib, dtype)), scale_factor=2,
                                                                 mode=mode), [arr(1, 2, 4, 4)])
    _assert_same(jt, th, **({"rtol": 1e-6, "atol": 1e-6} if dtype == "float32" else BF16_TOL))


def _recurrent(lib, cls, **kw):
    torch.manual_seed(0)
    th = getattr(torch.nn, cls)(4, 3, **kw)
    if lib is torch:
        return th
    jt = getattr(jitorch.nn, cls)(4, 3, **kw)
    jt.load_state_dict({k: jitorch.from_numpy(v.detach().numpy().copy()) for k, v in th.state_dict().items()})
    return jt


RECURRENT = [("LSTM", {}, False), ("LSTM", {"num_layers": 2, "bidirectional": True, "batch_first": True}, False),
             ("LSTM", {"proj_size": 2}, False), ("LSTM", {}, True), ("GRU", {}, False), ("RNN", {}, False),
             ("RNN", {"nonlinearity": "relu"}, False), ("RNN", {}, True), ("LSTM", {}, "bfloat16 input"),
             ("GRU", {}, "bfloat16 input")]


@pytest.mark.parametrize("cls,kw,variant", RECURRENT, ids=[f"{c}-{k}-{v}" for c, k, v in RECURRENT])
def test_recurrent_layers_under_autocast(cls, kw, variant):
    # CPU autocast runs an LSTM without projections through oneDNN (every output in bfloat16) and an Elman RNN through
    # linear cells (bfloat16); GRU and projected or packed LSTMs mix float32 states into each step.
    outs, grads = {}, {}
    for lib in (jitorch, torch):
        m = _recurrent(lib, cls, **kw)
        x = lib.from_numpy(arr(5, 2, 4))
        if variant == "bfloat16 input":
            x = x.to(lib.bfloat16)
        with lib.autocast("cpu", dtype=lib.bfloat16):
            if variant is True:
                x = lib.nn.utils.rnn.pack_padded_sequence(x, [5, 3])
            out, h = m(x)
        out = out.data if variant is True else out
        flat = [out] + list(h if isinstance(h, tuple) else (h,))
        sum(t.float().sum() for t in flat).backward()
        outs[lib.__name__], grads[lib.__name__] = flat, [p.grad for p in m.parameters()]
    for jt, th in zip(outs["jitorch"], outs["torch"]):
        _assert_same(jt, th, rtol=5e-2, atol=5e-2)
    for jt, th in zip(grads["jitorch"], grads["torch"]):
        assert jt.dtype == jitorch.float32 and th.dtype == torch.float32
        np.testing.assert_allclose(jt.numpy(), th.numpy(), rtol=0.1, atol=0.1)


def test_recurrent_cells_under_autocast():
    for cls, expected in (("RNNCell", "bfloat16"), ("LSTMCell", "float32"), ("GRUCell", "float32")):
        dtypes = []
        for lib in (jitorch, torch):
            with lib.autocast("cpu", dtype=lib.bfloat16):
                out = getattr(lib.nn, cls)(4, 3)(lib.ones(2, 4))
            dtypes.append([str(t.dtype).split(".")[-1] for t in (out if isinstance(out, tuple) else (out,))])
        assert dtypes[0] == dtypes[1] and dtypes[0][0] == expected, (cls, dtypes)
