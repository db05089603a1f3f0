"""``torch.utils.data._utils.worker``'s names (jitorch's implementation lives in ``jitorch.utils.data._worker``)."""
from .._worker import (  # noqa: F401
    MP_STATUS_CHECK_INTERVAL, ExceptionWrapper, WorkerInfo, _generate_state, _IterableDatasetStopIteration,
    _ResumeIteration, _worker_loop, get_worker_info,
)
