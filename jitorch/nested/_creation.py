"""Making nested tensors: from a list of tensors (copied or kept in the graph), from packed values and offsets or
lengths, as a narrowed or masked view of a dense tensor; and back to a dense padded tensor.

>>> import jitorch, jitorch.nested
>>> nt = jitorch.nested.nested_tensor_from_jagged(jitorch.arange(5.0), jitorch.tensor([0, 2, 5]))
>>> jitorch.nested.to_padded_tensor(nt, -1.0)
tensor([[ 0.,  1., -1.],
        [ 2.,  3.,  4.]])
"""
from __future__ import annotations

from .. import _dtype
from .._tensor import Tensor
from ._tensor import NestedTensor, components, make_jagged, make_strided

__all__ = ["nested_tensor", "as_nested_tensor", "nested_tensor_from_jagged", "to_padded_tensor", "narrow",
           "masked_select"]


def _jitorch():
    import jitorch

    return jitorch


def _layout_of(layout, op):
    layout = _dtype.strided if layout is None else layout
    if layout not in (_dtype.strided, _dtype.jagged):
        raise RuntimeError(f"{op}(): Specified layout is unsupported for nested tensors: {layout} (use "
                           "jitorch.strided or jitorch.jagged)")
    return layout


def _checked_parts(parts, layout, op):
    if not parts:
        raise RuntimeError("Cannot construct a nested tensor from an empty tensor list")
    if any(p.dim() == 0 for p in parts):
        raise RuntimeError("Cannot construct a nested tensor from a list of zero-dim tensors")
    if len({p.dim() for p in parts}) != 1:
        raise RuntimeError("When constructing a nested tensor, all tensors in list must have the same dim "
                           f"(got dims {[p.dim() for p in parts]})")
    if layout is _dtype.jagged and len({tuple(p.shape[1:]) for p in parts}) != 1:
        raise RuntimeError("Cannot represent given tensor list as a nested tensor with the jagged layout. Note "
                           "that the jagged layout only allows for a single ragged dimension. For example: (B, *, "
                           f"D_0, D_1, ..., D_N), with ragged * dim (got shapes {[list(p.shape) for p in parts]})")


def _pack(parts):
    """Jagged values and offsets of sequences ``parts`` (in the graph: gradients reach the parts)."""
    torch = _jitorch()
    lengths = [p.shape[0] for p in parts]
    offsets = torch.tensor([0] + lengths, dtype=_dtype.int64, device=parts[0].device).cumsum(0)
    values = torch.cat(parts) if len(parts) > 1 else parts[0].view_as(parts[0])
    return values, offsets, (min(lengths), max(lengths))


def nested_tensor(tensor_list, *, dtype=None, layout=None, device=None, requires_grad=False, pin_memory=False):
    """A new nested tensor (a leaf, copied) from a list of tensors or nested lists of numbers, as ``torch.nested
    .nested_tensor``: ``layout=jitorch.jagged`` packs sequences ragged in their first dim; the default strided
    layout keeps components that may differ in any dim.

    >>> import jitorch, jitorch.nested
    >>> jitorch.nested.nested_tensor([[1.0, 2.0], [3.0]], layout=jitorch.jagged).offsets()
    tensor([0, 2, 3])
    """
    torch = _jitorch()
    layout = _layout_of(layout, "nested_tensor")
    parts = [torch.as_tensor(t.detach() if isinstance(t, Tensor) else t, dtype=dtype, device=device)
             for t in tensor_list]
    _checked_parts(parts, layout, "nested_tensor")
    if requires_grad and not parts[0].is_floating_point() and not parts[0].is_complex():
        raise RuntimeError("only Tensors of floating point dtype can require gradients")
    if layout is _dtype.strided:
        return make_strided([p.clone().requires_grad_(requires_grad) for p in parts])
    values, offsets, seqlens = _pack([p.detach() for p in parts])
    values = values.clone() if len(parts) == 1 else values
    return make_jagged(values.requires_grad_(requires_grad), offsets, seqlens=seqlens)


def as_nested_tensor(ts, dtype=None, device=None, layout=None):
    """A nested tensor from a list of tensors or a dense ``(B, ...)`` tensor that keeps autograd history (gradients
    reach ``ts``), as ``torch.nested.as_nested_tensor``; a nested tensor of the layout asked is returned as is."""
    layout = _layout_of(layout, "as_nested_tensor")
    if isinstance(ts, NestedTensor):
        if ts.layout != layout:
            raise RuntimeError(f"as_nested_tensor(): converting between nested layouts ({ts.layout} to {layout}) "
                               "is not supported")
        return ts if dtype is None and device is None else ts.to(dtype=dtype, device=device)
    if isinstance(ts, Tensor):
        if ts.dim() < 2:
            raise RuntimeError(f"as_nested_tensor(): Expected tensor argument to have dim() > 1, got shape "
                               f"{list(ts.shape)}")
        parts = list(ts.to(dtype=dtype, device=device).unbind(0))
        if layout is _dtype.jagged:
            whole = ts.to(dtype=dtype, device=device)
            b, n = whole.shape[0], whole.shape[1]
            offsets = _jitorch().arange(0, (b + 1) * n, n, dtype=_dtype.int64, device=whole.device)
            return make_jagged(whole.reshape(b * n, *whole.shape[2:]), offsets, seqlens=(n, n))
        return make_strided(parts)
    if not isinstance(ts, (list, tuple)) or not all(isinstance(t, Tensor) for t in ts):
        raise TypeError("as_nested_tensor(): Expected a list of tensors or a tensor")
    parts = [t.to(dtype=dtype, device=device) for t in ts]
    _checked_parts(parts, layout, "as_nested_tensor")
    if layout is _dtype.strided:
        return make_strided(parts)
    values, offsets, seqlens = _pack(parts)
    return make_jagged(values, offsets, seqlens=seqlens)


def nested_tensor_from_jagged(values, offsets=None, lengths=None, jagged_dim=None, min_seqlen=None,
                              max_seqlen=None):
    """A jagged nested tensor viewing ``values`` (gradients reach it): sequence ``b`` is rows ``offsets[b]`` to
    ``offsets[b + 1]`` of the values' ``jagged_dim - 1`` dim, or ``lengths[b]`` rows from ``offsets[b]`` (holes
    between sequences); ``offsets`` from ``lengths`` when only they are given."""
    torch = _jitorch()
    if offsets is None:
        if lengths is None:
            raise RuntimeError("nested_tensor_from_jagged(): At least one of offsets or lengths is required.")
        offsets = torch.nn.functional.pad(lengths.cumsum(0), (1, 0)).to(_dtype.int64)
        lengths = None
    jagged_dim = 1 if jagged_dim is None else jagged_dim
    if not 1 <= jagged_dim <= values.dim():
        raise RuntimeError(f"nested_tensor_from_jagged(): jagged_dim={jagged_dim} is out of range for values of "
                           f"shape {list(values.shape)} (expected 1 to {values.dim()})")
    seqlens = None
    if min_seqlen is not None or max_seqlen is not None:
        nt = make_jagged(values, offsets, lengths, jagged_dim)
        seqlens = (nt._get_min_seqlen() if min_seqlen is None else int(min_seqlen),
                   nt._get_max_seqlen() if max_seqlen is None else int(max_seqlen))
    return make_jagged(values.view_as(values), offsets, lengths, jagged_dim, seqlens=seqlens)


def _resized(part, target, padding):
    """``part`` padded with ``padding`` (or cut) to ``target`` in every dim."""
    torch = _jitorch()
    for axis, (have, want) in enumerate(zip(part.shape, target)):
        if want < have:
            part = part.narrow(axis, 0, want)
    pads = []
    for have, want in zip(reversed(part.shape), reversed(target)):
        pads += [0, max(want - have, 0)]
    return torch.nn.functional.pad(part, pads, value=padding) if any(pads) else part


def to_padded_tensor(input, padding, output_size=None):
    """The dense ``(B, max sizes...)`` tensor of a nested tensor's sequences, ``padding`` where a sequence ends
    (``output_size`` pads further, or cuts); gradients reach the values.

    >>> import jitorch, jitorch.nested
    >>> nt = jitorch.nested.nested_tensor([jitorch.ones(1), jitorch.ones(2)], layout=jitorch.jagged)
    >>> nt.to_padded_tensor(0.0)
    tensor([[1., 0.],
            [1., 1.]])
    """
    if not isinstance(input, NestedTensor):
        raise RuntimeError(f"to_padded_tensor(): expected a nested tensor, got a {input.layout} tensor of shape "
                           f"{list(input.shape)}")
    if input._nt_lengths is not None:
        raise RuntimeError("to_padded_tensor(): not supported for nested tensors with holes")
    parts = components(input)
    if output_size is not None:
        output_size = list(output_size)
        if len(output_size) != input.dim() or output_size[0] != len(parts):
            raise RuntimeError(f"to_padded_tensor(): output_size {output_size} does not match a nested tensor of "
                               f"{len(parts)} sequences and {input.dim()} dims")
        target = output_size[1:]
    else:
        target = [max(p.shape[i] for p in parts) for i in range(parts[0].dim())]
    return _jitorch().stack([_resized(p, target, padding) for p in parts])


def narrow(tensor, dim, start, length, layout=None):
    """Rows ``start`` to ``start + length`` (per sequence when tensors) of a dense ``(B, T, ...)`` tensor's dim 1 as
    a jagged view with holes (``layout=jitorch.jagged``); the strided layout copies, and narrows dim 0 only (as
    torch's)."""
    torch = _jitorch()
    layout = _layout_of(layout, "narrow")
    if not isinstance(start, (int, Tensor)):
        raise RuntimeError("start must be an integer or a tensor")
    if not isinstance(length, (int, Tensor)):
        raise RuntimeError("length must be an integer or a tensor")
    if layout is _dtype.strided:
        if isinstance(start, Tensor) or isinstance(length, Tensor):
            raise RuntimeError("start and length must be integers for the strided layout NT impl")
        if dim != 0:
            raise RuntimeError(f"narrow(): only dim=0 supported for nested tensors, but got: {dim}")
        return make_strided([p.clone() for p in tensor.unbind(0)[start:start + length]])
    if dim != 1:
        raise RuntimeError("jagged layout only supports dim=1")
    if tensor.dim() < 2:
        raise RuntimeError(f"narrow(): the tensor must be at least 2-D, got shape {list(tensor.shape)}")
    b, t = tensor.shape[0], tensor.shape[1]
    starts = torch.as_tensor(start, dtype=_dtype.int64, device=tensor.device).expand(b)
    lengths = torch.as_tensor(length, dtype=_dtype.int64, device=tensor.device).expand(b)
    offsets = torch.cat([starts + t * torch.arange(b, dtype=_dtype.int64, device=tensor.device),
                         (starts[-1] + t * (b - 1) + lengths[-1]).reshape(1)])
    values = tensor.reshape(b * t, *tensor.shape[2:])
    seqlens = (int(lengths.min()), int(lengths.max()))
    contiguous = bool((lengths[1:-1] == t).all()) and bool((offsets[1:-2].diff() == t).all()) and \
        int(starts[0] + lengths[0]) == t
    if contiguous:
        first = int(offsets[0])
        return make_jagged(values[first:int(offsets[-1])], offsets - first, seqlens=seqlens)
    return make_jagged(values, offsets, lengths.clone(), seqlens=seqlens)


def masked_select(tensor, mask):
    """The entries of ``tensor`` where ``mask`` is True, one sequence per row of the last dim (a jagged tensor over
    ``tensor.masked_select(mask)``), as ``torch.nested.masked_select``."""
    torch = _jitorch()
    if tensor.layout != _dtype.strided or isinstance(tensor, NestedTensor):
        raise RuntimeError(f"torch.nested.masked_select requires a strided tensor, given {tensor.layout}")
    if mask.layout != _dtype.strided or isinstance(mask, NestedTensor):
        raise RuntimeError(f"torch.nested.masked_select requires a strided mask, given: {mask.layout}")
    values = tensor.masked_select(mask)
    lengths = mask.expand(tensor.shape).sum(dim=tensor.dim() - 1).reshape(-1)
    offsets = torch.nn.functional.pad(lengths.cumsum(0), (1, 0))
    return make_jagged(values, offsets)
