"""glibc malloc tuning (runtime/host_malloc.py): on by default, off through JITORCH_ALLOC_CONF, a no-op elsewhere."""
from __future__ import annotations

import platform
import subprocess
import sys

import pytest

from jitorch.runtime import host_malloc, parse_alloc_conf
from jitorch.runtime.alloc_config import AllocConfigError

GLIBC = platform.system() == "Linux" and platform.libc_ver()[0] == "glibc"


def _tuned_in_fresh_process(conf):
    env = {"JITORCH_ALLOC_CONF": conf, "PATH": ""}
    code = "import jitorch.runtime.host_malloc as h, jitorch; print(h.tuned())"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    return out.stdout.strip()


def test_import_tunes_glibc_malloc_unless_disabled():
    assert _tuned_in_fresh_process("") == str(GLIBC)
    assert _tuned_in_fresh_process("host_malloc_tuning:False") == "False"


def test_config_option_parses_and_rejects_bad_values():
    assert parse_alloc_conf("host_malloc_tuning:False").host_malloc_tuning is False
    assert parse_alloc_conf("").host_malloc_tuning is True
    with pytest.raises(AllocConfigError, match="host_malloc_tuning must be True or False"):
        parse_alloc_conf("host_malloc_tuning:maybe")


def test_explicit_disable_reports_false():
    assert host_malloc.tune_malloc(enabled=False) is False
