"""Pixel layouts for TensorBoard images, as PyTorch's: any ``dataformats`` to HWC (a batch tiled into a grid),
PNG encoding (Pillow) and matplotlib figures rendered to RGB.

>>> convert_to_HWC(np.zeros((2, 1, 4, 5)), "NCHW").shape  # two grey images side by side, as RGB
(4, 10, 3)
"""
from __future__ import annotations

import io

import numpy as np

__all__ = ["convert_to_HWC", "make_grid", "make_image", "figure_to_image"]


def make_grid(I, ncols=8):
    """An NCHW batch (1 or 3 channels) tiled into one CHW image, ``ncols`` images a row."""
    if not isinstance(I, np.ndarray):
        raise AssertionError("plugin error, should pass numpy array here")
    if I.shape[1] == 1:
        I = np.concatenate([I, I, I], 1)
    if I.ndim != 4 or I.shape[1] != 3:
        raise AssertionError("Input should be a 4D numpy array with 3 channels")
    nimg, H, W = I.shape[0], I.shape[2], I.shape[3]
    ncols = min(nimg, ncols)
    nrows = int(np.ceil(float(nimg) / ncols))
    canvas = np.zeros((3, H * nrows, W * ncols), dtype=I.dtype)
    for i in range(nimg):
        y, x = divmod(i, ncols)
        canvas[:, y * H:(y + 1) * H, x * W:(x + 1) * W] = I[i]
    return canvas


def convert_to_HWC(tensor, input_format):
    """``tensor`` laid out as ``input_format`` (letters of NCHW, HWC or HW, any order) as an HWC image."""
    if len(set(input_format)) != len(input_format):
        raise AssertionError(f"You can not use the same dimension shorthand twice. input_format: {input_format}")
    if len(tensor.shape) != len(input_format):
        raise AssertionError(f"size of input tensor and input format are different. tensor shape: {tensor.shape}, "
                             f"input_format: {input_format}")
    input_format = input_format.upper()
    if len(input_format) == 4:
        tensor_NCHW = tensor.transpose([input_format.find(c) for c in "NCHW"])
        return make_grid(tensor_NCHW).transpose(1, 2, 0)
    if len(input_format) == 3:
        tensor_HWC = tensor.transpose([input_format.find(c) for c in "HWC"])
        if tensor_HWC.shape[2] == 1:
            tensor_HWC = np.concatenate([tensor_HWC, tensor_HWC, tensor_HWC], 2)
        return tensor_HWC
    if len(input_format) == 2:
        tensor = tensor.transpose([input_format.find(c) for c in "HW"])
        return np.stack([tensor, tensor, tensor], 2)
    return None  # torch's falls through too (the image encoder then fails on None)


def make_image(tensor, rescale=1):
    """An HWC uint8 array as a PNG ``Summary.Image``."""
    from PIL import Image
    from tensorboard.compat.proto.summary_pb2 import Summary

    height, width, channel = tensor.shape
    image = Image.fromarray(tensor).resize((int(width * rescale), int(height * rescale)), Image.Resampling.LANCZOS)
    with io.BytesIO() as output:
        image.save(output, format="PNG")
        encoded = output.getvalue()
    return Summary.Image(height=height, width=width, colorspace=channel, encoded_image_string=encoded)


def figure_to_image(figures, close=True):
    """A matplotlib figure (or a list of them) rendered to a CHW (NCHW) uint8 array; ``close`` closes them."""
    import matplotlib.backends.backend_agg as plt_backend_agg
    import matplotlib.pyplot as plt

    def render_to_rgb(figure):
        canvas = plt_backend_agg.FigureCanvasAgg(figure)
        canvas.draw()
        data = np.frombuffer(canvas.buffer_rgba(), dtype=np.uint8)
        w, h = figure.canvas.get_width_height()
        image_chw = np.moveaxis(data.reshape([h, w, 4])[:, :, 0:3], source=2, destination=0)
        if close:
            plt.close(figure)
        return image_chw

    if isinstance(figures, list):
        return np.stack([render_to_rgb(figure) for figure in figures])
    return render_to_rgb(figures)
