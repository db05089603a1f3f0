"""``torch.utils.data._utils.fetch``'s names (jitorch's implementation lives in ``jitorch.utils.data._fetch``)."""
from .._fetch import _BaseDatasetFetcher, _IterableDatasetFetcher, _MapDatasetFetcher  # noqa: F401
