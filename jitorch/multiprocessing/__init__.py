"""``torch.multiprocessing``: Python's ``multiprocessing`` under torch's name, plus ``spawn`` and the sharing-strategy
switches. Tensors pickle by value between processes (NumPy arrays), except those moved into shared memory by
``share_memory_()``, which travel as their segment's name (`_shared`); the strategy is only recorded.

>>> import jitorch.multiprocessing as mp
>>> mp.get_sharing_strategy() in mp.get_all_sharing_strategies(), mp.cpu_count() > 0
(True, True)
"""
from __future__ import annotations

import multiprocessing
from multiprocessing import *  # noqa: F401,F403 - the re-export is the module's purpose

from .spawn import ProcessContext, ProcessExitedException, ProcessRaisedException, spawn, start_processes

__all__ = list(multiprocessing.__all__) + [
    "set_sharing_strategy", "get_sharing_strategy", "get_all_sharing_strategies", "spawn", "start_processes",
    "ProcessContext", "ProcessRaisedException", "ProcessExitedException",
]

_strategy = ["file_descriptor"]


def get_all_sharing_strategies():
    return {"file_descriptor", "file_system"}


def get_sharing_strategy():
    return _strategy[0]


def set_sharing_strategy(new_strategy):
    if new_strategy not in get_all_sharing_strategies():
        raise AssertionError(f"Invalid sharing strategy {new_strategy!r}")
    _strategy[0] = new_strategy
