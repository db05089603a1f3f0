"""Pixel layouts for TensorBoard images, as PyTorch's: any ``dataformats`` to HWC (a batch tiled into a grid), video
batches to frames, PNG encoding (Pillow, with boxes drawn as torch draws them) and matplotlib figures rendered to RGB.

>>> convert_to_HWC(np.zeros((2, 1, 4, 5)), "NCHW").shape  # two grey images side by side, as RGB
(4, 10, 3)
"""
from __future__ import annotations

import io

import numpy as np

__all__ = ["convert_to_HWC", "make_grid", "make_image", "draw_boxes", "prepare_video", "figure_to_image"]


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


def prepare_video(V):
    """An (N, T, C, H, W) batch of videos as (T, H', W', C) frames: the videos tiled into a grid (N padded with black
    videos to a power of two), uint8 turned to float in [0, 1], as torch's ``_prepare_video``."""
    b, t, c, h, w = V.shape
    if V.dtype == np.uint8:
        V = np.float32(V) / 255.0
    if b == 0 or b & (b - 1):  # not a power of two
        V = np.concatenate((V, np.zeros(shape=(2 ** b.bit_length() - b, t, c, h, w))), axis=0)
    n_rows = 2 ** ((b.bit_length() - 1) // 2)
    n_cols = V.shape[0] // n_rows
    V = np.transpose(np.reshape(V, (n_rows, n_cols, t, c, h, w)), axes=(2, 0, 4, 1, 5, 3))
    return np.reshape(V, (t, n_rows * h, n_cols * w, c))


def _draw_single_box(image, xmin, ymin, xmax, ymax, display_str, color="black", color_text="black", thickness=2):
    from PIL import ImageDraw, ImageFont

    font = ImageFont.load_default()
    draw = ImageDraw.Draw(image)
    left, right, top, bottom = xmin, xmax, ymin, ymax
    draw.line([(left, top), (left, bottom), (right, bottom), (right, top), (left, top)], width=thickness, fill=color)
    if display_str:
        # the label sits in a filled box on the bottom edge, inside the box
        _left, _top, _right, _bottom = font.getbbox(display_str)
        text_width, text_height = _right - _left, _bottom - _top
        margin = np.ceil(0.05 * text_height)
        draw.rectangle([(left, bottom - text_height - 2 * margin), (left + text_width, bottom)], fill=color)
        draw.text((left + margin, bottom - text_height - margin), display_str, fill=color_text, font=font)
    return image


def draw_boxes(disp_image, boxes, labels=None):
    """Red (xmin, ymin, xmax, ymax) rectangles on a PIL image, each with its label if ``labels`` is given."""
    for i in range(boxes.shape[0]):
        disp_image = _draw_single_box(disp_image, boxes[i, 0], boxes[i, 1], boxes[i, 2], boxes[i, 3],
                                      display_str=None if labels is None else labels[i], color="Red")
    return disp_image


def make_image(tensor, rescale=1, rois=None, labels=None):
    """An HWC uint8 array as a PNG ``Summary.Image``, with ``rois`` (N x 4 boxes) drawn before any rescaling."""
    from PIL import Image
    from tensorboard.compat.proto.summary_pb2 import Summary

    height, width, channel = tensor.shape
    image = Image.fromarray(tensor)
    if rois is not None:
        image = draw_boxes(image, rois, labels=labels)
    image = image.resize((int(width * rescale), int(height * rescale)), Image.Resampling.LANCZOS)
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
