"""``torch.utils.data._utils.pin_memory``'s ``pin_memory``: page-lock every tensor inside a (nested) batch."""
from ..dataloader import _pin_memory


def pin_memory(data, device=None):
    """``data`` with each tensor replaced by ``tensor.pin_memory()``; containers are rebuilt as in
    ``default_convert``. ``device`` is accepted for torch's signature (jitorch has one accelerator at most)."""
    return _pin_memory(data)
