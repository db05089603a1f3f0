"""``axis=``/``keepdims=`` for ``dim=``/``keepdim=``: every name jitorch lists is called the same way in torch 2.13 (so
the list holds only names torch accepts them on) and the results are compared."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import jitorch
from jitorch import _numpy_names as names, _overrides


def _inputs(m):
    x = m.tensor(np.array([[3.0, 1.0, 2.0], [0.5, 5.0, 4.0]], dtype=np.float32))
    idx = m.tensor([[1, 0, 1]])
    return x, idx


# Arguments besides the tensor: positional, then keywords (where ``dim`` comes first, the rest go by keyword too).
# Strings name the extra tensors ``_call`` builds; ``axis`` is 1 unless AXIS says otherwise.
ARGS = {
    "chunk": ((2,), {}), "kthvalue": ((1,), {}), "quantile": ((0.5,), {}), "nanquantile": ((0.5,), {}),
    "repeat_interleave": ((2,), {}), "split_with_sizes": (([1, 1],), {}), "tensor_split": ((2,), {}),
    "topk": ((1,), {}), "cross": (("x3",), {}), "cosine_similarity": (("x",), {}), "vecdot": (("x",), {}),
    "slice_scatter": (("x",), {}), "take_along_dim": (("idx",), {}),
    "gather": ((), {"index": "idx"}), "index_select": ((), {"index": "row"}),
    "index_add": ((), {"index": "row", "source": "src1"}), "index_copy": ((), {"index": "row", "source": "src1"}),
    "index_fill": ((), {"index": "row", "value": -1.0}), "narrow": ((), {"start": 0, "length": 1}),
    "renorm": ((), {"p": 2, "maxnorm": 1.0}), "scatter": ((), {"index": "idx", "src": "x"}),
    "scatter_add": ((), {"index": "idx", "src": "x"}),
    "scatter_reduce": ((), {"index": "idx", "src": "x", "reduce": "amax"}),
    "select": ((), {"index": 1}), "select_scatter": ((), {"src": "row1", "index": 0}),
    "unflatten": ((), {"sizes": (2, 1)}), "pairwise_distance": (("x",), {}),
}
KEEPDIMS = {"all", "amax", "amin", "aminmax", "any", "argmax", "argmin", "logsumexp", "max", "mean", "median", "min",
            "mode", "nanmean", "nanmedian", "nanquantile", "nansum", "prod", "quantile", "std", "sum", "var",
            "kthvalue", "std_mean", "var_mean", "norm", "vector_norm", "matrix_norm", "pairwise_distance"}
AXIS = {"unsqueeze": 2, "matrix_norm": (0, 1), "norm": (0, 1), "pairwise_distance": None}
AXIS.update(dict.fromkeys(("select_scatter", "split_with_sizes", "scatter_reduce", "index_add", "index_copy",
                           "index_fill", "index_select", "gather", "scatter", "scatter_add", "take_along_dim",
                           "unflatten", "cumulative_trapezoid", "trapezoid", "trapz", "diff", "logcumsumexp", "cumsum",
                           "cumprod", "cummax", "cummin", "softmax", "log_softmax", "sort", "argsort", "unbind",
                           "squeeze", "cumsum_", "cumprod_", "index_add_", "index_copy_", "index_fill_", "scatter_",
                           "scatter_add_", "scatter_reduce_", "squeeze_", "narrow", "select"), 0))


def _call(m, owner, name):
    """``owner.name(x, ...)``, or ``x.name(...)`` when ``owner`` is None, with ``axis=``/``keepdims=``."""
    x, idx = _inputs(m)
    extras = {"idx": idx, "x": x, "row": m.tensor([1]), "src1": x[:1] * 0 + 7, "row1": x[0] * 0, "x3": m.ones(2, 3)}
    pos, kw = ARGS.get(name.rstrip("_"), ((), {}))
    pos = [extras[a] if isinstance(a, str) and a in extras else a for a in pos]
    kw = {k: extras[v] if isinstance(v, str) and v in extras else v for k, v in kw.items()}
    axis = AXIS.get(name, 1)
    if axis is not None:
        kw["axis"] = axis
    if name in KEEPDIMS:
        kw["keepdims"] = True
    if name in ("cat", "concat", "concatenate", "stack"):
        return getattr(owner, name)([x, x], **kw)
    if owner is None:
        return getattr(x.clone() if name.endswith("_") else x, name)(*pos, **kw)
    return getattr(owner, name)(x, *pos, **kw)


def _compare(mine, theirs):
    if isinstance(theirs, (tuple, list)):
        assert len(mine) == len(theirs)
        for a, b in zip(mine, theirs):
            _compare(a, b)
        return
    assert tuple(mine.shape) == tuple(theirs.shape)
    np.testing.assert_allclose(mine.detach().numpy().astype(np.float64), theirs.detach().numpy().astype(np.float64),
                               rtol=1e-5, atol=1e-6)


def _owners(namespace):
    return {"torch": (torch, jitorch), "linalg": (torch.linalg, jitorch.linalg),
            "special": (torch.special, jitorch.special),
            "functional": (torch.nn.functional, jitorch.nn.functional)}[namespace]


CASES = ([("torch", n) for n in names.FUNCTIONS] + [("linalg", n) for n in names.LINALG]
         + [("special", n) for n in names.SPECIAL] + [("functional", n) for n in names.FUNCTIONAL])


@pytest.mark.parametrize("namespace,name", CASES)
def test_function_takes_axis_like_torch(namespace, name):
    theirs_ns, mine_ns = _owners(namespace)
    _compare(_call(jitorch, mine_ns, name), _call(torch, theirs_ns, name))


@pytest.mark.parametrize("name", [n for n in names.METHODS if hasattr(jitorch.Tensor, n)])
def test_method_takes_axis_like_torch(name):
    _compare(_call(jitorch, None, name), _call(torch, None, name))


def test_every_listed_method_exists_but_renorm_():
    # renorm_ is listed for when it lands; everything else must be a real method, or the list has a typo.
    assert [n for n in names.METHODS if not hasattr(jitorch.Tensor, n)] in ([], ["renorm_"])


@pytest.mark.parametrize("call", [lambda m, x: x.sum(dim=0, axis=0), lambda m, x: m.split(x, 1, axis=0),
                                  lambda m, x: x.norm(dim=0, keepdims=True),
                                  lambda m, x: m.nn.functional.softmax(x, axis=0)])
def test_refused_where_torch_refuses(call):
    """Both spellings at once, and torch's Python-level functions (split, Tensor.norm, F.softmax): TypeError."""
    for m in (torch, jitorch):
        with pytest.raises(TypeError):
            call(m, _inputs(m)[0])


def test_wrapped_once_and_named_as_before():
    # fx names call targets by ``__name__`` and public path; a second install must not wrap twice.
    names.install(jitorch.Tensor, ["sum"])
    method = jitorch.Tensor.sum
    if id(method) in _overrides._methods:  # under the Tensor method wrappers a subclass instance turns on
        method = method.__wrapped__
    assert jitorch.sum.__name__ == "sum" and method.__numpy_names__ and method.__wrapped__.__name__ == "sum"
    assert not getattr(method.__wrapped__, "__numpy_names__", False)
