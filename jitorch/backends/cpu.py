"""``jitorch.backends.cpu``: ``get_cpu_capability`` (jitorch runs NumPy kernels, so it reports the baseline).

>>> import jitorch.backends
>>> jitorch.backends.cpu.get_cpu_capability() in ("DEFAULT", "AVX2", "AVX512")
True
"""


def get_cpu_capability() -> str:
    return "DEFAULT"
