"""``jitorch.utils.tensorboard``: PyTorch's ``SummaryWriter``, writing TensorBoard event files with the
``tensorboard`` package (``pip install tensorboard``, or ``pip install jitorch[tensorboard]``), as torch's does.

Like ``torch.utils.tensorboard`` it is not imported by ``import jitorch``: import it by name.

>>> import tempfile
>>> from jitorch.utils.tensorboard import SummaryWriter
>>> with SummaryWriter(tempfile.mkdtemp()) as writer:
...     writer.add_scalar("loss", 0.5, global_step=1)
"""
try:
    import tensorboard
except ImportError as e:
    raise ImportError("jitorch.utils.tensorboard needs the tensorboard package, as torch.utils.tensorboard does: "
                      "pip install tensorboard (or pip install jitorch[tensorboard])") from e

if tuple(int(part) for part in getattr(tensorboard, "__version__", "0.0").split(".")[:2]) < (1, 15):
    raise ImportError("TensorBoard logging requires TensorBoard version 1.15 or above")
del tensorboard

from tensorboard.summary.writer.record_writer import RecordWriter  # noqa: E402

from .writer import FileWriter, SummaryWriter  # noqa: E402

__all__ = ["FileWriter", "RecordWriter", "SummaryWriter"]
