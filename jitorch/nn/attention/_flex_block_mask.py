"""``BlockMask``: FlexAttention's block-sparse description of a mask, in PyTorch's format.

The ``(Q_LEN, KV_LEN)`` mask is cut into ``BLOCK_SIZE = (Q_BLOCK, KV_BLOCK)`` tiles. For each row of tiles,
``kv_num_blocks`` counts the tiles holding some (but not all) allowed positions and ``kv_indices`` lists their
columns first (a stable descending sort of the row's 0/1 flags, so the rest of the row follows in column order); the
``full_kv_*`` pair does the same for tiles whose every position is allowed. The ``q_*`` pairs are the transposed view
(columns of tiles), which PyTorch's backward kernels walk. All are int32, with leading ``(B, H)`` dims.

PyTorch's CPU kernels, compiled or eager, read only ``mask_mod`` from a BlockMask (the tiles are what a GPU kernel
skips); `flex_attention` does the same, so a mask given by ``mask_mod`` or by a score_mod returning ``-inf`` gives
the same values.
"""
from __future__ import annotations

import functools
import itertools
import operator

from ... import _dtype
from ..._creation_filled import zeros
from ..._ranges import arange
from ..._sorting import argsort
from .._spatial_pad import pad
from ._flex_mods import noop_mask

__all__ = ["BlockMask", "_DEFAULT_SPARSE_BLOCK_SIZE", "_LARGE_SPARSE_BLOCK_SIZE", "_ordered_to_dense",
           "_dense_to_ordered", "_transpose_ordered", "_convert_mask_to_block_mask", "_round_up_to_multiple",
           "_create_sparse_block_from_block_mask", "_sliced_mask_mod_error"]

_DEFAULT_SPARSE_BLOCK_SIZE = 128
_LARGE_SPARSE_BLOCK_SIZE = 1 << 30


def _sliced_mask_mod_error(batch, head, token_q, token_kv):
    """The mask_mod of a sliced BlockMask: it no longer knows its batch/head offsets, so using it is an error."""
    raise RuntimeError("Cannot use mask_mod from a sliced BlockMask. When you slice a BlockMask using [], the "
                       "mask_mod attribute is reset. You must set it from the original BlockMask's mask_mod.")


def _round_up_to_multiple(x, multiple):
    return (x + multiple - 1) // multiple * multiple


def _ordered_to_dense(num_blocks_in_row, col_indices, num_cols):
    """The 0/1 int32 tile matrix ``(..., rows, num_cols)`` of the listed columns (entries past the count unread)."""
    listed = arange(col_indices.shape[-1], dtype=_dtype.int32, device=col_indices.device)
    valid = listed < num_blocks_in_row.unsqueeze(-1)
    # Unlisted entries land in one spare column past the end, cut off afterwards.
    targets = col_indices.long().masked_fill(~valid, num_cols)
    dense = zeros(*col_indices.shape[:-1], num_cols + 1, dtype=_dtype.int32, device=col_indices.device)
    dense.scatter_(-1, targets, 1)
    return dense[..., :num_cols].contiguous()


def _dense_to_ordered(dense_mask):
    """``(count, columns)`` per row of a 0/1 tile matrix: set columns first, each part in column order."""
    dense_mask = dense_mask.to(_dtype.int32)
    num_blocks_in_row = dense_mask.sum(dim=-1)
    col_indices = argsort(dense_mask, dim=-1, descending=True, stable=True)
    return num_blocks_in_row.to(_dtype.int32).contiguous(), col_indices.to(_dtype.int32).contiguous()


def _transpose_ordered(num_blocks_in_row, col_indices):
    dense = _ordered_to_dense(num_blocks_in_row, col_indices, col_indices.shape[-1])
    return _dense_to_ordered(dense.transpose(-2, -1))


def _adjust_num_blocks_and_indices(num_blocks, indices, new_num_rows, new_num_cols):
    indices = indices[:, :, :new_num_rows, :new_num_cols]
    num_blocks = num_blocks[:, :, :new_num_rows].clamp(max=new_num_cols)
    num_blocks = (indices < num_blocks[:, :, :, None]).sum(dim=-1).to(_dtype.int32)
    return num_blocks, indices


def _convert_mask_to_block_mask(mask, Q_BLOCK_SIZE=_DEFAULT_SPARSE_BLOCK_SIZE,  # noqa: N803 - PyTorch's names
                                KV_BLOCK_SIZE=_DEFAULT_SPARSE_BLOCK_SIZE, separate_full_blocks=False):
    """Per tile, whether it is partly allowed (and, with ``separate_full_blocks``, wholly allowed) as int8."""
    if mask.dtype is not _dtype.bool:
        raise AssertionError(f"mask.dtype must be torch.bool, got {mask.dtype}")
    while mask.dim() < 4:
        mask = mask.unsqueeze(0)
    q_len, kv_len = mask.shape[-2], mask.shape[-1]
    # Padding is disallowed, so the last, partial tiles count only their real positions.
    mask = pad(mask, (0, _round_up_to_multiple(kv_len, KV_BLOCK_SIZE) - kv_len,
                      0, _round_up_to_multiple(q_len, Q_BLOCK_SIZE) - q_len))
    B, H, Q, KV = mask.shape
    tiles = mask.view(B, H, Q // Q_BLOCK_SIZE, Q_BLOCK_SIZE, KV // KV_BLOCK_SIZE, KV_BLOCK_SIZE)
    allowed = tiles.permute(0, 1, 2, 4, 3, 5).sum(dim=[-2, -1])
    if not separate_full_blocks:
        return (allowed > 0).to(_dtype.int8), None
    whole = Q_BLOCK_SIZE * KV_BLOCK_SIZE
    return ((allowed > 0) & (allowed < whole)).to(_dtype.int8), (allowed == whole).to(_dtype.int8)


def _create_sparse_block_from_block_mask(block_mask, mask_mod, seq_lengths, Q_BLOCK_SIZE=_DEFAULT_SPARSE_BLOCK_SIZE,
                                         KV_BLOCK_SIZE=_DEFAULT_SPARSE_BLOCK_SIZE):  # noqa: N803
    partial_blocks, full_blocks = block_mask
    partial = _dense_to_ordered(partial_blocks)
    full = _dense_to_ordered(full_blocks) if full_blocks is not None else (None, None)
    return BlockMask.from_kv_blocks(partial[0], partial[1], full[0], full[1], BLOCK_SIZE=(Q_BLOCK_SIZE, KV_BLOCK_SIZE),
                                    mask_mod=mask_mod, seq_lengths=seq_lengths)


class BlockMask:
    """A block-sparse attention mask (see the module notes); build it with `create_block_mask` or `from_kv_blocks`.

    >>> import jitorch
    >>> from jitorch.nn.attention.flex_attention import create_block_mask
    >>> bm = create_block_mask(lambda b, h, q, kv: q >= kv, 1, 1, 256, 256, device="cpu")
    >>> bm.shape, bm.sparsity()
    ((1, 1, 256, 256), 25.0)
    """

    _TENSOR_ATTRS = ["kv_num_blocks", "kv_indices", "full_kv_num_blocks", "full_kv_indices", "q_num_blocks",
                     "q_indices", "full_q_num_blocks", "full_q_indices", "dq_write_order", "dq_write_order_full",
                     "dq_kv_order"]
    _CONTEXT_ATTRS = ["seq_lengths", "BLOCK_SIZE", "mask_mod", "dq_kv_order_spt"]

    def __init__(self, seq_lengths, kv_num_blocks, kv_indices, full_kv_num_blocks, full_kv_indices, q_num_blocks,
                 q_indices, full_q_num_blocks, full_q_indices,
                 BLOCK_SIZE=(_DEFAULT_SPARSE_BLOCK_SIZE, _DEFAULT_SPARSE_BLOCK_SIZE),  # noqa: N803
                 mask_mod=noop_mask, *, dq_write_order=None, dq_write_order_full=None, dq_kv_order=None,
                 dq_kv_order_spt=None):
        if kv_indices.dim() < 2:
            raise RuntimeError("BlockMask must have at least 2 dimensions")
        if (full_kv_num_blocks is None) != (full_kv_indices is None):
            raise AssertionError("full_kv_num_blocks and full_kv_indices must be both provided or omitted")
        if (full_q_num_blocks is None) != (full_q_indices is None):
            raise AssertionError("full_q_num_blocks and full_q_indices must be both provided or omitted")
        if dq_write_order_full is not None and dq_write_order is None:
            raise ValueError("dq_write_order_full requires dq_write_order")
        self.seq_lengths = tuple(seq_lengths)
        self.kv_num_blocks, self.kv_indices = kv_num_blocks, kv_indices
        self.full_kv_num_blocks, self.full_kv_indices = full_kv_num_blocks, full_kv_indices
        self.q_num_blocks, self.q_indices = q_num_blocks, q_indices
        self.full_q_num_blocks, self.full_q_indices = full_q_num_blocks, full_q_indices
        self.dq_write_order, self.dq_write_order_full = dq_write_order, dq_write_order_full
        self.dq_kv_order, self.dq_kv_order_spt = dq_kv_order, dq_kv_order_spt
        self.BLOCK_SIZE = tuple(BLOCK_SIZE)
        self.mask_mod = mask_mod

    @classmethod
    def from_kv_blocks(cls, kv_num_blocks, kv_indices, full_kv_num_blocks=None, full_kv_indices=None,
                       BLOCK_SIZE=_DEFAULT_SPARSE_BLOCK_SIZE, mask_mod=None, seq_lengths=None,  # noqa: N803
                       compute_q_blocks=True, *, dq_write_order=None, dq_write_order_full=None, dq_kv_order=None):
        """A BlockMask from the forward pairs; the ``q_*`` pairs are derived by transposing the tile matrices.

        ``seq_lengths`` defaults to the tile grid times ``BLOCK_SIZE``; ``mask_mod`` to `noop_mask`.
        """
        if kv_indices.dim() < 2:
            raise RuntimeError("BlockMask must have at least 2 dimensions")
        if (full_kv_num_blocks is None) != (full_kv_indices is None):
            raise AssertionError("full_kv_num_blocks and full_kv_indices must be both provided or omitted")
        q_num_blocks = q_indices = full_q_num_blocks = full_q_indices = None
        if compute_q_blocks:
            q_num_blocks, q_indices = _transpose_ordered(kv_num_blocks, kv_indices)
            if full_kv_num_blocks is not None:
                full_q_num_blocks, full_q_indices = _transpose_ordered(full_kv_num_blocks, full_kv_indices)
        if isinstance(BLOCK_SIZE, int):
            BLOCK_SIZE = (BLOCK_SIZE, BLOCK_SIZE)  # noqa: N806
        if seq_lengths is None:
            seq_lengths = (kv_indices.shape[-2] * BLOCK_SIZE[0], kv_indices.shape[-1] * BLOCK_SIZE[1])
        if dq_kv_order is not None and not isinstance(dq_kv_order, bool) and not hasattr(dq_kv_order, "shape"):
            raise ValueError("dq_kv_order must be a bool, Tensor, or None")
        is_flag = isinstance(dq_kv_order, bool)
        return cls(seq_lengths, kv_num_blocks, kv_indices, full_kv_num_blocks, full_kv_indices, q_num_blocks,
                   q_indices, full_q_num_blocks, full_q_indices, BLOCK_SIZE=BLOCK_SIZE,
                   mask_mod=mask_mod if mask_mod is not None else noop_mask, dq_write_order=dq_write_order,
                   dq_write_order_full=dq_write_order_full, dq_kv_order=None if is_flag else dq_kv_order,
                   dq_kv_order_spt=dq_kv_order if is_flag else None)

    def as_tuple(self, flatten=True):
        """The fields in PyTorch's order (the order its kernels take them); ``flatten`` splits the two pairs."""
        block_size = self.BLOCK_SIZE if flatten else (self.BLOCK_SIZE,)
        seq_lengths = self.seq_lengths if flatten else (self.seq_lengths,)
        return (*seq_lengths, *(getattr(self, a) for a in self._TENSOR_ATTRS), self.dq_kv_order_spt, *block_size,
                self.mask_mod)

    @property
    def shape(self):
        """``(*batch_dims, Q_LEN, KV_LEN)``."""
        return tuple(self.kv_indices.shape[:-2]) + tuple(self.seq_lengths)

    def numel(self):
        """The number of positions of the mask (sparsity not counted)."""
        return functools.reduce(operator.mul, self.shape, 1)

    def sparsity(self):
        """The percentage of positions in skipped tiles (negative past unaligned lengths, as PyTorch's)."""
        computed = self.kv_num_blocks.sum()
        if self.full_kv_num_blocks is not None:
            computed = computed + self.full_kv_num_blocks.sum()
        computed_size = computed.item() * self.BLOCK_SIZE[0] * self.BLOCK_SIZE[1]
        return 100 * (1 - computed_size / self.numel())

    def to_dense(self):
        """The 0/1 int32 tile matrix ``(*batch_dims, rows, cols)``: partial tiles or full ones."""
        dense = _ordered_to_dense(self.kv_num_blocks, self.kv_indices, self.kv_indices.shape[-1])
        if self.full_kv_num_blocks is not None:
            dense = dense | _ordered_to_dense(self.full_kv_num_blocks, self.full_kv_indices,
                                              self.full_kv_indices.shape[-1])
        return dense

    def to_string(self, grid_size=(20, 20), limit=4):
        """The tiles of each (batch, head) as text: █ computed, ░ partly, blank skipped, at most ``grid_size`` cells.

        ``grid_size=-1`` prints every tile; ``limit`` caps how many (batch, head) pictures are printed.
        """
        dense = self.to_dense()
        *batch_dims, num_rows, num_cols = dense.shape
        if isinstance(grid_size, int) and grid_size != -1:
            max_rows = max_cols = grid_size
        elif grid_size == -1:
            max_rows, max_cols = num_rows, num_cols
        else:
            max_rows, max_cols = grid_size
        row_step = max(1, -(-num_rows // max_rows))
        col_step = max(1, -(-num_cols // max_cols))
        values = dense.tolist()
        pictures = []
        for count, batch_idx in enumerate(itertools.product(*[range(n) for n in batch_dims])):
            if count == limit:
                pictures += ["...", "To print out more, set BlockMask.to_string(limit=N)",
                             "You can also index (BlockMask[batch, head]) to choose a specific batch or head"]
                break
            grid = values
            for i in batch_idx:
                grid = grid[i]
            lines = [f"{batch_idx}\n"]
            for r in range(0, num_rows, row_step):
                cells = [_shade([v for row in grid[r:r + row_step] for v in row[c:c + col_step]])
                         for c in range(0, num_cols, col_step)]
                lines.append("".join(ch * 2 for ch in cells) + "\n")
            pictures.append("".join(lines))
        return "\n".join(pictures)

    def __str__(self):
        return f"BlockMask(shape={self.shape}, sparsity={self.sparsity():.2f}%, \n{self.to_string().strip()}\n)"

    def __repr__(self):
        def shape_of(x):
            return x.shape if x is not None else None

        name = getattr(self.mask_mod, "__name__", self.mask_mod)
        return (f"BlockMask(\n    kv_num_blocks={self.kv_num_blocks.shape},\n    kv_indices={self.kv_indices.shape},\n"
                f"    full_kv_num_blocks={shape_of(self.full_kv_num_blocks)},\n"
                f"    full_kv_indices={shape_of(self.full_kv_indices)},\n"
                f"    q_num_blocks={shape_of(self.q_num_blocks)},\n    q_indices={shape_of(self.q_indices)},\n"
                f"    full_q_num_blocks={shape_of(self.full_q_num_blocks)},\n"
                f"    full_q_indices={shape_of(self.full_q_indices)},\n    BLOCK_SIZE={self.BLOCK_SIZE},\n"
                f"    shape={self.shape},\n    sparsity={self.sparsity():.2f}%,\n    mask_mod={name}\n)")

    def __getitem__(self, index):
        """The mask of some batches, heads and query tiles (up to three indices; an int keeps its dim, as PyTorch).

        The result's mask_mod raises when used: it no longer knows which batch/head it was sliced from.
        """
        if self.dq_kv_order is not None:
            raise NotImplementedError("Slicing BlockMask with tensor dq_kv_order is not supported yet. Construct a "
                                      "new BlockMask with matching precomputed dq_write_order metadata.")
        index = index if isinstance(index, tuple) else (index,)
        padded = (*index, slice(None), slice(None), slice(None))[:3]
        index = tuple(_keep_dim(i, n) for i, n in zip(padded, self.kv_num_blocks.shape[:3]))
        full = None if self.full_kv_num_blocks is None else (self.full_kv_num_blocks[index],
                                                              self.full_kv_indices[index])
        sliced = BlockMask.from_kv_blocks(self.kv_num_blocks[index], self.kv_indices[index],
                                          *(full or (None, None)), BLOCK_SIZE=self.BLOCK_SIZE,
                                          mask_mod=_sliced_mask_mod_error, seq_lengths=self.seq_lengths,
                                          compute_q_blocks=self.q_indices is not None)
        sliced.dq_kv_order_spt = self.dq_kv_order_spt
        return sliced

    def _adjust(self, new_q_len, new_kv_len):
        """The mask cropped to its top-left ``(new_q_len, new_kv_len)`` corner (right only for some mask_mods)."""
        rows = -(-new_q_len // self.BLOCK_SIZE[0])
        cols = -(-new_kv_len // self.BLOCK_SIZE[1])
        kv = _adjust_num_blocks_and_indices(self.kv_num_blocks, self.kv_indices, rows, cols)
        full = (None, None)
        if self.full_kv_num_blocks is not None:
            full = _adjust_num_blocks_and_indices(self.full_kv_num_blocks, self.full_kv_indices, rows, cols)
        return self.from_kv_blocks(*kv, *full, BLOCK_SIZE=self.BLOCK_SIZE, mask_mod=self.mask_mod,
                                   seq_lengths=(new_q_len, new_kv_len), compute_q_blocks=self.q_indices is not None)

    def to(self, device):
        """A BlockMask with every tensor moved to ``device``."""
        moved = {a: (None if getattr(self, a) is None else getattr(self, a).to(device)) for a in self._TENSOR_ATTRS}
        return BlockMask(self.seq_lengths, **moved, BLOCK_SIZE=self.BLOCK_SIZE, mask_mod=self.mask_mod,
                         dq_kv_order_spt=self.dq_kv_order_spt)


def _keep_dim(i, size):
    """An int index as the one-element slice at it, so slicing keeps every dim."""
    if not isinstance(i, int):
        return i
    start = i + size if -size <= i < 0 else i
    return slice(start, start + 1)


def _shade(cells):
    """█ for a section of computed tiles, blank for skipped ones, ░ for a mix (PyTorch's picture)."""
    share = sum(cells) / len(cells)
    return "█" if share == 1 else " " if share == 0 else "░"
