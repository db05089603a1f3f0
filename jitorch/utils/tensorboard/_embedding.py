"""The projector plugin's files, as PyTorch writes them for ``add_embedding``: ``tensors.tsv``, ``metadata.tsv``,
``sprite.png`` in ``<log_dir>/<step:05d>/<tag>/``, and ``projector_config.pbtxt`` listing every embedding.

>>> import tempfile
>>> d = tempfile.mkdtemp()
>>> make_mat(np.eye(2), d)
>>> open(os.path.join(d, "tensors.tsv")).read()
'1.0\\t0.0\\n0.0\\t1.0\\n'
"""
from __future__ import annotations

import io
import math
import os

import numpy as np

from ._images import make_grid

__all__ = ["make_tsv", "make_sprite", "make_mat", "get_embedding_info", "write_pbtxt"]


def _write(path, data: bytes):
    with open(path, "wb") as f:
        f.write(data)


def make_tsv(metadata, save_path, metadata_header=None):
    """One label per line, or with ``metadata_header`` a header line and tab-separated columns."""
    if not metadata_header:
        metadata = [str(x) for x in metadata]
    else:
        if len(metadata_header) != len(metadata[0]):
            raise AssertionError("len of header must be equal to the number of columns in metadata")
        metadata = ["\t".join(str(e) for e in row) for row in [metadata_header] + metadata]
    _write(os.path.join(save_path, "metadata.tsv"), ("\n".join(metadata) + "\n").encode())


def make_sprite(label_img, save_path):
    """The NCHW label images (values in [0, 1]) tiled into one square PNG."""
    from PIL import Image

    nrow = math.ceil(label_img.shape[0] ** 0.5)
    grid_CHW = make_grid(label_img, ncols=nrow)
    square_HWC = np.zeros((grid_CHW.shape[2], grid_CHW.shape[2], 3))  # as many rows as columns
    grid_HWC = grid_CHW.transpose(1, 2, 0)
    square_HWC[:grid_HWC.shape[0], :, :] = grid_HWC
    with io.BytesIO() as buf:
        Image.fromarray(np.uint8((square_HWC * 255).clip(0, 255))).save(buf, format="PNG")
        _write(os.path.join(save_path, "sprite.png"), buf.getvalue())


def make_mat(matlist, save_path):
    """The embedding matrix, one tab-separated row per point."""
    with open(os.path.join(save_path, "tensors.tsv"), "wb") as f:
        for x in matlist:
            f.write(("\t".join(str(i.item()) for i in x) + "\n").encode())


def get_embedding_info(metadata, label_img, subdir, global_step, tag):
    """The ``EmbeddingInfo`` entry of ``projector_config.pbtxt`` for one embedding."""
    from tensorboard.plugins.projector.projector_config_pb2 import EmbeddingInfo

    info = EmbeddingInfo()
    info.tensor_name = f"{tag}:{str(global_step).zfill(5)}"
    info.tensor_path = os.path.join(subdir, "tensors.tsv")
    if metadata is not None:
        info.metadata_path = os.path.join(subdir, "metadata.tsv")
    if label_img is not None:
        info.sprite.image_path = os.path.join(subdir, "sprite.png")
        info.sprite.single_image_dim.extend([label_img.shape[3], label_img.shape[2]])
    return info


def write_pbtxt(save_path, contents):
    _write(os.path.join(save_path, "projector_config.pbtxt"), contents.encode())
