"""``make_fx(tracing_mode="real")`` refuses to read the value of a tensor computed from the inputs, as torch's does.

The function runs on the example inputs, so ``if x.sum() > 0`` or ``x.max().item()`` would see the examples' values
and the graph would keep the branch or the number they chose, silently wrong for other inputs. While the function is
recorded, the host reads of a Tensor (``item``, ``bool``, ``int``, ``float``, ``tolist``, ``numpy``...) look up the
node of the tensor read: if it depends on a placeholder, they raise
:class:`~jitorch.fx._fake.DataDependentOutputException`, naming the read and the user's line. Values that do not
depend on the inputs (a constant, a parameter) are read as usual, and so are the library's input-validation reads
(the same list as fake tracing's, ``VALIDATION_READS``).

>>> import jitorch
>>> from jitorch.fx import make_fx
>>> gm = make_fx(lambda x: x * jitorch.tensor(2.0).item())(jitorch.ones(2))   # a constant's value: fine
>>> make_fx(lambda x: x * x.max().item())(jitorch.ones(2))
Traceback (most recent call last):
jitorch.fx._fake.DataDependentOutputException: make_fx: Tensor.item() reads the value of a tensor computed from ...
"""
from __future__ import annotations

import contextlib
import threading

from ._fake import DataDependentOutputException, _caller, guard_host_reads, read_site, restore_tensor_methods

__all__ = ["refusing_value_reads"]

_lock = threading.RLock()
_active: list = []  # the recording modes whose reads are guarded, innermost last
_originals: dict = {}


def depends_on_input(node) -> bool:
    """Whether a placeholder is among the nodes ``node`` is computed from."""
    seen, todo = set(), [node]
    while todo:
        n = todo.pop()
        if n.op == "placeholder":
            return True
        for m in n.all_input_nodes:
            if m not in seen:
                seen.add(m)
                todo.append(m)
    return False


def _check(name, t, frame):
    mode = _active[-1]
    node = mode.nodes.get(id(t)) or mode.by_array.get(id(t._data))
    if node is None or not depends_on_input(node):
        return
    allowed, shown, inside = read_site(frame, name)
    if allowed and not getattr(mode, "strict_reads", False):
        return
    where = _caller()[1]
    raise DataDependentOutputException(
        f"make_fx: {shown}{inside} reads the value of a tensor computed from the inputs (node {node.name!r}, shape "
        f"{tuple(t._data.shape)}){f' at {where}' if where else ''}; the graph would keep the value the example "
        "inputs gave and be wrong for other inputs. Write the choice as tensor ops (jitorch.where, masks), move it "
        "out of the traced function, or use jitorch.compile, which runs data-dependent code eagerly.")


@contextlib.contextmanager
def refusing_value_reads(mode):
    """Within the block, host reads of tensors that ``mode`` (make_fx's recording mode) computed from its
    placeholders raise."""
    with _lock:
        if not _active:
            _install()
        _active.append(mode)
    try:
        yield
    finally:
        with _lock:
            _active.remove(mode)
            if not _active:
                _uninstall()


def _read(name, t, original, args, kwargs, frame):
    _check(name, t, frame)
    return original(t, *args, **kwargs)


def _install():
    guard_host_reads(_originals, _active, _read)


def _uninstall():
    restore_tensor_methods(_originals)
