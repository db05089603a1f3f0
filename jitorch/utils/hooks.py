"""``torch.utils.hooks``: the handle module and optimizer ``register_*_hook`` calls return, and hook helpers.

>>> from collections import OrderedDict
>>> hooks = OrderedDict()
>>> with RemovableHandle(hooks) as handle:
...     hooks[handle.id] = print
...     len(hooks)
1
>>> len(hooks)
0
"""
from __future__ import annotations

import warnings

from ..nn.modules._hooks import BackwardHook, RemovableHandle

__all__ = ["RemovableHandle", "BackwardHook", "unserializable_hook", "warn_if_has_hooks"]


def unserializable_hook(f):
    """Mark ``f`` as a hook that is not saved with its tensor (PyTorch warns about the others on save)."""
    f.__torch_unserializable__ = True
    return f


def warn_if_has_hooks(tensor):
    """Warn when ``tensor`` has backward hooks that saving it would drop (those not marked `unserializable_hook`)."""
    for hook in tensor._hooks or ():  # a leaf's own hooks (a non-leaf's live on its grad_fn, not saved either way)
        if not getattr(hook, "__torch_unserializable__", False):
            warnings.warn(f"backward hook {hook!r} on tensor will not be serialized.  If this is expected, you can "
                          "decorate the function with @torch.utils.hooks.unserializable_hook to suppress this warning")
