"""jitorch.export's dynamic shapes (``Dim``, ``dynamic_shapes``) against torch.export on the same models and weights.

The models and helpers are `test_export`'s.
"""
from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

import jitorch
from jitorch.export import Dim, UserError
from test_export import assert_close, inputs, pair, state

@pytest.mark.parametrize("name,sizes", [("mlp", (1, 9)), ("cnn_eval", (3, 7)), ("encoder", (3, 6))])
def test_dynamic_batch(name, sizes):
    jm, tm, shape = pair(name)
    x, xt = inputs(shape)
    batch = Dim("batch", min=1 if name == "mlp" else 2, max=16)
    ep = jitorch.export.export(jm, (x,), dynamic_shapes=({0: batch},))
    tep = torch.export.export(tm, (xt,), dynamic_shapes=({0: batch_t(batch)},))
    ep.graph.lint()
    (vr,), (tvr,) = ep.range_constraints.values(), tep.range_constraints.values()
    assert (vr.lower, vr.upper) == (tvr.lower, tvr.upper)
    placeholder = ep.graph.find_nodes(op="placeholder")[-1]
    assert placeholder.meta["sym_shape"][0] == "s0" and placeholder.meta["sym_shape"][1:] == shape[1:]
    m, tmod = ep.module(), tep.module()
    for i, n in enumerate(sizes):
        y, yt = inputs((n,) + shape[1:], seed=10 + i)
        assert_close(m(y), jm(y), atol=0, rtol=0)
        assert_close(m(y), tmod(yt))
    big, big_t = inputs((17,) + shape[1:])
    with pytest.raises(AssertionError) as torch_err:
        tmod(big_t)
    with pytest.raises(AssertionError, match=r"Guard failed: \w+.size\(\)\[0\] <= 16") as err:
        m(big)
    assert str(err.value).startswith(str(torch_err.value))
    if name != "mlp":
        with pytest.raises(AssertionError, match=r"size\(\)\[0\] >= 2"):
            m(inputs((1,) + shape[1:])[0])


def test_dynamic_batch_batchnorm_training():
    """BatchNorm's unbiased factor n / (n - 1) is a float of the batch size: the graph computes it from the input."""
    jm, tm, shape = pair("cnn_train")
    x, xt = inputs(shape)
    ep = jitorch.export.export(jm, (x,), dynamic_shapes=({0: Dim("batch", min=2, max=16)},))
    assert any(n.meta.get("sym") == "(36*s0)/(36*s0 - 1)" for n in ep.graph.nodes)
    tmod = torch.export.export(copy.deepcopy(tm), (xt,),
                               dynamic_shapes=({0: torch.export.Dim("batch", min=2, max=16)},)).module()
    m, eager = ep.module(), copy.deepcopy(jm)
    for i, n in enumerate((3, 11)):
        y, yt = inputs((n,) + shape[1:], seed=20 + i)
        out = m(y)
        assert_close(out, eager(y), atol=0, rtol=0)
        assert_close(out, tmod(yt))
    got, want = state(m), state(tmod)
    for k in ("bn.running_mean", "bn.running_var", "bn.num_batches_tracked"):
        np.testing.assert_allclose(got[k], want[k], atol=1e-6, rtol=1e-5)
    np.testing.assert_array_equal(got["bn.running_var"], state(eager)["bn.running_var"])


def batch_t(dim):
    return torch.export.Dim(dim.__name__, min=dim.min, max=dim.max)


def test_dynamic_two_dims_and_save_load(tmp_path):
    jm, _, _ = pair("encoder")
    x, _ = inputs((2, 5, 16))
    ep = jitorch.export.export(jm, (x,), dynamic_shapes={"src": {0: Dim("b", min=2, max=8), 1: Dim("t", max=32)}})
    assert str(ep.range_constraints) == "{s0: VR[2, 8], s1: VR[2, 32]}"
    assert any(n.meta.get("sym") == "s0*s1" for n in ep.graph.nodes)  # view(b * t, d) computed from the input
    path = tmp_path / "encoder.pt2"
    jitorch.export.save(ep, path)
    loaded = jitorch.export.load(path)
    assert str(loaded) == str(ep)
    for b, t in [(3, 7), (8, 2)]:
        y, _ = inputs((b, t, 16), seed=b)
        assert_close(loaded.module()(y), jm(y), atol=0, rtol=0)
    with pytest.raises(AssertionError, match="<= 32"):
        loaded.module()(inputs((2, 33, 16))[0])


def test_dim_errors_like_torch():
    jm, tm, _ = pair("mlp")
    x, xt = inputs((5, 4))
    with pytest.raises(Exception, match="top-level keys must be the arg names") as torch_err:
        torch.export.export(tm, (xt,), dynamic_shapes={"x": {0: torch.export.Dim("b")}})
    with pytest.raises(UserError, match="top-level keys must be the arg names") as err:
        jitorch.export.export(jm, (x,), dynamic_shapes={"x": {0: Dim("b")}})
    assert "['input']" in str(err.value) and "['input']" in str(torch_err.value)
    with pytest.raises(UserError, match="to be in the range"):
        jitorch.export.export(jm, (x,), dynamic_shapes=({0: Dim("b", min=8, max=16)},))


def test_shape_branch_specialised_or_refused():
    def build(T):
        class Branch(T.nn.Module):
            def forward(self, x):
                if x.shape[0] > 3:
                    return x + 1
                return x - 1
        return Branch()
    x, xt = inputs((5, 4))
    ep = jitorch.export.export(build(jitorch), (x,))
    names = [n.target.__name__ for n in ep.graph.nodes if n.op == "call_function"]
    assert names == ["add"]  # the branch the example took, and only it
    t_batch = torch.export.Dim("batch", max=64)
    with pytest.raises(Exception, match="Constraints violated") as torch_err:
        torch.export.export(build(torch), (xt,), dynamic_shapes=({0: t_batch},))
    with pytest.raises(UserError, match=r"Constraints violated \(batch\)") as err:
        jitorch.export.export(build(jitorch), (x,), dynamic_shapes=({0: Dim("batch", max=64)},))
    fix = "batch = Dim('batch', min=4, max=64)"
    assert fix in str(torch_err.value) and fix in str(err.value)
    ep = jitorch.export.export(build(jitorch), (x,), dynamic_shapes=({0: Dim("batch", min=4, max=64)},))
    assert_close(ep.module()(inputs((9, 4))[0]), inputs((9, 4))[0] + 1)
    ep = jitorch.export.export(build(jitorch), (x,), dynamic_shapes=({0: Dim.AUTO},))
    assert ep.range_constraints == {}  # AUTO: the dimension the code specializes stays static
