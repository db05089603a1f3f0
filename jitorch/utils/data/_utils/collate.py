"""``torch.utils.data._utils.collate``'s names (jitorch's implementation lives in ``jitorch.utils.data._collate``)."""
from .._collate import *  # noqa: F401,F403
from .._collate import __all__  # noqa: F401
