"""Memory overlap as torch sees it: ``expand``'s strides (a kept size-1 dim keeps its stride), ``fill_``/``zero_``
into an expanded tensor (allowed, the tensor stays refused to other in-place ops) and ``copy_`` between partly
overlapping views (refused), each against torch."""
import pytest
import torch

import jitorch
from helpers import assert_same, check_error


def _layouts(m):
    base = m.arange(24.0).reshape(2, 3, 4)
    return {
        "transposed-size1": (base.transpose(0, 2)[:, :1], (3, 4, 1, 2)),
        "sliced-size1": (base[:, :1, ::2], (5, 2, 1, 2)),
        "sliced-lead1": (base[:1, :, ::2], (2, 1, 3, 2)),
        "sliced-broadcast": (base[:1, :1, ::2], (1, 4, 2)),
        "channels_last": (m.arange(6.0).reshape(1, 3, 1, 2).contiguous(memory_format=m.channels_last),
                          (5, 1, 3, 1, 2)),
        "channels_last-broadcast": (m.arange(6.0).reshape(1, 3, 1, 2).contiguous(memory_format=m.channels_last),
                                    (1, 3, 4, 2)),
        "contiguous": (m.arange(3.0).reshape(3, 1), (2, 3, 4)),
        "permuted": (m.arange(6.0).reshape(1, 2, 3).permute(2, 0, 1), (3, 4, 2)),
    }


@pytest.mark.parametrize("layout", list(_layouts(torch)))
def test_expand_strides_match_torch(layout):
    (jt, shape), (th, _) = _layouts(jitorch)[layout], _layouts(torch)[layout]
    out = jt.expand(*shape)
    assert out.stride() == th.expand(*shape).stride()
    assert out.is_contiguous() == th.expand(*shape).is_contiguous()
    assert_same(out, th.expand(*shape))


@pytest.mark.parametrize("source", ["contiguous", "sliced-size1"])
@pytest.mark.parametrize("write", ["zero_", "fill_", "fill_tensor"])
def test_fill_of_expanded_tensor_writes_through_and_stays_refused(write, source):
    def run(m):
        if source == "contiguous":
            y = m.arange(4.0)
            x = y.expand(3, 4)
        else:  # a kept size-1 dim of a strided source: expand's strided view
            y = m.arange(12.0).reshape(3, 4)
            x = y[:1, ::2].expand(3, 1, 2)
        if write == "zero_":
            x.zero_()
        elif write == "fill_":
            x.fill_(2.5)
        else:
            x.fill_(m.tensor(1.5))
        return x, y

    if write == "fill_tensor":  # torch's fill_ by a tensor checks the overlap its fill by a number lets through
        check_error(lambda: run(jitorch), lambda: run(torch), match="more than one element of the written-to tensor")
        return
    (jx, jy), (tx, ty) = run(jitorch), run(torch)
    assert_same(jx, tx)
    assert_same(jy, ty)  # the write reached the expanded tensor's base
    assert jx.stride() == tx.stride()
    check_error(lambda: jx.add_(1), lambda: tx.add_(1), match="more than one element of the written-to tensor")
    check_error(lambda: jx.mul_(2), lambda: tx.mul_(2), match="more than one element of the written-to tensor")


def _copy_cases(m):
    def grid():
        return m.arange(16.0).reshape(4, 4)

    return {
        "shift": lambda: (lambda x: x[1:].copy_(x[:-1]))(m.arange(6.0)),
        "shift-rows": lambda: (lambda x: x[1:].copy_(x[:-1]))(grid()),
        "shift-large": lambda: (lambda x: x[1:5].copy_(x[0:4]))(m.arange(600.0)),
        "transposed-self": lambda: (lambda x: x.copy_(x.t()))(grid()),
        "other-dtype": lambda: (lambda x: x.view(m.int32)[1:].copy_(x[:-1]))(m.arange(6.0)),
        "as_strided": lambda: (lambda x: x[2:6].copy_(m.as_strided(x, (4,), (1,), 1)))(m.arange(8.0)),
        "requires-grad": lambda: (lambda x: x[1:].copy_(x[:-1]))(m.arange(6.0).requires_grad_().clone()),
        "self": lambda: (lambda x: x.copy_(x))(grid()),
        "same-view": lambda: (lambda x: x.view(16).copy_(x.view(16)))(grid()),
        "view-of-view": lambda: (lambda x: x.copy_(x.view(2, 8).view(4, 4)))(grid()),
        "disjoint": lambda: (lambda x: x[:2].copy_(x[2:]))(grid()),
        "disjoint-columns": lambda: (lambda x: x[:, :2].copy_(x[:, 2:]))(grid()),
        "interleaved": lambda: (lambda x: x[::2].copy_(x[1::2]))(m.arange(8.0)),
        "broadcast-row": lambda: (lambda x: x[1:].copy_(x[0]))(grid()),
        "empty": lambda: (lambda x: x[1:1].copy_(x[0:0]))(m.arange(8.0)),
    }


@pytest.mark.parametrize("case", list(_copy_cases(torch)))
def test_copy_overlap_refused_or_allowed_as_torch(case):
    th_fn, jt_fn = _copy_cases(torch)[case], _copy_cases(jitorch)[case]
    try:
        expected = th_fn()
    except RuntimeError:
        check_error(jt_fn, th_fn, match="some elements of the input tensor and the written-to tensor refer to a "
                                        "single memory location")
        return
    assert_same(jt_fn().detach(), expected.detach())


# torch's "too hard" overlap (a strided source over its own destination, x[:, 1:].copy_(x[:, :-1])) is copied
# element by element in memory order there; jitorch copies as if through a buffer. Neither refuses it.
