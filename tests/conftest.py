"""Test configuration: the ``cuda`` marker (skipped without a CUDA device) and deterministic seeding."""
from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest

# ``from helpers import ...`` works whatever directory pytest is started from.
sys.path.insert(0, str(Path(__file__).resolve().parent))

# Compiled kernels go to a private cache for the test run, never to ~/.cache/jitorch (subprocesses inherit it).
os.environ.setdefault("JITORCH_CACHE_DIR", tempfile.mkdtemp(prefix="jitorch-test-cache-"))


def pytest_collection_modifyitems(config, items):
    cuda_items = [item for item in items if "cuda" in item.keywords]
    if not cuda_items:
        return
    from jitorch.runtime import cuda_available

    if cuda_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device (jitorch.runtime.cuda_available() is False)")
    for item in cuda_items:
        item.add_marker(skip)


@pytest.fixture(autouse=True)
def seed():
    """Seed jitorch's and torch's default generators (and NumPy's legacy one) before every test; returns the seed.

    torch is seeded only when a test module already imported it: a test may check that jitorch alone never does.
    """
    import jitorch

    value = 0
    np.random.seed(value)
    jitorch.manual_seed(value)
    if "torch" in sys.modules:
        torch = sys.modules["torch"]
        torch.manual_seed(value)
        # torch.compile's first use (dynamo's patching) turns torch's distribution argument checks off for the whole
        # process: a later test comparing those checks with jitorch's would meet an unchecked torch. On, as default.
        distribution = getattr(getattr(torch, "distributions", None), "Distribution", None)
        if distribution is not None:
            distribution.set_default_validate_args(True)
    return value


@pytest.fixture
def rng(seed):
    """A fresh NumPy generator for the test's input data."""
    return np.random.default_rng(seed)


@pytest.fixture(autouse=True)
def _global_backward_hook_kind():
    """Global module backward hooks fix their kind (full or legacy) for the process at the first one registered, in
    jitorch as in torch: once a test has removed its hooks, the next starts without that choice (otherwise the order
    the suite happens to run in decides which hook tests fail)."""
    yield
    from jitorch.nn.modules import _hooks

    if not _hooks._global_backward_hooks:
        _hooks._global_is_full_backward_hook = None
    torch_module = sys.modules.get("torch.nn.modules.module")
    if torch_module is not None and not getattr(torch_module, "_global_backward_hooks", True):
        torch_module._global_is_full_backward_hook = None
