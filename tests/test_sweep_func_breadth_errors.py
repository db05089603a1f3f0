"""torch.func's errors as tutorials meet them, word for word against torch: in-place writes of batched values into
unbatched tensors under vmap, in_dims/out_dims structures (a list is no tuple), mismatched mapped sizes,
linearize's tangent checks, jacrev/jacfwd's refusal of complex tensors, integer inputs and non-tensor aux."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import jitorch
from helpers import assert_same

X8 = np.random.default_rng(2).standard_normal((8, 5)).astype(np.float32)


def _error(lib, call):
    with pytest.raises(Exception) as info:
        call(lib)
    return type(info.value), str(info.value).replace("jitorch.", "torch.")


def _same_error(call):
    got, want = _error(jitorch, call), _error(torch, call)
    assert got == want


def _write(lib, op, captured):
    """vmap over 8 samples of a function writing a batched value into an unbatched zeros(5) in place."""
    z = lib.zeros(5)
    x = lib.from_numpy(X8.copy())
    if captured:
        return lib.func.vmap(lambda r: op(z, r))(x)
    return lib.func.vmap(lambda r, buf: op(buf, r), in_dims=(0, None))(x, z)


WRITES = {
    "add_": lambda z, r: z.add_(r),
    "iadd": lambda z, r: z.__iadd__(r),
    "mul_": lambda z, r: z.mul_(r),
    "div_": lambda z, r: z.div_(r),
    "copy_": lambda z, r: z.copy_(r),
    "setitem": lambda z, r: z.__setitem__(slice(0, 2), r[:2]),
    "masked_fill_": lambda z, r: z.masked_fill_(r > 0, 1.0),
    "clamp_": lambda z, r: z.clamp_(min=r),
}


@pytest.mark.parametrize("captured", [True, False])
@pytest.mark.parametrize("name", list(WRITES))
def test_inplace_write_of_a_batched_value_into_an_unbatched_tensor(name, captured):
    _same_error(lambda lib: _write(lib, WRITES[name], captured))


def test_inplace_writes_that_torch_batches_still_run():
    for op in (lambda z, r: (r * 1).add_(z), lambda z, r: r.clone().mul_(2).add_(z), lambda z, r: (z + 0).relu_() + r):
        got, want = _write(jitorch, op, True), _write(torch, op, True)
        assert_same(got, want, atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("call", [
    lambda m: m.func.vmap(lambda x, y: x, in_dims=(0, None, 0))(m.zeros(4, 3), m.zeros(4, 3)),
    lambda m: m.func.vmap(lambda x, y: x, in_dims=(0, (None, 0)))(m.zeros(4, 3), m.zeros(4, 3)),
    lambda m: m.func.vmap(lambda x, d: x, in_dims=(0, {"a": 0}))(m.zeros(4, 3), {"b": m.zeros(4, 3)}),
    lambda m: m.func.vmap(lambda pair: pair[0], in_dims=((0, 1),))([m.zeros(4, 3), m.zeros(3, 4)]),
    lambda m: m.func.vmap(lambda x: (x, x), out_dims=(0, None, 1))(m.zeros(4, 3)),
    lambda m: m.func.vmap(lambda x: (x, x), out_dims=[0, 1])(m.zeros(4, 3)),
    lambda m: m.func.vmap(lambda x: [x, x], out_dims=(0, 1))(m.zeros(4, 3)),
    lambda m: m.func.vmap(lambda x: x, out_dims=[1])(m.zeros(4, 3)),
], ids=["in-len", "in-nested", "in-dict-keys", "in-tuple-for-list", "out-len", "out-list-for-tuple",
        "out-tuple-for-list", "out-list-for-tensor"])
def test_in_dims_and_out_dims_structure_errors(call):
    _same_error(call)


def test_matching_list_structures_map():
    def make(lib):
        x = lib.from_numpy(X8[:4].copy())
        pair = lib.func.vmap(lambda p: p[0] * p[1], in_dims=([0, 1],))([x, x.T.contiguous()])
        return pair, lib.func.vmap(lambda v: [v, v.sum()], out_dims=[1, 0])(x)
    got, want = make(jitorch), make(torch)
    assert_same(got[0], want[0], atol=1e-6, rtol=1e-6)
    assert isinstance(got[1], list) and isinstance(want[1], list)
    for g, w in zip(got[1], want[1]):
        assert_same(g, w, atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("call", [
    lambda m: m.func.vmap(lambda x, y: x + y)(m.zeros(4, 5), m.zeros(3, 5)),
    lambda m: m.func.vmap(lambda d: d["a"] + d["b"])({"a": m.zeros(4, 5), "b": m.zeros(2, 5)}),
    lambda m: m.func.vmap(lambda x, y: x + y, in_dims=(0, 1))(m.zeros(4, 5), m.zeros(5, 5)),
])
def test_mismatched_mapped_sizes(call):
    _same_error(call)


@pytest.mark.parametrize("tangents", [
    lambda m: (m.ones(4, 2),),
    lambda m: (m.ones(5, dtype=m.float64),),
    lambda m: (m.ones(5), m.ones(5)),
], ids=["shape", "dtype", "structure"])
def test_linearize_checks_tangents_against_the_primals(tangents):
    def call(m):
        _, jvp_fn = m.func.linearize(lambda x: x.sin() * x, m.from_numpy(X8[0].copy()))
        return jvp_fn(*tangents(m))
    _same_error(call)


@pytest.mark.parametrize("call", [
    lambda m: m.func.jacrev(lambda x: x * 2)(m.ones(2, dtype=m.complex64)),
    lambda m: m.func.jacfwd(lambda x: x * 2)(m.ones(2, dtype=m.complex64)),
    lambda m: m.func.jacrev(lambda x, y: x * 2, argnums=1)(m.ones(2, dtype=m.complex64), m.ones(2)),
    lambda m: m.func.jacrev(lambda x: x * (1 + 1j))(m.ones(2)),
    lambda m: m.func.jacrev(lambda x: x ** 3)(m.tensor([2, 3])),
    lambda m: m.func.grad(lambda x: x.sum())(m.ones(3, dtype=m.int64)),
    lambda m: m.func.grad(lambda x: (x.sum(), 3), has_aux=True)(m.ones(2)),
    lambda m: m.func.grad(lambda x: (x.sum(), [x, None]), has_aux=True)(m.ones(2)),
    lambda m: m.func.vjp(lambda x: (x.sin(), 2.0), m.ones(2), has_aux=True),
    lambda m: m.func.jvp(lambda x: (x.sin(), 2), (m.ones(2),), (m.ones(2),), has_aux=True),
    lambda m: m.func.jacrev(lambda x: (x.sin(), 2), has_aux=True)(m.ones(2)),
], ids=["jacrev-complex-in", "jacfwd-complex-in", "jacrev-complex-other-arg", "jacrev-complex-out",
        "jacrev-int", "grad-int", "grad-aux-int", "grad-aux-none", "vjp-aux", "jvp-aux", "jacrev-aux"])
def test_transform_input_and_aux_checks(call):
    _same_error(call)


def test_tensor_aux_of_any_structure_is_returned():
    def make(m):
        x = m.from_numpy(X8[0].copy())
        return m.func.grad(lambda v: ((v ** 2).sum(), {"a": v.sin(), "b": [v.cos()]}), has_aux=True)(x)
    got, want = make(jitorch), make(torch)
    assert_same(got[0], want[0], atol=1e-6, rtol=1e-6)
    assert_same(got[1]["a"], want[1]["a"], atol=1e-6, rtol=1e-6)
    assert_same(got[1]["b"][0], want[1]["b"][0], atol=1e-6, rtol=1e-6)
