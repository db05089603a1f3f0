"""``jitorch.distributed``: import-only for now; jitorch has no process-group backend yet.

Scripts that guard on ``is_initialized()`` (the common ``rank = dist.get_rank() if dist.is_initialized() else 0``)
run unchanged on one process; ``init_process_group`` says clearly that multi-process training is not supported.

>>> import jitorch.distributed as dist
>>> dist.is_available(), dist.is_initialized()
(True, False)
>>> dist.get_rank()
Traceback (most recent call last):
    ...
ValueError: Default process group has not been initialized, please make sure to call init_process_group.
"""
from __future__ import annotations

__all__ = ["is_available", "is_initialized", "is_nccl_available", "is_gloo_available", "is_mpi_available",
           "is_torchelastic_launched", "init_process_group", "destroy_process_group", "get_rank", "get_world_size",
           "get_backend", "barrier", "all_reduce", "broadcast", "ReduceOp", "Backend", "group"]

_NOT_INIT = "Default process group has not been initialized, please make sure to call init_process_group."


def is_available() -> bool:
    """True, as in torch: the package imports (even though ``init_process_group`` cannot start a group yet)."""
    return True


def is_initialized() -> bool:
    """Always False: jitorch never has a default process group."""
    return False


def is_nccl_available() -> bool:
    return False


def is_gloo_available() -> bool:
    return False


def is_mpi_available() -> bool:
    return False


def is_torchelastic_launched() -> bool:
    import os

    return os.getenv("TORCHELASTIC_RUN_ID") is not None


def init_process_group(backend=None, init_method=None, timeout=None, world_size=-1, rank=-1, store=None,
                       group_name="", pg_options=None, device_id=None):
    raise RuntimeError("jitorch.distributed.init_process_group: jitorch has no process-group backend yet "
                       "(no NCCL/Gloo/MPI); run the script as a single process (drop torchrun / DDP setup).")


def destroy_process_group(group=None) -> None:
    # torch fails here with an AssertionError when no group exists; same type and text.
    raise AssertionError("Process group cannot be None")


def _not_initialized(*args, **kwargs):
    raise ValueError(_NOT_INIT)


def get_rank(group=None) -> int:
    raise ValueError(_NOT_INIT)


def get_world_size(group=None) -> int:
    raise ValueError(_NOT_INIT)


get_backend = barrier = all_reduce = broadcast = all_gather = reduce = gather = scatter = _not_initialized


class ReduceOp:
    SUM, PRODUCT, MIN, MAX, BAND, BOR, BXOR, AVG, PREMUL_SUM = ("sum", "product", "min", "max", "band", "bor",
                                                                "bxor", "avg", "premul_sum")


class Backend(str):
    GLOO, NCCL, MPI, UCC, UNDEFINED = "gloo", "nccl", "mpi", "ucc", "undefined"


class group:
    WORLD = None
