"""``nn.functional.linear_cross_entropy``, ``nn.LinearCrossEntropyLoss`` and ``nn.LinearCrossEntropyOptions`` against
PyTorch 2.13: the reference path (``options=None``), the chunked path against PyTorch's chunked op, the options'
resolution, errors and warnings, and state dicts across the libraries."""
from __future__ import annotations

import io
import tracemalloc
import warnings

import numpy as np
import pytest
import torch
from helpers import check_error, check_op, gradcheck_op, gradgradcheck_op, same_error, tol_for

import jitorch

N, F, C = 9, 5, 13
REDUCTIONS = ("mean", "sum", "none")


def lce(lib, *, weight=None, options=None, **kw):
    """``fn(input, linear_weight, target, linear_bias)`` of ``lib``; ``weight`` (a NumPy array) and ``options``
    (a dict of LinearCrossEntropyOptions fields) become ``lib``'s objects."""
    class_weight = None if weight is None else lib.tensor(weight)
    opts = None if options is None else lib.nn.LinearCrossEntropyOptions(**options)

    def fn(input, linear_weight, target, linear_bias=None):
        return lib.nn.functional.linear_cross_entropy(input, linear_weight, target, linear_bias=linear_bias,
                                                      weight=class_weight, options=opts, **kw)
    return fn


def both(**kw):
    return lce(jitorch, **kw), lce(torch, **kw)


def compare(jt_fn, torch_fn, inputs, **kw):
    """``check_op`` on a call PyTorch computes (not one both refuse)."""
    assert check_op(jt_fn, torch_fn, inputs, **kw) is not None, "torch raised"


def operands(rng, *, n=N, classes=C, out_features=(), dtype="float32", probabilities=False, ignored=()):
    """(input, linear_weight, target, linear_bias) arrays; ``ignored`` rows get target 3."""
    x = rng.standard_normal((n, F)).astype(dtype)
    w = (rng.standard_normal((classes, *out_features, F)) / np.sqrt(F)).astype(dtype)
    b = rng.standard_normal((classes, *out_features)).astype(dtype)
    if probabilities:
        t = rng.random((n, classes, *out_features))
        return x, w, (t / t.sum(1, keepdims=True)).astype(dtype), b
    t = rng.integers(0, classes, (n, *out_features))
    t[list(ignored)] = 3
    return x, w, t, b


# -- the reference path ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("case", [
    {}, {"bias": True}, {"weight": True}, {"ignore_index": 3}, {"ignore_index": 3, "weight": True, "bias": True},
    {"label_smoothing": 0.2}, {"label_smoothing": 0.3, "weight": True, "ignore_index": 3}])
def test_reference_matches_torch(reduction, case, rng):
    x, w, t, b = operands(rng, ignored=(0, 4))
    kw = {k: v for k, v in case.items() if k not in ("bias", "weight")}
    class_weight = rng.random(C).astype(np.float32) if case.get("weight") else None
    jt, th = both(reduction=reduction, weight=class_weight, **kw)
    compare(jt, th, [x, w, t, b if case.get("bias") else None], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("out_features", [(), (3,), (2, 3)])
@pytest.mark.parametrize("probabilities", [False, True])
def test_k_dimensional_and_probability_targets(reduction, out_features, probabilities, rng):
    x, w, t, b = operands(rng, n=4, classes=6, out_features=out_features, probabilities=probabilities)
    class_weight = rng.random(6).astype(np.float32)
    jt, th = both(reduction=reduction, weight=class_weight, label_smoothing=0.1)
    compare(jt, th, [x, w, t, b], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("probabilities", [False, True])
def test_unbatched_input(probabilities, rng):
    x, w, t, b = operands(rng, n=1, probabilities=probabilities)
    for reduction in REDUCTIONS:
        compare(*both(reduction=reduction), [x[0], w, np.asarray(t[0]), b], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("dtype", ["float64", "bfloat16", "float16"])
def test_reference_dtypes(dtype, rng):
    x, w, t, b = operands(rng, dtype=dtype, ignored=(1,))
    atol, rtol = tol_for(dtype)
    for reduction in REDUCTIONS:
        compare(*both(reduction=reduction, ignore_index=3), [x, w, t, b], atol=4 * atol, rtol=4 * rtol)


def test_reference_non_contiguous(rng):
    x, w, t, b = operands(rng)
    compare(*both(reduction="sum"), [x, w, t, b], layout=["transposed", "transposed", "contiguous", "sliced"],
             atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("options", [None, {"batch_chunk_size": 2}])
@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_empty_batch(options, reduction, rng):
    x, w, t, b = operands(rng, n=0)
    compare(*both(reduction=reduction, options=options), [x, w, t, b], atol=1e-6)


def test_reference_gradcheck_and_double_backward(rng):
    x, w, t, b = operands(rng, n=4, classes=5, dtype="float64", ignored=(2,))
    p = operands(rng, n=4, classes=5, out_features=(2,), dtype="float64", probabilities=True)
    class_weight = jitorch.tensor(rng.random(5))
    loss_fn = jitorch.nn.functional.linear_cross_entropy
    for fn, arrays in [
            (lambda x, w, b: loss_fn(x, w, jitorch.tensor(t), linear_bias=b, weight=class_weight, ignore_index=3,
                                     label_smoothing=0.1), [x, w, b]),
            (lambda x, w, target: loss_fn(x, w, target, reduction="none"), [p[0], p[1], p[2]])]:
        gradcheck_op(fn, arrays)
        gradgradcheck_op(fn, arrays)


# -- the chunked path --------------------------------------------------------------------------------------------------
CHUNKINGS = [{"batch_chunk_size": 1}, {"batch_chunk_size": 4}, {"batch_chunk_size": 100}, {},
             {"chunking_method": "aspect_ratio"}, {"chunking_method": "aspect_ratio:4"},
             {"chunking_method": None, "acc_policy": "accurate"}, {"batch_chunk_size": 2, "acc_policy": "balanced"}]


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("options", CHUNKINGS)
def test_chunked_matches_torch_chunked(reduction, options, rng):
    x, w, t, b = operands(rng, ignored=(0, 5))
    class_weight = rng.random(C).astype(np.float32)
    for kw, bias in [({}, None), ({"ignore_index": 3, "weight": class_weight}, b), ({"ignore_index": -1}, b)]:
        compare(*both(reduction=reduction, options=options, **kw), [x, w, t, bias], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_chunked_matches_reference(reduction, rng):
    """Large vocabulary against small features: the chunked gradients are the composite's."""
    x, w, t, b = operands(rng, n=40, classes=300, ignored=(3, 7))
    class_weight = rng.random(300).astype(np.float32)
    chunked = lce(jitorch, reduction=reduction, weight=class_weight, ignore_index=3, options={"batch_chunk_size": 7})
    compare(chunked, lce(torch, reduction=reduction, weight=class_weight, ignore_index=3), [x, w, t, b],
             atol=2e-5, rtol=2e-5)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float64"])
@pytest.mark.parametrize("acc_policy", ["auto", "accurate", "balanced", "compact"])
def test_chunked_dtypes(dtype, acc_policy, rng):
    x, w, t, b = operands(rng, dtype=dtype, ignored=(2,))
    atol, rtol = tol_for(dtype)
    options = {"batch_chunk_size": 4, "acc_policy": acc_policy}
    for reduction in REDUCTIONS:
        compare(*both(reduction=reduction, options=options), [x, w, t, b], atol=8 * atol, rtol=8 * rtol)


def test_chunked_unbatched_and_non_contiguous(rng):
    x, w, t, b = operands(rng)
    for reduction in REDUCTIONS:
        compare(*both(reduction=reduction, options={}), [x[0], w, np.asarray(t[0]), b], atol=1e-5, rtol=1e-5)
        compare(*both(reduction=reduction, options={"batch_chunk_size": 2}), [x, w, t, b],
                 layout=["transposed", "transposed", "contiguous", "sliced"], atol=1e-5, rtol=1e-5)


def _peak_bytes(fn):
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_chunked_peak_memory_stays_below_the_logits(rng):
    """The point of the chunked path: forward and backward never hold the (N, C) logits (NumPy's allocations are
    traced); the reference path, measured the same way, does."""
    x, w, t, _ = operands(rng, n=512, classes=4096)
    logits_bytes = 512 * 4096 * 4
    for options, bound in [({"batch_chunk_size": 64}, lambda peak: peak < logits_bytes / 2),
                           (None, lambda peak: peak >= logits_bytes)]:
        fn = lce(jitorch, options=options)
        xt, wt, tt = jitorch.tensor(x, requires_grad=True), jitorch.tensor(w, requires_grad=True), jitorch.tensor(t)
        fn(xt, wt, tt).backward()  # (kernels compiled and caches filled outside the measurement)
        peak = _peak_bytes(lambda: fn(xt, wt, tt).backward())
        assert bound(peak), f"options={options}: peak {peak} bytes, logits {logits_bytes}"


def test_chunked_all_rows_ignored_mean_is_nan(rng):
    x, w, t, b = operands(rng, n=3)
    t[:] = 3
    compare(*both(ignore_index=3, options={"batch_chunk_size": 2}), [x, w, t, b])


def test_chunked_gradcheck(rng):
    x, w, t, b = operands(rng, n=6, classes=7, dtype="float64", ignored=(1,))
    class_weight = rng.random(7)
    for reduction in REDUCTIONS:
        fn = lce(jitorch, reduction=reduction, weight=class_weight, ignore_index=3,
                 options={"batch_chunk_size": 4, "allow_retain_graph": True})
        gradcheck_op(lambda x, w, b: fn(x, w, jitorch.tensor(t), b), [x, w, b])


def test_chunked_grad_fn_names_match_torch(rng):
    x, w, t, b = operands(rng)
    for reduction in REDUCTIONS:
        names = [type(fn(lib.tensor(x, requires_grad=True), lib.tensor(w), lib.tensor(t)).grad_fn).__name__
                 for lib, fn in zip((jitorch, torch), both(reduction=reduction, options={}))]
        assert names[0] == names[1]


def _grads_twice(lib, arrays, reduction, options, create_graph=False):
    """The first backward's input gradient, then the second backward's (or its error as (type, message))."""
    x = lib.tensor(arrays[0], requires_grad=True)
    loss = lce(lib, reduction=reduction, options=options)(x, lib.tensor(arrays[1]), lib.tensor(arrays[2]))
    (first,) = lib.autograd.grad(loss.sum(), x, retain_graph=True, create_graph=create_graph)
    try:
        source = first.sum() if create_graph else loss.sum()
        (second,) = lib.autograd.grad(source, x)
    except RuntimeError as e:
        return first.detach().numpy(), (type(e), str(e))
    return first.detach().numpy(), second.numpy()


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("allow_retain_graph", [False, True])
def test_chunked_retained_second_backward(reduction, allow_retain_graph, rng):
    arrays = operands(rng)
    options = {"allow_retain_graph": allow_retain_graph}
    (jt_first, jt_second), (th_first, th_second) = (_grads_twice(lib, arrays, reduction, options)
                                                    for lib in (jitorch, torch))
    np.testing.assert_allclose(jt_first, th_first, atol=1e-6)
    if isinstance(th_second, tuple):  # PyTorch's consumed buffers: "called twice"
        assert jt_second == th_second
    else:
        np.testing.assert_allclose(jt_second, th_second, atol=1e-6)


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_chunked_has_no_double_backward(reduction, rng):
    arrays = operands(rng)
    (_, jt_error), (_, th_error) = (_grads_twice(lib, arrays, reduction, {"allow_retain_graph": True}, True)
                                    for lib in (jitorch, torch))
    assert jt_error == th_error


# -- options, fallbacks and errors -------------------------------------------------------------------------------------
@pytest.mark.parametrize("fields", [{}, {"batch_chunk_size": 3}, {"chunking_method": "aspect_ratio:3"},
                                    {"chunking_method": None}, {"acc_policy": "balanced"},
                                    {"acc_dtype": "float32"}, {"acc_policy": "accurate", "chunking_method": None}])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16", "float64"])
@pytest.mark.parametrize("sizes", [(100, 8, 1000), (1000, 16, 512), (7, 64, 5), (1, 1, 1)])
def test_options_resolve_as_torch(fields, dtype, sizes):
    resolved = []
    for lib in (jitorch, torch):
        kw = {k: getattr(lib, v) if k == "acc_dtype" else v for k, v in fields.items()}
        options = lib.nn.LinearCrossEntropyOptions(**kw)._adjust(*sizes, getattr(lib, dtype), lib.device("cpu"))
        resolved.append(repr(options).replace("jitorch.", "torch."))
    assert resolved[0] == resolved[1]


@pytest.mark.parametrize("fields", [{"acc_policy": "fast"}, {"chunking_method": "rows"},
                                    {"chunking_method": "aspect_ratio:0"}, {"batch_chunk_size": 0},
                                    {"batch_chunk_size": 2.0}, {"acc_dtype": "int64"}])
def test_options_validation_errors(fields):
    def make(lib):
        lib.nn.LinearCrossEntropyOptions(**{k: getattr(lib, v) if k == "acc_dtype" else v for k, v in fields.items()})
    same_error(make)


def test_options_are_frozen():
    options = jitorch.nn.LinearCrossEntropyOptions()
    with pytest.raises(Exception, match="cannot assign"):
        options.batch_chunk_size = 3
    assert repr(options) == repr(torch.nn.LinearCrossEntropyOptions())


@pytest.mark.parametrize("call", [
    lambda lib: lce(lib)(lib.zeros(2, 3, 4), lib.zeros(5, 4), lib.zeros(2, dtype=lib.int64)),
    lambda lib: lce(lib)(lib.zeros(2, 4), lib.zeros(4), lib.zeros(2, dtype=lib.int64)),
    lambda lib: lce(lib)(lib.zeros(2, 4), lib.zeros(5, 3), lib.zeros(2, dtype=lib.int64)),
    lambda lib: lce(lib)(lib.zeros(2, 4), lib.zeros(5, 4), lib.zeros(2, dtype=lib.int64), lib.zeros(4)),
    lambda lib: lce(lib)(lib.zeros(4), lib.zeros(5, 2, 4), lib.zeros((), dtype=lib.int64)),
    lambda lib: lce(lib, ignore_index=1)(lib.zeros(2, 4), lib.zeros(5, 4), lib.zeros(2, 5)),
    lambda lib: lce(lib, options={"batch_chunk_size": 3, "chunking_method": "aspect_ratio"})(
        lib.zeros(6, 4), lib.zeros(5, 4), lib.zeros(6, dtype=lib.int64)),
    lambda lib: lce(lib, options={"acc_dtype": lib.float64})(lib.zeros(2, 4), lib.zeros(5, 4),
                                                             lib.zeros(2, dtype=lib.int64)),
])
def test_errors_match_torch(call):
    same_error(call)


@pytest.mark.parametrize("target, match", [([0, 13, 2], "out of bounds"), ([0, -1, 2], "out of bounds"),
                                           ([0, 1], "target of shape")])
def test_chunked_target_errors(target, match, rng):
    x, w, _, _ = operands(rng, n=3)
    check_error(*both(options={}), [x, w, np.array(target)], match=match)


def test_chunked_dtype_mismatch_error(rng):
    x, w, t, _ = operands(rng)
    check_error(*both(options={}), [x, w.astype(np.float64), t], match=["float32", "float64"])


@pytest.mark.parametrize("case", ["label_smoothing", "probabilities", "k_dimensional", "reduction"])
def test_unsupported_options_warn_and_fall_back(case, rng):
    x, w, t, b = operands(rng, n=4, classes=6, out_features=(2,) if case == "k_dimensional" else (),
                          probabilities=case == "probabilities")
    kw = {"label_smoothing": 0.1} if case == "label_smoothing" else {}
    kw = {"reduction": "batchmean"} if case == "reduction" else kw
    messages, results = [], []
    for lib, fn in zip((jitorch, torch), both(options={"batch_chunk_size": 2}, **kw)):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                results.append(fn(*(lib.tensor(a) for a in (x, w, t, b))).numpy())
            except ValueError as e:  # the reference path's refusal of the reduction
                results.append(str(e))
        assert [c.filename for c in caught] == [__file__]
        messages.append(str(caught[0].message).replace("jitorch.", "torch."))
    assert messages[0] == messages[1]
    if case == "reduction":
        assert results[0] == results[1]
    else:
        np.testing.assert_allclose(results[0], results[1], atol=1e-5, rtol=1e-5)


# -- the module ----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("out_features, bias", [((), False), ((), True), ((2, 3), True), ((4,), False)])
def test_module_state_dict_round_trip(out_features, bias, rng):
    th = torch.nn.LinearCrossEntropyLoss(F, 6, out_features=out_features, bias=bias)
    jt = jitorch.nn.LinearCrossEntropyLoss(F, 6, out_features=out_features, bias=bias)
    assert list(jt.state_dict()) == list(th.state_dict())
    assert [(n, tuple(p.shape)) for n, p in jt.named_parameters()] == \
        [(n, tuple(p.shape)) for n, p in th.named_parameters()]
    assert repr(jt) == repr(th)
    jt.load_state_dict({k: jitorch.tensor(v.numpy()) for k, v in th.state_dict().items()})
    for k, v in jt.state_dict().items():
        np.testing.assert_array_equal(v.numpy(), th.state_dict()[k].numpy())
    buffer = io.BytesIO()
    jitorch.save(jt.state_dict(), buffer)
    back = torch.nn.LinearCrossEntropyLoss(F, 6, out_features=out_features, bias=bias)
    back.load_state_dict(torch.load(io.BytesIO(buffer.getvalue())))
    for k, v in back.state_dict().items():
        np.testing.assert_array_equal(v.numpy(), th.state_dict()[k].numpy())


def test_module_init_matches_torch():
    jitorch.manual_seed(7)
    torch.manual_seed(7)
    jt, th = (lib.nn.LinearCrossEntropyLoss(F, 6, out_features=(2,), bias=True) for lib in (jitorch, torch))
    for k, v in jt.state_dict().items():
        np.testing.assert_array_equal(v.numpy(), th.state_dict()[k].numpy())


@pytest.mark.parametrize("options", [None, {"batch_chunk_size": 3}])
@pytest.mark.parametrize("out_features", [(), (3,)])
def test_module_forward_and_grads(options, out_features, rng):
    x, _, t, _ = operands(rng, n=7, classes=6, out_features=out_features)
    class_weight = rng.random(6).astype(np.float32)
    mods = []
    for lib in (jitorch, torch):
        opts = None if options is None else lib.nn.LinearCrossEntropyOptions(**options)
        mods.append(lib.nn.LinearCrossEntropyLoss(F, 6, out_features=out_features, bias=True, ignore_index=2,
                                                  weight=lib.tensor(class_weight), options=opts))
    mods[0].load_state_dict({k: jitorch.tensor(v.numpy()) for k, v in mods[1].state_dict().items()})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # K-dimensional chunked: the fallback warning
        losses = [m(lib.tensor(x), lib.tensor(t)) for m, lib in zip(mods, (jitorch, torch))]
        for loss in losses:
            loss.backward()
    np.testing.assert_allclose(losses[0].detach().numpy(), losses[1].detach().numpy(), atol=1e-5, rtol=1e-5)
    for (name, p), (_, q) in zip(mods[0].named_parameters(), mods[1].named_parameters()):
        np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), atol=1e-5, rtol=1e-5, err_msg=name)


@pytest.mark.parametrize("kw", [{"weight": "bad"}, {"label_smoothing": 1.5}, {"label_smoothing": -0.1}])
def test_module_errors_match_torch(kw):
    same_error(lambda lib: lib.nn.LinearCrossEntropyLoss(
        4, 6, **{k: lib.ones(5) if v == "bad" else v for k, v in kw.items()}))


def test_public_names():
    assert "linear_cross_entropy" in jitorch.nn.functional.__all__
    assert {"LinearCrossEntropyLoss", "LinearCrossEntropyOptions"} <= set(jitorch.nn.__all__)
    assert jitorch.nn.modules.loss.LinearCrossEntropyLoss is jitorch.nn.LinearCrossEntropyLoss
    assert jitorch.nn.modules.linear_cross_entropy.__all__ == torch.nn.modules.linear_cross_entropy.__all__
