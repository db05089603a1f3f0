"""jitorch tells NumPy's OpenBLAS to let its workers sleep after each product (runtime/_blas_threads.py), only when
it can: imported before NumPy, and the user has not chosen a value."""
import os
import subprocess
import sys

import pytest

PROBE = "import os; {first}; print(os.environ.get('OPENBLAS_THREAD_TIMEOUT'))"


@pytest.mark.parametrize("first, user, expected", [
    ("import jitorch", None, "4"),
    ("import jitorch", "20", "20"),        # the user's choice stays
    ("import numpy, jitorch", None, "None"),  # OpenBLAS already read its environment: nothing to change
])
def test_openblas_thread_timeout_set_at_import(first, user, expected):
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_THREAD_TIMEOUT"}
    if user is not None:
        env["OPENBLAS_THREAD_TIMEOUT"] = user
    out = subprocess.run([sys.executable, "-c", PROBE.format(first=first)], env=env, capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == expected
