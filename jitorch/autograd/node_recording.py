"""The nodes recorded inside a region (``recording_nodes``): what a checkpointed region replays or checks.

``Node.__init__`` adds each new node to the innermost region of its thread while any region is open
(``autograd.graph`` re-exports these names).

>>> import jitorch
>>> x = jitorch.ones(2, requires_grad=True)
>>> with recording_nodes() as region:
...     y = (x * 2).exp()
>>> [node.name() for node in region.nodes]
['MulBackward0', 'ExpBackward0']
"""
from __future__ import annotations

import threading

__all__ = ["recording_nodes"]

# ``(thread id, list)`` per checkpointed region running now, innermost last: its thread's nodes go in the list.
_recording: list = []


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
    ident = threading.get_ident()
    for owner, nodes in reversed(_recording):
        if owner == ident:
            nodes.append(node)
            return
