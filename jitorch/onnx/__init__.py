"""``jitorch.onnx``: import-only; exporting to ONNX is not implemented yet.

>>> import jitorch.onnx
>>> jitorch.onnx.export(None, (), "model.onnx")  # doctest: +ELLIPSIS
Traceback (most recent call last):
    ...
NotImplementedError: jitorch.onnx.export is not implemented yet: jitorch cannot write ONNX graphs. ...
"""
from __future__ import annotations

__all__ = ["export", "is_in_onnx_export"]


def export(model, args=(), f=None, *extra, **kwargs):
    raise NotImplementedError("jitorch.onnx.export is not implemented yet: jitorch cannot write ONNX graphs. Save "
                              "weights with jitorch.save(model.state_dict(), path) and export from PyTorch if you "
                              "need ONNX.")


def is_in_onnx_export() -> bool:
    return False
