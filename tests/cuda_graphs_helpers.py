"""Helpers of the CUDA graph tests: a capture's constants and a driver-backed caching allocator over a fake driver."""
from jitorch.runtime.alloc_config import AllocatorConfig
from jitorch.runtime.allocator import CachingAllocator
from jitorch.runtime.driver import FakeDriver

KiB, MiB = 1 << 10, 1 << 20
CAPTURE = 7  # the fake side stream graphs capture on


def make():
    driver = FakeDriver(capacity=1 << 30)
    return CachingAllocator(driver, AllocatorConfig()), driver
