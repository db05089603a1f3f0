"""``spawn(fn, args, nprocs)``: run ``fn(i, *args)`` in ``nprocs`` fresh processes (``torch.multiprocessing.spawn``);
the first failure is raised in the parent with the child's traceback.
"""
from __future__ import annotations

import multiprocessing
import traceback

__all__ = ["spawn", "start_processes", "ProcessContext", "ProcessRaisedException", "ProcessExitedException"]


class ProcessException(Exception):
    def __init__(self, msg, error_index, pid):
        super().__init__(msg)
        self.msg, self.error_index, self.pid = msg, error_index, pid

    def __reduce__(self):
        return type(self), (self.msg, self.error_index, self.pid)


class ProcessRaisedException(ProcessException):
    """A child raised: the message carries its traceback."""


class ProcessExitedException(ProcessException):
    """A child exited with a nonzero code (or a signal) without raising."""

    def __init__(self, msg, error_index, error_pid, exit_code, signal_name=None):
        super().__init__(msg, error_index, error_pid)
        self.exit_code, self.signal_name = exit_code, signal_name

    def __reduce__(self):
        return type(self), (self.msg, self.error_index, self.pid, self.exit_code, self.signal_name)


def _wrap(fn, i, args, error_queue):
    try:
        fn(i, *args)
    except KeyboardInterrupt:
        pass
    except Exception:  # noqa: BLE001 - every failure goes back to the parent
        error_queue.put(traceback.format_exc())
        raise SystemExit(1) from None


class ProcessContext:
    """The spawned processes; ``join()`` returns True once all ended, raising the first failure."""

    def __init__(self, processes, error_queues):
        self.processes, self.error_queues = processes, error_queues

    def pids(self):
        return [p.pid for p in self.processes]

    def join(self, timeout=None):
        for p in self.processes:
            p.join(timeout)
        for i, (p, q) in enumerate(zip(self.processes, self.error_queues)):
            if p.exitcode is None:
                return False
            if not q.empty():
                for other in self.processes:
                    if other.is_alive():
                        other.terminate()
                raise ProcessRaisedException(f"\n\n-- Process {i} terminated with the following error:\n{q.get()}",
                                             i, p.pid)
            if p.exitcode != 0:
                raise ProcessExitedException(f"process {i} terminated with exit code {p.exitcode}", i, p.pid,
                                             p.exitcode)
        return True


def start_processes(fn, args=(), nprocs=1, join=True, daemon=False, start_method="spawn"):
    ctx = multiprocessing.get_context(start_method)
    processes, queues = [], []
    for i in range(nprocs):
        q = ctx.SimpleQueue()
        p = ctx.Process(target=_wrap, args=(fn, i, args, q), daemon=daemon)
        p.start()
        processes.append(p)
        queues.append(q)
    context = ProcessContext(processes, queues)
    if not join:
        return context
    while not context.join():
        pass
    return None


def spawn(fn, args=(), nprocs=1, join=True, daemon=False, start_method="spawn"):
    """``fn(i, *args)`` for ``i`` in ``range(nprocs)``, each in a new process; waits unless ``join=False``."""
    return start_processes(fn, args, nprocs, join, daemon, start_method)
