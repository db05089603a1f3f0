"""``cat``/``stack`` of plain CPU tensors of one dtype take a shortcut past the general checks (`_quick_join`): the
same values, dtypes, layouts, gradients and errors as PyTorch, and the general path for everything else (mixed
dtypes, legacy empty tensors, ``out=``, non-tensor entries, stale views, tracing)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import jitorch
from helpers import assert_same, check_op

RNG = np.random.default_rng(0)


@pytest.mark.parametrize("shape", [(4,), (3, 5), (2, 3, 4), (0, 3), (2, 1, 3, 2)])
@pytest.mark.parametrize("layout", ["contiguous", "transposed", "sliced"])
def test_cat_matches_torch_at_every_dim(shape, layout):
    arrays = [RNG.standard_normal(shape).astype(np.float32) for _ in range(3)]
    for dim in range(-len(shape), len(shape)):
        got, want = check_op(lambda *t: jitorch.cat(t, dim), lambda *t: torch.cat(t, dim), arrays, layout=layout,
                             atol=0, rtol=0)
        assert got.is_contiguous() == want.is_contiguous()
        if want.requires_grad:
            assert got.grad_fn.name() == want.grad_fn.name()


def test_cat_of_differing_sizes_along_dim_and_tuple_input():
    a, b = RNG.standard_normal((2, 3)), RNG.standard_normal((2, 5))
    check_op(lambda x, y: jitorch.cat((x, y), 1), lambda x, y: torch.cat((x, y), 1), [a, b], atol=0, rtol=0)
    check_op(lambda x, y: jitorch.cat([x, y, x], -1), lambda x, y: torch.cat([x, y, x], -1), [a, b], atol=0, rtol=0)


def test_views_written_in_place_are_read_fresh():
    for lib in (jitorch, torch):
        base = lib.zeros(4, 3)
        view = base[1:3]
        base.add_(1)  # the view's history changes: jitorch regenerates it before reading
        joined = lib.cat([view, base[:1]])
        stacked = lib.stack([view, base[2:4]], 1)
        if lib is jitorch:
            got = (joined, stacked)
        else:
            assert_same(got[0], joined)
            assert_same(got[1], stacked)


@pytest.mark.parametrize("tensors", [
    lambda lib: [lib.ones(2, dtype=lib.int32), lib.ones(2, dtype=lib.float16)],  # promoted
    lambda lib: [lib.ones(2, 3, dtype=lib.int64), lib.tensor([]), lib.ones(1, 3, dtype=lib.int64)],  # legacy empty
    lambda lib: [lib.tensor([], dtype=lib.float64), lib.ones(3, dtype=lib.int32)],
    lambda lib: [lib.ones(2, 3, dtype=lib.bool), lib.zeros(2, 3, dtype=lib.bool)],
])
def test_general_path_cases_as_torch(tensors):
    for dim in (0, -1):
        try:
            want = torch.cat(tensors(torch), dim)
        except RuntimeError:
            with pytest.raises(RuntimeError, match="Sizes of tensors must match"):
                jitorch.cat(tensors(jitorch), dim)
            continue
        assert_same(jitorch.cat(tensors(jitorch), dim), want)


def test_errors_as_torch():
    for fn in (lambda lib: lib.cat([lib.ones(2, 3), lib.ones(3, 3)], 1),
               lambda lib: lib.cat([lib.ones(2, 3), lib.ones(2, 3, 1)]),
               lambda lib: lib.cat([lib.ones(2), lib.ones(2)], 1),
               lambda lib: lib.cat([lib.ones(()), lib.ones(())]),
               lambda lib: lib.cat([]),
               lambda lib: lib.cat([lib.ones(2), 3]),
               lambda lib: lib.cat(lib.ones(2, 2)),
               lambda lib: lib.stack([lib.ones(2), lib.ones(3)]),
               lambda lib: lib.stack([lib.ones(2), lib.ones(2)], 2)):
        with pytest.raises(Exception) as want:
            fn(torch)
        with pytest.raises(type(want.value)):
            fn(jitorch)


def test_out_and_stack_gradients_as_torch():
    a, b = RNG.standard_normal((3, 4)).astype(np.float32), RNG.standard_normal((3, 4)).astype(np.float32)
    for dim in (0, 1, 2, -1):
        check_op(lambda x, y: jitorch.stack([x, y, x], dim), lambda x, y: torch.stack([x, y, x], dim), [a, b],
                 atol=0, rtol=0)
    out_j, out_t = jitorch.empty(6, 4, dtype=jitorch.float64), torch.empty(6, 4, dtype=torch.float64)
    jitorch.cat([jitorch.from_numpy(a), jitorch.from_numpy(b)], out=out_j)
    torch.cat([torch.from_numpy(a), torch.from_numpy(b)], out=out_t)
    assert_same(out_j, out_t)
    with jitorch.no_grad():
        x = jitorch.from_numpy(a).requires_grad_()
        assert jitorch.cat([x, x]).grad_fn is None
    with jitorch.inference_mode():
        assert jitorch.stack([jitorch.from_numpy(a)] * 2).is_inference()


@pytest.mark.parametrize("dim", [0, 1, 3, -1])
def test_layouts_follow_atens_format_rule(dim):
    x = RNG.standard_normal((2, 3, 4, 5)).astype(np.float32)
    for lib in (jitorch, torch):
        cl = lib.from_numpy(x).contiguous(memory_format=lib.channels_last)
        plain = lib.from_numpy(x)
        cases = [lib.cat([cl, cl], dim), lib.cat([cl, plain], dim), lib.cat([cl.unsqueeze(0)] * 2, 0),
                 lib.stack([cl, cl], dim % 4), lib.cat([plain.permute(3, 2, 1, 0)] * 2, dim),
                 lib.cat([plain[0].transpose(0, 2)[:, :, 1:]] * 2, min(dim, 2))]
        if lib is jitorch:
            got = cases
        else:
            for g, w in zip(got, cases):
                assert g.stride() == w.stride()
                assert_same(g, w)


def test_mixed_dtypes_promote_with_gradients_as_torch():
    a = RNG.standard_normal((2, 3)).astype(np.float32)
    b = RNG.standard_normal((2, 3)).astype(np.float64)
    c = RNG.integers(0, 5, (2, 3)).astype(np.int32)
    for dim in (0, 1):
        check_op(lambda x, y, z: jitorch.cat([x, y, z], dim), lambda x, y, z: torch.cat([x, y, z], dim), [a, b, c],
                 atol=0, rtol=0)
        check_op(lambda x, y: jitorch.stack([x, y], dim), lambda x, y: torch.stack([x, y], dim), [a, b], atol=0, rtol=0)
