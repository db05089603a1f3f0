"""``torch.functional``: the module torch keeps a few Python-level functions in (``einsum``, ``split``,
``stft``, ``meshgrid``...), imported from it by older code. They are jitorch's own functions under that name.

>>> import jitorch.functional
>>> jitorch.functional.einsum("ij->j", jitorch.ones(2, 3)).tolist()
[2.0, 2.0, 2.0]
"""
from __future__ import annotations

from jitorch import (atleast_1d, atleast_2d, atleast_3d, block_diag, broadcast_shapes, broadcast_tensors,
                     cartesian_prod, cdist, chain_matmul, einsum, istft, lu, meshgrid, norm, pca_lowrank, split,
                     stft, svd_lowrank, tensordot, unique, unique_consecutive, unravel_index)

__all__ = ["atleast_1d", "atleast_2d", "atleast_3d", "broadcast_shapes", "broadcast_tensors", "cartesian_prod",
           "block_diag", "cdist", "chain_matmul", "einsum", "istft", "lu", "norm", "meshgrid", "pca_lowrank",
           "split", "stft", "svd_lowrank", "tensordot", "unique", "unique_consecutive", "unravel_index"]
