"""Lookup tables in ``nn.functional``: ``embedding``, ``embedding_bag`` and ``one_hot``.

``embedding`` is a row gather of the weight, so its gradient is a scatter-add of the upstream gradient into the rows
that were looked up; the ``padding_idx`` row gets none (its output is detached), and ``scale_grad_by_freq`` divides
each row's gradient by how often it occurs in the batch. With ``sparse=True`` the lookup is the ``sparse_embedding``
row (jitorch/ops/sparse_ops.py), whose backward gives the weight a sparse_coo gradient, as torch's: one entry per index
looked up, in order, ``padding_idx`` entries left out (``scale_grad_by_freq`` is refused there, as by torch).

>>> import jitorch
>>> import jitorch.nn.functional as F
>>> F.embedding(jitorch.tensor([[0, 2]]), jitorch.arange(6.0).reshape(3, 2))
tensor([[[0., 1.],
         [4., 5.]]])
>>> F.one_hot(jitorch.tensor([0, 2]))
tensor([[1, 0, 0],
        [0, 0, 1]])
"""
from __future__ import annotations

from .. import _creation, _dtype
from .._dispatch import apply
from .._pointwise import where
from .._tensor import Tensor
from ..autograd.graph import named
from ..autograd.grad_mode import no_grad
from ..ops.indexing import INDEX
from ..ops.nn_ops import CHECK_RANGE
from ..ops.segment_max import SEGMENT_ARGMAX
from ..ops.sparse_ops import SPARSE_EMBEDDING

__all__ = ["embedding", "embedding_bag", "one_hot"]


def _check_indices(indices, op):
    if indices.dtype not in (_dtype.int64, _dtype.int32):
        raise RuntimeError(f"Expected tensor for argument #1 'indices' to have one of the following scalar types: "
                           f"Long, Int; but got {indices.type()} instead (while checking arguments for {op})")


def _checked_range(indices, num, op, error="RuntimeError", message=None):
    """``indices``, checked in ``[0, num)`` by a row (so compiled graphs keep the check without a graph break)."""
    if message is None:
        message = f"{op}: index {{index}} of input takes value {{value}} which is not in the valid range [0, {num})"
    return apply(CHECK_RANGE, indices, low=0, high=num, below=message, above=message, error=error)


def _padding_index(padding_idx, num):
    if padding_idx is None:
        return None
    if padding_idx >= num or padding_idx < -num:
        raise AssertionError("Padding_idx must be within num_embeddings")
    return padding_idx + num if padding_idx < 0 else padding_idx


def _renorm_rows(weight, indices, max_norm, norm_type):
    """PyTorch's ``embedding_renorm_``: rows looked up whose norm exceeds ``max_norm`` are rescaled in place."""
    with no_grad():
        rows = indices.reshape(-1).unique()
        norms = weight[rows].norm(norm_type, 1)
        too_big = norms > max_norm
        if bool(too_big.any()):
            rows = rows[too_big]
            scale = (max_norm / (norms[too_big] + 1e-7)).unsqueeze(1).to(weight.dtype)
            weight[rows] = weight[rows] * scale


def _masked_forward(rows, keep):
    # ``rows`` where ``keep``, 0 elsewhere, with the gradient of ``rows`` everywhere.
    detached = rows.detach()
    return rows - where(keep, 0.0, detached)


# Weight dtypes whose CPU embedding_bag runs FBGEMM's kernel where no padding index is given.
_SHORT_END_DTYPES = (_dtype.float32, _dtype.float16, _dtype.bfloat16)


def _straight_through_scale(out, factor):
    # The value of ``out`` exactly, the gradient of ``out * factor``.
    detached = out.detach()
    return detached + (out - detached) * factor


def embedding(input, weight, padding_idx=None, max_norm=None, norm_type=2.0, scale_grad_by_freq=False, sparse=False):
    """Rows of ``weight`` (``[num_embeddings, dim]``) picked by the integer ``input``: shape ``input.shape + [dim]``."""
    if weight.dim() != 2:
        raise RuntimeError(f"embedding: 'weight' must be 2-D, but got a weight of shape {list(weight.shape)}")
    _check_indices(input, "embedding")
    num = weight.shape[0]
    padding_idx = _padding_index(padding_idx, num)
    if max_norm is not None or sparse:  # (the dense lookup's own row checks the range)
        input = _checked_range(input, num, "embedding", "IndexError",
                               f"embedding: index out of range in self (indices must be in [0, {num}))")
    if max_norm is not None:
        _renorm_rows(weight, input, max_norm, norm_type)
    if sparse:
        return apply(SPARSE_EMBEDDING, weight, input if input.device == weight.device else input.to(weight.device),
                     num_weights=num, padding_idx=padding_idx, scale_grad_by_freq=bool(scale_grad_by_freq))
    try:
        # One index row over the whole index tensor (its shape leads the result's): the kernel checks the range, so
        # no value is read into Python and a compiled model keeps one graph.
        out = apply(INDEX, weight, input if input.device == weight.device else input.to(weight.device), key=(0,),
                    negative=False)
    except IndexError:
        raise IndexError(f"embedding: index out of range in self (indices must be in [0, {num}))") from None
    if not out.requires_grad:
        return out
    if scale_grad_by_freq:
        counts = input.reshape(-1).bincount(minlength=num)
        out = _straight_through_scale(out, (1.0 / counts[input].to(weight.dtype)).unsqueeze(-1))
    if padding_idx is not None:
        out = where((input == padding_idx).unsqueeze(-1), out.detach(), out)
    return named(out, "EmbeddingBackward0")


def _bag_ids(input, offsets, include_last_offset):
    """(flat indices, bag id of each index, number of bags) for a 2-D input or a 1-D input with ``offsets``."""
    if input.dim() == 2:
        if offsets is not None:
            raise ValueError("if input is 2D, then offsets has to be None, as input is treated is a mini-batch of "
                             "fixed length sequences. However, found offsets of type "
                             f"{type(offsets).__name__}")
        bags, length = input.shape
        ids = _creation.arange(bags, device=input.device).unsqueeze(1).expand(bags, length).reshape(-1)
        return input.reshape(-1), ids, bags
    if input.dim() != 1:
        raise ValueError(f"input has to be 1D or 2D Tensor, but got Tensor of dimension {input.dim()}")
    if offsets is None:
        raise ValueError("offsets has to be a 1D Tensor but got None")
    if offsets.dim() != 1:
        raise ValueError("offsets has to be a 1D Tensor")
    if offsets.numel() and int(offsets[0]) != 0:
        raise RuntimeError(f"offsets[0] has to be 0, i.e., the first sequence in the mini-batch has to start from "
                           f"position 0. However, got {int(offsets[0])}")
    if offsets.numel() and int(offsets[-1]) > input.numel():
        raise RuntimeError(f"embedding_bag: offsets[-1] can not be greater than input's length {input.numel()} but "
                           f"got offsets[-1] of {int(offsets[-1])}")
    if offsets.numel() > 1 and bool((offsets[1:] < offsets[:-1]).any()):  # a negative bag would shift the others
        raise RuntimeError(f"embedding_bag: offsets must be non-decreasing, but got {offsets.tolist()}")
    starts = offsets.long()
    if include_last_offset:
        starts = starts[:-1]
    bags = starts.numel()
    # Bag of element k: the number of bag starts at or before k, minus one.
    marks = _creation.zeros(input.numel() + 1, dtype=_dtype.int64, device=input.device)
    marks = marks.index_add(0, starts.clamp(max=input.numel()), _creation.ones_like(starts))
    ids = marks[:-1].cumsum(0) - 1
    return input, ids, bags


def _bag_frequencies(flat, num):
    """The count ``embedding_bag``'s gradient divides each looked-up row by. ATen's CPU backward divides the i-th
    distinct index's rows by the count of the i-th *sorted* index (``counts[indices_data[i]]``), not by their own;
    so do these, for the gradients to agree. Elsewhere each row's own count."""
    counts = flat.bincount(minlength=num)
    if flat.device.type != "cpu":
        return counts[flat]
    from .._sorting import searchsorted

    ordered = flat.sort().values
    return counts[ordered[searchsorted(ordered.unique_consecutive(), flat)]]


def embedding_bag(input, weight, offsets=None, max_norm=None, norm_type=2, scale_grad_by_freq=False, mode="mean",
                  sparse=False, per_sample_weights=None, include_last_offset=False, padding_idx=None):
    """Sums, means or maxima of bags of embeddings, without materializing the per-index embeddings' shape.

    Bags are the rows of a 2-D ``input``, or the slices of a 1-D ``input`` that start at ``offsets``. Indices equal
    to ``padding_idx`` are left out (an empty bag gives zeros).
    """
    if mode not in ("sum", "mean", "max"):
        raise ValueError("mode has to be one of sum, mean or max")
    if mode == "max" and scale_grad_by_freq:
        raise ValueError("max mode does not support scaling the gradient by the frequency")
    if sparse and mode == "max":
        raise ValueError("max mode does not support sparse weights")
    if per_sample_weights is not None:
        if mode != "sum":
            raise NotImplementedError(f"embedding_bag: per_sample_weights was not None. per_sample_weights is only "
                                      f"supported for mode='sum' (got mode='{mode}'). Please open a feature request "
                                      "on GitHub.")
        if per_sample_weights.shape != input.shape:
            raise ValueError(f"embedding_bag: If per_sample_weights ({per_sample_weights.shape}) is not None, "
                             f"then it must have the same shape as the input ({input.shape})")
        if per_sample_weights.dtype != weight.dtype:
            from .._dispatch import TORCH_TYPE_NAMES

            names = [TORCH_TYPE_NAMES[t.dtype.name] + "Tensor" for t in (weight, per_sample_weights)]
            raise RuntimeError(f"Expected tensor for argument #1 'weight' to have the same type as tensor for argument "
                               f"#1 'per_sample_weights'; but type torch.{names[0]} does not equal torch.{names[1]} "
                               "(while checking arguments for embedding_bag)")
    _check_indices(input, "embedding_bag")
    flat, ids, bags = _bag_ids(input, offsets, include_last_offset)
    num, dim = weight.shape
    padding_idx = _padding_index(padding_idx, num)
    flat = _checked_range(flat, num, "embedding_bag")
    if max_norm is not None:
        _renorm_rows(weight, flat, max_norm, norm_type)
    if sparse:  # the weight's gradient is sparse: entries for the indices, the padding ones left out
        rows = apply(SPARSE_EMBEDDING, weight, flat, num_weights=num, padding_idx=padding_idx,
                     scale_grad_by_freq=bool(scale_grad_by_freq))
    else:
        rows = weight.index_select(0, flat)
    if scale_grad_by_freq and rows.requires_grad and not sparse:
        rows = _straight_through_scale(rows, (1.0 / _bag_frequencies(flat, num).to(weight.dtype)).unsqueeze(-1))
    keep = None if padding_idx is None else flat != padding_idx
    if mode == "max":
        if keep is not None:
            rows, ids = rows[keep], ids[keep]
        # each maximum's row found, then gathered (with no rows left, the zeros below)
        if rows.dtype in (_dtype.float32, _dtype.float64) and rows.shape[0]:
            positions = apply(SEGMENT_ARGMAX, rows.detach(), ids, bags=bags)
            empty = positions < 0
            out = rows.gather(0, positions.clamp(min=0))
            return out.masked_fill(empty, 0) if bool(empty.any()) else out
        out = weight.new_zeros((bags, dim))
        return out.scatter_reduce(0, ids.unsqueeze(1).expand(ids.shape[0], dim), rows, "amax", include_self=False)
    if per_sample_weights is not None:
        rows = rows * per_sample_weights.reshape(-1, 1)
    if keep is not None:
        rows = rows * keep.unsqueeze(1).to(rows.dtype)
    if (include_last_offset and input.dim() == 1 and offsets.numel() and int(offsets[-1]) < flat.numel()
            and padding_idx is None and weight.dtype in _SHORT_END_DTYPES):
        # An offsets end short of the input (torch's contract is the input's length): torch's FBGEMM forward (float
        # and half weights, no padding index) stops its sums there, while its means still count the indices after
        # it and its backward hands them their gradient (which for sums it reads past its buffer); its other kernels
        # take the last bag to the input's end. So do these, the indices after the end passing the gradient through.
        before_end = (_creation.arange(flat.numel(), device=flat.device) < int(offsets[-1])).unsqueeze(1)
        rows = _masked_forward(rows, before_end)
    out = weight.new_zeros((bags, dim)).index_add(0, ids, rows)
    if mode == "mean":
        weight_of = _creation.ones_like(ids) if keep is None else keep.long()
        counts = _creation.zeros(bags, dtype=_dtype.int64, device=input.device).index_add(0, ids, weight_of)
        out = out / counts.clamp(min=1).unsqueeze(1).to(out.dtype)
    return out


def one_hot(tensor, num_classes=-1):
    """``[..., num_classes]`` int64 tensor with a 1 at each entry's class (``-1``: ``max + 1`` classes)."""
    if not isinstance(tensor, Tensor) or tensor.dtype is not _dtype.int64:
        raise RuntimeError("one_hot is only applicable to index tensor of type LongTensor.")
    if num_classes == -1:
        if tensor.numel() == 0:
            raise RuntimeError("Can not infer total number of classes from empty tensor.")
        num_classes = int(tensor.max()) + 1
    tensor = apply(CHECK_RANGE, tensor, low=0, high=num_classes, below="Class values must be non-negative.",
                   above="Class values must be smaller than num_classes.")
    classes = _creation.arange(num_classes, device=tensor.device)
    return (tensor.unsqueeze(-1) == classes).long()

