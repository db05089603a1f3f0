"""``SummaryWriter``: PyTorch's TensorBoard writer over the ``tensorboard`` package's event file writer, writing the
same events to the same files (``summary.py`` builds the protocol buffers as torch does).

Values may be jitorch tensors (any device, with grad: they are detached and copied to the host), NumPy arrays or
Python numbers. ``add_graph`` is the one writer that needs torch's JIT tracer; see its message for jitorch's way.
As in torch, ``add_video`` needs moviepy (without it, it prints so and writes an empty value) and
``add_onnx_graph`` the onnx package.

>>> import tempfile
>>> from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
>>> log_dir = tempfile.mkdtemp()
>>> with SummaryWriter(log_dir) as w:
...     for step in range(3):
...         w.add_scalar("loss", 1.0 / (step + 1), global_step=step)
>>> acc = EventAccumulator(log_dir)
>>> _ = acc.Reload()
>>> [(e.step, round(e.value, 3)) for e in acc.Scalars("loss")]
[(0, 1.0), (1, 0.5), (2, 0.333)]
"""
from __future__ import annotations

import os
import time

from tensorboard.compat.proto import event_pb2
from tensorboard.compat.proto.event_pb2 import Event, SessionLog
from tensorboard.summary.writer.event_file_writer import EventFileWriter

from ._embedding import get_embedding_info, make_mat, make_sprite, make_tsv, write_pbtxt
from ._images import figure_to_image
from ._plugins import image_boxes, load_onnx_graph, mesh, tensor_proto, video
from .summary import (audio, custom_scalars, histogram, histogram_raw, hparams, image, make_np, pr_curve,
                      pr_curve_raw, scalar, text)

__all__ = ["FileWriter", "SummaryWriter"]


class FileWriter:
    """One event file in ``log_dir``: ``Event`` protos queued and written by a background thread."""

    def __init__(self, log_dir, max_queue=10, flush_secs=120, filename_suffix=""):
        self.event_writer = EventFileWriter(str(log_dir), max_queue, flush_secs, filename_suffix)

    def get_logdir(self):
        return self.event_writer.get_logdir()

    def add_event(self, event, step=None, walltime=None):
        event.wall_time = time.time() if walltime is None else walltime
        if step is not None:
            event.step = int(step)  # a NumPy or 0-d tensor step, which protobuf may refuse
        self.event_writer.add_event(event)

    def add_summary(self, summary, global_step=None, walltime=None):
        self.add_event(event_pb2.Event(summary=summary), global_step, walltime)

    def add_onnx_graph(self, graph, walltime=None):
        """A ``GraphDef`` for TensorBoard's graph tab."""
        self.add_event(event_pb2.Event(graph_def=graph.SerializeToString()), None, walltime)

    def flush(self):
        self.event_writer.flush()

    def close(self):
        self.event_writer.close()

    def reopen(self):
        self.event_writer.reopen()


class SummaryWriter:
    """Writes summaries to event files in ``log_dir`` (default ``runs/<Mon DD_HH-MM-SS>_<host><comment>``).

    ``purge_step``: TensorBoard drops the events at or after that step that a crashed run left in the directory.
    ``add_scalars`` writes one sub-run per key (``<log_dir>/<main_tag>_<key>``), ``add_hparams`` one per call.
    """

    def __init__(self, log_dir=None, comment="", purge_step=None, max_queue=10, flush_secs=120, filename_suffix=""):
        if not log_dir:
            import socket
            from datetime import datetime

            stamp = datetime.now().strftime("%b%d_%H-%M-%S")
            log_dir = os.path.join("runs", stamp + "_" + socket.gethostname() + comment)
        self.log_dir = log_dir
        self.purge_step = purge_step
        self.max_queue = max_queue
        self.flush_secs = flush_secs
        self.filename_suffix = filename_suffix
        self.file_writer = self.all_writers = None
        self._get_file_writer()
        # TensorFlow's default histogram buckets: +-1e-12 growing by 10% up to 1e20, and zero
        v, buckets = 1e-12, []
        while v < 1e20:
            buckets.append(v)
            v *= 1.1
        self.default_bins = [-b for b in reversed(buckets)] + [0] + buckets

    def _get_file_writer(self):
        """The main event file writer, opened again after ``close()``."""
        if self.all_writers is None or self.file_writer is None:
            self.file_writer = FileWriter(self.log_dir, self.max_queue, self.flush_secs, self.filename_suffix)
            self.all_writers = {self.file_writer.get_logdir(): self.file_writer}
            if self.purge_step is not None:
                self.file_writer.add_event(Event(step=self.purge_step, file_version="brain.Event:2"))
                self.file_writer.add_event(Event(step=self.purge_step,
                                                 session_log=SessionLog(status=SessionLog.START)))
                self.purge_step = None
        return self.file_writer

    def get_logdir(self):
        return self.log_dir

    def add_hparams(self, hparam_dict, metric_dict, hparam_domain_discrete=None, run_name=None, global_step=None):
        """One run's hyperparameters and metrics, written to ``<log_dir>/<run_name>`` (default: the time)."""
        if type(hparam_dict) is not dict or type(metric_dict) is not dict:
            raise TypeError("hparam_dict and metric_dict should be dictionary.")
        exp, ssi, sei = hparams(hparam_dict, metric_dict, hparam_domain_discrete)
        logdir = os.path.join(self._get_file_writer().get_logdir(), run_name or str(time.time()))
        with SummaryWriter(log_dir=logdir) as w_hp:
            for summary in (exp, ssi, sei):
                w_hp.file_writer.add_summary(summary, global_step)
            for k, v in metric_dict.items():
                w_hp.add_scalar(k, v, global_step)

    def add_scalar(self, tag, scalar_value, global_step=None, walltime=None, new_style=False,
                   double_precision=False):
        """One value (a number or a one-element tensor) at ``global_step``."""
        summary = scalar(tag, scalar_value, new_style=new_style, double_precision=double_precision)
        self._get_file_writer().add_summary(summary, global_step, walltime)

    def add_scalars(self, main_tag, tag_scalar_dict, global_step=None, walltime=None):
        """Several values under ``main_tag``, each key in its own run so TensorBoard draws them in one chart."""
        walltime = time.time() if walltime is None else walltime
        fw_logdir = self._get_file_writer().get_logdir()
        for tag, scalar_value in tag_scalar_dict.items():
            fw_tag = fw_logdir + "/" + main_tag.replace("/", "_") + "_" + tag
            fw = self.all_writers.get(fw_tag)
            if fw is None:
                fw = self.all_writers[fw_tag] = FileWriter(fw_tag, self.max_queue, self.flush_secs,
                                                           self.filename_suffix)
            fw.add_summary(scalar(main_tag, scalar_value), global_step, walltime)

    def add_tensor(self, tag, tensor, global_step=None, walltime=None):
        """The whole ``tensor`` (its dtype, shape and values) for TensorBoard's tensor plugin."""
        self._get_file_writer().add_summary(tensor_proto(tag, tensor), global_step, walltime)

    def add_histogram(self, tag, values, global_step=None, bins="tensorflow", walltime=None, max_bins=None):
        """A histogram of ``values``; ``bins`` as NumPy's, or ``"tensorflow"`` for TensorFlow's default buckets."""
        if isinstance(bins, str) and bins == "tensorflow":
            bins = self.default_bins
        self._get_file_writer().add_summary(histogram(tag, values, bins, max_bins=max_bins), global_step, walltime)

    def add_histogram_raw(self, tag, min, max, num, sum, sum_squares, bucket_limits, bucket_counts,
                          global_step=None, walltime=None):
        """A histogram from counts already taken (``bucket_limits`` are right edges)."""
        if len(bucket_limits) != len(bucket_counts):
            raise ValueError("len(bucket_limits) != len(bucket_counts), see the document.")
        summary = histogram_raw(tag, min, max, num, sum, sum_squares, bucket_limits, bucket_counts)
        self._get_file_writer().add_summary(summary, global_step, walltime)

    def add_image(self, tag, img_tensor, global_step=None, walltime=None, dataformats="CHW"):
        """One image: uint8 0..255, or float in [0, 1]; ``dataformats`` CHW, HWC, HW (any order of the letters)."""
        summary = image(tag, img_tensor, dataformats=dataformats)
        self._get_file_writer().add_summary(summary, global_step, walltime)

    def add_images(self, tag, img_tensor, global_step=None, walltime=None, dataformats="NCHW"):
        """A batch of images, tiled into one grid image (8 a row)."""
        summary = image(tag, img_tensor, dataformats=dataformats)
        self._get_file_writer().add_summary(summary, global_step, walltime)

    def add_image_with_boxes(self, tag, img_tensor, box_tensor, global_step=None, walltime=None, rescale=1,
                             dataformats="CHW", labels=None):
        """An image with red boxes (``box_tensor``: N x 4, xmin, ymin, xmax, ymax in pixels) drawn on it; ``labels``
        (one string a box, else ignored, as torch) are written on them."""
        if labels is not None:
            if isinstance(labels, str):
                labels = [labels]
            if len(labels) != box_tensor.shape[0]:
                labels = None
        summary = image_boxes(tag, img_tensor, box_tensor, rescale=rescale, dataformats=dataformats, labels=labels)
        self._get_file_writer().add_summary(summary, global_step, walltime)

    def add_figure(self, tag, figure, global_step=None, close=True, walltime=None):
        """A matplotlib figure (a list: a grid of them) rendered as an image; ``close`` closes the figures."""
        formats = "NCHW" if isinstance(figure, list) else "CHW"
        self.add_image(tag, figure_to_image(figure, close), global_step, walltime, dataformats=formats)

    def add_text(self, tag, text_string, global_step=None, walltime=None):
        """A string (Markdown in TensorBoard's text tab), tagged ``<tag>/text_summary``."""
        self._get_file_writer().add_summary(text(tag, text_string), global_step, walltime)

    def add_video(self, tag, vid_tensor, global_step=None, fps=4, walltime=None):
        """A batch of videos ``(N, T, C, H, W)`` (uint8 0..255 or float in [0, 1]) tiled into one GIF; needs moviepy."""
        self._get_file_writer().add_summary(video(tag, vid_tensor, fps), global_step, walltime)

    def add_audio(self, tag, snd_tensor, global_step=None, sample_rate=44100, walltime=None):
        """A mono clip of samples in [-1, 1], as 16-bit WAV."""
        self._get_file_writer().add_summary(audio(tag, snd_tensor, sample_rate=sample_rate), global_step, walltime)

    def add_pr_curve(self, tag, labels, predictions, global_step=None, num_thresholds=127, weights=None,
                     walltime=None):
        """A precision-recall curve of binary ``labels`` against ``predictions`` in [0, 1]."""
        summary = pr_curve(tag, make_np(labels), make_np(predictions), num_thresholds, weights)
        self._get_file_writer().add_summary(summary, global_step, walltime)

    def add_pr_curve_raw(self, tag, true_positive_counts, false_positive_counts, true_negative_counts,
                         false_negative_counts, precision, recall, global_step=None, num_thresholds=127, weights=None,
                         walltime=None):
        """A precision-recall curve from counts already taken."""
        columns = [make_np(c) for c in (true_positive_counts, false_positive_counts, true_negative_counts,
                                        false_negative_counts, precision, recall)]
        self._get_file_writer().add_summary(pr_curve_raw(tag, *columns, num_thresholds, weights), global_step,
                                            walltime)

    def add_custom_scalars_multilinechart(self, tags, category="default", title="untitled"):
        self._get_file_writer().add_summary(custom_scalars({category: {title: ["Multiline", tags]}}))

    def add_custom_scalars_marginchart(self, tags, category="default", title="untitled"):
        if len(tags) != 3:
            raise AssertionError(f"Expected 3 tags, got {len(tags)}.")
        self._get_file_writer().add_summary(custom_scalars({category: {title: ["Margin", tags]}}))

    def add_custom_scalars(self, layout):
        """The custom-scalars layout: ``{category: {chart: ["Multiline" or "Margin", tags]}}``."""
        self._get_file_writer().add_summary(custom_scalars(layout))

    @staticmethod
    def _encode(rawstr):
        return rawstr.replace("%", "%25").replace("/", "%2f").replace("\\", "%5c")

    def add_embedding(self, mat, metadata=None, label_img=None, global_step=None, tag="default",
                      metadata_header=None):
        """Points (rows of a 2-D ``mat``) for the projector, with optional labels and NCHW thumbnails."""
        mat = make_np(mat)
        global_step = 0 if global_step is None else global_step
        subdir = f"{str(global_step).zfill(5)}/{self._encode(tag)}"
        save_path = os.path.join(self._get_file_writer().get_logdir(), subdir)
        if os.path.isdir(save_path):
            print("warning: Embedding dir exists, did you set global_step for add_embedding()?")
        elif os.path.exists(save_path):
            raise NotADirectoryError(f"Path: `{save_path}` exists, but is a file. Cannot proceed.")
        else:
            os.makedirs(save_path)
        if metadata is not None:
            if mat.shape[0] != len(metadata):
                raise AssertionError("#labels should equal with #data points")
            make_tsv(metadata, save_path, metadata_header=metadata_header)
        if label_img is not None:
            label_img = make_np(label_img)
            if mat.shape[0] != label_img.shape[0]:
                raise AssertionError("#images should equal with #data points")
            make_sprite(label_img, save_path)
        if mat.ndim != 2:
            raise AssertionError("mat should be 2D, where mat.size(0) is the number of data points")
        make_mat(mat, save_path)
        from google.protobuf import text_format
        from tensorboard.plugins.projector.projector_config_pb2 import ProjectorConfig

        if not hasattr(self, "_projector_config"):
            self._projector_config = ProjectorConfig()
        self._projector_config.embeddings.extend([get_embedding_info(metadata, label_img, subdir, global_step, tag)])
        write_pbtxt(self._get_file_writer().get_logdir(), text_format.MessageToString(self._projector_config))

    def add_onnx_graph(self, prototxt):
        """The graph of the ONNX model file ``prototxt`` in TensorBoard's graph tab; needs the onnx package."""
        self._get_file_writer().add_onnx_graph(load_onnx_graph(prototxt))

    def add_mesh(self, tag, vertices, colors=None, faces=None, config_dict=None, global_step=None, walltime=None):
        """A mesh or point cloud: ``vertices`` (B, N, 3), optional ``colors`` (B, N, 3: uint8 or [0, 1]) and
        ``faces`` (B, F, 3 vertex indices); ``config_dict`` holds Three.js camera, light and material settings."""
        summary = mesh(tag, vertices, colors, faces, config_dict)
        self._get_file_writer().add_summary(summary, global_step, walltime)

    def add_graph(self, model, input_to_model=None, verbose=False, use_strict_trace=True):
        raise NotImplementedError(
            "SummaryWriter.add_graph: TensorBoard's graph is built from torch.jit.trace's TorchScript graph, which "
            "jitorch does not have. Inspect the model's graph with jitorch.fx instead: "
            "print(jitorch.fx.symbolic_trace(model).graph), or log it as text with "
            "writer.add_text('graph', jitorch.fx.symbolic_trace(model).code)")

    def flush(self):
        """Write every queued event to disk."""
        if self.all_writers is None:
            return
        for writer in self.all_writers.values():
            writer.flush()

    def close(self):
        """Flush and close every event file (a later add_* opens a new one)."""
        if self.all_writers is None:
            return
        for writer in self.all_writers.values():
            writer.flush()
            writer.close()
        self.file_writer = self.all_writers = None

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc_val, exc_tb):
        self.close()
