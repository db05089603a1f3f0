"""jitorch's version, in one place: the package metadata (pyproject's dynamic version), ``jitorch.__version__`` and
the compile cache's keys read it. A leaf module: codegen may import it without importing jitorch's upper layers."""

__version__ = "0.1.0"
