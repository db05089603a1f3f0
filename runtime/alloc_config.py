"""Parsing ``JITORCH_ALLOC_CONF``: the caching allocator's tuning knobs, in PyTorch's ``PYTORCH_ALLOC_CONF`` syntax.

The value is a comma-separated list of ``key:value`` pairs. Supported keys:

- ``max_split_size_mb`` (> 20): blocks this large or larger are never split ("oversize"), and small requests never
  take them. Unlimited by default.
- ``max_non_split_rounding_mb`` (>= 0, default 20): how much larger than a request an oversize block may be and
  still serve it.
- ``garbage_collection_threshold`` (0 < t < 1): with a memory fraction set, reclaim old cached blocks once reserved
  memory passes ``t * allowed``.
- ``roundup_power2_divisions``: either one power of two (``4``: round sizes up to quarter steps between powers of
  two) or per-size-interval values ``[256:1,512:2,>:8]`` keyed by the interval's lower bound in MiB (a power of
  two; ``>`` means "all larger intervals"). 0 or 1 means plain 512-byte rounding.
- ``backend``: ``native`` (default: CuPy allocates through jitorch's caching allocator) or ``cupy`` (CuPy's own
  ``MemoryPool``; jitorch's memory statistics then report that pool's figures only).
- ``host_cache_max_mb`` (>= 0): freed large host (NumPy) buffers kept for reuse by :mod:`.host_cache`, at most;
  0 disables the cache. Default: the smaller of 1 GiB and an eighth of RAM.
- ``host_malloc_tuning``: ``True`` (default) or ``False``: whether :mod:`.host_malloc` tunes glibc's malloc so
  freed tensor buffers below 32 MiB are reused instead of returned to the OS and faulted in again.

>>> cfg = parse_alloc_conf("max_split_size_mb:128,garbage_collection_threshold:0.6,roundup_power2_divisions:4")
>>> cfg.max_split_size, cfg.garbage_collection_threshold, cfg.divisions_for(1200)
(134217728, 0.6, 4)
>>> parse_alloc_conf("max_split_size_mb:5")  # doctest: +IGNORE_EXCEPTION_DETAIL
Traceback (most recent call last):
...
AllocConfigError: JITORCH_ALLOC_CONF: max_split_size_mb must be > 20, got 5
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field

MiB = 1 << 20
UNLIMITED = 1 << 62  # "no max_split_size": larger than any device
ENV_VAR = "JITORCH_ALLOC_CONF"
# Interval i of the power-of-two rounding table covers sizes in [2**i MiB, 2**(i+1) MiB); sizes under 1 MiB use 0.
ROUNDUP_INTERVALS = 16


class AllocConfigError(ValueError):
    """A malformed or out-of-range ``JITORCH_ALLOC_CONF`` entry."""


@dataclass
class AllocatorConfig:
    """The parsed allocator settings; the defaults are PyTorch's.

    >>> AllocatorConfig().max_split_size == UNLIMITED
    True
    """

    max_split_size: int = UNLIMITED
    max_non_split_rounding: int = 20 * MiB
    garbage_collection_threshold: float = 0.0
    roundup_power2_divisions: list = field(default_factory=lambda: [0] * ROUNDUP_INTERVALS)
    host_cache_max: int | None = None  # bytes; None: host_cache picks its default
    host_malloc_tuning: bool = True
    backend: str = "native"

    def divisions_for(self, size: int) -> int:
        """How many power-of-two divisions apply to a request of ``size`` bytes."""
        index = max(0, size.bit_length() - 1 - (MiB.bit_length() - 1))
        return self.roundup_power2_divisions[min(index, ROUNDUP_INTERVALS - 1)]

    @classmethod
    def from_env(cls, environ=None) -> "AllocatorConfig":
        """Settings from ``JITORCH_ALLOC_CONF`` (defaults when it is unset or empty)."""
        environ = os.environ if environ is None else environ
        return parse_alloc_conf(environ.get(ENV_VAR, ""))


def _fail(message):
    raise AllocConfigError(f"{ENV_VAR}: {message}")


def _number(key, text, kind=int):
    try:
        return kind(text)
    except ValueError:
        _fail(f"{key} expects a{'n integer' if kind is int else ' number'}, got {text!r}")


def _is_pow2(n):
    return n > 0 and n & (n - 1) == 0


def _check_division(value):
    if value not in (0, 1) and not _is_pow2(value):
        _fail(f"roundup_power2_divisions values must be 0 or a power of two, got {value}")
    return value


def _parse_divisions(text):
    text = text.strip()
    if not text.startswith("["):
        return [_check_division(_number("roundup_power2_divisions", text))] * ROUNDUP_INTERVALS
    if not text.endswith("]"):
        _fail(f"roundup_power2_divisions list must end with ']', got {text!r}")
    table = [None] * ROUNDUP_INTERVALS
    last_index = -1
    for item in filter(None, (part.strip() for part in text[1:-1].split(","))):
        bound, sep, value = item.partition(":")
        if not sep:
            _fail(f"roundup_power2_divisions entries look like 'MiB:divisions' or '>:divisions', got {item!r}")
        value = _check_division(_number("roundup_power2_divisions", value.strip()))
        bound = bound.strip()
        if bound == ">":
            for i in range(last_index + 1, ROUNDUP_INTERVALS):
                table[i] = value
            last_index = ROUNDUP_INTERVALS - 1
            continue
        mib = _number("roundup_power2_divisions", bound)
        if not _is_pow2(mib):
            _fail(f"roundup_power2_divisions interval bounds must be powers of two (MiB), got {mib}")
        index = min(mib.bit_length() - 1, ROUNDUP_INTERVALS - 1)
        if index <= last_index:
            _fail(f"roundup_power2_divisions interval bounds must increase, got {mib} after a larger bound")
        table[index] = value
        last_index = index
    # An interval without its own entry takes the nearest entry below it (or none when nothing is below).
    current = 0
    for i, value in enumerate(table):
        current = current if value is None else value
        table[i] = current
    return table


# Sizes given in MiB: option -> (config attribute, lower bound, whether the bound itself is refused).
_MIB_OPTIONS = {"max_split_size_mb": ("max_split_size", 20, True),
                "max_non_split_rounding_mb": ("max_non_split_rounding", 0, False),
                "host_cache_max_mb": ("host_cache_max", 0, False)}


def parse_alloc_conf(text: str) -> AllocatorConfig:
    """Parse a ``JITORCH_ALLOC_CONF`` string; raises :class:`AllocConfigError` naming the bad entry.

    >>> parse_alloc_conf("roundup_power2_divisions:[1:2,>:8]").divisions_for(64 << 20)
    8
    >>> parse_alloc_conf("colour:blue")  # doctest: +IGNORE_EXCEPTION_DETAIL
    Traceback (most recent call last):
    ...
    AllocConfigError: JITORCH_ALLOC_CONF: unknown option 'colour' (known: garbage_collection_threshold, ...)
    """
    cfg = AllocatorConfig()
    # Split on commas outside brackets: the divisions list has commas of its own.
    entries, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        depth += (ch == "[") - (ch == "]")
        if ch == "," and depth == 0:
            entries.append(text[start:i])
            start = i + 1
    entries.append(text[start:])
    known = ("backend", "garbage_collection_threshold", "host_cache_max_mb", "host_malloc_tuning",
             "max_non_split_rounding_mb", "max_split_size_mb", "roundup_power2_divisions")
    for entry in (e.strip() for e in entries):
        if not entry:
            continue
        key, sep, value = entry.partition(":")
        key, value = key.strip(), value.strip()
        if not sep or not value:
            _fail(f"expected 'key:value', got {entry!r}")
        if key in _MIB_OPTIONS:
            attr, low, strict = _MIB_OPTIONS[key]
            mb = _number(key, value)
            if mb < low or (strict and mb == low):
                _fail(f"{key} must be {'>' if strict else '>='} {low}, got {mb}")
            setattr(cfg, attr, mb * MiB)
        elif key == "garbage_collection_threshold":
            threshold = _number(key, value, float)
            if not 0.0 < threshold < 1.0:
                _fail(f"garbage_collection_threshold must be between 0 and 1 (exclusive), got {value}")
            cfg.garbage_collection_threshold = threshold
        elif key == "backend":
            if value not in ("native", "cupy"):
                _fail(f"backend must be 'native' or 'cupy', got {value!r}")
            cfg.backend = value
        elif key == "host_malloc_tuning":
            if value not in ("True", "False"):
                _fail(f"host_malloc_tuning must be True or False, got {value!r}")
            cfg.host_malloc_tuning = value == "True"
        elif key == "roundup_power2_divisions":
            cfg.roundup_power2_divisions = _parse_divisions(value)
        else:
            _fail(f"unknown option {key!r} (known: {', '.join(known)})")
    return cfg
