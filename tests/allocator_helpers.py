"""Helpers of the caching-allocator tests: sizes and an allocator over a fake driver."""
from __future__ import annotations

from jitorch.runtime.alloc_config import parse_alloc_conf
from jitorch.runtime.allocator import CachingAllocator
from jitorch.runtime.driver import FakeDriver


KiB, MiB = 1 << 10, 1 << 20


def make(capacity=1 << 30, conf="", **driver_kwargs):
    driver = FakeDriver(capacity=capacity, **driver_kwargs)
    return CachingAllocator(driver, parse_alloc_conf(conf)), driver
