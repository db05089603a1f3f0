"""``torch._inductor``'s surface scripts touch: ``config`` (tuning flags set before compiling) and the option names
``jitorch.compile(options=...)`` accepts. jitorch compiles with its own code generator, so the flags are kept and
read back but change nothing.
"""
from __future__ import annotations

from . import config  # noqa: F401

__all__ = ["config"]
