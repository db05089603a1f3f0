"""OpenBLAS's worker threads told to sleep as soon as a product ends, so compiled kernels can use the other cores.

NumPy's OpenBLAS keeps its workers spinning for about 2^28 cycles (~0.1 s) after every product. A compiled kernel that
then splits its range across jitorch's threads waits for a core that a spinning BLAS worker holds, until the OS
preempts it (measured on 2 cores, transformer-block training step with BLAS and kernels at 2 threads: 16.8 ms, and
13.1 ms with the workers sleeping at once; BLAS alone is no slower). OpenBLAS reads ``OPENBLAS_THREAD_TIMEOUT`` (cycles
as a power of two, 4 to 30) once, when NumPy loads it, so this only takes effect when jitorch is imported before NumPy
(importing this module applies it); a value the user set is kept.

>>> import os
>>> quiet_blas_workers(environ={}, numpy_loaded=False)
True
>>> env = {"OPENBLAS_THREAD_TIMEOUT": "28"}
>>> quiet_blas_workers(environ=env, numpy_loaded=False), env["OPENBLAS_THREAD_TIMEOUT"]
(False, '28')
"""
from __future__ import annotations

import os
import sys

__all__ = ["quiet_blas_workers", "SLEEP_AFTER"]

SLEEP_AFTER = "4"  # 2^4 cycles: the least OpenBLAS accepts


def quiet_blas_workers(environ=None, numpy_loaded=None) -> bool:
    """Set ``OPENBLAS_THREAD_TIMEOUT`` unless the user did or NumPy (and so OpenBLAS) is already loaded; returns
    whether it was set."""
    environ = os.environ if environ is None else environ
    numpy_loaded = "numpy" in sys.modules if numpy_loaded is None else numpy_loaded
    if numpy_loaded or "OPENBLAS_THREAD_TIMEOUT" in environ:
        return False
    environ["OPENBLAS_THREAD_TIMEOUT"] = SLEEP_AFTER
    return True


quiet_blas_workers()  # at import: the runtime package imports this module before anything loads NumPy
