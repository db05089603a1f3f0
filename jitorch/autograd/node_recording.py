"""The nodes recorded inside a region (``recording_nodes``): what a checkpointed region replays or checks.

``Node.__init__`` adds each new node to the innermost region of its thread while any region is open
(``autograd.graph`` re-exports these names); in anomaly mode it also keeps the forward call's stack on the node.

>>> import jitorch
>>> x = jitorch.ones(2, requires_grad=True)
>>> with recording_nodes() as region:
...     y = (x * 2).exp()
>>> [node.name() for node in region.nodes]
['MulBackward0', 'ExpBackward0']
"""
from __future__ import annotations

import os
import threading
import traceback

__all__ = ["recording_nodes"]

# ``(thread id, list)`` per checkpointed region running now, innermost last: its thread's nodes go in the list.
# While anomaly mode is on it also holds `_STACKS_ENTRY` (no thread's), so the one check every node creation makes
# (``if _recording``) covers both.
_recording: list = []
_STACKS_ENTRY = (None, None)
_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class forward_stacks:  # noqa: N801 - a namespace for one flag
    """Whether new nodes keep the forward call's stack (anomaly mode), as torch's ``metadata["traceback_"]``."""

    on = False


def set_forward_stacks(on):
    """Start or stop keeping each new node's forward stack."""
    if on and not forward_stacks.on:
        _recording.append(_STACKS_ENTRY)
    elif not on and forward_stacks.on:
        _recording[:] = [e for e in _recording if e is not _STACKS_ENTRY]
    forward_stacks.on = bool(on)


def _user_stack():
    """``traceback.format_stack()`` of the op's call without jitorch's own frames (torch's ops have none)."""
    frames = [f for f in traceback.extract_stack() if not f.filename.startswith(_PACKAGE + os.sep)]
    return traceback.format_list(frames)


class recording_nodes:  # noqa: N801 - a context manager, named for what it does
    """Collect the nodes this thread records inside the ``with`` block, in order, into ``self.nodes``."""

    def __enter__(self):
        self.nodes = []
        self._entry = (threading.get_ident(), self.nodes)
        _recording.append(self._entry)
        return self

    def __exit__(self, *exc):
        # By identity: two regions that recorded nothing hold equal (empty) lists.
        for i in range(len(_recording) - 1, -1, -1):
            if _recording[i] is self._entry:
                del _recording[i]
                break


def _record(node):
    if forward_stacks.on:
        node.metadata["traceback_"] = _user_stack()
    ident = threading.get_ident()
    for owner, nodes in reversed(_recording):
        if owner == ident:
            nodes.append(node)
            return
