"""``torch.utils.tensorboard.summary``: the ``Summary`` protocol buffers a ``SummaryWriter`` writes, built as
PyTorch builds them (the same protos from the ``tensorboard`` package, the same bucket and pixel arithmetic), so the
event files read back alike.

>>> import jitorch
>>> s = scalar("loss", jitorch.tensor(0.5))
>>> s.value[0].tag, s.value[0].simple_value
('loss', 0.5)
>>> h = histogram("w", np.array([0.0, 1.0, 1.0]), bins=3)  # an empty bucket first, as TensorFlow
>>> list(h.value[0].histo.bucket), h.value[0].histo.num
([0.0, 1.0, 0.0, 2.0], 3.0)
"""
from __future__ import annotations

import io
import wave

import numpy as np
from google.protobuf import struct_pb2
from tensorboard.compat.proto.summary_pb2 import HistogramProto, Summary, SummaryMetadata
from tensorboard.compat.proto.tensor_pb2 import TensorProto
from tensorboard.compat.proto.tensor_shape_pb2 import TensorShapeProto
from tensorboard.plugins.custom_scalar import layout_pb2
from tensorboard.plugins.pr_curve.plugin_data_pb2 import PrCurvePluginData
from tensorboard.plugins.text.plugin_data_pb2 import TextPluginData

from ..._tensor import Tensor
from ._convert_np import make_np
from ._images import convert_to_HWC, make_image
from ._plugins import image_boxes, make_video, mesh, tensor_proto, video  # noqa: F401 - torch's summary has them

__all__ = ["make_np", "scalar", "histogram", "histogram_raw", "make_histogram", "image", "text", "hparams", "audio",
           "pr_curve", "pr_curve_raw", "compute_curve", "custom_scalars", "tensor_proto", "mesh", "image_boxes",
           "video", "make_video"]


def _plugin_metadata(name, content=b""):
    return SummaryMetadata(plugin_data=SummaryMetadata.PluginData(plugin_name=name, content=content))


def scalar(name, tensor, collections=None, new_style=False, double_precision=False):
    """A one-value summary: ``simple_value``, or with ``new_style`` a float (``double_precision``: double) tensor
    of the ``scalars`` plugin."""
    tensor = make_np(tensor).squeeze()
    if tensor.ndim != 0:
        raise AssertionError(f"Tensor should contain one element (0 dimensions). Was given size: {tensor.size} and "
                             f"{tensor.ndim} dimensions.")
    value = float(tensor)
    if not new_style:
        return Summary(value=[Summary.Value(tag=name, simple_value=value)])
    proto = (TensorProto(double_val=[value], dtype="DT_DOUBLE") if double_precision
             else TensorProto(float_val=[value], dtype="DT_FLOAT"))
    return Summary(value=[Summary.Value(tag=name, tensor=proto, metadata=_plugin_metadata("scalars"))])


def histogram(name, values, bins, max_bins=None):
    """A ``HistogramProto`` of ``values`` over ``bins`` (NumPy's ``bins`` argument)."""
    return Summary(value=[Summary.Value(tag=name, histo=make_histogram(make_np(values).astype(float), bins,
                                                                        max_bins))])


def histogram_raw(name, min, max, num, sum, sum_squares, bucket_limits, bucket_counts):
    """A ``HistogramProto`` from counts already taken."""
    hist = HistogramProto(min=min, max=max, num=num, sum=sum, sum_squares=sum_squares, bucket_limit=bucket_limits,
                          bucket=bucket_counts)
    return Summary(value=[Summary.Value(tag=name, histo=hist)])


def make_histogram(values, bins, max_bins=None):
    """NumPy's histogram trimmed to the occupied buckets (with one empty bucket before them, as TensorFlow's), at
    most ``max_bins`` buckets by summing neighbours."""
    if values.size == 0:
        raise ValueError("The input has no element.")
    values = values.reshape(-1)
    counts, limits = np.histogram(values, bins=bins)
    num_bins = len(counts)
    if max_bins is not None and num_bins > max_bins:
        subsampling = num_bins // max_bins
        remainder = num_bins % subsampling
        if remainder != 0:
            counts = np.pad(counts, pad_width=[[0, subsampling - remainder]], mode="constant", constant_values=0)
        counts = counts.reshape(-1, subsampling).sum(axis=-1)
        new_limits = np.empty((counts.size + 1,), limits.dtype)
        new_limits[:-1] = limits[:-1:subsampling]
        new_limits[-1] = limits[-1]
        limits = new_limits
    cum_counts = np.cumsum(np.greater(counts, 0))
    start, end = np.searchsorted(cum_counts, [0, cum_counts[-1] - 1], side="right")
    start, end = int(start), int(end) + 1
    counts = counts[start - 1:end] if start > 0 else np.concatenate([[0], counts[:end]])
    limits = limits[start:end + 1]
    if counts.size == 0 or limits.size == 0:
        raise ValueError("The histogram is empty, please file a bug report.")
    return HistogramProto(min=values.min(), max=values.max(), num=len(values), sum=values.sum(),
                          sum_squares=values.dot(values), bucket_limit=limits.tolist(), bucket=counts.tolist())


def image(tag, tensor, rescale=1, dataformats="NCHW"):
    """A PNG ``Summary.Image``: uint8 pixels as they are, other dtypes as [0, 1] scaled to 0..255 and clipped; a
    batch (``N`` in ``dataformats``) tiled into a grid of 8 columns."""
    tensor = convert_to_HWC(make_np(tensor), dataformats)
    scale_factor = 1 if tensor.dtype == np.uint8 else 255
    tensor = (tensor.astype(np.float32) * scale_factor).clip(0, 255).astype(np.uint8)
    return Summary(value=[Summary.Value(tag=tag, image=make_image(tensor, rescale=rescale))])


def text(tag, text):
    """A string tensor of the ``text`` plugin, tagged ``<tag>/text_summary``."""
    smd = _plugin_metadata("text", TextPluginData(version=0).SerializeToString())
    tensor = TensorProto(dtype="DT_STRING", string_val=[text.encode(encoding="utf_8")],
                         tensor_shape=TensorShapeProto(dim=[TensorShapeProto.Dim(size=1)]))
    return Summary(value=[Summary.Value(tag=tag + "/text_summary", metadata=smd, tensor=tensor)])


def _discrete(values, field):
    return struct_pb2.ListValue(values=[struct_pb2.Value(**{field: d}) for d in values])


def hparams(hparam_dict=None, metric_dict=None, hparam_domain_discrete=None):
    """The hparams plugin's three summaries (experiment, session start, session end) for one run."""
    from tensorboard.plugins.hparams.api_pb2 import DataType, Experiment, HParamInfo, MetricInfo, MetricName, Status
    from tensorboard.plugins.hparams.metadata import (EXPERIMENT_TAG, PLUGIN_DATA_VERSION, PLUGIN_NAME,
                                                      SESSION_END_INFO_TAG, SESSION_START_INFO_TAG)
    from tensorboard.plugins.hparams.plugin_data_pb2 import HParamsPluginData, SessionEndInfo, SessionStartInfo

    if not isinstance(hparam_dict, dict):
        raise TypeError("parameter: hparam_dict should be a dictionary, nothing logged.")
    if not isinstance(metric_dict, dict):
        raise TypeError("parameter: metric_dict should be a dictionary, nothing logged.")
    hparam_domain_discrete = hparam_domain_discrete or {}
    if not isinstance(hparam_domain_discrete, dict):
        raise TypeError("parameter: hparam_domain_discrete should be a dictionary, nothing logged.")
    for k, v in hparam_domain_discrete.items():
        if k not in hparam_dict or not isinstance(v, list) or not all(isinstance(d, type(hparam_dict[k])) for d in v):
            raise TypeError(f"parameter: hparam_domain_discrete[{k}] should be a list of same type as "
                            f"hparam_dict[{k}].")
    hps = []
    ssi = SessionStartInfo()
    for k, v in hparam_dict.items():
        if v is None:
            continue
        # torch tests int/float before bool, so a bool is logged as a number (1.0/0.0)
        if isinstance(v, (int, float)):
            ssi.hparams[k].number_value = v
            kind, field = "DATA_TYPE_FLOAT64", "number_value"
        elif isinstance(v, str):
            ssi.hparams[k].string_value = v
            kind, field = "DATA_TYPE_STRING", "string_value"
        elif isinstance(v, Tensor):
            ssi.hparams[k].number_value = make_np(v).reshape(-1)[0]
            kind, field = "DATA_TYPE_FLOAT64", None  # torch gives a tensor's hparam no domain
        else:
            raise ValueError("value should be one of int, float, str, bool, or torch.Tensor")
        discrete = _discrete(hparam_domain_discrete[k], field) if field and k in hparam_domain_discrete else None
        hps.append(HParamInfo(name=k, type=DataType.Value(kind), domain_discrete=discrete))

    def plugin_summary(tag, **content):
        data = HParamsPluginData(version=PLUGIN_DATA_VERSION, **content).SerializeToString()
        return Summary(value=[Summary.Value(tag=tag, metadata=_plugin_metadata(PLUGIN_NAME, data))])

    session_end = SessionEndInfo(status=Status.Value("STATUS_SUCCESS"))
    experiment = Experiment(hparam_infos=hps, metric_infos=[MetricInfo(name=MetricName(tag=k)) for k in metric_dict])
    return (plugin_summary(EXPERIMENT_TAG, experiment=experiment),
            plugin_summary(SESSION_START_INFO_TAG, session_start_info=ssi),
            plugin_summary(SESSION_END_INFO_TAG, session_end_info=session_end))


def audio(tag, tensor, sample_rate=44100):
    """A mono 16-bit WAV ``Summary.Audio`` of samples in [-1, 1] (clipped, with torch's warning, beyond)."""
    array = make_np(tensor).squeeze()
    if abs(array).max() > 1:
        print("warning: audio amplitude out of range, auto clipped.")
        array = array.clip(-1, 1)
    if array.ndim != 1:
        raise AssertionError("input tensor should be 1 dimensional.")
    array = (array * np.iinfo(np.int16).max).astype("<i2")
    with io.BytesIO() as fio:
        with wave.open(fio, "wb") as wave_write:
            wave_write.setnchannels(1)
            wave_write.setsampwidth(2)
            wave_write.setframerate(sample_rate)
            wave_write.writeframes(array.data)
        encoded = fio.getvalue()
    value = Summary.Audio(sample_rate=sample_rate, num_channels=1, length_frames=array.shape[-1],
                          encoded_audio_string=encoded, content_type="audio/wav")
    return Summary(value=[Summary.Value(tag=tag, audio=value)])


def _pr_summary(tag, data, num_thresholds):
    content = PrCurvePluginData(version=0, num_thresholds=num_thresholds).SerializeToString()
    tensor = TensorProto(dtype="DT_FLOAT", float_val=data.reshape(-1).tolist(), tensor_shape=TensorShapeProto(
        dim=[TensorShapeProto.Dim(size=data.shape[0]), TensorShapeProto.Dim(size=data.shape[1])]))
    return Summary(value=[Summary.Value(tag=tag, metadata=_plugin_metadata("pr_curves", content), tensor=tensor)])


def pr_curve(tag, labels, predictions, num_thresholds=127, weights=None):
    """A precision-recall curve of the ``pr_curves`` plugin (at most 127 thresholds)."""
    num_thresholds = min(num_thresholds, 127)
    return _pr_summary(tag, compute_curve(labels, predictions, num_thresholds, weights), num_thresholds)


def pr_curve_raw(tag, tp, fp, tn, fn, precision, recall, num_thresholds=127, weights=None):
    """A precision-recall curve from counts already taken."""
    return _pr_summary(tag, np.stack((tp, fp, tn, fn, precision, recall)), min(num_thresholds, 127))


def compute_curve(labels, predictions, num_thresholds=None, weights=None):
    """True/false positives and negatives, precision and recall at each threshold, as a (6, thresholds) array."""
    weights = 1.0 if weights is None else weights
    bucket_indices = np.int32(np.floor(predictions * (num_thresholds - 1)))
    float_labels = labels.astype(np.float64)
    histogram_range = (0, num_thresholds - 1)
    tp_buckets, _ = np.histogram(bucket_indices, bins=num_thresholds, range=histogram_range,
                                 weights=float_labels * weights)
    fp_buckets, _ = np.histogram(bucket_indices, bins=num_thresholds, range=histogram_range,
                                 weights=(1.0 - float_labels) * weights)
    tp = np.cumsum(tp_buckets[::-1])[::-1]
    fp = np.cumsum(fp_buckets[::-1])[::-1]
    tn, fn = fp[0] - fp, tp[0] - tp
    precision = tp / np.maximum(1e-7, tp + fp)
    recall = tp / np.maximum(1e-7, tp + fn)
    return np.stack((tp, fp, tn, fn, precision, recall))


def custom_scalars(layout):
    """The ``custom_scalars`` plugin's layout: ``{category: {chart: ["Multiline", tags] or ["Margin", 3 tags]}}``."""
    categories = []
    for category, charts in layout.items():
        built = []
        for title, (kind, tags) in charts.items():
            if kind == "Margin":
                if len(tags) != 3:
                    raise AssertionError("len(tags) != 3")
                series = layout_pb2.MarginChartContent.Series(value=tags[0], lower=tags[1], upper=tags[2])
                built.append(layout_pb2.Chart(title=title, margin=layout_pb2.MarginChartContent(series=[series])))
            else:
                built.append(layout_pb2.Chart(title=title, multiline=layout_pb2.MultilineChartContent(tag=tags)))
        categories.append(layout_pb2.Category(title=category, chart=built))
    tensor = TensorProto(dtype="DT_STRING", string_val=[layout_pb2.Layout(category=categories).SerializeToString()],
                         tensor_shape=TensorShapeProto())
    return Summary(value=[Summary.Value(tag="custom_scalars__config__", tensor=tensor,
                                        metadata=_plugin_metadata("custom_scalars"))])
