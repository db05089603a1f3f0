"""Functions the spawned processes of test_toplevel_extras.py run: a module of its own, so a child process imports
neither torch nor the test module to unpickle them."""
from __future__ import annotations

import os


def write_rank_or_fail(rank, folder):
    """Rank 0 writes its file; rank 1 raises (one spawn tests both paths: each child imports jitorch, which is slow)."""
    if rank == 1:
        raise ValueError(f"rank {rank} failed")
    with open(os.path.join(folder, f"rank{rank}"), "w") as f:
        f.write(str(rank))
