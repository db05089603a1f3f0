"""``jitorch.utils.tensorboard``: a ``SummaryWriter`` that accepts every call and writes no event file (it makes its
log directory, as torch's does: scripts save checkpoints there).

Training scripts written for PyTorch log through ``torch.utils.tensorboard``; this keeps them running unchanged
(jitorch does not produce TensorBoard event files).

>>> import tempfile
>>> from jitorch.utils.tensorboard import SummaryWriter
>>> with SummaryWriter(tempfile.mkdtemp()) as writer:
...     writer.add_scalar("loss", 0.5, global_step=1)
"""
from __future__ import annotations

import datetime
import os
import socket

__all__ = ["SummaryWriter"]


class SummaryWriter:
    """PyTorch's ``SummaryWriter`` interface; every method is a no-op."""

    def __init__(self, log_dir=None, comment="", purge_step=None, max_queue=10, flush_secs=120, filename_suffix=""):
        if not log_dir:  # torch's default: runs/<Mon DD_HH-MM-SS>_<host><comment>, which scripts save checkpoints in
            stamp = datetime.datetime.now().strftime("%b%d_%H-%M-%S")
            log_dir = os.path.join("runs", f"{stamp}_{socket.gethostname()}{comment}")
        os.makedirs(log_dir, exist_ok=True)
        self.log_dir = str(log_dir)
        self.comment = comment

    def __getattr__(self, name):
        # torch's other writers (add_video, add_audio, add_mesh, add_custom_scalars...) accept and drop too
        if name.startswith("add_"):
            return lambda *args, **kwargs: None
        raise AttributeError(f"'SummaryWriter' object has no attribute '{name}'")

    def get_logdir(self):
        return self.log_dir

    def add_scalar(self, tag, scalar_value, global_step=None, walltime=None, new_style=False,
                   double_precision=False):
        pass

    def add_scalars(self, main_tag, tag_scalar_dict, global_step=None, walltime=None):
        pass

    def add_histogram(self, tag, values, global_step=None, bins="tensorflow", walltime=None, max_bins=None):
        pass

    def add_image(self, tag, img_tensor, global_step=None, walltime=None, dataformats="CHW"):
        pass

    def add_images(self, tag, img_tensor, global_step=None, walltime=None, dataformats="NCHW"):
        pass

    def add_figure(self, tag, figure, global_step=None, close=True, walltime=None):
        pass

    def add_text(self, tag, text_string, global_step=None, walltime=None):
        pass

    def add_graph(self, model, input_to_model=None, verbose=False, use_strict_trace=True):
        pass

    def add_hparams(self, hparam_dict, metric_dict, hparam_domain_discrete=None, run_name=None, global_step=None):
        pass

    def add_embedding(self, mat, metadata=None, label_img=None, global_step=None, tag="default",
                      metadata_header=None):
        pass

    def add_pr_curve(self, tag, labels, predictions, global_step=None, num_thresholds=127, weights=None,
                     walltime=None):
        pass

    def flush(self):
        pass

    def close(self):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
