"""make_fx(tracing_mode="fake"): real mode's graph, recorded from shapes, dtypes and strides only (never the data)."""
from __future__ import annotations

import operator

import numpy as np
import pytest
import torch
from test_fx_helpers import assert_close, digits_cnn

import jitorch
import jitorch.nn.functional as F
from jitorch import fx, nn
from jitorch._dispatch import MODES
from jitorch._tensor import Tensor
from jitorch.fx._fake import HOST_READS, DataDependentOutputException, DynamicOutputShapeException, fake_array


DigitsCNN = digits_cnn(jitorch)


def _randn(*shape, seed=0, requires_grad=False):
    x = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    return jitorch.tensor(x, requires_grad=requires_grad)


def _locked(*tensors):
    """Make the tensors' arrays read-only (a write raises) and return copies of their values to compare after."""
    for t in tensors:
        t._data.flags.writeable = False
    return [t._data.copy() for t in tensors]


def _nan_like(t):
    return jitorch.full(tuple(t.shape), float("nan"), dtype=t.dtype).requires_grad_(t.requires_grad)


def _signature(gm):
    """What both modes must agree on: each node's opcode, target and arguments, and the shape/dtype/strides it holds."""
    out = []
    for n in gm.graph.nodes:
        target = n.target if n.op != "get_attr" else "const"
        args = tuple(a.name if isinstance(a, fx.Node) else a for a in n.args if not isinstance(a, (list, tuple)))
        meta = n.meta.get("tensor_meta")
        out.append((n.op, target, n.name, args, n.meta.get("val"), n.meta.get("stride"), n.meta.get("phase"),
                    None if meta is None or isinstance(meta, tuple) else (meta.requires_grad, meta.stride)))
    return out


def _check_fake(fn, args, fresh, joint=False, tangents=None, atol=1e-4):
    """Fake trace == real trace node for node; data never read nor written; the fake GraphModule equals eager."""
    kw = {} if tangents is None else {"tangents": tangents}
    saved = _locked(*[a for a in (*args, *(tangents or ())) if isinstance(a, Tensor)])
    fake_gm = fx.make_fx(fn, joint=joint, tracing_mode="fake")(*args, **kw)
    assert not MODES
    for a, before in zip([a for a in (*args, *(tangents or ())) if isinstance(a, Tensor)], saved):
        np.testing.assert_array_equal(a._data, before)  # unchanged (and, being read-only, never written)
        a._data.flags.writeable = True
    fake_gm.graph.lint()
    # Inputs full of NaN give the very same graph: the values are not read.
    nan_args = [_nan_like(a) if isinstance(a, Tensor) and a.is_floating_point() else a for a in args]
    nan_kw = {} if tangents is None else {"tangents": [_nan_like(t) for t in tangents]}
    assert _signature(fx.make_fx(fn, joint=joint, tracing_mode="fake")(*nan_args, **nan_kw)) == _signature(fake_gm)
    real_gm = fx.make_fx(fn, joint=joint)(*args, **kw)
    assert _signature(fake_gm) == _signature(real_gm)
    placeholders = [n for n in fake_gm.graph.nodes if n.op == "placeholder"]
    for node, a in zip(placeholders, [a for a in args if isinstance(a, Tensor)]):
        assert node.meta["val"] == (tuple(a.shape), a._data.dtype)
        meta = node.meta["tensor_meta"]
        assert (tuple(meta.shape), meta.dtype, meta.stride, meta.requires_grad) == \
            (tuple(a.shape), a.dtype, a.stride(), a.requires_grad)
    # The fake trace's module computes the function on real inputs.
    if joint:
        wrt = [a for a in fresh if isinstance(a, Tensor) and a.requires_grad]
        outs = fn(*fresh)
        outs = list(outs) if isinstance(outs, (tuple, list)) else [outs]
        roots = outs if tangents is not None else outs[:1]
        grads = jitorch.autograd.grad(roots, wrt, grad_outputs=tangents, allow_unused=True)
        expected = [o.detach() for o in outs] + list(grads)
        flat = [a.detach() if isinstance(a, Tensor) else a for a in fresh] + list(tangents or ())
    else:
        with jitorch.no_grad():
            expected = fn(*fresh)
        flat = list(fresh)
    assert_close(list(fake_gm(*flat)) if joint else fake_gm(*flat), expected, atol=atol)
    assert_close(list(fx.Interpreter(fake_gm).run(*flat)) if joint else fx.Interpreter(fake_gm).run(*flat), expected,
                 atol=atol)
    return fake_gm


def test_mlp_forward():
    jitorch.manual_seed(0)
    mlp = nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 4), nn.Softmax(-1))
    gm = _check_fake(mlp, (_randn(5, 8),), (_randn(5, 8, seed=1),))
    names = [n.target.__name__ for n in gm.graph.nodes if n.op == "call_function"]
    assert names.count("linear") == 2 and "softmax" in names
    assert sum(n.op == "get_attr" for n in gm.graph.nodes) == 4  # the parameters stay real constants, as in torch


def test_digits_cnn_forward():
    jitorch.manual_seed(0)
    cnn = DigitsCNN().eval()
    gm = _check_fake(cnn, (_randn(4, 1, 8, 8),), (_randn(4, 1, 8, 8, seed=1),))
    out = [n for n in gm.graph.nodes if n.op == "output"][0].args[0]
    assert out.meta["val"] == ((4, 10), np.dtype(np.float32))


def test_transformer_encoder_layer_forward():
    jitorch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(16, 4, dim_feedforward=32, dropout=0.0, batch_first=True).eval()
    gm = _check_fake(layer, (_randn(3, 6, 16),), (_randn(3, 6, 16, seed=1),))
    names = {n.target.__name__ for n in gm.graph.nodes if n.op == "call_function"}
    assert "native_layer_norm" in names and names & {"softmax", "scaled_dot_product_attention"}


def test_joint_cnn_with_cross_entropy_targets():
    # The input requires grad; the integer targets are an input too (nll_loss's bounds check is skipped on fakes).
    jitorch.manual_seed(0)
    cnn = DigitsCNN().eval()
    target = jitorch.tensor([3, 1, 9, 0])

    def loss(x, t):
        return F.cross_entropy(cnn(x), t)

    gm = _check_fake(loss, (_randn(4, 1, 8, 8, requires_grad=True), target),
                     (_randn(4, 1, 8, 8, seed=1, requires_grad=True), jitorch.tensor([0, 7, 2, 2])), joint=True)
    assert {n.meta["phase"] for n in gm.graph.nodes} == {"forward", "backward", "output"}


def test_joint_mlp_parameters_as_inputs_against_torch():
    w1, b1 = _randn(16, 8, seed=2, requires_grad=True), _randn(16, seed=3, requires_grad=True)
    w2 = _randn(3, 16, seed=4, requires_grad=True)
    x = _randn(5, 8)
    up = _randn(5, 3, seed=5)

    def f(w1, b1, w2, x):
        return (F.linear(F.linear(x, w1, b1).tanh(), w2),)

    gm = _check_fake(f, (w1, b1, w2, x), (w1, b1, w2, _randn(5, 8, seed=6)), joint=True, tangents=(up,))
    tw1, tb1, tw2 = (torch.tensor(t.detach().numpy(), requires_grad=True) for t in (w1, b1, w2))
    out = torch.nn.functional.linear(torch.nn.functional.linear(torch.tensor(x.numpy()), tw1, tb1).tanh(), tw2)
    grads = torch.autograd.grad(out, (tw1, tb1, tw2), torch.tensor(up.numpy()))
    ours = gm(w1.detach(), b1.detach(), w2.detach(), x, up)
    assert_close(list(ours), [out.detach()] + list(grads), atol=1e-5)


def test_layout_requires_grad_and_leafness_are_kept():
    base = _randn(6, 4, requires_grad=True)
    nonleaf = base * 2  # requires grad, not a leaf
    transposed = _randn(4, 6, seed=1).t()  # strides (1, 6)
    seen = {}

    def f(a, b):
        seen.update(a_leaf=a.is_leaf, a_grad=a.requires_grad, b_stride=b.stride(), b_contig=b.is_contiguous())
        return (a * b).sum()

    gm = fx.make_fx(f, joint=True, tracing_mode="fake")(nonleaf, transposed)
    assert seen == {"a_leaf": False, "a_grad": True, "b_stride": (1, 6), "b_contig": False}
    ph = [n for n in gm.graph.nodes if n.op == "placeholder"]
    assert ph[1].meta["tensor_meta"].stride == (1, 6) and ph[0].meta["tensor_meta"].requires_grad
    x, y = _randn(6, 4, seed=2), _randn(4, 6, seed=3).t()
    assert_close(list(gm(x, y)), [(x * y).sum(), y])
    a = fake_array(np.ones((3, 4), np.float32)[:, ::-2])  # a negative stride: offset into the zero buffer
    assert a.shape == (3, 2) and a.strides == (16, -8) and not a.any()


def test_the_fake_tensor_inside_the_function():
    printed = []

    def f(x):
        printed.append(repr(x))
        return x + 1

    fx.make_fx(f, tracing_mode="fake")(_randn(2, 3, requires_grad=True))
    assert printed == ["FakeTensor(..., size=(2, 3), dtype=jitorch.float32, requires_grad=True)"]
    assert repr(jitorch.zeros(1)) == "tensor([0.])"  # the guards are removed


DATA_DEPENDENT = [
    ("nonzero", lambda x: x.nonzero(), DynamicOutputShapeException, "nonzero()"),
    ("torch.where(cond)", lambda x: jitorch.where(x > 0), DynamicOutputShapeException, "nonzero()"),
    ("unique", lambda x: jitorch.unique(x), DynamicOutputShapeException, "unique()"),
    ("masked_select", lambda x: jitorch.masked_select(x, x > 0), DynamicOutputShapeException, "masked_select()"),
    ("boolean mask", lambda x: x[x > 0], DynamicOutputShapeException, "index() with a fake boolean mask"),
    ("bincount", lambda x: jitorch.bincount(x.long().flatten().abs()), DataDependentOutputException, "bincount()"),
    ("repeat_interleave", lambda x: x.repeat_interleave(x.long().flatten()[:4].abs(), dim=0),
     DataDependentOutputException, "repeat_interleave()"),
    ("item", lambda x: x.sum().item(), DataDependentOutputException, "Tensor.item()"),
    ("if", lambda x: x * 2 if x.sum() > 0 else x, DataDependentOutputException, "bool()"),
    ("tolist", lambda x: x.tolist(), DataDependentOutputException, "Tensor.tolist()"),
    ("numpy", lambda x: x.numpy(), DataDependentOutputException, "Tensor.numpy()"),
    ("np.asarray", lambda x: np.asarray(x), DataDependentOutputException, "array()"),
    ("int", lambda x: int(x[0, 0]), DataDependentOutputException, "int()"),
    ("float", lambda x: float(x.mean()), DataDependentOutputException, "float()"),
    ("0-d tensor index", lambda x: x[x.long()[0, 0]], DataDependentOutputException, "int()"),
    ("one_hot without num_classes", lambda x: F.one_hot(x.long().abs()), DataDependentOutputException,
     "int() inside one_hot()"),
]


@pytest.mark.parametrize("name,fn,error,shown", DATA_DEPENDENT, ids=[c[0] for c in DATA_DEPENDENT])
def test_data_dependent_cases_raise_a_clear_error(name, fn, error, shown):
    originals = {m: Tensor.__dict__[m] for m in HOST_READS if m in Tensor.__dict__}
    x = _randn(4, 3)
    with pytest.raises(error, match="tracing_mode='real'") as info:
        fx.make_fx(fn, tracing_mode="fake")(x)
    assert isinstance(info.value, RuntimeError)
    assert shown in str(info.value) and "test_fx_fake.py" in str(info.value), str(info.value)
    assert not MODES and all(Tensor.__dict__[m] is f for m, f in originals.items())  # cleaned up after the error
    if error is DynamicOutputShapeException:
        fx.make_fx(fn)(x)  # real mode records the row, whose output has the real shape
        return
    # Real mode refuses the read too (torch's raises for item, bool, int, one_hot; it records bincount and
    # repeat_interleave as single ops, which jitorch builds from a read of the counts).
    with pytest.raises(DataDependentOutputException, match="computed from the inputs"):
        fx.make_fx(fn)(x)
    assert not MODES and all(Tensor.__dict__[m] is f for m, f in originals.items())
    fx.make_fx(fn, _error_on_data_dependent_ops=False)(x)  # the internal switch specializes to the values


def test_value_independent_uses_of_fake_values_trace():
    cap_mask = jitorch.tensor([True, False, True])  # a real mask and a real tensor: their shapes are known

    def f(x, d):
        kept = x[:, cap_mask]
        filled = x.masked_fill(x > 0, 0.0)  # one value into a fake mask: the shape does not depend on it
        nz = cap_mask.nonzero()
        q = d // d.flip(0)  # integer division by (fake) zeros is not refused while tracing
        inv = jitorch.linalg.inv(x[:3])  # nor a singular (fake) matrix
        return kept, filled, nz, q, inv

    x, d = _randn(4, 3), jitorch.tensor([3, 7, 2])
    gm = fx.make_fx(f, tracing_mode="fake")(x, d)
    assert_close(list(gm(x, d)), list(f(x, d)))


def test_input_validation_reads_are_skipped_as_in_torch():
    # Label smoothing takes cross_entropy's composite path, whose target bounds check reads bool(); one_hot's range
    # checks do too. Those reads only decide whether to raise, so they run on the fake zeros (and pass).
    seen = []

    def f(x, t):
        seen.append(F.one_hot(t, 6).shape)
        return F.cross_entropy(x, t, label_smoothing=0.1)

    _check_fake(f, (_randn(4, 6, requires_grad=True), jitorch.tensor([5, 0, 2, 2])),
                (_randn(4, 6, seed=1, requires_grad=True), jitorch.tensor([1, 4, 3, 0])), joint=True)
    assert seen[0] == (4, 6)


def test_singular_fake_matrix_whose_backward_needs_it_raises():
    with pytest.raises(DataDependentOutputException, match="linalg_solve"):
        fx.make_fx(lambda a, b: jitorch.linalg.solve(a, b).sum(), joint=True, tracing_mode="fake")(
            _randn(3, 3, requires_grad=True), _randn(3, seed=1))


def test_module_buffers_are_not_written_by_a_fake_trace():
    jitorch.manual_seed(0)
    bn = nn.BatchNorm1d(4).train()
    before = bn.running_mean.clone(), bn.running_var.clone(), int(bn.num_batches_tracked)
    gm = fx.make_fx(bn, tracing_mode="fake")(_randn(8, 4))
    assert_close([bn.running_mean, bn.running_var], list(before[:2]))
    assert int(bn.num_batches_tracked) == before[2]
    x = _randn(8, 4, seed=1)
    expected = nn.BatchNorm1d(4).train()(x)
    assert_close(gm(x), expected)
    assert any(n.op == "call_function" and n.target.inplace for n in gm.graph.nodes)  # the running-stat updates


def test_large_input_is_traced_without_allocating_it():
    def rss():
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * 4096

    x = jitorch.empty(2 ** 14, 2 ** 14)  # 1 GiB of float32, never touched
    start = rss()
    gm = fx.make_fx(lambda x: x.reshape(-1, 1024).sum(1), tracing_mode="fake")(x)
    grown = rss() - start
    assert grown < 64 * 2 ** 20, f"RSS grew by {grown / 2 ** 20:.0f} MiB"
    assert [n.meta.get("val") for n in gm.graph.nodes][:3] == [
        ((2 ** 14, 2 ** 14), np.dtype(np.float32)), ((2 ** 18, 1024), np.dtype(np.float32)),
        ((2 ** 18,), np.dtype(np.float32))]
    small = _randn(64, 32)
    assert_close(fx.make_fx(lambda x: x.reshape(-1, 1024).sum(1), tracing_mode="fake")(small)(small),
                 small.reshape(-1, 1024).sum(1))


def test_multi_output_rows_carry_per_output_meta():
    gm = fx.make_fx(lambda x: jitorch.max(x, dim=1), tracing_mode="fake")(_randn(3, 5))
    row = [n for n in gm.graph.nodes if n.op == "call_function" and n.target is not operator.getitem][0]
    assert [m.dtype for m in row.meta["tensor_meta"]] == [jitorch.float32, jitorch.int64]
    parts = [n for n in gm.graph.nodes if n.target is operator.getitem]
    assert [p.meta["val"] for p in parts] == [((3,), np.dtype(np.float32)), ((3,), np.dtype(np.int64))]


def test_tracing_modes():
    with pytest.raises(NotImplementedError, match="symbolic"):
        fx.make_fx(lambda x: x, tracing_mode="symbolic")
    with pytest.raises(AssertionError, match="real/fake/symbolic"):
        fx.make_fx(lambda x: x, tracing_mode="meta")


def test_writes_through_a_view_of_a_captured_tensor_are_refused():
    state = jitorch.zeros(4, 3)

    def f(x):
        state[:2] = x  # a KV-cache style write into a tensor the function closes over
        return state * 1

    with pytest.raises(DataDependentOutputException, match="view of a tensor of shape \\(4, 3\\)"):
        fx.make_fx(f, tracing_mode="fake")(_randn(2, 3))
    assert not state.any()
    local = fx.make_fx(lambda x: (lambda s: (s.__setitem__(slice(0, 2), x), s * 1)[1])(jitorch.zeros(4, 3)),
                       tracing_mode="fake")(_randn(2, 3))  # into a tensor made inside the function: fine
    x = _randn(2, 3, seed=1)
    assert_close(local(x), jitorch.cat([x, jitorch.zeros(2, 3)]))


def test_masked_attention_traces_in_fake_mode_and_handles_dead_rows():
    # The dead-row handling has no branch on values, so one traced graph serves every mask.
    def attend(q, mask):
        return F.scaled_dot_product_attention(q, q, q, attn_mask=mask)

    q = jitorch.randn(2, 3, 4)
    mask = jitorch.tensor([[True, False, True], [False, False, False], [True, True, True]])
    gm = fx.make_fx(attend, tracing_mode="fake")(q, mask)
    gm.graph.lint()
    for m in (mask, ~mask, jitorch.ones(3, 3, dtype=jitorch.bool)):
        expected = attend(q, m)
        got = gm(q, m)
        assert not got.isnan().any().item()
        np.testing.assert_allclose(got.numpy(), expected.numpy(), atol=1e-6)
